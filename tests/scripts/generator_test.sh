#!/bin/sh
# scripts/test.sh, demo.sh, stress.sh and gpu-check.sh configure BUILD_DIR through
# scripts/cmake_generator.sh: a folder configured earlier by another generator (here Unix
# Makefiles) must configure again, and a new folder gets Ninja. The first half shows the
# failure the helper avoids, so this test fails if CMake ever stops refusing the switch
# (then the helper would be pointless) as well as if the helper forces a generator.
# Usage: generator_test.sh SOURCE_DIR CMAKE
set -u
src="$1"
cmake="$2"
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v ninja >/dev/null 2>&1 || { echo "SKIP: ninja is not installed"; exit 77; }
command -v make >/dev/null 2>&1 || { echo "SKIP: make is not installed"; exit 77; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/project"
printf 'cmake_minimum_required(VERSION 3.20)\nproject(probe NONE)\n' >"$tmp/project/CMakeLists.txt"

"$cmake" -S "$tmp/project" -B "$tmp/make" -G "Unix Makefiles" >"$tmp/log" 2>&1 ||
  { cat "$tmp/log" >&2; fail "could not configure with Unix Makefiles"; }
if "$cmake" -S "$tmp/project" -B "$tmp/make" -G Ninja >"$tmp/log" 2>&1; then
  fail "CMake accepted -G Ninja on a Makefiles folder (the helper is then unneeded)"
fi
grep -q "generator" "$tmp/log" || { cat "$tmp/log" >&2; fail "unexpected CMake error"; }

. "$src/scripts/cmake_generator.sh"
# shellcheck disable=SC2046
"$cmake" -S "$tmp/project" -B "$tmp/make" $(generator_args "$tmp/make") >"$tmp/log" 2>&1 ||
  { cat "$tmp/log" >&2; fail "reconfiguring a Makefiles folder through generator_args failed"; }
grep -q '^CMAKE_GENERATOR:INTERNAL=Unix Makefiles$' "$tmp/make/CMakeCache.txt" ||
  fail "the Makefiles folder changed generator"
echo "ok: a Unix Makefiles folder reconfigures"

# shellcheck disable=SC2046
"$cmake" -S "$tmp/project" -B "$tmp/new" $(generator_args "$tmp/new") >"$tmp/log" 2>&1 ||
  { cat "$tmp/log" >&2; fail "configuring a new folder failed"; }
grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$tmp/new/CMakeCache.txt" ||
  fail "a new folder did not get Ninja"
echo "ok: a new folder gets Ninja"

# Every script that configures a build goes through the helper, none forces -G.
for s in test.sh demo.sh stress.sh gpu-check.sh; do
  grep -q 'generator_args' "$src/scripts/$s" || fail "scripts/$s does not use generator_args"
  if grep -Eq 'cmake -S [^#]*-G ' "$src/scripts/$s"; then fail "scripts/$s still forces a generator"; fi
done
echo "ok: the scripts configure through generator_args"
