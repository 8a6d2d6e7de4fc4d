#!/usr/bin/env bash
# The main job: kvpoold (the default host-memory config, with DEMO_BLOCKS blocks: 8192, 40% of
# the slice's distinct blocks) and 4 workers replaying a slice
# of a real production trace (Mooncake's conversation trace, tools/replay/traces): the first
# DEMO_TRACE_SECONDS (300) seconds of it compressed into DEMO_SECONDS (25) seconds. One
# worker is killed with kill -9 mid-run and the daemon reclaims its blocks. Prints the prefix
# hit rate against the trace's infinite-cache ceiling and an exact simulation of the same
# pool, the prefill saved, the bytes verified, the reclaim and the final pool state; exits
# non-zero if an invariant fails. Then the same slice with 20% in host memory and a disk tier
# of 80% below it: host and disk hit rates against the two-tier simulation and the ceiling.
#   scripts/demo.sh            (DEMO_SECONDS=25, DEMO_TRACE_SECONDS=300, DEMO_BLOCKS=8192)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh

BUILD_DIR=${BUILD_DIR:-build}
SECONDS_RUN=${DEMO_SECONDS:-25}
TRACE_SECONDS=${DEMO_TRACE_SECONDS:-300}
BLOCKS=${DEMO_BLOCKS:-8192}
# shellcheck source=scripts/cmake_generator.sh
. scripts/cmake_generator.sh
# shellcheck disable=SC2046
cmake -S . -B "$BUILD_DIR" $(generator_args "$BUILD_DIR") >/dev/null
cmake --build "$BUILD_DIR" --target kvpoold kvpoolctl kvpool-replay >/dev/null

KVPOOLD="$BUILD_DIR/daemon/kvpoold"
CTL="$BUILD_DIR/tools/kvpoolctl/kvpoolctl"
REPLAY="$BUILD_DIR/tools/replay/kvpool-replay"
RUN=$(mktemp -d /tmp/kvpool-demo-XXXXXX)
INSTANCE="demo$$"
DAEMON_PID=""
cleanup() {
  [ -n "$DAEMON_PID" ] && kill "$DAEMON_PID" 2>/dev/null && wait "$DAEMON_PID" 2>/dev/null
  rm -rf "$RUN"
}
trap cleanup EXIT

fail() { echo "demo: FAILED: $*" >&2; echo "--- kvpoold log ---" >&2; cat "$RUN/kvpoold.log" >&2; exit 1; }

"$KVPOOLD" --print-default-config | sed "s/\"num_blocks\": [0-9]*/\"num_blocks\": $BLOCKS/" >"$RUN/kvpoold.json"
"$KVPOOLD" --config "$RUN/kvpoold.json" --instance "$INSTANCE" --runtime-dir "$RUN" >"$RUN/kvpoold.log" 2>&1 &
DAEMON_PID=$!
for _ in $(seq 1 100); do   # wait for the socket (bounded: 10 s)
  "$CTL" status --instance "$INSTANCE" --runtime-dir "$RUN" >/dev/null 2>&1 && break
  kill -0 "$DAEMON_PID" 2>/dev/null || fail "kvpoold exited at start"
  sleep 0.1
done
"$CTL" status --instance "$INSTANCE" --runtime-dir "$RUN" >/dev/null || fail "kvpoold did not come up"
echo "kvpoold running (pid $DAEMON_PID), default config with $("$CTL" status --instance "$INSTANCE" --runtime-dir "$RUN" --json | grep -o '"total_blocks": [0-9]*' | head -1)"

# The replay: 4 workers, one SIGKILL about a third of the way in (a replacement serves the
# rest of the victim's share). kvpool-replay checks every matched block's bytes, the final
# pool state through kvpoolctl and kvpoolctl check, and exits 1 on any violation.
SPEED=$(awk -v t="$TRACE_SECONDS" -v s="$SECONDS_RUN" 'BEGIN { printf "%.3f", t / s }')
KILL_AT=$(awk -v s="$SECONDS_RUN" 'BEGIN { printf "%.3f", s / 3 / 1.5 }')  # jitter x0.5..1.5
"$REPLAY" --instance "$INSTANCE" --runtime-dir "$RUN" --kvpoolctl "$CTL" --workers 4 \
  --span-s "$TRACE_SECONDS" --speed "$SPEED" --kill-interval "$KILL_AT" --max-kills 1 --seed 1 \
  --json "$RUN/replay.json" | tee "$RUN/replay.out" || fail "kvpool-replay found a violation (above)"
grep -q '^killed worker' "$RUN/replay.out" || fail "no worker was killed"

STATUS=$("$CTL" status --instance "$INSTANCE" --runtime-dir "$RUN" --json)
field() { echo "$STATUS" | grep -o "\"$1\": [0-9]*" | head -1 | awk '{print $2}'; }
TOTAL=$(field total_blocks); FREE=$(field free_blocks); MUT=$(field mutable_blocks)
ACT=$(field active_blocks); INACT=$(field inactive_blocks)
RCL=$(field reclaimed_clients); CLIENTS=$(field clients)

[ "$RCL" -ge 1 ] || fail "the killed worker was not reclaimed"
[ "$MUT" -eq 0 ] || fail "$MUT mutable blocks left"
[ "$ACT" -eq 0 ] || fail "$ACT active blocks left after every worker ended"
[ $((FREE + INACT)) -eq "$TOTAL" ] || fail "free + inactive != total"
[ "$CLIENTS" -eq 0 ] || fail "$CLIENTS clients still attached"
echo "demo: OK (every block free or inactive, no byte wrong)"

# The disk tier (docs/disk-tier.md): the same slice against a private kvpoold whose pool holds
# 20% of the slice's distinct blocks in host memory and 80% more in a slot file under
# /var/tmp; the workers' matches continue their prefixes from disk (MatchOptions::onboard).
# It prints host and disk hit rates beside the two-tier simulation's and the ceiling, and
# checks every matched block's bytes.
echo
echo "== the disk tier: host memory at 20% of the slice's distinct blocks, a disk tier of 80%"
"$REPLAY" --kvpoold "$KVPOOLD" --kvpoolctl "$CTL" --workers 4 --span-s "$TRACE_SECONDS" \
  --speed "$SPEED" --capacity-pct 20 --disk-pct 80 --seed 1 | tee "$RUN/disk.out" ||
  fail "kvpool-replay with a disk tier found a violation (above)"
grep -q '^hit rate: .*disk' "$RUN/disk.out" || fail "no disk hit rate in the replay's output"
echo "demo: disk tier OK (host + disk hits beside the simulation's, no byte wrong)"
