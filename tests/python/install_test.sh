#!/bin/sh
# The documented install path (libclient/python/install.sh) into a fresh venv of PYTHON,
# made without pip (no PyPI, no wheel, no setuptools): afterwards the venv's python imports
# kvpool from any directory, with no PYTHONPATH or LD_LIBRARY_PATH, and uses it against a
# real kvpoold (no_numpy_smoke.py; KVPOOLD in the environment).
#   install_test.sh PYTHON SOURCE_DIR BUILD_DIR
set -eu
py=$1 src=$2 build=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" -m venv --without-pip "$tmp/venv"
# The install path is what this checks, on each interpreter; the bindings' code at -O2 is
# the main build's, run by every other python test. Unoptimised they compile in a fraction
# of the CPU time (CI has two cores).
export CXXFLAGS="-O0 -g0"
sh "$src/libclient/python/install.sh" "$tmp/venv/bin/python" "$build" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log" >&2; echo "install_test: install.sh failed for $py" >&2; exit 1; }
cat "$tmp/install.log"
site=$("$tmp/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
[ -f "$site/kvpool/libkvpool.so.0" ] || { echo "install_test: not installed in $site" >&2; exit 1; }
cd "$tmp"
env -u PYTHONPATH -u LD_LIBRARY_PATH "$tmp/venv/bin/python" -c \
  'import kvpool, kvpool.integrations, sys; assert kvpool.__file__.startswith(sys.prefix), kvpool.__file__'
env -u PYTHONPATH -u LD_LIBRARY_PATH "$tmp/venv/bin/python" "$src/tests/python/no_numpy_smoke.py"
