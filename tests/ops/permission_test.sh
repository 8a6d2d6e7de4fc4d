#!/bin/sh
# Who may reach kvpoold, as an operator meets it (runs as root, tries as user nobody):
#  1. a socket the caller may not open: the error names the group that grants access (the
#     socket's, or the directory's when that cannot be searched) and how to join it;
#  2. allowed_uids: a worker outside the list is refused, but root may always observe
#     (kvpoolctl, kvpool-exporter read the control segment read-only), and a non-root
#     observer outside the list is refused with the reason.
# Needs root and setpriv(1); exits 77 otherwise.
# Usage: permission_test.sh KVPOOLD KVPOOLCTL DEMO_WORKER
set -u
kvpoold="$1"; ctl="$2"; worker="$3"
fail() { echo "FAIL: $*" >&2; [ -f "$tmp/kvpoold.log" ] && sed 's/^/kvpoold: /' "$tmp/kvpoold.log" >&2; exit 1; }
if [ "$(id -u)" -ne 0 ] || ! command -v setpriv >/dev/null 2>&1; then
  echo "SKIP: needs root and setpriv"; exit 77
fi
nobody=65534
grp=$(getent group daemon | cut -d: -f1)
[ -n "$grp" ] || { echo "SKIP: no group 'daemon' to hand the socket to"; exit 77; }
tmp="$(mktemp -d)"
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
as_nobody() { setpriv --reuid=$nobody --regid=$nobody --clear-groups "$@"; }

start() {  # start CONFIG_JSON INSTANCE
  printf '%s' "$1" >"$tmp/$2.json"
  "$kvpoold" --config "$tmp/$2.json" --instance "$2" --runtime-dir "$tmp" >"$tmp/kvpoold.log" 2>&1 &
  pid=$!
  tries=0
  until "$ctl" status --instance "$2" --runtime-dir "$tmp" >/dev/null 2>&1; do
    kill -0 "$pid" 2>/dev/null || fail "kvpoold exited at start"
    tries=$((tries + 1)); [ $tries -lt 1000 ] || fail "kvpoold not answering after 20 s"
    sleep 0.02
  done
}
stop() { kill -TERM "$pid"; wait "$pid"; pid=""; }

# ---- 1. the socket's group, then the directory's ----------------------------------------
inst="perm$$"
start '{}' "$inst"
chmod 0755 "$tmp"
chgrp "$grp" "$tmp/$inst.sock" && chmod 0660 "$tmp/$inst.sock"
out="$(as_nobody "$ctl" status --instance "$inst" --runtime-dir "$tmp" 2>&1)" && fail "nobody reached a 0660 socket"
echo "$out" | grep -q "socket is group '$grp', mode 0660" || fail "no group in: $out"
echo "$out" | grep -q "usermod -aG $grp" || fail "no way to join in: $out"
echo "ok: $out"
chgrp "$grp" "$tmp" && chmod 0750 "$tmp"
out="$(as_nobody "$ctl" status --instance "$inst" --runtime-dir "$tmp" 2>&1)" && fail "nobody searched a 0750 directory"
echo "$out" | grep -q "its directory $tmp is group '$grp', mode 0750" || fail "no directory group in: $out"
echo "ok: $out"
chmod 0755 "$tmp"; chgrp root "$tmp"
stop

# ---- 2. allowed_uids: workers are held to it, root observers are not ------------------------
inst="allow$$"
start '{"allowed_uids": [12345]}' "$inst"
"$ctl" status --instance "$inst" --runtime-dir "$tmp" >/dev/null || fail "root could not observe"
"$ctl" metrics --instance "$inst" --runtime-dir "$tmp" | grep -q '^kvpool_pool_blocks' || fail "root metrics"
echo "ok: root observes a daemon whose allowed_uids does not list it"
out="$("$worker" --instance "$inst" --runtime-dir "$tmp" --seconds 1 2>&1)" && fail "a root worker attached outside allowed_uids"
echo "$out" | grep -q "allowed_uids" || fail "worker refusal does not name allowed_uids: $out"
echo "ok: a root worker is refused: $(echo "$out" | grep -m1 allowed_uids)"
chmod 0666 "$tmp/$inst.sock"
out="$(as_nobody "$ctl" status --instance "$inst" --runtime-dir "$tmp" 2>&1)" && fail "nobody observed outside allowed_uids"
echo "$out" | grep -q "uid $nobody" || fail "observer refusal does not name the uid: $out"
echo "ok: a non-root observer outside allowed_uids is refused: $out"
stop
