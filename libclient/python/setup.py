"""pip install of the kvpool Python package, offline, for the interpreter that runs pip:

    pip install --no-build-isolation ./libclient/python       # Debian: python3-setuptools
    pip wheel --no-build-isolation --no-deps -w dist ./libclient/python

It compiles the bindings (src/*.cpp, pybind11 and dlpack headers from Debian's pybind11-dev and
libdlpack-dev) against a built or installed libkvpool, and puts that libkvpool.so.0 in the
package beside the extension (RUNPATH $ORIGIN), so the wheel needs no kvpool install.
Where libkvpool is:
    KVPOOL_BUILD_DIR=<cmake build dir>   the headers of this source tree, <dir>/libclient
    KVPOOL_PREFIX=<install prefix>       <prefix>/include, <prefix>/lib (default /usr/local)
Any CPython >= 3.9 with setuptools builds it; libclient/python/install.sh is the documented
path, for any interpreter, with or without setuptools.
"""

import os
import shutil
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
# The kvpool source tree (for its headers with KVPOOL_BUILD_DIR); KVPOOL_SOURCE_DIR when this
# directory was copied elsewhere to build (as the tests do, keeping the sources clean).
ROOT = os.environ.get("KVPOOL_SOURCE_DIR") or os.path.abspath(os.path.join(HERE, "..", ".."))


def kvpool_paths():
    build = os.environ.get("KVPOOL_BUILD_DIR")
    if build:
        build = os.path.abspath(build)
        return ([os.path.join(ROOT, "libclient", "include"), os.path.join(ROOT, "shared", "include")],
                os.path.join(build, "libclient"))
    prefix = os.environ.get("KVPOOL_PREFIX", "/usr/local")
    return [os.path.join(prefix, "include")], os.path.join(prefix, "lib")


class BuildWithLibkvpool(build_ext):
    """Builds the extension, then copies libkvpool.so.0 beside it."""

    def run(self):
        if sys.version_info < (3, 9):
            raise SystemExit("kvpool needs CPython >= 3.9")
        super().run()

    def build_extension(self, ext):
        super().build_extension(ext)
        _, libdir = kvpool_paths()
        lib = os.path.join(libdir, "libkvpool.so.0")
        if not os.path.exists(lib):
            raise SystemExit(f"kvpool: {lib} not found (set KVPOOL_BUILD_DIR or KVPOOL_PREFIX)")
        dest = os.path.dirname(self.get_ext_fullpath(ext.name))
        shutil.copy2(os.path.realpath(lib), os.path.join(dest, "libkvpool.so.0"))


includes, libdir = kvpool_paths()
have_dlpack = os.path.exists("/usr/include/dlpack/dlpack.h")
ext = Extension(
    "kvpool._kvpool",
    sources=[os.path.join("src", f) for f in ("module.cpp", "blocks.cpp", "errors.cpp", "dlpack.cpp",
                                              "batch_store.cpp")],
    include_dirs=includes,
    library_dirs=[libdir],
    libraries=["kvpool"],
    define_macros=[("KVPOOL_HAVE_DLPACK", "1")] if have_dlpack else [],
    # The optimisation level is the interpreter's own (its CFLAGS: -O2 or -O3); CFLAGS in the
    # environment override it, as for any setuptools build.
    extra_compile_args=["-std=c++20", "-fvisibility=hidden"],
    extra_link_args=["-Wl,-rpath,$ORIGIN"],
    language="c++",
)

setup(
    name="kvpool",
    version="0.1.0",
    description="Python client of kvpoold, the host-local KV-cache block manager",
    python_requires=">=3.9",
    packages=["kvpool", "kvpool.integrations"],
    package_data={"kvpool": ["__init__.pyi", "py.typed"]},
    ext_modules=[ext],
    cmdclass={"build_ext": BuildWithLibkvpool},
    zip_safe=False,
)
