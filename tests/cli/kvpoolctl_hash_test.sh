#!/bin/sh
# kvpoolctl hash must print Dynamo's reference hashes exactly, and reject a zero page size
# with a message instead of crashing. Usage: kvpoolctl_hash_test.sh /path/to/kvpoolctl
set -u
ctl="$1"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cat >"$tmp/expected" <<'END'
14643705804678351452 14643705804678351452
16777012769546811212 4945711292740353085
483935686894639516 12583592247330656132
END
"$ctl" hash --salt 1337 --page-size 4 1 2 3 4 5 6 7 8 9 10 11 12 >"$tmp/out" 2>"$tmp/err" ||
  fail "hash exited $?: $(cat "$tmp/err")"
diff -u "$tmp/expected" "$tmp/out" || fail "hash output differs from the reference vectors"

# A partial tail is left out of stdout and reported on stderr.
"$ctl" hash --salt 1337 --page-size 4 1 2 3 4 5 6 >"$tmp/out" 2>"$tmp/err" ||
  fail "hash with a tail exited $?"
head -n 1 "$tmp/expected" | diff -u - "$tmp/out" || fail "partial tail changed stdout"
grep -q "2 trailing token" "$tmp/err" || fail "no note about the 2 trailing tokens: $(cat "$tmp/err")"

# JSON: the first block has no parent, the second chains to the first.
"$ctl" hash --json --salt 1337 --page-size 4 1 2 3 4 5 6 7 8 >"$tmp/out" 2>"$tmp/err" ||
  fail "hash --json exited $?"
# Hashes as decimal strings, so jq (doubles) keeps every digit (issue 27).
expected_json='[{"block_hash":"14643705804678351452","parent_hash":null,"sequence_hash":"14643705804678351452"},{"block_hash":"16777012769546811212","parent_hash":"14643705804678351452","sequence_hash":"4945711292740353085"}]'
[ "$(cat "$tmp/out")" = "$expected_json" ] || fail "unexpected JSON: $(cat "$tmp/out")"
if command -v jq >/dev/null 2>&1; then
  [ "$(jq -r '.[0].block_hash' "$tmp/out")" = "14643705804678351452" ] ||
    fail "jq reads block_hash as $(jq -r '.[0].block_hash' "$tmp/out")"
fi

# A mistyped subcommand is named, with the ones that exist (not "A subcommand is required").
if "$ctl" stauts >"$tmp/out" 2>"$tmp/err"; then fail "kvpoolctl stauts exited 0"; fi
grep -q "unknown subcommand 'stauts'" "$tmp/err" || fail "mistyped subcommand: $(cat "$tmp/err")"
grep -q "status" "$tmp/err" || fail "the error does not list the subcommands: $(cat "$tmp/err")"

if "$ctl" hash --page-size 0 1 2 3 4 >"$tmp/out" 2>"$tmp/err"; then
  fail "--page-size 0 exited 0"
fi
grep -q "page_size" "$tmp/err" || fail "--page-size 0 gave no message naming page_size"
[ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "--page-size 0 error is not one line: $(cat "$tmp/err")"
echo "ok"
