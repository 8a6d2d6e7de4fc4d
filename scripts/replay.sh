#!/usr/bin/env bash
# The replay figures and pictures: kvpool-replay over a slice of the Mooncake conversation
# trace at pool capacities of 2, 5, 10, 20 and 40% of the slice's distinct blocks (each run
# against a private kvpoold, 4 workers, one SIGKILL), the simulation over the whole trace at
# the same capacities, and the torch engine's TTFT with and without kvpool; then PNGs
# (python3-matplotlib) of hit rate vs capacity, the latency CDF per operation, and TTFT.
#   scripts/replay.sh [OUT_DIR]            (default docs/replay)
#   REPLAY_SPAN_S=600 REPLAY_SPEED=30 TTFT_REQUESTS=100 scripts/replay.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh

BUILD_DIR=${BUILD_DIR:-build}
OUT=${1:-docs/replay}
SPAN=${REPLAY_SPAN_S:-600}
SPEED=${REPLAY_SPEED:-30}
TTFT_REQUESTS=${TTFT_REQUESTS:-100}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD_DIR" --target kvpoold kvpoolctl kvpool-replay kvpool_python >/dev/null

REPLAY="$BUILD_DIR/tools/replay/kvpool-replay"
RES=$(mktemp -d /tmp/kvpool-replay-results-XXXXXX)
trap 'rm -rf "$RES"' EXIT
mkdir -p "$OUT"

for pct in 2 5 10 20 40; do
  echo "=== capacity $pct% of the slice's distinct blocks ==="
  "$REPLAY" --kvpoold "$BUILD_DIR/daemon/kvpoold" --kvpoolctl "$BUILD_DIR/tools/kvpoolctl/kvpoolctl" \
    --capacity-pct "$pct" --span-s "$SPAN" --speed "$SPEED" --workers 4 \
    --kill-interval 5 --max-kills 1 --seed "$pct" --json "$RES/cap_$pct.json" | tee "$RES/cap_$pct.out"
done
echo "=== simulation, whole trace ==="
"$REPLAY" --simulate-only 2,5,10,20,40 --json "$RES/sim_whole.json"
echo "=== TTFT, torch engine ==="
KVPOOLD="$BUILD_DIR/daemon/kvpoold" PYTHONPATH="$BUILD_DIR/libclient/python" \
  /usr/bin/python3 examples/torch_engine/bench_ttft.py --requests "$TTFT_REQUESTS" --json "$RES/ttft.json"
/usr/bin/python3 tools/replay/plot.py "$RES" "$OUT"

echo
echo "capacity  blocks  kvpool  simulation  ceiling   (first $SPAN s of the trace, x$SPEED)"
for pct in 2 5 10 20 40; do
  /usr/bin/python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(f\"{sys.argv[2]:>7}% {j['capacity_blocks']:7d} {100*j['hit_rate']:6.1f}% {100*j['simulated_hit_rate']:10.1f}% {100*j['ceiling']:7.1f}%\")" "$RES/cap_$pct.json" "$pct"
done
