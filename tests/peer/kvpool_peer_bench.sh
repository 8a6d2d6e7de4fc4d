#!/usr/bin/env bash
# kvpool_peer_bench: the peer tier's fetch speed over a veth pair between two network
# namespaces, against the link's own limits measured in the same run:
#   iperf3 (TCP), ucx_perftest ucp_am_bw (UCX over TCP, the block size), and kvpool-peer
#   fetching 64-block prefixes (B's worker: local match, ask, transfer, verify, register,
#   match), per block size.
# usage: kvpool_peer_bench.sh BUILD_DIR [ROUNDS] [INNER_DIMS...]
#   block bytes = 2 layers * 2 (K,V) * 16 tokens * inner_dim * 2 bytes (inner 2048: 256 KiB)
# Prints one line per measurement; needs root (ip netns), iperf3 and ucx_perftest.
BUILD=$(cd "$1" && pwd)
ROUNDS=${2:-5}
shift 2 || true
INNERS=("$@"); [ ${#INNERS[@]} -gt 0 ] || INNERS=(1024 2048 8192)
BLOCKS_PER_POOL=$(( 64 * (ROUNDS + 1) ))
source "$(dirname "$0")/netns_lib.sh"
command -v iperf3 >/dev/null && command -v ucx_perftest >/dev/null || { echo "SKIP: iperf3/ucx_perftest"; exit 77; }

listening() { ip netns exec "$1" ss -ltn | grep -q ":$2 "; }

make_hosts
echo "link: veth pair between two network namespaces, UCX_TLS=$UCX_TLS, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

ip netns exec "$NSA" iperf3 -s -B "$IPA" -p 5201 -1 > "$WORK/iperf-s.log" 2>&1 &
PIDS+=($!)
# (its log is block-buffered in a file: wait for the socket, not the line)
wait_for 10 listening "$NSA" 5201 || fail "iperf3 server did not start"
gbps=$(ip netns exec "$NSB" iperf3 -c "$IPA" -p 5201 -t 5 -J | "$PY" -c \
  "import json,sys; print('%.2f' % (json.load(sys.stdin)['end']['sum_received']['bits_per_second']/8e9))")
echo "iperf3 TCP B<-A: $gbps GB/s"

for inner in "${INNERS[@]}"; do
  bytes=$(( 2 * 2 * 16 * inner * 2 ))
  # ucx_perftest: active messages of one block's size, B -> A then A serving (its bw test
  # is the client sending), over the same link with the same transports.
  ip netns exec "$NSA" ucx_perftest -p 13400 > "$WORK/perf-s.log" 2>&1 &
  sp=$!; PIDS+=($sp)
  wait_for 10 listening "$NSA" 13400 || fail "ucx_perftest server did not start"
  perf=$(ip netns exec "$NSB" ucx_perftest "$IPA" -p 13400 -t ucp_am_bw -s "$bytes" -n 2000 -w 100 2>&1 \
         | awk '/Final:/ {print $6}')
  wait "$sp" 2>/dev/null || true
  INNER=$inner
  for h in A B; do
    [ -n "$(eval echo \${KVPOOLD_$h:-})" ] && { kill "$(eval echo \$KVPOOLD_$h)" "$(eval echo \$PEER_$h)"; wait "$(eval echo \$KVPOOLD_$h)" "$(eval echo \$PEER_$h)" 2>/dev/null || true; }
  done
  rm -rf "$WORK/A" "$WORK/B"
  start_kvpoold "$NSA" A "$inner"; start_kvpoold "$NSB" B "$inner"
  start_peer "$NSA" A "$IPA"; start_peer "$NSB" B "$IPB"
  # A warm-up prefix (connects and authenticates), then ROUNDS fresh 64-block prefixes.
  worker "$NSA" A register --blocks 64 --seed 1000 >/dev/null
  worker "$NSB" B match --blocks 64 --seed 1000 --deadline-ms 20000 --holder "$IPA:$PORT" >/dev/null
  times=()
  for r in $(seq 1 "$ROUNDS"); do
    worker "$NSA" A register --blocks 64 --seed $(( 1000 + r )) >/dev/null
    res=$(worker "$NSB" B match --blocks 64 --seed $(( 1000 + r )) --deadline-ms 20000 --holder "$IPA:$PORT")
    got=$("$PY" -c "import json,sys; j=json.loads(sys.argv[1]); print(j['got'] if j['bytes_ok'] else -1)" "$res")
    [ "$got" = 64 ] || { echo "round $r: $res"; exit 1; }
    times+=("$("$PY" -c "import json,sys; print(json.loads(sys.argv[1])['elapsed_ms'])" "$res")")
  done
  "$PY" - "$bytes" "$perf" "$gbps" "${times[@]}" <<'PY'
import statistics, sys
b = int(sys.argv[1]); perf = float(sys.argv[2] or 0); iperf = float(sys.argv[3]); t = [float(x) for x in sys.argv[4:]]
med = statistics.median(t)
gbs = 64 * b / (med / 1e3) / 1e9
perf_gbs = perf * 2**20 / 1e9 if perf else 0.0  # ucx_perftest's MB is 2^20 bytes
ratio = gbs / perf_gbs if perf_gbs else float('nan')
print(f"block {b//1024} KiB: kvpool-peer 64-block fetch median {med:.1f} ms (min {min(t):.1f}, max {max(t):.1f}, n={len(t)}) "
      f"= {gbs:.3f} GB/s; ucx_perftest ucp_am_bw {perf_gbs:.3f} GB/s; iperf3 {iperf:.3f} GB/s; kvpool/ucx_perftest {ratio:.0%}")
PY
done
