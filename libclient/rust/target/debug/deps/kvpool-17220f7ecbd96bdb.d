/work/wt/peer/libclient/rust/target/debug/deps/kvpool-17220f7ecbd96bdb.d: src/lib.rs src/block.rs src/client.rs src/error.rs src/ffi.rs src/future.rs src/hash.rs

/work/wt/peer/libclient/rust/target/debug/deps/libkvpool-17220f7ecbd96bdb.rmeta: src/lib.rs src/block.rs src/client.rs src/error.rs src/ffi.rs src/future.rs src/hash.rs

src/lib.rs:
src/block.rs:
src/client.rs:
src/error.rs:
src/ffi.rs:
src/future.rs:
src/hash.rs:
