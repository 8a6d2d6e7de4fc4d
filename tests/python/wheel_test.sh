#!/bin/sh
# pip builds a wheel of libclient/python offline (--no-build-isolation, Debian's setuptools),
# installs it into a fresh directory, and the package works from there without NumPy.
#   wheel_test.sh <python> <kvpool source dir> <cmake build dir>
set -eu
py=$1 src=$2 build=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# A copy of the package sources: pip builds in place, and the source tree stays clean.
cp -r "$src/libclient/python" "$tmp/src"
rm -rf "$tmp/src/build" "$tmp/src"/*.egg-info
export KVPOOL_BUILD_DIR="$build" KVPOOL_SOURCE_DIR="$src" PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# What this test checks is the packaging; the bindings' code at -O2 is the main build's
# kvpool_python, which every other python test runs. Unoptimised, without debug info, the
# five pybind11 files compile in a fraction of the CPU time (CI has two cores).
export CFLAGS="-O0 -g0"
"$py" -m pip wheel --no-build-isolation --no-deps -q -w "$tmp/dist" "$tmp/src"
tag=$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
wheel=$(ls "$tmp"/dist/kvpool-0.1.0-"$tag"-"$tag"-*.whl)
echo "wheel_test: built $(basename "$wheel")"
"$py" -m pip install --no-deps -q --target "$tmp/site" "$wheel"
[ -f "$tmp/site/kvpool/libkvpool.so.0" ] || { echo "wheel_test: libkvpool.so.0 is not in the wheel"; exit 1; }
# Nothing of the build tree on the way: only the installed wheel.
env -u LD_LIBRARY_PATH PYTHONPATH="$tmp/site" "$py" "$src/tests/python/no_numpy_smoke.py"
