#!/bin/sh
# The C ABI's contract, checked on the built library:
#   - it exports exactly the functions listed in libclient/src/c_api/abi_symbols.txt (no more:
#     nothing C++ leaks; no less: every documented function is there), all with the
#     version node KVPOOL_C_<major>;
#   - kvpool.h declares exactly that list;
#   - the SONAME is libkvpool_c.so.<KVPOOL_ABI_VERSION_MAJOR>.
# usage: abi_check.sh <libkvpool_c.so> <abi_symbols.txt> <kvpool.h>
set -eu
lib=$1 list=$2 header=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

grep '^kvpool_' "$list" >"$tmp/documented"
sort -c "$tmp/documented" || { echo "abi_check: $list is not sorted"; fail=1; }

major=$(sed -n 's/^#define KVPOOL_ABI_VERSION_MAJOR \([0-9]*\)$/\1/p' "$header")
[ -n "$major" ] || { echo "abi_check: no KVPOOL_ABI_VERSION_MAJOR in $header"; exit 1; }

# Every defined dynamic symbol, whatever its kind (functions, data, weak template code),
# but the version node's own definition (an absolute symbol named KVPOOL_C_<major>).
nm -D --defined-only "$lib" | awk -v node="KVPOOL_C_$major" '!($2 == "A" && $3 == node) {print $NF}' |
  sed 's/@.*//' | sort -u >"$tmp/exported"
if ! diff -u "$tmp/documented" "$tmp/exported" >"$tmp/diff"; then
  echo "abi_check: $lib exports a different set than $list (- documented, + exported):"
  cat "$tmp/diff"
  fail=1
fi

# The version node on every export.
unversioned=$(nm -D --defined-only "$lib" | awk '{print $NF}' | grep -v "@@KVPOOL_C_$major\$" | grep -v "^KVPOOL_C_$major\$" || true)
if [ -n "$unversioned" ]; then
  echo "abi_check: exports without the version node KVPOOL_C_$major:"
  echo "$unversioned"
  fail=1
fi

# What the header declares (one KVPOOL_API declaration per function).
grep -o 'KVPOOL_API[^(]*(' "$header" | grep -o 'kvpool_[a-z0-9_]*($' | tr -d '(' | sort -u >"$tmp/declared"
if ! diff -u "$tmp/documented" "$tmp/declared" >"$tmp/diff"; then
  echo "abi_check: $header declares a different set than $list (- documented, + declared):"
  cat "$tmp/diff"
  fail=1
fi

soname=$(objdump -p "$lib" | awk '$1 == "SONAME" {print $2}')
if [ "$soname" != "libkvpool_c.so.$major" ]; then
  echo "abi_check: SONAME is '$soname', expected libkvpool_c.so.$major"
  fail=1
fi

[ $fail -eq 0 ] && echo "abi_check: OK ($(wc -l <"$tmp/documented") functions, SONAME $soname)"
exit $fail
