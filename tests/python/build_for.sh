#!/bin/sh
# Builds the kvpool Python package for any CPython >= 3.9, without setuptools (what setup.py
# does, by hand): compiles the bindings against a cmake build's libkvpool and lays out
#   <out>/kvpool/{__init__.py,__init__.pyi,py.typed,_kvpool<EXT_SUFFIX>,libkvpool.so.0}
# so that PYTHONPATH=<out> imports it.
#   build_for.sh <python> <kvpool source dir> <cmake build dir> <out>
set -eu
py=$1 src=$2 build=$3 out=$4
"$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 9) else "kvpool needs CPython >= 3.9")'
inc=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
suffix=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
dl=""
[ -f /usr/include/dlpack/dlpack.h ] && dl="-DKVPOOL_HAVE_DLPACK=1"
mkdir -p "$out/kvpool"
cc=${CXX:-c++}
command -v ccache >/dev/null 2>&1 && cc="ccache $cc"
objs=""
for f in module blocks errors dlpack batch_store; do
  $cc -std=c++20 -O2 -fPIC -fvisibility=hidden -Wall -Wextra -Werror $dl -I"$inc" \
    -I"$src/libclient/include" -I"$src/shared/include" -c "$src/libclient/python/src/$f.cpp" \
    -o "$out/$f.o"
  objs="$objs $out/$f.o"
done
# shellcheck disable=SC2086
$cc -shared -o "$out/kvpool/_kvpool$suffix" $objs -L"$build/libclient" -lkvpool '-Wl,-rpath,$ORIGIN'
rm -f $objs
cp "$(readlink -f "$build/libclient/libkvpool.so.0")" "$out/kvpool/libkvpool.so.0"
cp "$src/libclient/python/kvpool/__init__.py" "$src/libclient/python/kvpool/__init__.pyi" \
  "$src/libclient/python/kvpool/py.typed" "$out/kvpool/"
mkdir -p "$out/kvpool/integrations"
cp "$src"/libclient/python/kvpool/integrations/*.py "$out/kvpool/integrations/"
echo "build_for: $("$py" -c 'import platform; print(platform.python_version())') -> $out/kvpool/_kvpool$suffix"
