# Two hosts for the peer-tier tests and benchmark: network namespaces A and B joined by a
# veth pair, one kvpoold and one kvpool-peer in each. Sourced by netns_test.sh and
# peer_bench.sh; everything it starts it stops (trap on EXIT), by pid.
#   BUILD: the build folder; INNER: the pools' inner_dim (block bytes = 2*2*16*INNER*2).
set -euo pipefail

[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root (ip netns, veth)"; exit 77; }
command -v ip >/dev/null || { echo "SKIP: no ip (iproute2)"; exit 77; }

ID=$(( $$ % 60000 ))
NSA=kvpa$ID; NSB=kvpb$ID; VA=kva$ID; VB=kvb$ID
NET=10.$(( 100 + ID % 100 )).$(( ID / 100 % 250 ))
IPA=$NET.1; IPB=$NET.2; PORT=13337
WORK=$(mktemp -d /tmp/kvpeer.XXXXXX)
KEY=$WORK/cluster.key
PIDS=()
: "${INNER:=1024}"
: "${BLOCKS_PER_POOL:=256}"
# TCP only: both namespaces are one machine, and UCX would otherwise move the bytes over
# shared memory (cma/posix), around the link the tests cut.
export UCX_TLS=tcp
export UCX_WARN_UNUSED_ENV_VARS=n
# The system's python: a pyenv shim costs a second or more a call on a loaded machine, and
# the tests poll JSON with it.
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3

cleanup() {
  set +e
  for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  ip netns del "$NSA" 2>/dev/null; ip netns del "$NSB" 2>/dev/null
  if [ -n "${KEEP_WORK:-}" ]; then echo "logs kept in $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

fail() { echo "FAIL: $*"; for f in "$WORK"/*.log; do echo "== $f"; tail -20 "$f"; done; exit 1; }

# wait_for SECONDS COMMAND...: runs COMMAND until it succeeds, at most SECONDS.
wait_for() {
  local limit=$1; shift
  local end=$(( $(date +%s%N) + limit * 1000000000 ))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s%N)" -lt "$end" ] || return 1
    sleep 0.02
  done
}

make_hosts() {
  ip netns add "$NSA"; ip netns add "$NSB"
  ip link add "$VA" type veth peer name "$VB"
  ip link set "$VA" netns "$NSA"; ip link set "$VB" netns "$NSB"
  ip -n "$NSA" addr add "$IPA/24" dev "$VA"; ip -n "$NSB" addr add "$IPB/24" dev "$VB"
  for ns in "$NSA" "$NSB"; do ip -n "$ns" link set lo up; done
  ip -n "$NSA" link set "$VA" up; ip -n "$NSB" link set "$VB" up
  head -c 32 /dev/urandom | base64 > "$KEY"; chmod 600 "$KEY"
}

# write_config FILE INNER [DISK_FILE]: with DISK_FILE, the pool has a disk tier of
# $DISK_SLOTS slots there.
write_config() {
  local disk=""
  [ -n "${3:-}" ] && disk=",\"disk\":{\"path\":\"$3\",\"num_blocks\":$DISK_SLOTS}"
  cat > "$1" <<JSON
{"instance":"default","max_clients":16,"event_ring_slots":4096,
 "pools":[{"name":"g1","storage":"host","num_blocks":$BLOCKS_PER_POOL,"hash_scheme":"dynamo-0.2",
   "layout":{"num_layers":2,"outer_dim":2,"page_size":16,"inner_dim":$2,"dtype_bytes":2,
             "alignment":256,"kind":"fully_contiguous"}$disk}]}
JSON
}

# start_kvpoold NS HOST [INNER]: HOST is A or B; its runtime dir is $WORK/HOST. With
# DISK_SLOTS set, its pool has a disk tier ($WORK/HOST.slots).
start_kvpoold() {
  local ns=$1 host=$2 inner=${3:-$INNER}
  write_config "$WORK/$host.json" "$inner" ${DISK_SLOTS:+"$WORK/$host.slots"}
  rm -f "$WORK/$host/default.sock"  # a killed one's: wait for the new daemon's own
  ip netns exec "$ns" "$BUILD/daemon/kvpoold" --config "$WORK/$host.json" \
    --runtime-dir "$WORK/$host" >> "$WORK/kvpoold-$host.log" 2>&1 &
  PIDS+=($!); eval "KVPOOLD_$host=$!"
  wait_for 20 test -S "$WORK/$host/default.sock" || fail "kvpoold $host did not start"
}

# start_peer NS HOST IP [ARGS...]
# HOST_CPUS="CPU_A CPU_B": each host's kvpool-peer (and kvpool_peer_bench's ucx_perftest ends)
# runs on a core of its own, as on two machines. Unset: the scheduler places them, and both
# "hosts" share this machine's cores and scheduler, which two hosts never do.
host_pin() {  # host_pin A|B: the command prefix that pins a process to that host's core
  [ -n "${HOST_CPUS:-}" ] || return 0
  local cpus
  read -r -a cpus <<< "$HOST_CPUS"
  if [ "$1" = A ]; then echo "taskset -c ${cpus[0]}"; else echo "taskset -c ${cpus[1]}"; fi
}
start_peer() {
  local ns=$1 host=$2 ip=$3; shift 3
  rm -f "$WORK/$host/default.peer.sock"
  # shellcheck disable=SC2046
  ip netns exec "$ns" $(host_pin "$host") "$BUILD/tools/kvpool-peer/kvpool-peer" --runtime-dir "$WORK/$host" \
    --name "$host" --listen "$ip:$PORT" --export g1 --key-file "${PEER_KEY:-$KEY}" "$@" \
    >> "$WORK/peer-$host.log" 2>&1 &
  PIDS+=($!); eval "PEER_$host=$!"
  wait_for 20 peers_json "$host" || fail "kvpool-peer $host did not start"
}

peers_json() { "$BUILD/tools/kvpoolctl/kvpoolctl" peers --runtime-dir "$WORK/$1" --json; }
status_json() { "$BUILD/tools/kvpoolctl/kvpoolctl" status --runtime-dir "$WORK/$1" --json; }
# jget HOST-JSON-COMMAND PYTHON-EXPR: evaluates EXPR on the JSON as `j`.
jget() { local cmd=$1 expr=$2; shift 2; $cmd "$@" | "$PY" -c "import json,sys; j=json.load(sys.stdin); print($expr)"; }

worker() {  # worker NS HOST ARGS...
  local ns=$1 host=$2; shift 2
  ip netns exec "$ns" "$BUILD/tests/peer/kvpool_peer_worker" "$@" --runtime-dir "$WORK/$host"
}
