#!/usr/bin/env bash
# The peer tier between two real hosts (network namespaces joined by a veth pair, see
# netns_lib.sh): netns_test.sh SCENARIO BUILD_DIR
#   fetch      B gets A's bytes (whole prefix, a partial one, one continuing a local prefix,
#              the async form); nothing stays pinned on A, nothing leaks on B
#   auth       a peer with another key gets nothing, and A counts the failed handshake
#   layout     A restarts with another layout: B gets nothing (a layout miss), no error
#   kill9      A's kvpool-peer is killed -9 mid-transfer
#   sigstop    A's kvpool-peer is stopped mid-transfer
#   linkdown   the link goes down mid-transfer
#   discovery  no holder named: B finds A through NATS (kvpool-events + announcements);
#              A gone silent is dropped, after which B no longer asks it
#   corrupt    a block whose bytes changed in A's pool after it was registered with its
#              checksum: A sends the registered checksum, B refuses the block and what
#              follows it, registers only the intact prefix before it (with the checksums
#              it checked, so B's kvpoold can scrub them)
#   disk       the disk tier (docs/disk-tier.md) on both sides: A serves blocks that left
#              its host memory for its disk (onboarding them first); B's own disk tier is
#              looked at before any peer is asked
# In the failure scenarios B's call returns within its deadline (+1 s of slack for a loaded
# machine) with only intact blocks (every byte checked), fewer than asked; afterwards A pins
# nothing (its pool has no active block) and B holds nothing (no mutable or active block).
SCENARIO=$1
BUILD=$(cd "$2" && pwd)
# 512 KiB blocks where a fault must land mid-transfer.
case "$SCENARIO" in kill9|sigstop|linkdown) INNER=4096 ;; esac
# Host pools of 32 blocks over disk tiers of 128 slots: newer blocks push old ones out of
# host memory, and the disk keeps them. (Not smaller: a uid may hold 87% of a pool, and
# kvpool-peer and the worker, both root here, each hold the fetched blocks for a moment.)
if [ "$SCENARIO" = disk ]; then BLOCKS_PER_POOL=32; DISK_SLOTS=128; fi
source "$(dirname "$0")/netns_lib.sh"

pool_count() {  # pool_count HOST FIELD
  jget status_json "j['pools'][0]['$2']" "$1"
}
disk_count() {  # disk_count HOST FIELD: of the pool's disk tier
  jget status_json "j['pools'][0]['disk']['$2']" "$1"
}
disk_at_least() { [ "$(disk_count "$1" "$2")" -ge "$3" ]; }
settled() { [ "$(pool_count "$1" active_blocks)" = 0 ] && [ "$(pool_count "$1" mutable_blocks)" = 0 ]; }
a_pins_nothing() { [ "$(pool_count A active_blocks)" = 0 ]; }
b_holds_nothing() { [ "$(pool_count B active_blocks)" = 0 ] && [ "$(pool_count B mutable_blocks)" = 0 ]; }
# Conditions for wait_for, evaluated on each try.
pool_at_least() { [ "$(pool_count "$1" "$2")" -ge "$3" ]; }
peers_at_least() { [ "$(jget peers_json "$2" "$1")" -ge "$3" ]; }
peers_equal() { [ "$(jget peers_json "$2" "$1")" = "$3" ]; }
# The intact prefix of B's fetch in flight (0: none in flight).
# (grep, not python: this is polled while the transfer runs, and must see it early.)
fetch_prefix() {
  peers_json B | grep -o '"intact_prefix": *[0-9]*' | grep -o '[0-9]*$' | sort -n | tail -1 | grep . \
    || echo 0
}
fetch_prefix_at_least() { [ "$(fetch_prefix)" -ge "$1" ]; }
field() { "$PY" -c "import json,sys; print(json.loads(sys.argv[1])['$2'])" "$1"; }

# check_failure_result JSON ASKED DEADLINE_MS
check_failure_result() {
  local r=$1 asked=$2 deadline=$3
  [ "$(field "$r" bytes_ok)" = True ] || fail "wrong bytes: $r"
  [ "$(field "$r" got)" -lt "$asked" ] || fail "all $asked blocks arrived before the failure: $r"
  "$PY" -c "import sys; sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) + 1000 else 1)" \
    "$(field "$r" elapsed_ms)" "$deadline" || fail "returned after its deadline: $r"
}

make_hosts
start_kvpoold "$NSA" A
start_kvpoold "$NSB" B

case "$SCENARIO" in
fetch)
  start_peer "$NSA" A "$IPA"; start_peer "$NSB" B "$IPB"
  worker "$NSA" A register --blocks 16 --seed 7 >/dev/null
  r=$(worker "$NSB" B match --blocks 16 --seed 7 --deadline-ms 5000 --holder "$IPA:$PORT")
  echo "whole prefix: $r"
  [ "$(field "$r" got)" = 16 ] && [ "$(field "$r" bytes_ok)" = True ] || fail "fetch: $r"
  # Registered on B now: a plain local match finds them.
  r=$(worker "$NSB" B match --blocks 16 --seed 7 --deadline-ms 1 --holder "$IPB:1")
  [ "$(field "$r" got)" = 16 ] || fail "fetched blocks not registered on B: $r"
  # A holds 8 of 12: B gets those 8.
  worker "$NSA" A register --blocks 8 --seed 8 >/dev/null
  r=$(worker "$NSB" B match --blocks 12 --seed 8 --deadline-ms 5000 --holder "$IPA:$PORT" --async)
  echo "partial (async): $r"
  [ "$(field "$r" got)" = 8 ] && [ "$(field "$r" bytes_ok)" = True ] || fail "partial: $r"
  # B has the first 4 of seed 9, A all 10: 4 local + 6 fetched, one prefix.
  worker "$NSB" B register --blocks 4 --seed 9 >/dev/null
  worker "$NSA" A register --blocks 10 --seed 9 >/dev/null
  r=$(worker "$NSB" B match --blocks 10 --seed 9 --deadline-ms 5000 --holder "$IPA:$PORT")
  echo "continued prefix: $r"
  [ "$(field "$r" got)" = 10 ] && [ "$(field "$r" bytes_ok)" = True ] || fail "continued: $r"
  [ "$(jget peers_json "j['peers']['A']['blocks_fetched']" B)" = 30 ] || fail "B's metrics"
  [ "$(jget peers_json "j['peers']['B']['blocks_served']" A)" = 30 ] || fail "A's metrics"
  wait_for 15 a_pins_nothing || fail "A still pins blocks: $(status_json A)"
  wait_for 15 b_holds_nothing || fail "B leaked blocks: $(status_json B)"
  "$BUILD/tools/kvpoolctl/kvpoolctl" peers --runtime-dir "$WORK/B"
  ;;
auth)
  start_peer "$NSA" A "$IPA"
  head -c 32 /dev/urandom | base64 > "$WORK/other.key"; chmod 600 "$WORK/other.key"
  PEER_KEY=$WORK/other.key start_peer "$NSB" B "$IPB"
  worker "$NSA" A register --blocks 4 --seed 7 >/dev/null
  r=$(worker "$NSB" B match --blocks 4 --seed 7 --deadline-ms 3000 --holder "$IPA:$PORT")
  echo "wrong key: $r"
  [ "$(field "$r" got)" = 0 ] || fail "a peer with another key got blocks: $r"
  wait_for 5 peers_at_least B "sum(p['auth_failures'] for p in j['peers'].values())" 1 \
    || fail "B did not count the holder's failed proof"
  ;;
layout)
  start_peer "$NSA" A "$IPA"; start_peer "$NSB" B "$IPB"
  worker "$NSA" A register --blocks 4 --seed 7 >/dev/null
  r=$(worker "$NSB" B match --blocks 4 --seed 7 --deadline-ms 5000 --holder "$IPA:$PORT")
  [ "$(field "$r" got)" = 4 ] || fail "first fetch: $r"
  # A restarts (new epoch) with another layout and registers the next prompt there.
  kill -9 "$PEER_A" "$KVPOOLD_A"; wait "$PEER_A" "$KVPOOLD_A" 2>/dev/null || true
  start_kvpoold "$NSA" A 512
  start_peer "$NSA" A "$IPA"  # on the same port: peers dial the address they know
  worker "$NSA" A register --blocks 4 --seed 11 >/dev/null
  # B's endpoint to A's first start breaks (its TCP connection was reset); until B has seen
  # that, a fetch on it is a transport miss, not the layout miss this scenario is about.
  wait_for 15 peers_equal B "len(j['connections'])" 0 || fail "B kept its endpoint to dead A"
  r=$(worker "$NSB" B match --blocks 4 --seed 11 --deadline-ms 3000 --holder "$IPA:$PORT")
  echo "after A's restart with another layout: $r"
  [ "$(field "$r" got)" = 0 ] || fail "blocks of another layout arrived: $r"
  wait_for 5 peers_at_least B "j['peers']['A']['failures']['layout']" 1 \
    || fail "B did not count a layout miss"
  ;;
kill9|sigstop|linkdown)
  # A link of 100 Mbit/s (tbf) and 512 KiB blocks: 64 blocks take ~2.7 s, well inside the
  # deadline (the control below shows it), so a fetch that comes back short was cut by the
  # fault alone. The link's queue (20 ms) and the sockets' buffers (256 KiB) are kept short,
  # so that little is still on its way when the fault lands.
  ip netns exec "$NSA" tc qdisc add dev "$VA" root tbf rate 100mbit burst 64kb latency 20ms
  export UCX_TCP_SNDBUF=256k UCX_TCP_RCVBUF=256k
  start_peer "$NSA" A "$IPA"; start_peer "$NSB" B "$IPB"
  DEADLINE=6000
  # Control: without a fault the same transfer completes within the deadline.
  worker "$NSA" A register --blocks 64 --seed 4 >/dev/null
  r=$(worker "$NSB" B match --blocks 64 --seed 4 --deadline-ms $DEADLINE --holder "$IPA:$PORT")
  echo "control, no fault: $r"
  [ "$(field "$r" got)" = 64 ] && [ "$(field "$r" bytes_ok)" = True ] || fail "control: $r"
  worker "$NSA" A register --blocks 64 --seed 5 >/dev/null
  worker "$NSB" B match --blocks 64 --seed 5 --deadline-ms $DEADLINE --holder "$IPA:$PORT" \
    > "$WORK/result.json" &
  W=$!; PIDS+=($W)
  # Mid-transfer: B has verified the first blocks of the prefix (its kvpool-peer's status
  # shows each fetch's intact prefix) and the rest is still to come.
  wait_for 20 fetch_prefix_at_least 2 || fail "no transfer began: $(peers_json B)"
  seen=$(fetch_prefix)
  case "$SCENARIO" in
    kill9) kill -9 "$PEER_A" ;;
    sigstop) kill -STOP "$PEER_A" ;;
    linkdown) ip -n "$NSA" link set "$VA" down ;;
  esac
  echo "fault ($SCENARIO) after B had $seen intact block(s)"
  wait "$W" || fail "worker failed: $(cat "$WORK/result.json")"
  r=$(cat "$WORK/result.json")
  echo "$SCENARIO mid-transfer: $r"
  check_failure_result "$r" 64 $DEADLINE
  [ "$(field "$r" got)" -ge "$seen" ] || fail "blocks B had verified were not given: $r"
  fails=$(jget peers_json "j['peers']['A']['failures']" B)
  echo "B's failures from A: $fails"
  case "$SCENARIO" in
    # A dead holder is seen at once (its connection breaks), not at the deadline.
    kill9) [ "$(jget peers_json "j['peers']['A']['failures']['transport']" B)" = 1 ] \
             || fail "B did not see the holder die: $fails" ;;
    # A stalled holder or a dead link: only the deadline ends the fetch.
    sigstop|linkdown) [ "$(jget peers_json "j['peers']['A']['failures']['timeout']" B)" = 1 ] \
             || fail "B's fetch did not end at its deadline: $fails" ;;
  esac
  case "$SCENARIO" in
    sigstop) kill -CONT "$PEER_A" ;;
    linkdown) ip -n "$NSA" link set "$VA" up ;;
  esac
  # Nothing stays pinned on A: the holder's pins end with the transfer (its deadline, or
  # kvpoold reclaiming a dead kvpool-peer's references).
  wait_for 15 a_pins_nothing || fail "A still pins blocks: $(status_json A)"
  if [ "$SCENARIO" != kill9 ]; then
    wait_for 15 peers_equal A "j['blocks_pinned_for_peers']" 0 || fail "A's kvpool-peer pins"
  fi
  wait_for 15 b_holds_nothing || fail "B leaked blocks: $(status_json B)"
  wait_for 15 peers_equal B "j['fetches_in_flight']" 0 || fail "B's fetch never ended"
  "$BUILD/tools/kvpoolctl/kvpoolctl" peers --runtime-dir "$WORK/B"
  ;;
corrupt)
  start_peer "$NSA" A "$IPA"; start_peer "$NSB" B "$IPB"
  # Block 5 changes in A's memory after A registered it with its checksum. A serves blocks
  # with the checksum they were registered with (it does not hash them again), so the
  # change is caught by B's check of what arrived.
  worker "$NSA" A register --blocks 8 --seed 7 --checksum --corrupt 5 >/dev/null
  # (|| true: a worker that got a wrong byte exits 1; the checks below say what it got.)
  r=$(worker "$NSB" B match --blocks 8 --seed 7 --deadline-ms 5000 --holder "$IPA:$PORT") || true
  echo "block 5 changed on A: $r"
  [ "$(field "$r" got)" = 5 ] && [ "$(field "$r" bytes_ok)" = True ] || fail "corrupt: $r"
  [ "$(jget peers_json "j['peers']['A']['failures']['checksum']" B)" = 1 ] \
    || fail "B did not count the bad block: $(peers_json B)"
  # Only the intact prefix is registered on B: a plain local match finds 5.
  r=$(worker "$NSB" B match --local --blocks 8 --seed 7)
  [ "$(field "$r" got)" = 5 ] || fail "B registered more than the intact prefix: $r"
  # An intact prefix registered with checksums arrives whole (the registered checksums
  # are the bytes' own).
  worker "$NSA" A register --blocks 8 --seed 8 --checksum >/dev/null
  r=$(worker "$NSB" B match --blocks 8 --seed 8 --deadline-ms 5000 --holder "$IPA:$PORT")
  echo "registered with checksums, intact: $r"
  [ "$(field "$r" got)" = 8 ] && [ "$(field "$r" bytes_ok)" = True ] || fail "intact: $r"
  # B registered what arrived with the checksums it checked the bytes against: B's
  # kvpoold can check them too (5 blocks of seed 7, 8 of seed 8), and they match.
  s=$("$BUILD/tools/kvpoolctl/kvpoolctl" scrub --runtime-dir "$WORK/B" --json)
  echo "B's scrub: $s"
  [ "$("$PY" -c "import json,sys; p=json.loads(sys.argv[1])['pools'][0]; \
print(p['checked'], p['without_checksum'], p['mismatches'])" "$s")" = "13 0 0" ] \
    || fail "B's fetched blocks were not registered with their checksums: $s"
  wait_for 15 a_pins_nothing || fail "A still pins blocks: $(status_json A)"
  wait_for 15 peers_equal A "j['blocks_pinned_for_peers']" 0 || fail "A's kvpool-peer pins"
  wait_for 15 b_holds_nothing || fail "B leaked blocks: $(status_json B)"
  ;;
disk)
  start_peer "$NSA" A "$IPA"; start_peer "$NSB" B "$IPB"
  # evict_to_disk HOST NS SEED: HOST's 8 blocks of SEED are on its disk and no longer in its
  # host memory (newer blocks took their place). Between steps the host settles: its
  # disk tier holds each block it writes (a reference) until the write is done.
  evict_to_disk() {
    local host=$1 ns=$2 seed=$3 written
    wait_for 15 settled "$host" || fail "$host does not settle: $(status_json "$host")"
    written=$(disk_count "$host" blocks_written)
    worker "$ns" "$host" register --blocks 8 --seed "$seed" >/dev/null
    wait_for 15 disk_at_least "$host" blocks_written $(( written + 8 )) \
      || fail "$host's disk tier did not take seed $seed: $(status_json "$host")"
    wait_for 15 settled "$host" || fail "$host does not settle: $(status_json "$host")"
    # 36 newer blocks in a host pool of 32 (12 at a time: within a uid's share).
    for more in 100 200 300; do
      worker "$ns" "$host" register --blocks 12 --seed $(( seed + more )) >/dev/null
      wait_for 15 settled "$host" || fail "$host does not settle: $(status_json "$host")"
    done
    r=$(worker "$ns" "$host" match --local --blocks 8 --seed "$seed")
    [ "$(field "$r" got)" = 0 ] || fail "seed $seed still in $host's host memory: $r"
  }
  # A serves what its disk holds: B asks, A onboards, B gets A's bytes.
  evict_to_disk A "$NSA" 21
  r=$(worker "$NSB" B match --blocks 8 --seed 21 --deadline-ms 5000 --holder "$IPA:$PORT")
  echo "from A's disk: $r"
  [ "$(field "$r" got)" = 8 ] && [ "$(field "$r" bytes_ok)" = True ] || fail "A's disk: $r"
  [ "$(disk_count A blocks_onboarded)" -ge 8 ] || fail "A did not onboard: $(status_json A)"
  # B's own disk first: A holds seed 22 too, but B reads it from its disk, asking no peer.
  wait_for 15 settled A || fail "A does not settle: $(status_json A)"
  worker "$NSA" A register --blocks 8 --seed 22 >/dev/null
  evict_to_disk B "$NSB" 22
  asked=$(jget peers_json "j['peers']['A']['fetches']" B)
  onboarded=$(disk_count B blocks_onboarded)
  r=$(worker "$NSB" B match --blocks 8 --seed 22 --deadline-ms 5000 --holder "$IPA:$PORT")
  echo "from B's own disk: $r"
  [ "$(field "$r" got)" = 8 ] && [ "$(field "$r" bytes_ok)" = True ] || fail "B's disk: $r"
  [ "$(jget peers_json "j['peers']['A']['fetches']" B)" = "$asked" ] || fail "B asked A for seed 22"
  [ "$(disk_count B blocks_onboarded)" -ge $(( onboarded + 8 )) ] \
    || fail "B did not onboard: $(status_json B)"
  wait_for 15 a_pins_nothing || fail "A still pins blocks: $(status_json A)"
  wait_for 15 peers_equal A "j['blocks_pinned_for_peers']" 0 || fail "A's kvpool-peer pins"
  wait_for 15 b_holds_nothing || fail "B leaked blocks: $(status_json B)"
  ;;
discovery)
  command -v nats-server >/dev/null || { echo "SKIP: no nats-server"; exit 77; }
  ip netns exec "$NSA" nats-server -a "$IPA" -p 4222 > "$WORK/nats.log" 2>&1 &
  PIDS+=($!)
  wait_for 10 grep -q "Server is ready" "$WORK/nats.log" || fail "nats-server did not start"
  NATS=nats://$IPA:4222
  for h in A B; do
    ns=$NSA; [ $h = B ] && ns=$NSB
    wid=1; [ $h = B ] && wid=2
    ip netns exec "$ns" "$BUILD/tools/kvpool-events/kvpool-events" --runtime-dir "$WORK/$h" \
      --nats-url "$NATS" --worker-id $wid --namespace t --component kv > "$WORK/events-$h.log" 2>&1 &
    PIDS+=($!)
  done
  start_peer "$NSA" A "$IPA" --nats "$NATS" --worker-id 1 --namespace t --component kv \
    --announce-ms 200 --peer-timeout-ms 1500
  start_peer "$NSB" B "$IPB" --nats "$NATS" --worker-id 2 --namespace t --component kv \
    --announce-ms 200 --peer-timeout-ms 1500
  worker "$NSA" A register --blocks 8 --seed 3 >/dev/null
  worker "$NSA" A register --blocks 8 --seed 4 >/dev/null
  wait_for 15 peers_at_least B "j['directory']['indexed_hashes']" 16 \
    || fail "B never learnt what A holds: $(peers_json B)"
  wait_for 15 peers_at_least B "len(j['directory']['peers'])" 1 \
    || fail "B never heard A's announcement: $(peers_json B)"
  r=$(worker "$NSB" B match --blocks 8 --seed 3 --deadline-ms 5000)
  echo "found through NATS: $r"
  [ "$(field "$r" got)" = 8 ] && [ "$(field "$r" bytes_ok)" = True ] || fail "discovery: $r"
  # A's kvpool-peer stops announcing: B drops it, and with it what A held.
  kill -STOP "$PEER_A"
  wait_for 15 peers_equal B "len(j['directory']['peers'])" 0 \
    || fail "a silent peer was not dropped"
  r=$(worker "$NSB" B match --blocks 8 --seed 4 --deadline-ms 3000)
  echo "after A went silent: $r"
  [ "$(field "$r" got)" = 0 ] || fail "B asked a dropped peer: $r"
  [ "$(jget peers_json "j['peers']['(none)']['failures']['no_holder']" B)" -ge 1 ] || fail "no_holder"
  kill -CONT "$PEER_A"
  ;;
*) echo "unknown scenario $SCENARIO"; exit 2 ;;
esac
echo "PASS: $SCENARIO"
