#!/bin/sh
# kvpoold --check-config: a valid config prints its summary and exits 0, an invalid one
# names the problem and exits 2, and neither creates a socket or shared memory.
# Usage: kvpoold_check_config_test.sh KVPOOLD
set -u
kvpoold="$1"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
instance="chk$$"
cat >"$tmp/good.json" <<END
{"instance": "$instance", "runtime_dir": "$tmp/run",
 "pools": [{"name": "g2", "num_blocks": 8,
            "layout": {"num_layers": 2, "outer_dim": 2, "page_size": 16, "inner_dim": 64,
                       "dtype": "bf16", "alignment": 256}}]}
END
"$kvpoold" --config "$tmp/good.json" --check-config >"$tmp/out" 2>"$tmp/err" ||
  fail "valid config: exit $? ($(cat "$tmp/err"))"
grep -q "is valid: instance '$instance', 1 pool(s)" "$tmp/out" || fail "summary: $(cat "$tmp/out")"
grep -q "pool 'g2': host, 8 blocks of 8192 bytes" "$tmp/out" || fail "pool line: $(cat "$tmp/out")"
# --instance applies before the check, as at a real start.
"$kvpoold" --config "$tmp/good.json" --instance other --check-config >"$tmp/out" 2>&1 ||
  fail "--instance with --check-config: $(cat "$tmp/out")"
grep -q "instance 'other'" "$tmp/out" || fail "--instance not applied: $(cat "$tmp/out")"

sed 's/"num_blocks": 8/"num_blocks": 0/' "$tmp/good.json" >"$tmp/bad.json"
"$kvpoold" --config "$tmp/bad.json" --check-config >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 2 ] || fail "invalid config: exit $rc, expected 2 ($(cat "$tmp/out" "$tmp/err"))"
grep -q "num_blocks" "$tmp/err" || fail "invalid config: the message does not name num_blocks: $(cat "$tmp/err")"

# Nothing was created: no runtime directory, no shared memory of the instance.
[ ! -e "$tmp/run" ] || fail "--check-config created $tmp/run"
ls /dev/shm | grep -q "kvpool\.$instance\." && fail "--check-config created shared memory"
echo "ok"
