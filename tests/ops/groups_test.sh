#!/bin/sh
# allowed_gids and supplementary groups (issue 27, item 7), set up the way the systemd unit
# and the docs set kvpool up: kvpoold runs as its own non-root user (uid and gid $kv), its
# runtime directory is $kv:$kv mode 0750 (RuntimeDirectoryMode=0750) and its socket 0660
# (UMask=0007), and a worker joins the group the docs' way (`usermod -aG kvpool worker`):
# the group is one of the worker's supplementary groups, not its gid.
#  1. allowed_gids [$kv] (instance and pool) admits that worker;
#  2. a pool whose allowed_gids names another group stays closed to it;
#  3. without the group the OS keeps it from the socket, and the error names the group;
#  4. a worker whose primary gid is the group is admitted as before.
# Needs root and setpriv(1); exits 77 otherwise.
# Usage: groups_test.sh KVPOOLD KVPOOLCTL TEST_WORKER
set -u
kvpoold="$1"; ctl="$2"; worker="$3"
fail() { echo "FAIL: $*" >&2; [ -f "$tmp/kvpoold.log" ] && sed 's/^/kvpoold: /' "$tmp/kvpoold.log" >&2; exit 1; }
if [ "$(id -u)" -ne 0 ] || ! command -v setpriv >/dev/null 2>&1; then
  echo "SKIP: needs root and setpriv"; exit 77
fi
kv=63001      # the kvpool user and group
wuid=63002    # a worker user, its own primary group
other=63009   # a group nobody here is in
tmp="$(mktemp -d)"
chmod 0755 "$tmp"
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

run="$tmp/run"
mkdir "$run" && chown "$kv:$kv" "$run" && chmod 0750 "$run"
inst="groups$$"
layout='"layout": {"num_layers": 2, "outer_dim": 2, "page_size": 4, "inner_dim": 16, "dtype_bytes": 2, "alignment": 64}'
cat >"$tmp/kvpoold.json" <<EOF
{"instance": "$inst", "runtime_dir": "$run", "allowed_gids": [$kv],
 "pools": [{"name": "g", "num_blocks": 16, $layout, "allowed_gids": [$kv]},
           {"name": "closed", "num_blocks": 16, $layout, "allowed_gids": [$other]}]}
EOF
chmod 0644 "$tmp/kvpoold.json"

setpriv --reuid=$kv --regid=$kv --clear-groups sh -c "umask 0007; exec \"$kvpoold\" --config \"$tmp/kvpoold.json\"" \
  >"$tmp/kvpoold.log" 2>&1 &
pid=$!
tries=0
until "$ctl" status --instance "$inst" --runtime-dir "$run" >/dev/null 2>&1; do
  kill -0 "$pid" 2>/dev/null || fail "kvpoold exited at start"
  tries=$((tries + 1)); [ $tries -lt 1000 ] || fail "kvpoold not answering after 20 s"
  sleep 0.02
done
[ "$(stat -c %a "$run/$inst.sock")" = 660 ] || fail "socket mode $(stat -c %a "$run/$inst.sock"), want 660"
[ "$(stat -c %u:%g "$run/$inst.sock")" = "$kv:$kv" ] || fail "socket owner $(stat -c %u:%g "$run/$inst.sock")"

attach() {  # attach POOL SETPRIV-ARGS...: the worker's first line
  p="$1"; shift
  setpriv "$@" "$worker" --instance "$inst" --runtime-dir "$run" idle --pool "$p" </dev/null 2>&1 | head -n 1
}

# ---- 1. a supplementary group is a group -----------------------------------------------------
out="$(attach g --reuid=$wuid --regid=$wuid --groups=$kv)"
case "$out" in READY*) ;; *) fail "a worker with supplementary group $kv was refused: $out" ;; esac
echo "ok: supplementary group $kv admitted ($out)"

# ---- 2. ... but only to the pools whose allow-lists name it ------------------------------------
out="$(attach closed --reuid=$wuid --regid=$wuid --groups=$kv)"
case "$out" in *PermissionDenied*"not open"*) ;; *) fail "pool 'closed' opened to group $kv: $out" ;; esac
echo "ok: pool 'closed' (allowed_gids [$other]) stays closed: $out"

# ---- 3. without the group the OS says no, and says which group -----------------------------
out="$(attach g --reuid=$wuid --regid=$wuid --clear-groups)"
case "$out" in READY*) fail "a worker outside group $kv reached the socket" ;; esac
echo "$out" | grep -q "usermod -aG" || fail "the refusal does not say how to join: $out"
echo "ok: without the group: $out"

# ---- 4. the group as primary gid, as before ------------------------------------------------
out="$(attach g --reuid=$wuid --regid=$kv --clear-groups)"
case "$out" in READY*) ;; *) fail "a worker with gid $kv was refused: $out" ;; esac
echo "ok: primary gid $kv admitted"
echo "PASS"
