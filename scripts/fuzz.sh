#!/usr/bin/env bash
# Builds kvpool's libFuzzer targets with clang-14 (ASan + UBSan) in the asan preset's build
# folder (the one scripts/test.sh runs the sanitized tests from, so CI compiles once) and runs
# each for a bounded time on a copy of its seed corpus, all at once.
#   scripts/fuzz.sh [target...]        targets: dispatch config adopt (default: all three)
# Env: FUZZ_SECONDS (default 60) per target, FUZZ_BUILD_DIR (default build-fuzz),
#      FUZZ_JOBS (parallel build jobs, default nproc).
# Exits non-zero when a target crashes, leaks, hangs or breaks a checked property; the
# input that did it is kept in $FUZZ_BUILD_DIR/artifacts/ (reproduce: <fuzzer> <file>).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh

FUZZ_SECONDS=${FUZZ_SECONDS:-60}
FUZZ_BUILD_DIR=${FUZZ_BUILD_DIR:-build-asan}
JOBS=${FUZZ_JOBS:-$(nproc)}
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(dispatch config adopt)
BINS=()
for t in "${TARGETS[@]}"; do BINS+=("kvpool_${t}_fuzz"); done

# CMakePresets.json "asan": clang-14, ASan+UBSan, KVPOOL_BUILD_FUZZ=ON, CUDA off.
cmake --preset asan -B "$FUZZ_BUILD_DIR" >/dev/null
cmake --build "$FUZZ_BUILD_DIR" -j "$JOBS" --target "${BINS[@]}"

ARTIFACTS="$FUZZ_BUILD_DIR/artifacts"
mkdir -p "$ARTIFACTS"
pids=()
for t in "${TARGETS[@]}"; do
  seeds="tests/fuzz/corpus/$t"
  work="$FUZZ_BUILD_DIR/corpus/$t"  # new inputs land here, never in the committed seeds
  mkdir -p "$work"
  extra=()
  [ -f "tests/fuzz/$t.dict" ] && extra+=("-dict=tests/fuzz/$t.dict")
  echo "fuzz: $t for ${FUZZ_SECONDS}s (log: $FUZZ_BUILD_DIR/fuzz-$t.log)"
  "$FUZZ_BUILD_DIR/tests/fuzz/kvpool_${t}_fuzz" "$work" "$seeds" "${extra[@]}" \
    -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
    -print_final_stats=1 -artifact_prefix="$ARTIFACTS/$t-" >"$FUZZ_BUILD_DIR/fuzz-$t.log" 2>&1 &
  pids+=($!)
done

status=0
for i in "${!TARGETS[@]}"; do
  t=${TARGETS[$i]}
  if wait "${pids[$i]}"; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$FUZZ_BUILD_DIR/fuzz-$t.log" | grep -o '[0-9]*$' || true)
    cov=$(grep -o 'cov: [0-9]*' "$FUZZ_BUILD_DIR/fuzz-$t.log" | tail -1 || true)
    echo "fuzz: $t ok (${runs:-?} runs, ${cov:-cov ?})"
  else
    status=1
    echo "fuzz: $t FAILED; the end of its log:"
    tail -n 60 "$FUZZ_BUILD_DIR/fuzz-$t.log"
    ls -l "$ARTIFACTS" | grep -- "$t-" || true
  fi
done
exit $status
