//! The C ABI of kvpool.h, declared by hand (no bindgen: std only). Kept in the order of the
//! header; the ABI check in ctest keeps the header and the library in step.
#![allow(non_camel_case_types)]

use std::os::raw::{c_char, c_int, c_void};

pub type kvpool_error_code = c_int;
pub const KVPOOL_OK: kvpool_error_code = 0;
pub const KVPOOL_ABI_VERSION_MAJOR: u32 = 1;

#[repr(C)]
pub struct kvpool_client {
    _private: [u8; 0],
}
#[repr(C)]
pub struct kvpool_pool {
    _private: [u8; 0],
}
#[repr(C)]
pub struct kvpool_mutable_block {
    _private: [u8; 0],
}
#[repr(C)]
pub struct kvpool_mutable_batch {
    _private: [u8; 0],
}
#[repr(C)]
pub struct kvpool_immutable_block {
    _private: [u8; 0],
}
#[repr(C)]
pub struct kvpool_immutable_batch {
    _private: [u8; 0],
}

/// Since ABI 1.2.
#[repr(C)]
pub struct kvpool_batch_store {
    _private: [u8; 0],
}
#[repr(C)]
pub struct kvpool_batch_completion {
    _private: [u8; 0],
}
#[repr(C)]
pub struct kvpool_batch_store_options {
    pub struct_size: u32,
    pub max_key_bytes: u32,
    pub key_namespace: *const c_char,
    pub key_namespace_len: usize,
    pub priority: u32,
    pub keys_per_request: u32,
    pub index_bits: u32,
}

#[repr(C)]
pub struct kvpool_connect_options {
    pub struct_size: u32,
    pub connect_timeout_ms: u32,
    pub runtime_dir: *const c_char,
    pub poll_us: u32,
    pub pin_host_pools: u32,
    pub reattach: u32,
    pub reattach_timeout_ms: u32,
}

/// Since ABI 1.1.
#[repr(C)]
pub struct kvpool_register_options {
    pub struct_size: u32,
    pub checksum: u32,
    pub send_tokens: u32,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
pub struct kvpool_layout {
    pub struct_size: u32,
    pub kind: u32,
    pub num_blocks: u32,
    pub num_layers: u32,
    pub outer_dim: u32,
    pub page_size: u32,
    pub inner_dim: u32,
    pub dtype_bytes: u32,
    pub alignment: u32,
    pub dtype: u32,
    pub region_bytes: u64,
    pub block_bytes: u64,
    pub total_bytes: u64,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
pub struct kvpool_pool_counts {
    pub struct_size: u32,
    pub total: u32,
    pub free_blocks: u32,
    pub inactive: u32,
    pub active: u32,
    pub mutable_blocks: u32,
}

pub type kvpool_mutable_done = extern "C" fn(
    user_data: *mut c_void,
    code: kvpool_error_code,
    message: *const c_char,
    result: *mut kvpool_mutable_batch,
);
/// Since ABI 1.2 (kvpool.h): the peer tier's match options.
#[repr(C)]
pub struct kvpool_peer_fetch_options {
    pub deadline_ms: u32,
    pub holder: *const c_char,
}

/// Since ABI 1.3 (kvpool.h): how a match looks for the prefix on this host.
#[repr(C)]
pub struct kvpool_match_options {
    pub struct_size: u32,
    pub onboard: u32,
}

pub type kvpool_immutable_done = extern "C" fn(
    user_data: *mut c_void,
    code: kvpool_error_code,
    message: *const c_char,
    result: *mut kvpool_immutable_batch,
);

extern "C" {
    pub fn kvpool_abi_version() -> u32;
    pub fn kvpool_error_name(code: kvpool_error_code) -> *const c_char;
    pub fn kvpool_last_error_message() -> *const c_char;

    pub fn kvpool_connect_options_init(options: *mut kvpool_connect_options);
    pub fn kvpool_connect(
        instance: *const c_char,
        options: *const kvpool_connect_options,
        out: *mut *mut kvpool_client,
    ) -> kvpool_error_code;
    pub fn kvpool_client_release(client: *mut kvpool_client);
    pub fn kvpool_client_pool(
        client: *const kvpool_client,
        name: *const c_char,
        out: *mut *mut kvpool_pool,
    ) -> kvpool_error_code;
    pub fn kvpool_client_pool_count(client: *const kvpool_client) -> usize;
    pub fn kvpool_client_pool_name(client: *const kvpool_client, index: usize) -> *const c_char;
    pub fn kvpool_client_ping(client: *mut kvpool_client) -> kvpool_error_code;
    pub fn kvpool_client_flush(client: *mut kvpool_client);
    pub fn kvpool_client_daemon_alive(client: *const kvpool_client) -> c_int;
    pub fn kvpool_client_slot(client: *const kvpool_client) -> u32;

    pub fn kvpool_pool_release(pool: *mut kvpool_pool);
    pub fn kvpool_pool_name(pool: *const kvpool_pool) -> *const c_char;
    pub fn kvpool_pool_index(pool: *const kvpool_pool) -> u32;
    pub fn kvpool_pool_layout(pool: *const kvpool_pool, out: *mut kvpool_layout) -> kvpool_error_code;
    pub fn kvpool_pool_storage(pool: *const kvpool_pool) -> c_int;
    pub fn kvpool_pool_cuda_device(pool: *const kvpool_pool, out: *mut c_int) -> kvpool_error_code;
    pub fn kvpool_pool_counts_get(
        pool: *const kvpool_pool,
        out: *mut kvpool_pool_counts,
    ) -> kvpool_error_code;

    pub fn kvpool_pool_allocate(
        pool: *mut kvpool_pool,
        count: u32,
        out: *mut *mut kvpool_mutable_batch,
    ) -> kvpool_error_code;
    pub fn kvpool_pool_register_blocks(
        pool: *mut kvpool_pool,
        blocks: *const *mut kvpool_mutable_block,
        count: usize,
        out: *mut *mut kvpool_immutable_batch,
    ) -> kvpool_error_code;
    pub fn kvpool_pool_register_blocks_with(
        pool: *mut kvpool_pool,
        blocks: *const *mut kvpool_mutable_block,
        count: usize,
        options: *const kvpool_register_options,
        out: *mut *mut kvpool_immutable_batch,
    ) -> kvpool_error_code;
    pub fn kvpool_pool_match(
        pool: *mut kvpool_pool,
        hashes: *const u64,
        count: usize,
        out: *mut *mut kvpool_immutable_batch,
    ) -> kvpool_error_code;
    pub fn kvpool_pool_match_peers(
        pool: *mut kvpool_pool,
        hashes: *const u64,
        count: usize,
        options: *const kvpool_peer_fetch_options,
        out: *mut *mut kvpool_immutable_batch,
    ) -> kvpool_error_code;
    pub fn kvpool_pool_match_with(
        pool: *mut kvpool_pool,
        hashes: *const u64,
        count: usize,
        options: *const kvpool_match_options,
        out: *mut *mut kvpool_immutable_batch,
    ) -> kvpool_error_code;
    pub fn kvpool_pool_match_with_async(
        pool: *mut kvpool_pool,
        hashes: *const u64,
        count: usize,
        options: *const kvpool_match_options,
        done: kvpool_immutable_done,
        user_data: *mut c_void,
    ) -> kvpool_error_code;
    pub fn kvpool_pool_match_peers_async(
        pool: *mut kvpool_pool,
        hashes: *const u64,
        count: usize,
        options: *const kvpool_peer_fetch_options,
        done: kvpool_immutable_done,
        user_data: *mut c_void,
    ) -> kvpool_error_code;
    pub fn kvpool_pool_allocate_async(
        pool: *mut kvpool_pool,
        count: u32,
        done: kvpool_mutable_done,
        user_data: *mut c_void,
    ) -> kvpool_error_code;
    pub fn kvpool_pool_match_async(
        pool: *mut kvpool_pool,
        hashes: *const u64,
        count: usize,
        done: kvpool_immutable_done,
        user_data: *mut c_void,
    ) -> kvpool_error_code;

    pub fn kvpool_mutable_batch_size(batch: *const kvpool_mutable_batch) -> usize;
    pub fn kvpool_mutable_batch_take(
        batch: *mut kvpool_mutable_batch,
        index: usize,
        out: *mut *mut kvpool_mutable_block,
    ) -> kvpool_error_code;
    pub fn kvpool_mutable_batch_release(batch: *mut kvpool_mutable_batch);
    pub fn kvpool_mutable_block_release(block: *mut kvpool_mutable_block);
    pub fn kvpool_mutable_block_init_sequence(
        block: *mut kvpool_mutable_block,
        salt: u64,
        has_parent: c_int,
        parent: u64,
    ) -> kvpool_error_code;
    pub fn kvpool_mutable_block_add_token(block: *mut kvpool_mutable_block, token: u32) -> kvpool_error_code;
    pub fn kvpool_mutable_block_add_tokens(
        block: *mut kvpool_mutable_block,
        tokens: *const u32,
        count: usize,
        added: *mut usize,
    ) -> kvpool_error_code;
    pub fn kvpool_mutable_block_pop_token(block: *mut kvpool_mutable_block) -> kvpool_error_code;
    pub fn kvpool_mutable_block_pop_tokens(
        block: *mut kvpool_mutable_block,
        count: usize,
    ) -> kvpool_error_code;
    pub fn kvpool_mutable_block_commit(block: *mut kvpool_mutable_block) -> kvpool_error_code;
    pub fn kvpool_mutable_block_reset(block: *mut kvpool_mutable_block) -> kvpool_error_code;
    pub fn kvpool_mutable_block_state(block: *const kvpool_mutable_block) -> c_int;
    pub fn kvpool_mutable_block_token_count(block: *const kvpool_mutable_block) -> usize;
    pub fn kvpool_mutable_block_sequence_hash(
        block: *const kvpool_mutable_block,
        out: *mut u64,
    ) -> kvpool_error_code;
    pub fn kvpool_mutable_block_block_hash(
        block: *const kvpool_mutable_block,
        out: *mut u64,
    ) -> kvpool_error_code;
    pub fn kvpool_mutable_block_set_priority(
        block: *mut kvpool_mutable_block,
        priority: u32,
    ) -> kvpool_error_code;
    pub fn kvpool_mutable_block_priority(block: *const kvpool_mutable_block) -> u32;
    pub fn kvpool_mutable_block_id(block: *const kvpool_mutable_block) -> u32;
    pub fn kvpool_mutable_block_address(
        block: *const kvpool_mutable_block,
        layer: u32,
        outer: u32,
        out: *mut *mut c_void,
    ) -> kvpool_error_code;

    pub fn kvpool_immutable_batch_size(batch: *const kvpool_immutable_batch) -> usize;
    pub fn kvpool_immutable_batch_at(
        batch: *const kvpool_immutable_batch,
        index: usize,
    ) -> *const kvpool_immutable_block;
    pub fn kvpool_immutable_batch_release(batch: *mut kvpool_immutable_batch);
    pub fn kvpool_immutable_block_clone(
        block: *const kvpool_immutable_block,
        out: *mut *mut kvpool_immutable_block,
    ) -> kvpool_error_code;
    pub fn kvpool_immutable_block_release(block: *mut kvpool_immutable_block);
    pub fn kvpool_immutable_block_sequence_hash(block: *const kvpool_immutable_block) -> u64;
    pub fn kvpool_immutable_block_id(block: *const kvpool_immutable_block) -> u32;
    pub fn kvpool_immutable_block_address(
        block: *const kvpool_immutable_block,
        layer: u32,
        outer: u32,
        out: *mut *const c_void,
    ) -> kvpool_error_code;

    // Batch store (since ABI 1.2).
    pub fn kvpool_batch_store_options_init(options: *mut kvpool_batch_store_options);
    pub fn kvpool_batch_store_open(
        client: *const kvpool_client,
        pool: *const c_char,
        options: *const kvpool_batch_store_options,
        out: *mut *mut kvpool_batch_store,
    ) -> kvpool_error_code;
    pub fn kvpool_batch_store_release(store: *mut kvpool_batch_store);
    pub fn kvpool_batch_store_event_fd(store: *const kvpool_batch_store) -> c_int;
    pub fn kvpool_batch_store_value_capacity(store: *const kvpool_batch_store) -> u64;
    pub fn kvpool_batch_store_submit(
        store: *mut kvpool_batch_store,
        op: c_int,
        count: usize,
        keys: *const *const c_void,
        key_sizes: *const usize,
        buffers: *const *mut c_void,
        buffer_sizes: *const usize,
        id_out: *mut u64,
    ) -> kvpool_error_code;
    pub fn kvpool_batch_store_next(store: *mut kvpool_batch_store) -> *mut kvpool_batch_completion;
    pub fn kvpool_batch_store_wait(
        store: *mut kvpool_batch_store,
        id: u64,
        timeout_ms: u32,
        out: *mut *mut kvpool_batch_completion,
    ) -> kvpool_error_code;
    pub fn kvpool_batch_completion_id(c: *const kvpool_batch_completion) -> u64;
    pub fn kvpool_batch_completion_status(c: *const kvpool_batch_completion) -> kvpool_error_code;
    pub fn kvpool_batch_completion_message(c: *const kvpool_batch_completion) -> *const c_char;
    pub fn kvpool_batch_completion_count(c: *const kvpool_batch_completion) -> usize;
    pub fn kvpool_batch_completion_results(c: *const kvpool_batch_completion) -> *const u8;
    pub fn kvpool_batch_completion_value_sizes(c: *const kvpool_batch_completion) -> *const u64;
    pub fn kvpool_batch_completion_prefix(c: *const kvpool_batch_completion) -> u32;
    pub fn kvpool_batch_completion_release(c: *mut kvpool_batch_completion);

    // Since ABI 1.2.
    pub fn kvpool_pool_hash_scheme(pool: *const kvpool_pool) -> c_int;
    pub fn kvpool_pool_hash_tokens(
        pool: *const kvpool_pool,
        tokens: *const u32,
        count: usize,
        salt: u64,
        block_hashes: *mut u64,
        sequence_hashes: *mut u64,
        capacity: usize,
        blocks: *mut usize,
    ) -> kvpool_error_code;
    pub fn kvpool_hash_tokens_scheme(
        scheme: c_int,
        tokens: *const u32,
        count: usize,
        page_size: u32,
        salt: u64,
        block_hashes: *mut u64,
        sequence_hashes: *mut u64,
        capacity: usize,
        blocks: *mut usize,
    ) -> kvpool_error_code;

    pub fn kvpool_block_hash(tokens: *const u32, count: usize, salt: u64) -> u64;
    pub fn kvpool_sequence_hash(has_parent: c_int, parent: u64, block_hash: u64, salt: u64) -> u64;
    // (kvpool_hash_tokens is kvpool_hash_tokens_scheme with KVPOOL_HASH_DYNAMO_0_2.)
}
