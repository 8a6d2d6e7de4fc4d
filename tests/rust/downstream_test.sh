#!/bin/sh
# A crate that depends on kvpool, as a user's would (tests/rust/downstream, a path
# dependency, offline): its binary must find libkvpool_c.so.1 at run time with no
# LD_LIBRARY_PATH, once with KVPOOL_C_LIB_DIR and once through pkg-config (kvpool_c.pc);
# and the kvpool crate's own `cargo test` must pass with no KVPOOLD set (its tests find a
# kvpoold themselves or say they are skipped).
# Usage: downstream_test.sh CARGO RUSTC SOURCE_DIR BUILD_DIR C_LIB_DIR KVPOOLD_DIR
set -u
cargo="$1"; rustc="$2"; src="$3"; build="$4"; clib="$5"; kvpoold_dir="$6"
fail() { echo "FAIL: $*" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
export RUSTC="$rustc"
# The rustdoc beside that rustc (doctests read the rlibs it made).
[ -x "$(dirname "$rustc")/rustdoc" ] && export RUSTDOC="$(dirname "$rustc")/rustdoc"
unset LD_LIBRARY_PATH KVPOOL_C_LIB_DIR PKG_CONFIG_PATH

# 1. KVPOOL_C_LIB_DIR.
KVPOOL_C_LIB_DIR="$clib" CARGO_TARGET_DIR="$build/rust-downstream-env" "$cargo" build --offline \
  --locked --quiet --manifest-path "$src/tests/rust/downstream/Cargo.toml" >"$tmp/b1" 2>&1 ||
  { cat "$tmp/b1" >&2; fail "downstream build with KVPOOL_C_LIB_DIR"; }
out="$("$build/rust-downstream-env/debug/kvpool-downstream" 2>&1)" ||
  fail "downstream binary (KVPOOL_C_LIB_DIR) does not run: $out"
[ "$out" = "downstream ok" ] || fail "downstream binary: $out"
echo "ok: a dependent crate's binary runs without LD_LIBRARY_PATH (KVPOOL_C_LIB_DIR)"

# 2. pkg-config: a kvpool_c.pc for this build's library (what cmake --install writes).
if command -v pkg-config >/dev/null 2>&1; then
  mkdir -p "$tmp/pc"
  cat >"$tmp/pc/kvpool_c.pc" <<END
libdir=$clib
includedir=$src/libclient/include
Name: kvpool_c
Description: kvpool C ABI (test)
Version: 1.2.0
Cflags: -I\${includedir}
Libs: -L\${libdir} -lkvpool_c
END
  PKG_CONFIG_PATH="$tmp/pc" CARGO_TARGET_DIR="$build/rust-downstream-pc" "$cargo" build --offline \
    --locked --quiet --manifest-path "$src/tests/rust/downstream/Cargo.toml" >"$tmp/b2" 2>&1 ||
    { cat "$tmp/b2" >&2; fail "downstream build through pkg-config kvpool_c"; }
  out="$("$build/rust-downstream-pc/debug/kvpool-downstream" 2>&1)" ||
    fail "downstream binary (pkg-config) does not run: $out"
  [ "$out" = "downstream ok" ] || fail "downstream binary (pkg-config): $out"
  echo "ok: the same through pkg-config kvpool_c"
fi

# 3. Plain `cargo test` of the crate without KVPOOLD: kvpoold from PATH here.
PATH="$kvpoold_dir:$PATH" KVPOOL_C_LIB_DIR="$clib" CARGO_TARGET_DIR="$build/rust-target" \
  "$cargo" test --offline --locked --quiet --manifest-path "$src/libclient/rust/Cargo.toml" \
  -- --test-threads=2 >"$tmp/t" 2>&1 || { cat "$tmp/t" >&2; fail "cargo test without KVPOOLD"; }
grep -q "SKIPPED" "$tmp/t" && { cat "$tmp/t" >&2; fail "tests skipped although kvpoold is on PATH"; }
echo "ok: cargo test without KVPOOLD finds kvpoold itself"
