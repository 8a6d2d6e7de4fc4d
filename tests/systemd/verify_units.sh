#!/bin/sh
# The shipped systemd files are valid as systemd reads them, offline:
#  - `systemd-analyze verify` of kvpoold.service (a copy whose ExecStart= points at the
#    built kvpoold, since verify insists the binary exists) reports nothing about it;
#  - the unit keeps what kvpoold relies on (Type=notify, NotifyAccess=main, WatchdogSec=,
#    RuntimeDirectory=kvpool, User=kvpool, ExecStart=/usr/bin/kvpoold --config ...);
#  - `systemd-sysusers --root` of kvpool.sysusers.conf creates the user and group kvpool;
#  - kvpoold.json is exactly `kvpoold --print-default-config`, and kvpoold accepts it.
# Usage: verify_units.sh SYSTEMD_DIR KVPOOLD
# Skips (exit 77) when systemd-analyze is not installed.
set -u
src="$1"
kvpoold="$2"
fail() { echo "FAIL: $*" >&2; exit 1; }

if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "SKIP: systemd-analyze is not installed (apt-get install systemd); unit not verified"
  exit 77
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

unit="$src/kvpoold.service"
for key in 'Type=notify' 'NotifyAccess=main' 'WatchdogSec=10s' 'Restart=on-failure' \
           'RuntimeDirectory=kvpool' 'RuntimeDirectoryMode=0750' 'User=kvpool' 'Group=kvpool' \
           'ExecStart=/usr/bin/kvpoold --config /etc/kvpool/kvpoold.json --keep-cache' \
           'FileDescriptorStoreMax=128' \
           'NoNewPrivileges=yes' 'ProtectSystem=strict' 'RestrictAddressFamilies=AF_UNIX'; do
  grep -qx "$key" "$unit" || fail "kvpoold.service lacks the line '$key'"
done
grep -q '^# RemoveIPC=' "$unit" || fail "kvpoold.service lacks the RemoveIPC= note"

sed "s|^ExecStart=/usr/bin/kvpoold |ExecStart=$kvpoold |" "$unit" >"$tmp/kvpoold.service"
grep -q "^ExecStart=$kvpoold " "$tmp/kvpoold.service" || fail "could not point ExecStart at $kvpoold"
# verify also loads the units ours names (After=, WantedBy=); only lines about ours count.
systemd-analyze verify --man=no "$tmp/kvpoold.service" >"$tmp/verify.out" 2>&1
rc=$?
if [ $rc -ne 0 ] || grep -q 'kvpoold' "$tmp/verify.out"; then
  cat "$tmp/verify.out" >&2
  fail "systemd-analyze verify kvpoold.service: exit $rc, or complaints about the unit (above)"
fi
echo "ok: systemd-analyze verify kvpoold.service"

if command -v systemd-sysusers >/dev/null 2>&1; then
  mkdir -p "$tmp/root/etc"
  systemd-sysusers --root="$tmp/root" "$src/kvpool.sysusers.conf" >"$tmp/sysusers.out" 2>&1 ||
    { cat "$tmp/sysusers.out" >&2; fail "systemd-sysusers rejected kvpool.sysusers.conf"; }
  grep -q '^kvpool:' "$tmp/root/etc/passwd" || fail "sysusers created no user kvpool"
  grep -q '^kvpool:' "$tmp/root/etc/group" || fail "sysusers created no group kvpool"
  kvpool_uid=$(grep '^kvpool:' "$tmp/root/etc/passwd" | cut -d: -f3)
  [ "$kvpool_uid" -lt 1000 ] || fail "kvpool got uid $kvpool_uid: not a system user"
  echo "ok: systemd-sysusers creates kvpool (uid $kvpool_uid)"
else
  echo "note: systemd-sysusers not installed; kvpool.sysusers.conf not checked"
fi

"$kvpoold" --print-default-config >"$tmp/default.json" || fail "kvpoold --print-default-config failed"
diff -u "$src/kvpoold.json" "$tmp/default.json" ||
  fail "systemd/kvpoold.json differs from 'kvpoold --print-default-config' (regenerate it)"
echo "ok: kvpoold.json is the default config"
