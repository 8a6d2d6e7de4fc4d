//! The async forms: std Futures over kvpool.h's completion callbacks. The request is sent
//! when the future is made; the client's completion thread stores the answer and wakes the
//! task, so any executor works and none is needed by this crate.

use std::ffi::CStr;
use std::future::Future;
use std::os::raw::{c_char, c_void};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use crate::block::{immutables_from_batch, MutableBlock};
use crate::client::{Pool, PoolMeta};
use crate::error::{Error, ErrorCode, Result};
use crate::ffi;
use crate::ImmutableBlock;

struct Slot<T> {
    result: Option<Result<Vec<T>>>,
    waker: Option<Waker>,
}

struct Shared<T> {
    meta: Arc<PoolMeta>,
    slot: Mutex<Slot<T>>,
}

impl<T> Shared<T> {
    fn new(meta: &Arc<PoolMeta>) -> Arc<Self> {
        Arc::new(Shared {
            meta: meta.clone(),
            slot: Mutex::new(Slot {
                result: None,
                waker: None,
            }),
        })
    }
    fn complete(&self, r: Result<Vec<T>>) {
        let waker = {
            let mut s = self.slot.lock().unwrap_or_else(|e| e.into_inner());
            s.result = Some(r);
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
    fn poll(&self, cx: &mut Context<'_>) -> Poll<Result<Vec<T>>> {
        let mut s = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        match s.result.take() {
            Some(r) => Poll::Ready(r),
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

fn error_of(code: ffi::kvpool_error_code, message: *const c_char) -> Error {
    let m = if message.is_null() {
        String::new()
    } else {
        unsafe { CStr::from_ptr(message) }.to_string_lossy().into_owned()
    };
    Error::new(ErrorCode::from_raw(code), m)
}

extern "C" fn on_allocated(
    user: *mut c_void,
    code: ffi::kvpool_error_code,
    message: *const c_char,
    batch: *mut ffi::kvpool_mutable_batch,
) {
    // The Arc handed over in start() comes back here, exactly once.
    let shared = unsafe { Arc::from_raw(user as *const Shared<MutableBlock>) };
    let r = if code == ffi::KVPOOL_OK {
        unsafe { MutableBlock::from_batch(batch, &shared.meta) }
    } else {
        Err(error_of(code, message))
    };
    shared.complete(r);
}

extern "C" fn on_matched(
    user: *mut c_void,
    code: ffi::kvpool_error_code,
    message: *const c_char,
    batch: *mut ffi::kvpool_immutable_batch,
) {
    let shared = unsafe { Arc::from_raw(user as *const Shared<ImmutableBlock>) };
    let r = if code == ffi::KVPOOL_OK {
        unsafe { immutables_from_batch(batch, &shared.meta) }
    } else {
        Err(error_of(code, message))
    };
    shared.complete(r);
}

/// `Pool::allocate_blocks_async`: resolves to the blocks, or the error.
pub struct AllocateFuture {
    shared: Arc<Shared<MutableBlock>>,
}

impl AllocateFuture {
    pub(crate) fn start(pool: &Pool, count: u32) -> Self {
        let shared = Shared::new(&pool.meta);
        let user = Arc::into_raw(shared.clone()) as *mut c_void;
        let rc = unsafe { ffi::kvpool_pool_allocate_async(pool.inner.ptr, count, on_allocated, user) };
        if rc != ffi::KVPOOL_OK {
            // The callback will never run: take the Arc back and resolve with the error.
            drop(unsafe { Arc::from_raw(user as *const Shared<MutableBlock>) });
            shared.complete(Err(Error::last(rc)));
        }
        AllocateFuture { shared }
    }
}

impl Future for AllocateFuture {
    type Output = Result<Vec<MutableBlock>>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.shared.poll(cx)
    }
}

/// `Pool::match_sequence_hashes_async`: resolves to the matched prefix, or the error.
pub struct MatchFuture {
    shared: Arc<Shared<ImmutableBlock>>,
}

impl MatchFuture {
    pub(crate) fn start(pool: &Pool, hashes: &[u64]) -> Self {
        let shared = Shared::new(&pool.meta);
        let user = Arc::into_raw(shared.clone()) as *mut c_void;
        let rc = unsafe {
            ffi::kvpool_pool_match_async(pool.inner.ptr, hashes.as_ptr(), hashes.len(), on_matched, user)
        };
        if rc != ffi::KVPOOL_OK {
            drop(unsafe { Arc::from_raw(user as *const Shared<ImmutableBlock>) });
            shared.complete(Err(Error::last(rc)));
        }
        MatchFuture { shared }
    }

    pub(crate) fn start_with(pool: &Pool, hashes: &[u64], options: &crate::MatchOptions) -> Self {
        let shared = Shared::new(&pool.meta);
        let o = options.raw();
        let user = Arc::into_raw(shared.clone()) as *mut c_void;
        let rc = unsafe {
            ffi::kvpool_pool_match_with_async(pool.inner.ptr, hashes.as_ptr(), hashes.len(), &o, on_matched, user)
        };
        if rc != ffi::KVPOOL_OK {
            drop(unsafe { Arc::from_raw(user as *const Shared<ImmutableBlock>) });
            shared.complete(Err(Error::last(rc)));
        }
        MatchFuture { shared }
    }

    pub(crate) fn start_with_peers(pool: &Pool, hashes: &[u64], peers: &crate::PeerFetchOptions) -> Self {
        let shared = Shared::new(&pool.meta);
        let holder = match crate::client::cstring(&peers.holder, "holder") {
            Ok(h) => h,
            Err(e) => {
                shared.complete(Err(e));
                return MatchFuture { shared };
            }
        };
        let o = peers.raw(&holder);
        let user = Arc::into_raw(shared.clone()) as *mut c_void;
        let rc = unsafe {
            ffi::kvpool_pool_match_peers_async(
                pool.inner.ptr,
                hashes.as_ptr(),
                hashes.len(),
                &o,
                on_matched,
                user,
            )
        };
        if rc != ffi::KVPOOL_OK {
            drop(unsafe { Arc::from_raw(user as *const Shared<ImmutableBlock>) });
            shared.complete(Err(Error::last(rc)));
        }
        MatchFuture { shared }
    }
}

impl Future for MatchFuture {
    type Output = Result<Vec<ImmutableBlock>>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.shared.poll(cx)
    }
}
