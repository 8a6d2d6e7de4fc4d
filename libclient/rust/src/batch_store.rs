//! Opaque byte-string keys over one kvpoold host pool, in asynchronous batches (the C ABI's
//! batch store, kvpool.h since 1.2; docs/batch-store.md). A worker thread of the library
//! does the round trips and the copies; `event_fd` becomes readable; `next` / `wait` take the
//! completions.

use std::ffi::{CStr, CString};
use std::os::raw::c_void;
use std::os::unix::io::RawFd;
use std::time::Duration;

use crate::client::Client;
use crate::error::{check, Error, ErrorCode, Result};
use crate::ffi;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchOp {
    Exists = 0,
    Get = 1,
    Set = 2,
    Delete = 3,
    /// How many keys from the first are stored (BatchCompletion::prefix).
    ExistsPrefix = 4,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyResult {
    Miss,
    Ok,
    /// A value above the capacity, or a get buffer shorter than the stored value.
    TooLarge,
    /// The batch stopped before this key (BatchCompletion::error says why).
    Failed,
}

#[derive(Debug, Clone)]
pub struct BatchStoreOptions {
    pub max_key_bytes: u32,
    pub key_namespace: Vec<u8>,
    pub priority: u32,
    pub keys_per_request: u32,
    /// 64; fewer only in tests (forces index collisions).
    pub index_bits: u32,
}

impl Default for BatchStoreOptions {
    fn default() -> Self {
        BatchStoreOptions {
            max_key_bytes: 448,
            key_namespace: Vec::new(),
            priority: 0,
            keys_per_request: 128,
            index_bits: 64,
        }
    }
}

/// What one batch did.
#[derive(Debug)]
pub struct BatchCompletion {
    pub id: u64,
    /// None, or why the batch stopped.
    pub error: Option<Error>,
    pub results: Vec<KeyResult>,
    /// Get: bytes copied per key.
    pub value_sizes: Vec<u64>,
    pub prefix: u32,
}

impl BatchCompletion {
    /// Takes a C completion and frees it.
    unsafe fn take(c: *mut ffi::kvpool_batch_completion) -> BatchCompletion {
        let n = ffi::kvpool_batch_completion_count(c);
        let res = ffi::kvpool_batch_completion_results(c);
        let results = (0..n)
            .map(|i| match *res.add(i) {
                0 => KeyResult::Miss,
                1 => KeyResult::Ok,
                2 => KeyResult::TooLarge,
                _ => KeyResult::Failed,
            })
            .collect();
        let sizes = ffi::kvpool_batch_completion_value_sizes(c);
        let value_sizes = if sizes.is_null() {
            Vec::new()
        } else {
            std::slice::from_raw_parts(sizes, n).to_vec()
        };
        let code = ffi::kvpool_batch_completion_status(c);
        let error = if code == ffi::KVPOOL_OK {
            None
        } else {
            let msg = CStr::from_ptr(ffi::kvpool_batch_completion_message(c));
            Some(Error::new(
                ErrorCode::from_raw(code),
                msg.to_string_lossy().into_owned(),
            ))
        };
        let out = BatchCompletion {
            id: ffi::kvpool_batch_completion_id(c),
            error,
            results,
            value_sizes,
            prefix: ffi::kvpool_batch_completion_prefix(c),
        };
        ffi::kvpool_batch_completion_release(c);
        out
    }

    /// Per key: result == Ok.
    pub fn hits(&self) -> Vec<bool> {
        self.results.iter().map(|r| *r == KeyResult::Ok).collect()
    }
}

pub struct BatchStore {
    ptr: *mut ffi::kvpool_batch_store,
    _client: Client,
}

// kvpool.h: one store may be used from one thread at a time (submit keeps scratch); Send only.
unsafe impl Send for BatchStore {}

impl Drop for BatchStore {
    fn drop(&mut self) {
        unsafe { ffi::kvpool_batch_store_release(self.ptr) }
    }
}

impl BatchStore {
    pub fn open(client: &Client, pool: &str, options: &BatchStoreOptions) -> Result<BatchStore> {
        let name = CString::new(pool)
            .map_err(|_| Error::new(ErrorCode::InvalidArgument, "pool name contains a NUL"))?;
        let mut o = ffi::kvpool_batch_store_options {
            struct_size: 0,
            max_key_bytes: 0,
            key_namespace: std::ptr::null(),
            key_namespace_len: 0,
            priority: 0,
            keys_per_request: 0,
            index_bits: 0,
        };
        unsafe { ffi::kvpool_batch_store_options_init(&mut o) };
        o.max_key_bytes = options.max_key_bytes;
        o.key_namespace = options.key_namespace.as_ptr() as *const _;
        o.key_namespace_len = options.key_namespace.len();
        o.priority = options.priority;
        o.keys_per_request = options.keys_per_request;
        o.index_bits = options.index_bits;
        let mut out = std::ptr::null_mut();
        check(unsafe { ffi::kvpool_batch_store_open(client.raw(), name.as_ptr(), &o, &mut out) })?;
        Ok(BatchStore {
            ptr: out,
            _client: client.clone(),
        })
    }

    /// Readable while completions wait (nonblocking eventfd).
    pub fn event_fd(&self) -> RawFd {
        unsafe { ffi::kvpool_batch_store_event_fd(self.ptr) }
    }

    pub fn value_capacity(&self) -> u64 {
        unsafe { ffi::kvpool_batch_store_value_capacity(self.ptr) }
    }

    /// Queues a batch without buffers (Exists, Delete, ExistsPrefix); returns its id.
    pub fn submit(&mut self, op: BatchOp, keys: &[&[u8]]) -> Result<u64> {
        unsafe { self.submit_raw(op, keys, &[]) }
    }

    /// Queues a Get or Set batch over raw buffers (address, bytes), one per key.
    ///
    /// # Safety
    /// Each buffer must stay valid (and, for Get, writable and unaliased) until this batch's
    /// completion has been taken with `next` or `wait`.
    pub unsafe fn submit_raw(
        &mut self,
        op: BatchOp,
        keys: &[&[u8]],
        buffers: &[(*mut u8, usize)],
    ) -> Result<u64> {
        let kp: Vec<*const c_void> = keys.iter().map(|k| k.as_ptr() as *const c_void).collect();
        let ks: Vec<usize> = keys.iter().map(|k| k.len()).collect();
        let bp: Vec<*mut c_void> = buffers.iter().map(|b| b.0 as *mut c_void).collect();
        let bs: Vec<usize> = buffers.iter().map(|b| b.1).collect();
        let (bptr, bsz) = if buffers.is_empty() {
            (std::ptr::null(), std::ptr::null())
        } else {
            (bp.as_ptr(), bs.as_ptr())
        };
        let mut id = 0u64;
        check(ffi::kvpool_batch_store_submit(
            self.ptr,
            op as i32,
            keys.len(),
            kp.as_ptr(),
            ks.as_ptr(),
            bptr,
            bsz,
            &mut id,
        ))?;
        Ok(id)
    }

    /// Copies each stored key's value into its buffer and waits for the batch (a dead daemon
    /// completes it with an error within milliseconds, so this always returns).
    pub fn get(&mut self, keys: &[&[u8]], buffers: &mut [&mut [u8]]) -> Result<BatchCompletion> {
        let raw: Vec<(*mut u8, usize)> = buffers.iter_mut().map(|b| (b.as_mut_ptr(), b.len())).collect();
        let id = unsafe { self.submit_raw(BatchOp::Get, keys, &raw)? };
        self.wait_done(id)
    }

    /// Copies each buffer in under its key and waits for the batch.
    pub fn set(&mut self, keys: &[&[u8]], values: &[&[u8]]) -> Result<BatchCompletion> {
        let raw: Vec<(*mut u8, usize)> = values.iter().map(|b| (b.as_ptr() as *mut u8, b.len())).collect();
        let id = unsafe { self.submit_raw(BatchOp::Set, keys, &raw)? };
        self.wait_done(id)
    }

    // The buffers of `id` are borrowed by the caller: never return before the batch is done.
    fn wait_done(&mut self, id: u64) -> Result<BatchCompletion> {
        loop {
            match self.wait(id, Duration::from_secs(60)) {
                Err(e) if e.code() == ErrorCode::Timeout => continue,
                other => return other,
            }
        }
    }

    /// The next completion ready now, or None.
    pub fn next(&mut self) -> Option<BatchCompletion> {
        let c = unsafe { ffi::kvpool_batch_store_next(self.ptr) };
        if c.is_null() {
            None
        } else {
            Some(unsafe { BatchCompletion::take(c) })
        }
    }

    /// Waits for batch `id` alone; ErrorCode::Timeout when it is not done in time.
    pub fn wait(&mut self, id: u64, timeout: Duration) -> Result<BatchCompletion> {
        let ms = timeout.as_millis().min(u32::MAX as u128) as u32;
        let mut out = std::ptr::null_mut();
        check(unsafe { ffi::kvpool_batch_store_wait(self.ptr, id, ms, &mut out) })?;
        Ok(unsafe { BatchCompletion::take(out) })
    }
}
