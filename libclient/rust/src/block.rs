//! MutableBlock and ImmutableBlock, as in Dynamo's block manager: a mutable block is
//! unique (fill it, then register it); an immutable block is a shared, registered block.
//! Dropping either releases it.

use std::os::raw::c_void;
use std::ptr;
use std::sync::Arc;

use crate::client::{PoolMeta, Storage};
use crate::error::{check, Error, ErrorCode, Result};
use crate::ffi;

/// Where a block is in Dynamo's life cycle: Reset -> Partial -> Complete -> Registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockState {
    Reset,
    Partial,
    Complete,
    Registered,
}

impl BlockState {
    pub fn is_reset(&self) -> bool {
        *self == BlockState::Reset
    }
    pub fn is_partial(&self) -> bool {
        *self == BlockState::Partial
    }
    pub fn is_complete(&self) -> bool {
        *self == BlockState::Complete
    }
    pub fn is_registered(&self) -> bool {
        *self == BlockState::Registered
    }
}

/// A block this worker allocated: unique, belongs to one thread at a time. Dropping it
/// returns it, reset, to the pool.
pub struct MutableBlock {
    ptr: *mut ffi::kvpool_mutable_block,
    meta: Arc<PoolMeta>,
}
// kvpool.h: a mutable block belongs to one thread at a time (it may move between threads).
unsafe impl Send for MutableBlock {}

impl Drop for MutableBlock {
    fn drop(&mut self) {
        unsafe { ffi::kvpool_mutable_block_release(self.ptr) }
    }
}

impl MutableBlock {
    /// Every block of an allocate's batch, each in its own handle; releases the batch.
    pub(crate) unsafe fn from_batch(
        batch: *mut ffi::kvpool_mutable_batch,
        meta: &Arc<PoolMeta>,
    ) -> Result<Vec<MutableBlock>> {
        let n = ffi::kvpool_mutable_batch_size(batch);
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let mut b = ptr::null_mut();
            let rc = ffi::kvpool_mutable_batch_take(batch, i, &mut b);
            if rc != ffi::KVPOOL_OK {
                let e = Error::last(rc);
                ffi::kvpool_mutable_batch_release(batch); // `out` returns the rest as it drops
                return Err(e);
            }
            out.push(MutableBlock {
                ptr: b,
                meta: meta.clone(),
            });
        }
        ffi::kvpool_mutable_batch_release(batch);
        Ok(out)
    }

    /// Hands the C handle over (register consumes it).
    pub(crate) fn into_raw(self) -> *mut ffi::kvpool_mutable_block {
        let p = self.ptr;
        std::mem::forget(self);
        p
    }

    /// Starts a sequence with this block first (no parent).
    pub fn init_sequence(&mut self, salt: u64) -> Result<()> {
        check(unsafe { ffi::kvpool_mutable_block_init_sequence(self.ptr, salt, 0, 0) })
    }
    /// Starts the block as the child of `parent` (a sequence hash).
    pub fn init_sequence_with_parent(&mut self, salt: u64, parent: u64) -> Result<()> {
        check(unsafe { ffi::kvpool_mutable_block_init_sequence(self.ptr, salt, 1, parent) })
    }
    /// BlockFull once page_size tokens are in.
    pub fn add_token(&mut self, token: u32) -> Result<()> {
        check(unsafe { ffi::kvpool_mutable_block_add_token(self.ptr, token) })
    }
    /// Adds as many as fit; returns how many did.
    pub fn add_tokens(&mut self, tokens: &[u32]) -> Result<usize> {
        let mut added = 0usize;
        check(unsafe {
            ffi::kvpool_mutable_block_add_tokens(self.ptr, tokens.as_ptr(), tokens.len(), &mut added)
        })?;
        Ok(added)
    }
    pub fn pop_token(&mut self) -> Result<()> {
        check(unsafe { ffi::kvpool_mutable_block_pop_token(self.ptr) })
    }
    pub fn pop_tokens(&mut self, count: usize) -> Result<()> {
        check(unsafe { ffi::kvpool_mutable_block_pop_tokens(self.ptr, count) })
    }
    /// Only with exactly page_size tokens; computes the block and sequence hashes.
    pub fn commit(&mut self) -> Result<()> {
        check(unsafe { ffi::kvpool_mutable_block_commit(self.ptr) })
    }
    /// Back to Reset; the block stays allocated.
    pub fn reset(&mut self) -> Result<()> {
        check(unsafe { ffi::kvpool_mutable_block_reset(self.ptr) })
    }
    pub fn state(&self) -> BlockState {
        match unsafe { ffi::kvpool_mutable_block_state(self.ptr) } {
            1 => BlockState::Partial,
            2 => BlockState::Complete,
            3 => BlockState::Registered,
            _ => BlockState::Reset,
        }
    }
    pub fn len(&self) -> usize {
        unsafe { ffi::kvpool_mutable_block_token_count(self.ptr) }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// InvalidState before commit.
    pub fn sequence_hash(&self) -> Result<u64> {
        let mut h = 0;
        check(unsafe { ffi::kvpool_mutable_block_sequence_hash(self.ptr, &mut h) })?;
        Ok(h)
    }
    pub fn block_hash(&self) -> Result<u64> {
        let mut h = 0;
        check(unsafe { ffi::kvpool_mutable_block_block_hash(self.ptr, &mut h) })?;
        Ok(h)
    }
    /// Eviction priority once registered and unreferenced: lower goes first.
    pub fn set_priority(&mut self, priority: u32) {
        // Fails only for a consumed handle, which a MutableBlock never is.
        let _ = unsafe { ffi::kvpool_mutable_block_set_priority(self.ptr, priority) };
    }
    pub fn priority(&self) -> u32 {
        unsafe { ffi::kvpool_mutable_block_priority(self.ptr) }
    }
    pub fn block_id(&self) -> u32 {
        unsafe { ffi::kvpool_mutable_block_id(self.ptr) }
    }
    /// Region (layer, outer): a host pointer, or a device pointer for a Cuda pool.
    pub fn address(&self, layer: u32, outer: u32) -> Result<*mut u8> {
        let mut p: *mut c_void = ptr::null_mut();
        check(unsafe { ffi::kvpool_mutable_block_address(self.ptr, layer, outer, &mut p) })?;
        Ok(p as *mut u8)
    }
    /// Region (layer, outer) of a host pool's block, to write.
    pub fn region_mut(&mut self, layer: u32, outer: u32) -> Result<&mut [u8]> {
        let len = host_region_len(&self.meta)?;
        let p = self.address(layer, outer)?;
        Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
    }
}

fn host_region_len(meta: &PoolMeta) -> Result<usize> {
    if meta.storage != Storage::Host {
        return Err(Error::new(
            ErrorCode::InvalidState,
            format!(
                "pool '{}' is a device pool: its blocks are device memory, use address()",
                meta.name
            ),
        ));
    }
    Ok(meta.layout.region_bytes as usize)
}

impl std::fmt::Debug for MutableBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MutableBlock")
            .field("pool", &self.meta.name)
            .field("block_id", &self.block_id())
            .field("state", &self.state())
            .finish()
    }
}

/// A registered block: shared, read-only. Clones share the reference; the last one
/// dropped releases it, and the block stays matchable (inactive) until evicted.
pub struct ImmutableBlock {
    ptr: *mut ffi::kvpool_immutable_block,
    meta: Arc<PoolMeta>,
}
// kvpool.h: immutable blocks may be read from several threads, and released on any.
unsafe impl Send for ImmutableBlock {}
unsafe impl Sync for ImmutableBlock {}

impl Drop for ImmutableBlock {
    fn drop(&mut self) {
        unsafe { ffi::kvpool_immutable_block_release(self.ptr) }
    }
}

impl Clone for ImmutableBlock {
    fn clone(&self) -> Self {
        let mut p = ptr::null_mut();
        let rc = unsafe { ffi::kvpool_immutable_block_clone(self.ptr, &mut p) };
        // Fails only when out of memory, as any allocation in Clone would.
        assert_eq!(
            rc,
            ffi::KVPOOL_OK,
            "kvpool_immutable_block_clone: {}",
            Error::last(rc)
        );
        ImmutableBlock {
            ptr: p,
            meta: self.meta.clone(),
        }
    }
}

impl std::fmt::Debug for ImmutableBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImmutableBlock")
            .field("pool", &self.meta.name)
            .field("block_id", &self.block_id())
            .field("sequence_hash", &unsafe {
                ffi::kvpool_immutable_block_sequence_hash(self.ptr)
            })
            .finish()
    }
}

impl ImmutableBlock {
    /// Always Registered (Dynamo's ImmutableBlock::state()).
    pub fn state(&self) -> BlockState {
        BlockState::Registered
    }
    pub fn sequence_hash(&self) -> Result<u64> {
        Ok(unsafe { ffi::kvpool_immutable_block_sequence_hash(self.ptr) })
    }
    pub fn block_id(&self) -> u32 {
        unsafe { ffi::kvpool_immutable_block_id(self.ptr) }
    }
    pub fn address(&self, layer: u32, outer: u32) -> Result<*const u8> {
        let mut p: *const c_void = ptr::null();
        check(unsafe { ffi::kvpool_immutable_block_address(self.ptr, layer, outer, &mut p) })?;
        Ok(p as *const u8)
    }
    /// Region (layer, outer) of a host pool's block, to read.
    pub fn region(&self, layer: u32, outer: u32) -> Result<&[u8]> {
        let len = host_region_len(&self.meta)?;
        let p = self.address(layer, outer)?;
        Ok(unsafe { std::slice::from_raw_parts(p, len) })
    }
}

/// One owned handle per block of a register's or match's batch; releases the batch.
pub(crate) unsafe fn immutables_from_batch(
    batch: *mut ffi::kvpool_immutable_batch,
    meta: &Arc<PoolMeta>,
) -> Result<Vec<ImmutableBlock>> {
    let n = ffi::kvpool_immutable_batch_size(batch);
    let mut out = Vec::with_capacity(n);
    let mut err = None;
    for i in 0..n {
        let mut p = ptr::null_mut();
        let rc = ffi::kvpool_immutable_block_clone(ffi::kvpool_immutable_batch_at(batch, i), &mut p);
        if rc != ffi::KVPOOL_OK {
            err = Some(Error::last(rc));
            break;
        }
        out.push(ImmutableBlock {
            ptr: p,
            meta: meta.clone(),
        });
    }
    ffi::kvpool_immutable_batch_release(batch);
    match err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}
