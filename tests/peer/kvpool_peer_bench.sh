#!/usr/bin/env bash
# kvpool_peer_bench: the peer tier's fetch speed over a veth pair between two network
# namespaces, against the link's own limits measured in the same run:
#   iperf3 (TCP); ucx_perftest ucp_am_bw at the block size, once with UCX's defaults and once
#   with the UCX settings kvpool-peer runs with (PEER_UCX below, see docs/peers.md),
#   both with -E sleep: waiting for the network as kvpool-peer does (on epoll), not
#   busy-polling, which on a machine of few shared cores starves the kernel's own network
#   work and halves what perftest measures;
#   kvpool-peer fetching 64-block prefixes (B's worker: local match, ask, transfer, verify,
#   register, match), per block size.
# Two kvpool figures per block size:
#   warm: the steady state of a running host. Each pool holds 4 prefixes; 4 prefixes are
#         fetched first, so every page of both pools has been mapped by each kvpool-peer, and
#         the measured fetches reuse blocks (evicting old ones) as a long-running host does.
#         ucx_perftest's buffers are warm in the same way (it reuses one buffer).
#   cold: fetches 2-4, into pool pages kvpool-peer has never touched (the first after a start):
#         the page faults of first touch are in the figure (docs/peers.md: what limits it).
# usage: kvpool_peer_bench.sh BUILD_DIR [ROUNDS] [INNER_DIMS...]
#   block bytes = 2 layers * 2 (K,V) * 16 tokens * inner_dim * 2 bytes (inner 2048: 256 KiB)
# With each bandwidth, the CPU seconds both ends spent per GiB moved (user + system; on two
# shared cores with both hosts on one machine, CPU per byte is what bounds the bandwidth).
# CHECKSUM=y (the default) registers A's blocks with their checksums (RegisterOptions::
# checksum), which the holder then sends instead of hashing the blocks again; CHECKSUM=n
# registers them without, and the holder hashes each block it serves.
# HOST_CPUS="CPU_A CPU_B" gives each host a core of its own (netns_lib.sh, host_pin): both
# kvpool-peers and both perftest ends, as on two machines (docs/peers.md: the target).
# Prints one line per measurement; needs root (ip netns), iperf3, ucx_perftest, /usr/bin/time.
BUILD=$(cd "$1" && pwd)
ROUNDS=${2:-5}
shift 2 || true
INNERS=("$@"); [ ${#INNERS[@]} -gt 0 ] || INNERS=(1024 2048 8192)
REGISTER_ARGS=(); [ "${CHECKSUM:-y}" = y ] && REGISTER_ARGS=(--checksum)
BLOCKS_PER_POOL=$(( 64 * 4 ))
source "$(dirname "$0")/netns_lib.sh"
command -v iperf3 >/dev/null && command -v ucx_perftest >/dev/null && [ -x /usr/bin/time ] ||
  { echo "SKIP: iperf3/ucx_perftest//usr/bin/time"; exit 77; }

listening() { ip netns exec "$1" ss -ltn | grep -q ":$2 "; }

make_hosts
echo "link: veth pair between two network namespaces, UCX_TLS=$UCX_TLS, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "build: $BUILD; A registers its blocks with checksums (CHECKSUM): ${CHECKSUM:-y}"

ip netns exec "$NSA" iperf3 -s -B "$IPA" -p 5201 -1 > "$WORK/iperf-s.log" 2>&1 &
PIDS+=($!)
# (its log is block-buffered in a file: wait for the socket, not the line)
wait_for 10 listening "$NSA" 5201 || fail "iperf3 server did not start"
gbps=$(ip netns exec "$NSB" iperf3 -c "$IPA" -p 5201 -t 5 -J | "$PY" -c \
  "import json,sys; print('%.2f' % (json.load(sys.stdin)['end']['sum_received']['bits_per_second']/8e9))")
echo "iperf3 TCP B<-A: $gbps GB/s"

# The UCX defaults kvpool-peer changes (Service::init_ucx), for the second perftest.
PEER_UCX=(UCX_TCP_PUT_ENABLE=n UCX_TCP_RX_SEG_SIZE=512K)
# perftest BYTES [VAR=VALUE...]: "MB/s CPU-s-per-GiB" of ucx_perftest ucp_am_bw with 1 GiB of
# BYTES-sized messages, B -> A (its MB is 2^20 bytes).
perftest() {
  local n=$(( (1 << 30) / $1 ))
  local bytes=$1; shift
  # shellcheck disable=SC2046
  ip netns exec "$NSA" env "$@" /usr/bin/time -f "%U %S" -o "$WORK/time-s" \
    $(host_pin A) ucx_perftest -p 13400 > "$WORK/perf-s.log" 2>&1 &
  local sp=$!; PIDS+=($sp)
  wait_for 10 listening "$NSA" 13400 || fail "ucx_perftest server did not start"
  local mbs
  # shellcheck disable=SC2046
  mbs=$(ip netns exec "$NSB" env "$@" /usr/bin/time -f "%U %S" -o "$WORK/time-c" \
    $(host_pin B) ucx_perftest "$IPA" -p 13400 -t ucp_am_bw -s "$bytes" -n "$n" -w 10 -E sleep 2>&1 | awk '/Final:/ {print $6}')
  wait "$sp" 2>/dev/null || true
  echo "${mbs:-0} $(cat "$WORK/time-s" "$WORK/time-c" | awk '{s += $1 + $2} END {print s}')"
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }  # utime + stime

# fetch_ms SEED: B fetches A's 64-block prefix SEED; prints its elapsed ms.
fetch_ms() {
  worker "$NSA" A register --blocks 64 --seed "$1" "${REGISTER_ARGS[@]}" >/dev/null
  local res got
  res=$(worker "$NSB" B match --blocks 64 --seed "$1" --deadline-ms 20000 --holder "$IPA:$PORT")
  got=$("$PY" -c "import json,sys; j=json.loads(sys.argv[1]); print(j['got'] if j['bytes_ok'] else -1)" "$res")
  [ "$got" = 64 ] || fail "prefix $1: $res"
  "$PY" -c "import json,sys; print(json.loads(sys.argv[1])['elapsed_ms'])" "$res"
}

for inner in "${INNERS[@]}"; do
  bytes=$(( 2 * 2 * 16 * inner * 2 ))
  perf_default=$(perftest "$bytes")
  perf_peer=$(perftest "$bytes" "${PEER_UCX[@]}")
  INNER=$inner
  for h in A B; do
    [ -n "$(eval echo \${KVPOOLD_$h:-})" ] && { kill "$(eval echo \$KVPOOLD_$h)" "$(eval echo \$PEER_$h)"; wait "$(eval echo \$KVPOOLD_$h)" "$(eval echo \$PEER_$h)" 2>/dev/null || true; }
  done
  rm -rf "$WORK/A" "$WORK/B"
  start_kvpoold "$NSA" A "$inner"; start_kvpoold "$NSB" B "$inner"
  start_peer "$NSA" A "$IPA"; start_peer "$NSB" B "$IPB"
  fetch_ms 1000 >/dev/null  # connects and authenticates
  cold=()
  for r in 1 2 3; do cold+=("$(fetch_ms $(( 1000 + r )))"); done
  warm=()
  cpu0=$(( $(cpu_ticks "$PEER_A") + $(cpu_ticks "$PEER_B") ))
  for r in $(seq 1 "$ROUNDS"); do warm+=("$(fetch_ms $(( 2000 + r )))"); done
  cpu1=$(( $(cpu_ticks "$PEER_A") + $(cpu_ticks "$PEER_B") ))
  PEER_UCX_TEXT="${PEER_UCX[*]}" "$PY" - "$bytes" "$perf_default" "$perf_peer" "$gbps" "$(( cpu1 - cpu0 ))" "$(getconf CLK_TCK)" \
    "${cold[*]}" "${warm[@]}" <<'PY'
import os, statistics, sys
b = int(sys.argv[1]); iperf = float(sys.argv[4])
(pd_mbs, pd_cpu), (pp_mbs, pp_cpu) = (map(float, x.split()) for x in sys.argv[2:4])
perf_default, perf_peer = pd_mbs * 2**20 / 1e9, pp_mbs * 2**20 / 1e9  # perftest's MB: 2^20 B
cold = [float(x) for x in sys.argv[7].split()]; warm = [float(x) for x in sys.argv[8:]]
cpu_per_gib = int(sys.argv[5]) / int(sys.argv[6]) / (len(warm) * 64 * b / 2**30)
gbs = lambda ms: 64 * b / (ms / 1e3) / 1e9
med = statistics.median(warm)
ratio = lambda x: f"{gbs(med) / x:.0%}" if x else "n/a"
print(f"block {b//1024} KiB: kvpool-peer 64-block fetch, warm: median {med:.1f} ms (min {min(warm):.1f}, "
      f"max {max(warm):.1f}, n={len(warm)}) = {gbs(med):.3f} GB/s, {cpu_per_gib:.2f} CPU-s/GiB "
      f"(both kvpool-peers); cold (first touch): median {statistics.median(cold):.1f} ms = "
      f"{gbs(statistics.median(cold)):.3f} GB/s")
print(f"block {b//1024} KiB: ucx_perftest ucp_am_bw -E sleep {perf_default:.3f} GB/s, {pd_cpu:.2f} "
      f"CPU-s/GiB (UCX defaults); {perf_peer:.3f} GB/s, {pp_cpu:.2f} CPU-s/GiB "
      f"({os.environ['PEER_UCX_TEXT']}, as kvpool-peer); iperf3 {iperf:.3f} GB/s")
print(f"block {b//1024} KiB: kvpool warm / ucx_perftest: {ratio(perf_default)} (defaults), "
      f"{ratio(perf_peer)} (as kvpool-peer)")
PY
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
