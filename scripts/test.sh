#!/usr/bin/env bash
# Builds everything and runs every test: `scripts/test.sh`
# Installs what it needs first (scripts/bootstrap.sh). BUILD_DIR overrides the build folder
# (default build type, i.e. RelWithDebInfo). Under CI=true, or with RELEASE_CHECK=1, every
# target is then also built as Release (RELEASE_BUILD_DIR, default build-release).
# Under CI=true, or with SANITIZERS=1, it then also runs the unit and multi-process tests
# under ASan+UBSan (clang-14) and under TSan (gcc) (CMakePresets.json: asan, tsan;
# ASAN_BUILD_DIR and TSAN_BUILD_DIR override their folders) and the fuzzers from the asan
# build (scripts/fuzz.sh, FUZZ_SECONDS each, 60 by default). A plain local run stays quick.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase prints how long it took: CI has 30 minutes on 2 cores, and this is where they go.
START=$SECONDS
phase() { echo "== [$((SECONDS - START)) s] $*"; }
scripts/bootstrap.sh
phase "bootstrap done"

BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
# The default (empty) build type: CMakeLists.txt makes it RelWithDebInfo, the build tested.
# A folder already configured keeps its generator and build type.
# shellcheck source=scripts/cmake_generator.sh
. scripts/cmake_generator.sh
# Unity files for the heavy multi-file targets (cmake/KvpoolPch.cmake): each build here is a
# build from scratch, and they compile in about half the CPU time. KVPOOL_UNITY=OFF: per file.
UNITY="-DKVPOOL_UNITY=${KVPOOL_UNITY:-ON}"
# Line tables only (-g1) in the tested build: backtraces and sanitizer-style reports still
# name file and line, and a fifth of each compile (full type information, -g) is saved; debug
# information never changes GCC's code or its warnings, so the default build type (-O2 -g)
# builds warning-free exactly when this one does. DEBUG_INFO=-g: full debug information.
DEBUG_INFO=${DEBUG_INFO:--g1}
RELWITHDEBINFO=(-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 $DEBUG_INFO -DNDEBUG"
                -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 $DEBUG_INFO -DNDEBUG")
# shellcheck disable=SC2046,SC2086
cmake -S . -B "$BUILD_DIR" $(generator_args "$BUILD_DIR") $UNITY "${RELWITHDEBINFO[@]}" ${CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j "$JOBS"
phase "build done ($BUILD_DIR)"

# Release (what packagers and benchmarks build: -O3, where g++ warns about more) must build
# warning-free too. Under CI=true, or RELEASE_CHECK=1: every target compiled and linked in
# a folder of its own (RELEASE_BUILD_DIR), not run (the tests run the same code), beside the
# tests.
RELEASE_CHECK=${RELEASE_CHECK:-0}
[ "${CI:-}" = "true" ] && RELEASE_CHECK=1
if [ "$RELEASE_CHECK" = "1" ]; then
  REL_DIR=${RELEASE_BUILD_DIR:-build-release}
  echo "== Release: every target, warnings as errors ($REL_DIR), beside the tests"
  # shellcheck disable=SC2046,SC2086
  cmake -S . -B "$REL_DIR" $(generator_args "$REL_DIR") -DCMAKE_BUILD_TYPE=Release $UNITY ${CMAKE_ARGS:-} >/dev/null
  # -k 0: one run names every file that warns, not just the first.
  keep_going=()
  [ -f "$REL_DIR/build.ninja" ] && keep_going=(-- -k 0)
  # At nice 19, beside the tests: they leave about a third of two cores idle (the serial
  # ones, the waits on deadlines), and a niced compile takes only that. Tests + Release took
  # 583 s this way against 770 s one after the other (CI=true on a 2-core VM). Its output
  # goes to a log, shown if it fails; setsid gives it a process group of its own, which a
  # run that stops early takes down, compilers included.
  REL_LOG="$REL_DIR/release-build.log"
  setsid nice -n 19 cmake --build "$REL_DIR" -j "$JOBS" "${keep_going[@]}" >"$REL_LOG" 2>&1 &
  REL_PID=$!
  trap 'kill -- "-$REL_PID" 2>/dev/null || true' EXIT
fi

ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" --timeout 300
phase "tests done ($BUILD_DIR)"
if [ "$RELEASE_CHECK" = "1" ]; then
  rc=0
  wait "$REL_PID" || rc=$?
  trap - EXIT
  if [ "$rc" -ne 0 ]; then
    cat "$REL_LOG"
    echo "== Release build failed (exit $rc; its output is above and in $REL_LOG)"
    exit "$rc"
  fi
  grep 'warning:' "$REL_LOG" || true  # -Werror fails a compile; the linker's would show here
  phase "Release build done"
fi

SANITIZERS=${SANITIZERS:-0}
[ "${CI:-}" = "true" ] && SANITIZERS=1
[ "$SANITIZERS" = "1" ] || exit 0

# Each sanitizer build makes only what the unit and multi-process tests run. The options
# are read from the asan / tsan test presets in CMakePresets.json, their one source; ctest is
# pointed at the folder itself because `ctest --preset` always uses the preset's own
# binaryDir. Reports go to files too (log_path), so one from a process whose exit status
# nobody checks (a worker or a daemon a test kills anyway) still fails the run.
preset_env() {  # preset_env PRESET VARIABLE: that test preset's value, ${sourceDir} expanded
  python3 - "$1" "$2" "$PWD" <<'PY'
import json, sys
preset, var, source_dir = sys.argv[1:]
with open("CMakePresets.json") as f:
    tests = {p["name"]: p for p in json.load(f)["testPresets"]}
print(tests[preset]["environment"][var].replace("${sourceDir}", source_dir))
PY
}
ASAN_BASE=$(preset_env asan ASAN_OPTIONS)
UBSAN_BASE=$(preset_env asan UBSAN_OPTIONS)
TSAN_BASE=$(preset_env tsan TSAN_OPTIONS)
sanitized() {
  local preset=$1 dir=$2
  shift 2
  echo "== $preset: unit + multiproc tests ($dir)"
  cmake --preset "$preset" -B "$dir" "$UNITY" >/dev/null
  cmake --build "$dir" -j "$JOBS" --target kvpool_unit_tests kvpool_multiproc_tests "$@"
  local logs
  logs="$(cd "$dir" && pwd)/sanitizer-reports"
  rm -rf "$logs" && mkdir -p "$logs"
  local rc=0
  ASAN_OPTIONS="$ASAN_BASE:log_path=$logs/asan" UBSAN_OPTIONS="$UBSAN_BASE:log_path=$logs/ubsan" \
    TSAN_OPTIONS="$TSAN_BASE:log_path=$logs/tsan" \
    ctest --test-dir "$dir" -L 'unit|multiproc' --output-on-failure -j "$JOBS" --timeout 300 || rc=1
  phase "$preset done"
  if [ -n "$(ls -A "$logs")" ]; then
    echo "== $preset: sanitizer reports:"
    for f in "$logs"/*; do echo "-- $f"; cat "$f"; done
    rc=1
  fi
  return $rc
}
ASAN_DIR=${ASAN_BUILD_DIR:-build-asan}
# The asan build also makes the fuzz targets (same instrumentation): fuzz.sh reuses it.
sanitized asan "$ASAN_DIR" kvpool_dispatch_fuzz kvpool_config_fuzz kvpool_adopt_fuzz
sanitized tsan "${TSAN_BUILD_DIR:-build-tsan}"

echo "== fuzz"
FUZZ_BUILD_DIR="$ASAN_DIR" FUZZ_SECONDS=${FUZZ_SECONDS:-60} scripts/fuzz.sh
phase "fuzz done"
