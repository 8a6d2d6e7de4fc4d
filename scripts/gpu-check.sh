#!/usr/bin/env bash
# Device-pool check on a machine with an NVIDIA GPU (sized for a fresh H200 machine: well
# under 8 minutes): bootstrap, a Release build with CUDA, the `gpu` tests (plus the CUDA
# unit tests), the copy_blocks bandwidth benchmark, and a summary.
#   scripts/gpu-check.sh
# BUILD_DIR (default build-gpu), JOBS (default nproc), CUDA_ARCH (default 90: H200/H100).
# Fails when no GPU is visible: a skipped device test is not a pass here.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
stage() { echo; echo "== gpu-check: $* ($(( $(date +%s) - t0 )) s)"; }
BUILD_DIR=${BUILD_DIR:-build-gpu}
JOBS=${JOBS:-$(nproc)}
LOG_DIR="$BUILD_DIR/gpu-check"

stage "bootstrap"
scripts/bootstrap.sh
if [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi
command -v nvcc >/dev/null || { echo "gpu-check: no nvcc (CUDA toolkit) on PATH or in /usr/local/cuda"; exit 1; }
nvcc --version | tail -n 2
if command -v nvidia-smi >/dev/null; then
  nvidia-smi -L
else
  echo "gpu-check: nvidia-smi not found (no NVIDIA driver?)"
fi

stage "configure + build (Release, CUDA, sm_${CUDA_ARCH:-90})"
. scripts/cmake_generator.sh
# shellcheck disable=SC2046
cmake -S . -B "$BUILD_DIR" $(generator_args "$BUILD_DIR") -DCMAKE_BUILD_TYPE=Release -DKVPOOL_WITH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS" --target kvpool_gpu_tests kvpool_unit_tests kvpool_copy_bench
mkdir -p "$LOG_DIR"

stage "CUDA unit tests"
unit_rc=0
# (minus the one test of the no-device path, which skips where a device is visible)
"$BUILD_DIR/tests/kvpool_unit_tests" \
  --gtest_filter='CudaDevice.*:PoolStorage.*:CopyPlan.*-CudaDevice.PinningAndCopyingWithoutADeviceFailCleanly' \
  2>&1 | tee "$LOG_DIR/unit.log" || unit_rc=$?

stage "ctest -L gpu"
gpu_rc=0
ctest --test-dir "$BUILD_DIR" -L gpu --output-on-failure -j 4 --timeout 300 2>&1 \
  | tee "$LOG_DIR/ctest.log" || gpu_rc=$?

stage "copy bandwidth (kvpool_copy_bench)"
bench_rc=0
timeout 180 "$BUILD_DIR/tests/bench/kvpool_copy_bench" 2>&1 | tee "$LOG_DIR/bench.log" \
  || bench_rc=$?

stage "summary"
skipped=$(grep -c "Skipped" "$LOG_DIR/ctest.log" || true)
unit_skipped=$(grep -c '^\[  SKIPPED \] [A-Za-z]*\.' "$LOG_DIR/unit.log" || true)
echo "ctest -L gpu:      $(grep -E 'tests passed|tests failed' "$LOG_DIR/ctest.log" | tail -n 1) (skipped: $skipped)"
echo "CUDA unit tests:   exit $unit_rc (skipped: $unit_skipped)"
echo "copy bench:        exit $bench_rc"
grep -E '^(64KiB|2MiB) ' "$LOG_DIR/bench.log" | sed 's/^/  /' || true
echo "elapsed:           $(( $(date +%s) - t0 )) s; logs in $LOG_DIR"
fail=0
[ "$unit_rc" -eq 0 ] || fail=1
[ "$gpu_rc" -eq 0 ] || fail=1
[ "$bench_rc" -eq 0 ] || fail=1
if [ "$skipped" -ne 0 ] || [ "$unit_skipped" -ne 0 ]; then
  echo "gpu-check: device tests were skipped (no CUDA device visible?)"
  fail=1
fi
if [ "$fail" -ne 0 ]; then echo "gpu-check: FAILED"; exit 1; fi
echo "gpu-check: OK"
