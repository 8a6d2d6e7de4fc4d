"""The package as users get it: stubs match the module, docstrings, cmake --install output."""

import ast
import os
import subprocess
import sys
import tempfile

import pytest

import kvpool


def stub_names():
    path = os.path.join(os.path.dirname(kvpool.__file__), "__init__.pyi")
    tree = ast.parse(open(path).read())
    names = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    return names, {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}


def test_stubs_describe_exactly_the_public_api():
    names, classes = stub_names()
    assert names == set(kvpool.__all__)
    for cls_name in ("Client", "Pool", "MutableBlock", "ImmutableBlock", "ImmutableBlocks"):
        stubbed = {n.name for n in classes[cls_name].body
                   if isinstance(n, ast.FunctionDef)} | {
            n.target.id for n in classes[cls_name].body if isinstance(n, ast.AnnAssign)}
        real = {n for n in dir(getattr(kvpool, cls_name)) if not n.startswith("_")}
        assert real <= stubbed, f"{cls_name}: not in the stub: {real - stubbed}"
    assert os.path.exists(os.path.join(os.path.dirname(kvpool.__file__), "py.typed"))


def test_docstrings():
    assert kvpool.__doc__ and kvpool.hash_tokens.__doc__
    for cls in (kvpool.Client, kvpool.Pool, kvpool.MutableBlock, kvpool.ImmutableBlocks):
        assert cls.__doc__
    assert kvpool.Pool.match_sequence_hashes.__doc__


def test_import_from_cmake_install_output(daemon):
    build, cmake = os.environ.get("KVPOOL_BUILD_DIR"), os.environ.get("CMAKE_COMMAND")
    if not build or not cmake:
        pytest.skip("KVPOOL_BUILD_DIR / CMAKE_COMMAND not set (ctest sets them)")
    pydir = os.environ.get("KVPOOL_INSTALL_PYTHONDIR", "lib/python3/dist-packages")
    with tempfile.TemporaryDirectory(prefix="kvpool-pyinstall-") as prefix:
        out = subprocess.run([cmake, "--install", build, "--prefix", prefix],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        site = os.path.join(prefix, pydir)
        mods = [f for f in os.listdir(os.path.join(site, "kvpool")) if f.startswith("_kvpool")]
        assert len(mods) == 1
        assert {"__init__.py", "__init__.pyi", "py.typed"} <= set(os.listdir(os.path.join(site, "kvpool")))
        dyn = subprocess.run(["readelf", "-d", os.path.join(site, "kvpool", mods[0])],
                             capture_output=True, text=True).stdout
        assert build not in dyn, "the installed module keeps a RUNPATH into the build tree"
        # A clean interpreter that sees only the prefix: imports, hashes, talks to kvpoold.
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
        env["PYTHONPATH"] = site
        code = ("import kvpool, sys; assert kvpool.__file__.startswith(sys.argv[1]), kvpool.__file__;"
                "c = kvpool.Client.connect(sys.argv[2], runtime_dir=sys.argv[3]);"
                "print(len(c.pool('g').allocate_blocks(2)), kvpool.hash_tokens([1,2,3,4], 4, 1337)[1][0])")
        run = subprocess.run([sys.executable, "-c", code, prefix, daemon.instance, daemon.runtime_dir],
                             env=env, capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        assert run.stdout.split() == ["2", "14643705804678351452"]


def test_version_is_the_one_the_programs_print():
    # kvpoolctl links the same libkvpool: "kvpoolctl 0.1.0 (git <commit>)".
    out = subprocess.run([os.environ["KVPOOLCTL"], "--version"], capture_output=True,
                         text=True, check=True).stdout.split()
    assert out[0] == "kvpoolctl"
    assert out[1] == kvpool.__version__
    assert kvpool.__version__.count(".") == 2
    assert out[3].rstrip(")") == kvpool.__git_commit__
