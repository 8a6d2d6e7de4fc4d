#!/bin/sh
# Installs the kvpool Python package into one interpreter, offline, with nothing from PyPI
# (no pip, setuptools or wheel): compiles the bindings for that interpreter against a cmake
# build's libkvpool (C++20 compiler, Debian's pybind11-dev, the interpreter's headers) and
# copies the package into its site-packages:
#   <site-packages>/kvpool/{__init__.py,__init__.pyi,py.typed,_kvpool<EXT_SUFFIX>,libkvpool.so.0}
# The extension finds its libkvpool beside it ($ORIGIN), so the package is self-contained.
#
#   libclient/python/install.sh PYTHON [BUILD_DIR] [--target DIR]
#     PYTHON      the interpreter to install for: a venv's python (pyenv 3.9-3.13, ...),
#                 or Debian's /usr/bin/python3 (then site-packages is /usr/local/lib/...:
#                 run as root, or give --target)
#     BUILD_DIR   a cmake build of kvpool (default: build beside this source tree)
#     --target    install into DIR instead (then PYTHONPATH=DIR)
#     CXXFLAGS    (environment) the optimisation flags of the bindings (default -O2)
# Afterwards `PYTHON -c 'import kvpool'` works from any directory.
set -eu
[ $# -ge 1 ] || { echo "usage: $0 PYTHON [BUILD_DIR] [--target DIR]" >&2; exit 2; }
py=$1
shift
src=$(cd "$(dirname "$0")/../.." && pwd)
build="$src/build"
target=""
while [ $# -gt 0 ]; do
  case "$1" in
    --target) target=$2; shift 2 ;;
    *) build=$1; shift ;;
  esac
done
"$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 9) else "kvpool needs CPython >= 3.9")'
[ -e "$build/libclient/libkvpool.so.0" ] ||
  { echo "install.sh: no $build/libclient/libkvpool.so.0: build kvpool first (cmake --build $build)" >&2; exit 2; }
[ -f /usr/include/pybind11/pybind11.h ] ||
  { echo "install.sh: pybind11 headers missing (apt-get install pybind11-dev)" >&2; exit 2; }
inc=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
[ -f "$inc/Python.h" ] || { echo "install.sh: no Python.h in $inc (Debian: apt-get install python3-dev)" >&2; exit 2; }
suffix=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
[ -n "$target" ] || target=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
dl=""
[ -f /usr/include/dlpack/dlpack.h ] && dl="-DKVPOOL_HAVE_DLPACK=1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc=${CXX:-c++}
command -v ccache >/dev/null 2>&1 && cc="ccache $cc"
objs=""
# The same sources as CMakeLists.txt and setup.py list, compiled side by side. CXXFLAGS
# replaces the optimisation flags (default -O2).
pids=""
for f in module blocks errors dlpack batch_store; do
  # shellcheck disable=SC2086
  $cc -std=c++20 ${CXXFLAGS:--O2} -fPIC -fvisibility=hidden $dl -I"$inc" \
    -I"$src/libclient/include" -I"$src/shared/include" -c "$src/libclient/python/src/$f.cpp" \
    -o "$tmp/$f.o" &
  pids="$pids $!"
  objs="$objs $tmp/$f.o"
done
failed=0
for p in $pids; do wait "$p" || failed=1; done
[ "$failed" = 0 ] || { echo "install.sh: compiling the bindings failed (above)" >&2; exit 1; }
mkdir -p "$tmp/kvpool"
# shellcheck disable=SC2086
$cc -shared -o "$tmp/kvpool/_kvpool$suffix" $objs -L"$build/libclient" -lkvpool '-Wl,-rpath,$ORIGIN'
cp "$(readlink -f "$build/libclient/libkvpool.so.0")" "$tmp/kvpool/libkvpool.so.0"
cp "$src/libclient/python/kvpool/__init__.py" "$src/libclient/python/kvpool/__init__.pyi" \
  "$src/libclient/python/kvpool/py.typed" "$tmp/kvpool/"
mkdir -p "$tmp/kvpool/integrations"
cp "$src"/libclient/python/kvpool/integrations/*.py "$tmp/kvpool/integrations/"
mkdir -p "$target"
rm -rf "$target/kvpool"
cp -r "$tmp/kvpool" "$target/kvpool"
echo "install.sh: kvpool for Python $("$py" -c 'import platform; print(platform.python_version())') installed in $target/kvpool"
