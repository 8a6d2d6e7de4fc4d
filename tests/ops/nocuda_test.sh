#!/bin/sh
# Host-only use on a host without CUDA (issue: libkvpool had a NEEDED on libcudart.so.N):
#  1. nothing kvpool ships (libkvpool.so, the Python extension, kvpoold, kvpoolctl,
#     kvpool-events, kvpool-exporter) has a NEEDED entry on libcudart or libcuda;
#  2. in a private mount namespace where every directory holding libcudart is an empty
#     tmpfs (so the runtime truly cannot be loaded): kvpoold serves its default host pool,
#     a worker runs against it, kvpoolctl status/check work, the CUDA and pool-storage
#     unit tests pass, `import kvpool` works, and a config with a cuda pool fails with a
#     message naming the runtime it could not load.
# Part 2 needs root and unshare(1) (CI runs as root); without them it exits 77 (skipped).
# Usage: nocuda_test.sh BUILD_DIR CUDA_LIBRARY_DIR (may be empty) BINARY...
set -u
build="$1"
cudalib="$2"
shift 2
fail() { echo "FAIL: $*" >&2; exit 1; }

# ---- 1. no NEEDED on the CUDA libraries ---------------------------------------------------
checked=0
for f in "$@" "$build"/libclient/libkvpool.so "$build"/libclient/python/kvpool/_kvpool*.so; do
  [ -e "$f" ] || continue
  needed="$(readelf -d "$f" | grep NEEDED | grep -E 'libcudart|libcuda\.so' || true)"
  [ -z "$needed" ] || fail "$f needs the CUDA libraries: $needed"
  checked=$((checked + 1))
done
[ "$checked" -ge 4 ] || fail "found only $checked of the programs and libraries to check"
echo "ok: $checked programs and libraries have no NEEDED on libcudart / libcuda"

# ---- 2. run with the CUDA runtime hidden -------------------------------------------------
if [ "$(id -u)" -ne 0 ] || ! command -v unshare >/dev/null 2>&1; then
  echo "SKIP: hiding the CUDA libraries needs root and unshare"
  exit 77
fi
probe="$(mktemp -d)"
if ! unshare --mount --propagation private mount -t tmpfs kvpool-probe "$probe" 2>/dev/null; then
  rmdir "$probe"
  echo "SKIP: this container may not mount in a private namespace (no CAP_SYS_ADMIN)"
  exit 77
fi
rmdir "$probe"
dirs=""
for lib in $(ldconfig -p | sed -n 's/.*libcudart\.so[^ ]* .*=> //p') \
           $( [ -n "$cudalib" ] && ls "$cudalib"/libcudart.so* 2>/dev/null ); do
  d="$(dirname "$(readlink -f "$lib")")"
  dirs="$dirs $d $(dirname "$lib")"
done
dirs="$(echo "$dirs" | tr ' ' '\n' | sort -u | tr '\n' ' ')"
echo "hiding:${dirs:- (no libcudart on this host)}"
export KVPOOL_NOCUDA_DIRS="$dirs" KVPOOL_NOCUDA_BUILD="$build"
exec unshare --mount --propagation private sh -c '
  set -u
  fail() { echo "FAIL: $*" >&2; exit 1; }
  for d in $KVPOOL_NOCUDA_DIRS; do
    mount -t tmpfs -o size=1m kvpool-nocuda "$d" || fail "cannot hide $d"
  done
  for d in $KVPOOL_NOCUDA_DIRS; do
    if ls "$d"/libcudart.so* >/dev/null 2>&1; then fail "$d still holds libcudart"; fi
  done
  b="$KVPOOL_NOCUDA_BUILD"
  tmp="$(mktemp -d)"
  inst="nocuda$$"
  "$b/daemon/kvpoold" --instance "$inst" --runtime-dir "$tmp" >"$tmp/kvpoold.log" 2>&1 &
  pid=$!
  tries=0
  until "$b/tools/kvpoolctl/kvpoolctl" status --instance "$inst" --runtime-dir "$tmp" >"$tmp/status" 2>&1; do
    kill -0 "$pid" 2>/dev/null || { cat "$tmp/kvpoold.log" >&2; fail "kvpoold exited without CUDA"; }
    tries=$((tries + 1)); [ $tries -lt 1000 ] || fail "kvpoold not answering after 20 s"
    sleep 0.02
  done
  echo "ok: kvpoold serves its host pool with the CUDA runtime hidden"
  "$b/tests/kvpool_demo_worker" --instance "$inst" --runtime-dir "$tmp" --seconds 1 --seed 1 \
    >"$tmp/worker.out" 2>&1 || { cat "$tmp/worker.out" >&2; fail "worker failed without CUDA"; }
  "$b/tools/kvpoolctl/kvpoolctl" check --instance "$inst" --runtime-dir "$tmp" >/dev/null ||
    fail "kvpoolctl check failed without CUDA"
  echo "ok: a worker ran and kvpoolctl check passed: $(cat "$tmp/worker.out")"
  kill -TERM "$pid"; wait "$pid" || fail "kvpoold exited $? on SIGTERM"

  "$b/tests/kvpool_unit_tests" --gtest_brief=1 \
    --gtest_filter="CudaDevice.*:PoolStorage.*:CopyPlan.*" >"$tmp/unit.log" 2>&1 ||
    { cat "$tmp/unit.log" >&2; fail "unit tests failed without CUDA"; }
  echo "ok: CUDA / pool storage unit tests pass without CUDA"

  if ls "$b"/libclient/python/kvpool/_kvpool*.so >/dev/null 2>&1; then
    PYTHONPATH="$b/libclient/python" python3 -c "import kvpool; print(kvpool.__version__)" \
      >"$tmp/py" 2>&1 || { cat "$tmp/py" >&2; fail "import kvpool failed without CUDA"; }
    echo "ok: import kvpool (version $(cat "$tmp/py")) without CUDA"
  fi

  printf "%s" "{\"pools\": [{\"name\": \"g1\", \"storage\": \"cuda\", \"device\": 0, \"num_blocks\": 8}]}" \
    >"$tmp/cuda.json"
  "$b/daemon/kvpoold" --config "$tmp/cuda.json" --instance "${inst}c" --runtime-dir "$tmp" \
    >"$tmp/cuda.log" 2>&1 && fail "kvpoold started a cuda pool without CUDA"
  grep -q "libcudart" "$tmp/cuda.log" || { cat "$tmp/cuda.log" >&2; fail "the cuda pool error does not name libcudart"; }
  echo "ok: a cuda pool fails clearly: $(grep -m1 libcudart "$tmp/cuda.log")"
  rm -rf "$tmp"
'
