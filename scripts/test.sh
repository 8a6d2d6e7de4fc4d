#!/usr/bin/env bash
# Builds everything and runs every test: `scripts/test.sh`
# Installs what it needs first (scripts/bootstrap.sh). BUILD_DIR overrides the build folder.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh

BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo ${CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j "$JOBS"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" --timeout 300
