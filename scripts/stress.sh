#!/usr/bin/env bash
# Multi-process stress with kill -9: N workers, a killer, optional daemon restarts.
#   scripts/stress.sh [--workers 8] [--seconds 30] [--kill-interval-ms 300]
#                     [--daemon-restarts 0] [--keep-cache [--reattach]] [--seed 1] [--blocks 2048]
# --keep-cache: kvpoold runs under `kvpoold --supervise` and each daemon restart is a kill -9
# whose successor adopts the pool (docs/restarts.md). --reattach: workers
# reconnect on their own (ConnectOptions::reattach) and must ride through each restart.
# Prints progress each second and a verdict; exits non-zero on any violation.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
BUILD_DIR=${BUILD_DIR:-build}
. scripts/cmake_generator.sh
# shellcheck disable=SC2046
cmake -S . -B "$BUILD_DIR" $(generator_args "$BUILD_DIR") >/dev/null
cmake --build "$BUILD_DIR" --target kvpool_stress >/dev/null
exec "$BUILD_DIR/tests/stress/kvpool_stress" "$@"
