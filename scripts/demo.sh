#!/usr/bin/env bash
# The main job: kvpoold with the default host-memory config and 4 workers serving prompts
# that share system-prompt prefixes; one worker is killed with kill -9 mid-run and the
# daemon reclaims its blocks. Prints a summary and exits non-zero if an invariant fails.
#   scripts/demo.sh            (DEMO_SECONDS=8 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh

BUILD_DIR=${BUILD_DIR:-build}
SECONDS_RUN=${DEMO_SECONDS:-8}
# shellcheck source=scripts/cmake_generator.sh
. scripts/cmake_generator.sh
# shellcheck disable=SC2046
cmake -S . -B "$BUILD_DIR" $(generator_args "$BUILD_DIR") >/dev/null
cmake --build "$BUILD_DIR" --target kvpoold kvpoolctl kvpool_demo_worker >/dev/null

KVPOOLD="$BUILD_DIR/daemon/kvpoold"
CTL="$BUILD_DIR/daemon/ctl/kvpoolctl"
WORKER="$BUILD_DIR/tests/kvpool_demo_worker"
RUN=$(mktemp -d /tmp/kvpool-demo-XXXXXX)
INSTANCE="demo$$"
DAEMON_PID=""
cleanup() {
  [ -n "$DAEMON_PID" ] && kill "$DAEMON_PID" 2>/dev/null && wait "$DAEMON_PID" 2>/dev/null
  rm -rf "$RUN"
}
trap cleanup EXIT

fail() { echo "demo: FAILED: $*" >&2; echo "--- kvpoold log ---" >&2; cat "$RUN/kvpoold.log" >&2; exit 1; }

"$KVPOOLD" --instance "$INSTANCE" --runtime-dir "$RUN" >"$RUN/kvpoold.log" 2>&1 &
DAEMON_PID=$!
for _ in $(seq 1 100); do   # wait for the socket (bounded: 10 s)
  "$CTL" status --instance "$INSTANCE" --runtime-dir "$RUN" >/dev/null 2>&1 && break
  kill -0 "$DAEMON_PID" 2>/dev/null || fail "kvpoold exited at start"
  sleep 0.1
done
"$CTL" status --instance "$INSTANCE" --runtime-dir "$RUN" >/dev/null || fail "kvpoold did not come up"
echo "kvpoold running (pid $DAEMON_PID), default config: $("$CTL" status --instance "$INSTANCE" --runtime-dir "$RUN" --json | grep -o '"total_blocks": [0-9]*' | head -1)"

START=$(date +%s.%N)
PIDS=()
for w in 1 2 3 4; do
  "$WORKER" --instance "$INSTANCE" --runtime-dir "$RUN" --seconds "$SECONDS_RUN" --seed "$w" \
    >"$RUN/worker$w.out" 2>"$RUN/worker$w.err" &
  PIDS+=($!)
done

# Kill worker 2 with SIGKILL a third of the way in, while it holds blocks.
sleep "$(awk -v s="$SECONDS_RUN" 'BEGIN { print s / 3 }')"
VICTIM=${PIDS[1]}
kill -9 "$VICTIM"
wait "$VICTIM" 2>/dev/null || true   # reap it quietly
echo "killed worker 2 (pid $VICTIM) with SIGKILL"

# The daemon notices at once; wait (bounded) until it has reclaimed the worker.
for _ in $(seq 1 50); do
  "$CTL" status --instance "$INSTANCE" --runtime-dir "$RUN" --json | grep -q '"reclaimed_clients": [1-9]' && break
  sleep 0.1
done

RC=0
for i in 0 2 3; do wait "${PIDS[$i]}" || RC=$?; done
END=$(date +%s.%N)
[ "$RC" -eq 0 ] || fail "a worker reported corrupt blocks or errors (rc $RC): $(cat "$RUN"/worker*.err)"

STATUS=$("$CTL" status --instance "$INSTANCE" --runtime-dir "$RUN" --json)
field() { echo "$STATUS" | grep -o "\"$1\": [0-9]*" | head -1 | awk '{print $2}'; }
TOTAL=$(field total_blocks); FREE=$(field free_blocks); MUT=$(field mutable_blocks)
ACT=$(field active_blocks); INACT=$(field inactive_blocks)
RCL=$(field reclaimed_clients); RBL=$(field reclaimed_blocks); CLIENTS=$(field clients)

cat "$RUN"/worker*.out | awk -v secs="$(awk -v a="$START" -v b="$END" 'BEGIN{print b-a}')" '
  { for (i = 1; i <= NF; i++) { split($i, kv, "="); sum[kv[1]] += kv[2] } }
  END {
    printf "requests served:      %d by 3 surviving workers (+ the killed one)\n", sum["requests"]
    printf "prefix hit rate:      %.1f%% of prompt blocks matched blocks another request registered\n", 100 * sum["matched_blocks"] / (sum["prompt_blocks"] ? sum["prompt_blocks"] : 1)
    printf "ops/s:                %.0f requests/s (match + allocate + register + release each)\n", sum["requests"] / secs
    printf "corrupt blocks seen:  %d\n", sum["corrupt"]
  }'
echo "reclaimed:            $RCL client(s), $RBL block(s) returned by the daemon"
echo "final pool 'g2':      total $TOTAL = free $FREE + inactive $INACT + active $ACT + mutable $MUT; clients attached $CLIENTS"

[ "$RCL" -ge 1 ] || fail "the killed worker was not reclaimed"
[ "$MUT" -eq 0 ] || fail "$MUT mutable blocks left"
[ "$ACT" -eq 0 ] || fail "$ACT active blocks left after every worker ended"
[ $((FREE + INACT)) -eq "$TOTAL" ] || fail "free + inactive != total"
[ "$CLIENTS" -eq 0 ] || fail "$CLIENTS clients still attached"
echo "demo: OK (every block free or inactive)"
