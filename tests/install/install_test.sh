#!/bin/sh
# Install and consume, as a packager and a worker author would:
#  1. `cmake --install` the build into a temporary prefix; the expected files are there
#     (programs, libkvpool, exactly the public headers, CMake package, kvpool.pc, unit,
#     sysusers, default config), the unit's ExecStart= points into the prefix;
#  2. the installed libkvpool.so is self-contained: no undefined kvpool symbol, every
#     dependency resolves, no RUNPATH into the build tree;
#  3. examples/worker configures and builds against the prefix with find_package(kvpool)
#     (CMAKE_PREFIX_PATH), and again by hand with `pkg-config --cflags --libs kvpool`;
#     examples/c the same against the C library (kvpool::c, pkg-config kvpool_c);
#  4. the installed kvpoold starts (installed default config, temp runtime dir and
#     instance), both workers run against it and exit 0, the installed kvpoolctl sees it,
#     and it stops cleanly on SIGTERM.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR CMAKE CXX
set -u
build="$1"
src="$2"
cmake="$3"
cxx="$4"
fail() { echo "FAIL: $*" >&2; [ -f "$tmp/kvpoold.log" ] && sed 's/^/kvpoold: /' "$tmp/kvpoold.log" >&2; exit 1; }
tmp="$(mktemp -d)"
daemon_pid=""
cleanup() {
  [ -n "$daemon_pid" ] && kill -KILL "$daemon_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
prefix="$tmp/prefix"

# ---- 1. install --------------------------------------------------------------------------
"$cmake" --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log" >&2; fail "cmake --install failed"; }
libdir=""
for d in lib lib64 lib/x86_64-linux-gnu lib/aarch64-linux-gnu; do
  [ -e "$prefix/$d/libkvpool.so" ] && libdir="$prefix/$d" && break
done
[ -n "$libdir" ] || fail "no libkvpool.so under $prefix/lib*"
# The C ABI: libkvpool_c.so.1 beside libkvpool, found through its RUNPATH.
[ -e "$libdir/libkvpool_c.so.1" ] || fail "cmake --install did not install libkvpool_c.so.1"
ldd "$libdir/libkvpool_c.so.1" | grep -q "not found" && fail "libkvpool_c.so.1 misses a library: $(ldd "$libdir/libkvpool_c.so.1")"
for f in bin/kvpoold bin/kvpoolctl include/kvpool/client.hpp include/kvpool/block.hpp \
         lib/systemd/system/kvpoold.service lib/sysusers.d/kvpool.conf etc/kvpool/kvpoold.json \
         share/doc/kvpool/README.md share/doc/kvpool/docs/operations.md; do
  [ -e "$prefix/$f" ] || fail "cmake --install did not install $f"
done
for f in cmake/kvpool/kvpoolConfig.cmake cmake/kvpool/kvpoolConfigVersion.cmake \
         cmake/kvpool/kvpoolTargets.cmake pkgconfig/kvpool.pc pkgconfig/kvpool_c.pc; do
  [ -e "$libdir/$f" ] || fail "cmake --install did not install $libdir/$f"
done
# Exactly the public headers and what they include, nothing internal (shm/, pool/, ...).
(cd "$prefix/include" && find . -type f | sort) >"$tmp/headers"
cat >"$tmp/headers.expected" <<'END'
./kvpool/block.hpp
./kvpool/client.hpp
./kvpool/core/block_state.hpp
./kvpool/core/dtype.hpp
./kvpool/core/hash.hpp
./kvpool/core/layout.hpp
./kvpool/core/status.hpp
./kvpool/core/token_block.hpp
./kvpool/kvpool.h
END
diff -u "$tmp/headers.expected" "$tmp/headers" || fail "installed headers differ (above)"
# Every quoted include of an installed header is itself installed.
for h in $(cat "$tmp/headers"); do
  for inc in $(sed -n 's/^#include "\(kvpool\/[^"]*\)".*/\1/p' "$prefix/include/$h"); do
    [ -e "$prefix/include/$inc" ] || fail "$h includes $inc, which is not installed"
  done
done
grep -qx "ExecStart=$prefix/bin/kvpoold --config $prefix/etc/kvpool/kvpoold.json --keep-cache" \
  "$prefix/lib/systemd/system/kvpoold.service" ||
  fail "installed unit's ExecStart= does not point into the prefix: $(grep ExecStart= "$prefix/lib/systemd/system/kvpoold.service")"
echo "ok: installed into $prefix"

# Every installed unit points into the prefix and verifies as systemd reads it; the
# forwarder's settings file is installed where its unit looks for it.
for unit in kvpool-events kvpool-exporter; do
  [ -x "$prefix/bin/$unit" ] || continue
  u="$prefix/lib/systemd/system/$unit.service"
  [ -e "$u" ] || fail "$unit is installed but not $unit.service"
  grep -q "^ExecStart=$prefix/bin/$unit " "$u" ||
    fail "installed $unit.service's ExecStart= does not point into the prefix: $(grep ExecStart= "$u")"
  if grep -v '^#' "$u" | grep -Eq '(=|=-| )/(usr/bin|etc/kvpool)/'; then
    fail "installed $unit.service still names /usr/bin or /etc/kvpool: $(grep -v '^#' "$u" | grep -E '(=|=-| )/(usr/bin|etc/kvpool)/')"
  fi
done
if [ -x "$prefix/bin/kvpool-events" ]; then
  grep -q "^EnvironmentFile=-$prefix/etc/kvpool/kvpool-events.env$" "$prefix/lib/systemd/system/kvpool-events.service" ||
    fail "kvpool-events.service's EnvironmentFile= is not the installed one"
  [ -e "$prefix/etc/kvpool/kvpool-events.env" ] || fail "kvpool-events.env is not installed"
fi
if command -v systemd-analyze >/dev/null 2>&1; then
  for u in "$prefix"/lib/systemd/system/*.service; do
    systemd-analyze verify --man=no "$u" >"$tmp/verify.out" 2>&1
    rc=$?
    if [ $rc -ne 0 ] || grep -q "$(basename "$u")" "$tmp/verify.out"; then
      cat "$tmp/verify.out" >&2
      fail "systemd-analyze verify $u: exit $rc, or complaints about it (above)"
    fi
  done
  echo "ok: systemd-analyze verify passes on every installed unit"
fi

# ---- 2. libkvpool.so is self-contained ---------------------------------------------------
lib="$(readlink -f "$libdir/libkvpool.so")"
undefined="$(nm -DC --undefined-only "$lib" | grep 'kvpool::' || true)"
[ -z "$undefined" ] || fail "libkvpool.so leaves kvpool symbols undefined: $undefined"
nm -DC --defined-only "$lib" | grep -q 'kvpool::TokenBlockSequence::create' ||
  fail "libkvpool.so does not export TokenBlockSequence::create (installed token_block.hpp)"
ldd "$lib" >"$tmp/ldd" 2>&1 || fail "ldd $lib failed"
if grep -q 'not found' "$tmp/ldd"; then cat "$tmp/ldd" >&2; fail "libkvpool.so has unresolved dependencies"; fi
if readelf -d "$lib" | grep -E 'RPATH|RUNPATH' | grep -q "$build"; then
  fail "installed libkvpool.so keeps a RUNPATH into the build tree"
fi
echo "ok: libkvpool.so is self-contained"

# ---- 3. build the example worker against the prefix ------------------------------------
gen=""
command -v ninja >/dev/null 2>&1 && gen="-G Ninja"
# shellcheck disable=SC2086
"$cmake" -S "$src/examples/worker" -B "$tmp/worker" $gen -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/worker-configure.log" 2>&1 ||
  { cat "$tmp/worker-configure.log" >&2; fail "examples/worker: find_package(kvpool) configure failed"; }
"$cmake" --build "$tmp/worker" >"$tmp/worker-build.log" 2>&1 ||
  { cat "$tmp/worker-build.log" >&2; fail "examples/worker does not build against the installed kvpool"; }
# The build used the installed headers, not the source tree.
if grep -rq -- "-I$src" "$tmp/worker" 2>/dev/null; then fail "examples/worker compiled against the source tree"; fi
echo "ok: examples/worker built with find_package(kvpool)"

pc_flags="$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs kvpool)" ||
  fail "pkg-config --cflags --libs kvpool failed"
case "$pc_flags" in *"-I$prefix/include"*) ;; *) fail "pkg-config --cflags lacks -I$prefix/include: $pc_flags" ;; esac
case "$pc_flags" in *"-lkvpool"*) ;; *) fail "pkg-config --libs lacks -lkvpool: $pc_flags" ;; esac
[ "$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --modversion kvpool)" = \
  "$(sed -n 's/^set(PACKAGE_VERSION "\(.*\)")$/\1/p' "$libdir/cmake/kvpool/kvpoolConfigVersion.cmake")" ] ||
  fail "kvpool.pc and kvpoolConfigVersion.cmake disagree on the version"
# shellcheck disable=SC2086
"$cxx" -std=c++20 -o "$tmp/worker-pc" "$src/examples/worker/main.cpp" $pc_flags \
  -Wl,-rpath,"$libdir" >"$tmp/worker-pc.log" 2>&1 ||
  { cat "$tmp/worker-pc.log" >&2; fail "examples/worker does not build with pkg-config's flags ($pc_flags)"; }
echo "ok: examples/worker built with pkg-config ($pc_flags)"

# The C example, against the C library: find_package(kvpool) -> kvpool::c, and pkg-config
# kvpool_c (with nothing but the C compiler's defaults: strict C11).
# shellcheck disable=SC2086
"$cmake" -S "$src/examples/c" -B "$tmp/cworker" $gen -DCMAKE_PREFIX_PATH="$prefix" \
  >"$tmp/cworker-configure.log" 2>&1 ||
  { cat "$tmp/cworker-configure.log" >&2; fail "examples/c: find_package(kvpool) (kvpool::c) configure failed"; }
"$cmake" --build "$tmp/cworker" >"$tmp/cworker-build.log" 2>&1 ||
  { cat "$tmp/cworker-build.log" >&2; fail "examples/c does not build against the installed kvpool::c"; }
if grep -rq -- "-I$src" "$tmp/cworker" 2>/dev/null; then fail "examples/c compiled against the source tree"; fi
cpc_flags="$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs kvpool_c)" ||
  fail "pkg-config --cflags --libs kvpool_c failed"
case "$cpc_flags" in *"-lkvpool_c"*) ;; *) fail "pkg-config --libs kvpool_c lacks -lkvpool_c: $cpc_flags" ;; esac
[ "$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --modversion kvpool_c)" = "$(readlink "$libdir/libkvpool_c.so.1" | sed 's/^libkvpool_c\.so\.//')" ] ||
  fail "kvpool_c.pc's version is not the library's ($(readlink "$libdir/libkvpool_c.so.1"))"
# shellcheck disable=SC2086
cc -std=c11 -Wall -Werror -pedantic -o "$tmp/cworker-pc" "$src/examples/c/kvpool_example.c" \
  $cpc_flags -Wl,-rpath,"$libdir" >"$tmp/cworker-pc.log" 2>&1 ||
  { cat "$tmp/cworker-pc.log" >&2; fail "examples/c does not build with pkg-config kvpool_c's flags ($cpc_flags)"; }
echo "ok: examples/c built with find_package(kvpool) (kvpool::c) and pkg-config kvpool_c"

# ---- 4. run it against the installed daemon --------------------------------------------
instance="inst$$"
run="$tmp/run"
mkdir -p "$run"
"$prefix/bin/kvpoold" --config "$prefix/etc/kvpool/kvpoold.json" --instance "$instance" \
  --runtime-dir "$run" >"$tmp/kvpoold.log" 2>&1 &
daemon_pid=$!
# Up when the installed kvpoolctl gets an answer (a deadline, not a guess: each try is a
# real connection attempt; the pause between tries only saves CPU).
tries=0
until "$prefix/bin/kvpoolctl" status --instance "$instance" --runtime-dir "$run" >"$tmp/status" 2>&1; do
  kill -0 "$daemon_pid" 2>/dev/null || fail "installed kvpoold exited at start"
  tries=$((tries + 1))
  [ $tries -lt 400 ] || fail "installed kvpoold not answering after 20 s: $(cat "$tmp/status")"
  sleep 0.05
done
"$tmp/worker/kvpool_worker" "$instance" "$run" >"$tmp/worker.out" 2>&1 ||
  { cat "$tmp/worker.out" >&2; fail "the find_package worker failed against the installed kvpoold"; }
grep -q "0 block(s) matched before, 3 registered, 3 matched after" "$tmp/worker.out" ||
  fail "unexpected worker output: $(cat "$tmp/worker.out")"
"$tmp/worker-pc" "$instance" "$run" >"$tmp/worker-pc.out" 2>&1 ||
  { cat "$tmp/worker-pc.out" >&2; fail "the pkg-config worker failed against the installed kvpoold"; }
# The C example (pool g2 of the installed config): registers 4, then the other build matches 4.
"$tmp/cworker/kvpool_example" "$instance" "$run" >"$tmp/cworker.out" 2>&1 ||
  { cat "$tmp/cworker.out" >&2; fail "the find_package C example failed against the installed kvpoold"; }
grep -q "matched 0 of 4 blocks, registered 4" "$tmp/cworker.out" ||
  fail "unexpected C example output: $(cat "$tmp/cworker.out")"
"$tmp/cworker-pc" "$instance" "$run" >"$tmp/cworker-pc.out" 2>&1 ||
  { cat "$tmp/cworker-pc.out" >&2; fail "the pkg-config C example failed against the installed kvpoold"; }
grep -q "matched 4 of 4 blocks, registered 0" "$tmp/cworker-pc.out" ||
  fail "unexpected C example output (second run): $(cat "$tmp/cworker-pc.out")"
"$prefix/bin/kvpoolctl" check --instance "$instance" --runtime-dir "$run" >"$tmp/check" 2>&1 ||
  fail "installed kvpoolctl check failed: $(cat "$tmp/check")"
echo "ok: workers ran against the installed kvpoold: $(cat "$tmp/worker.out")"

kill -TERM "$daemon_pid"
wait "$daemon_pid"
rc=$?
daemon_pid=""
[ $rc -eq 0 ] || fail "installed kvpoold exited $rc on SIGTERM"
echo "ok: installed kvpoold stopped cleanly"
