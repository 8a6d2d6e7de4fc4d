#!/usr/bin/env bash
# kvpool-replay on two hosts (issue 31, "How it is shown"; docs/peers.md, "Two hosts"): two
# network namespaces joined by a veth pair, one kvpoold and one kvpool-peer in each
# (netns_lib.sh), and kvpool-replay sending each request of a trace slice to a random host.
# Run twice on fresh hosts: without peer fetch, then with it (each host's workers name the
# other host's kvpool-peer as the holder). Prints the three hit rates: without and with peer
# fetch, and the simulation of one shared cache of both hosts' blocks.
# usage: replay_two_hosts.sh BUILD_DIR [--check] [kvpool-replay options...]
#   HOST_PCT: each host's pool as a percentage of the slice's distinct blocks (default 20:
#   both hosts together hold 40%). Default slice: the first 1000 requests, 60x faster.
#   --check (ctest): each run passes its own checks (every matched block's bytes, both hosts'
#   pools after), the run without peers is within 5 points of its simulation (the hosts as
#   separate caches), and with peers blocks were fetched and the hit rate is higher.
BUILD=$(cd "$1" && pwd)
shift
CHECK=0
[ "${1:-}" = --check ] && { CHECK=1; shift; }
INNER=64  # 8 KiB blocks: the hit rate does not depend on the block size
REPLAY=$BUILD/tools/replay/kvpool-replay
ARGS=("$@"); [ ${#ARGS[@]} -gt 0 ] || ARGS=(--limit 1000 --speed 60 --workers 4)
distinct=$("$REPLAY" --simulate-only 1 "${ARGS[@]}" | sed -n 's/^blocks: .* \([0-9]*\) distinct.*/\1/p')
[ -n "$distinct" ] || { echo "FAIL: kvpool-replay --simulate-only ${ARGS[*]} printed no distinct blocks"; exit 1; }
BLOCKS_PER_POOL=$(( distinct * ${HOST_PCT:-20} / 100 ))
source "$(dirname "$0")/netns_lib.sh"

make_hosts
echo "two hosts: veth pair between network namespaces, $BLOCKS_PER_POOL blocks of 8 KiB per host (${HOST_PCT:-20}% of $distinct distinct), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

# replay MODE: fresh kvpoolds and kvpool-peers, one replay; its JSON in $WORK/MODE.json.
replay() {
  local mode=$1 rc=0; shift
  rm -rf "$WORK/A" "$WORK/B"
  start_kvpoold "$NSA" A; start_kvpoold "$NSB" B
  start_peer "$NSA" A "$IPA"; start_peer "$NSB" B "$IPB"
  echo "== peer fetch $mode"
  "$REPLAY" --hosts "$WORK/A,$WORK/B" --pool g1 --kvpoolctl "$BUILD/tools/kvpoolctl/kvpoolctl" \
    --json "$WORK/$mode.json" "$@" "${ARGS[@]}" || rc=$?
  kill "$PEER_A" "$PEER_B" "$KVPOOLD_A" "$KVPOOLD_B"
  wait "$PEER_A" "$PEER_B" "$KVPOOLD_A" "$KVPOOLD_B" 2>/dev/null || true
  return $rc
}

GAP=(); [ $CHECK = 1 ] && GAP=(--max-sim-gap 5)
replay off "${GAP[@]}" || fail "the replay without peer fetch failed its checks"
replay on --peer-holders "$IPA:$PORT,$IPB:$PORT" || fail "the replay with peer fetch failed its checks"

"$PY" - "$WORK/off.json" "$WORK/on.json" "$CHECK" <<'PY'
import json, sys
off, on = (json.load(open(p)) for p in sys.argv[1:3])
print(f"two hosts, random router, {on['requests']} requests, ceiling {100 * on['ceiling']:.1f}%:")
print(f"  hit rate without peer fetch {100 * off['hit_rate']:.1f}% "
      f"(simulated separate caches {100 * off['simulated_separate_hit_rate']:.1f}%)")
print(f"  hit rate with peer fetch    {100 * on['hit_rate']:.1f}% "
      f"({100 * on['peer_fetched_rate']:.1f}% of prompt blocks fetched from the other host)")
print(f"  one shared cache (simulated) {100 * on['simulated_shared_hit_rate']:.1f}%")
if sys.argv[3] == "1":
    assert on["peer_fetched_blocks"] > 0, "no block was fetched from a peer"
    assert on["hit_rate"] > off["hit_rate"], "peer fetch did not raise the hit rate"
PY
