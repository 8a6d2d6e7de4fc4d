//! Client and Pool: a connection to kvpoold and one of its pools.

use std::ffi::{CStr, CString};
use std::ptr;
use std::sync::Arc;
use std::time::Duration;

use crate::block::{immutables_from_batch, MutableBlock};
use crate::error::{check, Error, ErrorCode, Result};
use crate::ffi;
use crate::future::{AllocateFuture, MatchFuture};
use crate::hash::HashScheme;
use crate::ImmutableBlock;

/// How to reach kvpoold (`ConnectOptions::default()` = the library's defaults).
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// Directory of kvpoold's socket; `None`: resolved like the daemon does.
    pub runtime_dir: Option<String>,
    pub connect_timeout: Duration,
    /// Empty polls of the response ring before parking.
    pub poll_us: u32,
    /// cudaHostRegister host pools (CUDA builds only).
    pub pin_host_pools: bool,
    /// After kvpoold dies, the next call waits up to `reattach_timeout` (50 ms) for it to
    /// come back and reattaches, keeping the blocks it adopted; if none came, later calls
    /// fail at once with `DaemonGone` (each tries once to reconnect) until one is back
    /// (C++ `ConnectOptions::reattach`).
    pub reattach: bool,
    pub reattach_timeout: Duration,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        let mut o = unsafe { std::mem::zeroed::<ffi::kvpool_connect_options>() };
        unsafe { ffi::kvpool_connect_options_init(&mut o) };
        ConnectOptions {
            runtime_dir: None,
            connect_timeout: Duration::from_millis(o.connect_timeout_ms as u64),
            poll_us: o.poll_us,
            pin_host_pools: o.pin_host_pools != 0,
            reattach: o.reattach != 0,
            reattach_timeout: Duration::from_millis(o.reattach_timeout_ms as u64),
        }
    }
}

struct ClientInner(*mut ffi::kvpool_client);
// kvpool.h: a client may be used from several threads at once.
unsafe impl Send for ClientInner {}
unsafe impl Sync for ClientInner {}
impl Drop for ClientInner {
    fn drop(&mut self) {
        unsafe { ffi::kvpool_client_release(self.0) }
    }
}

/// A connection to kvpoold; cheap to clone, may be shared by threads.
#[derive(Clone)]
pub struct Client {
    inner: Arc<ClientInner>,
}

impl Client {
    /// The C handle, for the crate's other wrappers (the BatchStore).
    pub(crate) fn raw(&self) -> *mut ffi::kvpool_client {
        self.inner.0
    }
}

impl Client {
    /// Attaches to kvpoold `instance` with the default options.
    pub fn connect(instance: &str) -> Result<Client> {
        Client::connect_with(instance, &ConnectOptions::default())
    }

    pub fn connect_with(instance: &str, options: &ConnectOptions) -> Result<Client> {
        let major = crate::abi_version() >> 16;
        if major != ffi::KVPOOL_ABI_VERSION_MAJOR {
            return Err(Error::new(
                ErrorCode::VersionMismatch,
                format!(
                    "libkvpool_c has C ABI {}, this crate speaks {}: rebuild against a matching kvpool",
                    major,
                    ffi::KVPOOL_ABI_VERSION_MAJOR
                ),
            ));
        }
        let instance = cstring(instance, "instance")?;
        let dir = match &options.runtime_dir {
            Some(d) => Some(cstring(d, "runtime_dir")?),
            None => None,
        };
        let mut o = unsafe { std::mem::zeroed::<ffi::kvpool_connect_options>() };
        unsafe { ffi::kvpool_connect_options_init(&mut o) };
        o.connect_timeout_ms = options.connect_timeout.as_millis().min(u32::MAX as u128) as u32;
        o.runtime_dir = dir.as_ref().map_or(ptr::null(), |d| d.as_ptr());
        o.poll_us = options.poll_us;
        o.pin_host_pools = options.pin_host_pools as u32;
        o.reattach = options.reattach as u32;
        o.reattach_timeout_ms = options.reattach_timeout.as_millis().min(u32::MAX as u128) as u32;
        let mut out = ptr::null_mut();
        check(unsafe { ffi::kvpool_connect(instance.as_ptr(), &o, &mut out) })?;
        Ok(Client {
            inner: Arc::new(ClientInner(out)),
        })
    }

    /// The pool called `name` (NotFound otherwise, naming the pools there are).
    pub fn pool(&self, name: &str) -> Result<Pool> {
        let name = cstring(name, "pool name")?;
        let mut out = ptr::null_mut();
        check(unsafe { ffi::kvpool_client_pool(self.inner.0, name.as_ptr(), &mut out) })?;
        let mut layout = ffi::kvpool_layout {
            struct_size: std::mem::size_of::<ffi::kvpool_layout>() as u32,
            ..Default::default()
        };
        let inner = PoolInner {
            ptr: out,
            client: self.clone(),
        };
        check(unsafe { ffi::kvpool_pool_layout(out, &mut layout) })?;
        let storage = match unsafe { ffi::kvpool_pool_storage(out) } {
            1 => Storage::Cuda,
            _ => Storage::Host,
        };
        let name = unsafe { CStr::from_ptr(ffi::kvpool_pool_name(out)) }
            .to_string_lossy()
            .into_owned();
        Ok(Pool {
            inner: Arc::new(inner),
            meta: Arc::new(PoolMeta {
                name,
                layout: Layout::from(layout),
                storage,
            }),
        })
    }

    pub fn pool_names(&self) -> Vec<String> {
        let n = unsafe { ffi::kvpool_client_pool_count(self.inner.0) };
        (0..n)
            .map(|i| {
                let p = unsafe { ffi::kvpool_client_pool_name(self.inner.0, i) };
                unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
            })
            .collect()
    }

    /// A round trip to kvpoold.
    pub fn ping(&self) -> Result<()> {
        check(unsafe { ffi::kvpool_client_ping(self.inner.0) })
    }

    /// Sends queued releases now (else with the next request, or within ~10 ms).
    pub fn flush(&self) {
        unsafe { ffi::kvpool_client_flush(self.inner.0) }
    }

    pub fn daemon_alive(&self) -> bool {
        unsafe { ffi::kvpool_client_daemon_alive(self.inner.0) != 0 }
    }

    pub fn slot(&self) -> u32 {
        unsafe { ffi::kvpool_client_slot(self.inner.0) }
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("slot", &self.slot()).finish()
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("name", &self.meta.name)
            .field("storage", &self.meta.storage)
            .finish()
    }
}

/// Where a match may continue on another host (C++ `PeerFetchOptions`).
#[derive(Clone, Debug)]
pub struct PeerFetchOptions {
    /// The whole fetch; the call returns within about this long.
    pub deadline: Duration,
    /// "host:port" of the holder's kvpool-peer, or "" to look it up.
    pub holder: String,
}

impl Default for PeerFetchOptions {
    fn default() -> Self {
        PeerFetchOptions { deadline: Duration::from_millis(500), holder: String::new() }
    }
}

impl PeerFetchOptions {
    pub(crate) fn raw(&self, holder: &CString) -> ffi::kvpool_peer_fetch_options {
        ffi::kvpool_peer_fetch_options {
            deadline_ms: self.deadline.as_millis().clamp(1, 60_000) as u32,
            holder: holder.as_ptr(),
        }
    }
}

/// How a match looks for the prefix on this host (C++ `MatchOptions`).
#[derive(Clone, Debug, Default)]
pub struct MatchOptions {
    /// Continue the prefix from the pool's disk tier (docs/disk-tier.md) past what host
    /// memory holds: kvpoold reads those blocks into host blocks, verifies each checksum,
    /// registers them and answers with the longest prefix over both tiers once the reads
    /// are done. A block that fails its checksum or its read ends the prefix (a miss, never
    /// a bad block). A pool without a disk tier answers as a plain match.
    pub onboard: bool,
}

impl MatchOptions {
    pub(crate) fn raw(&self) -> ffi::kvpool_match_options {
        ffi::kvpool_match_options {
            struct_size: std::mem::size_of::<ffi::kvpool_match_options>() as u32,
            onboard: self.onboard as u32,
        }
    }
}

pub(crate) fn cstring(s: &str, what: &str) -> Result<CString> {
    CString::new(s).map_err(|_| {
        Error::new(
            ErrorCode::InvalidArgument,
            format!("{} contains a NUL byte", what),
        )
    })
}

/// Where a pool's blocks live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// Shared memory mapped in this process.
    Host,
    /// One GPU's memory: block addresses are device pointers.
    Cuda,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutKind {
    FullyContiguous,
    LayerSeparate,
}

/// The element type of a pool's KV data (the config's `"dtype"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DType {
    Fp16,
    Bf16,
    Fp32,
    Fp8E4M3,
    U8,
}

impl DType {
    fn from_raw(v: u32) -> Option<DType> {
        match v {
            1 => Some(DType::Fp16),
            2 => Some(DType::Bf16),
            3 => Some(DType::Fp32),
            4 => Some(DType::Fp8E4M3),
            5 => Some(DType::U8),
            _ => None,
        }
    }
    /// The config's name: "fp16", "bf16", "fp32", "fp8_e4m3", "u8".
    pub fn name(self) -> &'static str {
        match self {
            DType::Fp16 => "fp16",
            DType::Bf16 => "bf16",
            DType::Fp32 => "fp32",
            DType::Fp8E4M3 => "fp8_e4m3",
            DType::U8 => "u8",
        }
    }
}

/// A pool's KV layout (kvpool_layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub kind: LayoutKind,
    pub num_blocks: u32,
    pub num_layers: u32,
    pub outer_dim: u32,
    pub page_size: u32,
    pub inner_dim: u32,
    pub dtype_bytes: u32,
    pub alignment: u32,
    /// The element type the config named (`None`: it gave dtype_bytes alone).
    pub dtype: Option<DType>,
    /// Bytes of one (layer, outer) region of a block.
    pub region_bytes: u64,
    pub block_bytes: u64,
    pub total_bytes: u64,
}

impl From<ffi::kvpool_layout> for Layout {
    fn from(l: ffi::kvpool_layout) -> Self {
        Layout {
            kind: if l.kind == 1 {
                LayoutKind::LayerSeparate
            } else {
                LayoutKind::FullyContiguous
            },
            num_blocks: l.num_blocks,
            num_layers: l.num_layers,
            outer_dim: l.outer_dim,
            page_size: l.page_size,
            inner_dim: l.inner_dim,
            dtype_bytes: l.dtype_bytes,
            alignment: l.alignment,
            dtype: DType::from_raw(l.dtype),
            region_bytes: l.region_bytes,
            block_bytes: l.block_bytes,
            total_bytes: l.total_bytes,
        }
    }
}

/// Block counts of a pool, a moment old (read from the daemon's control segment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolCounts {
    pub total: u32,
    pub free: u32,
    pub inactive: u32,
    pub active: u32,
    pub mutable: u32,
}

impl PoolCounts {
    /// What allocate can hand out: free blocks plus inactive (evictable) ones; Dynamo's
    /// `inactive.available_blocks()`.
    pub fn available(&self) -> u32 {
        self.free + self.inactive
    }
}

pub(crate) struct PoolInner {
    pub(crate) ptr: *mut ffi::kvpool_pool,
    pub(crate) client: Client,
}
unsafe impl Send for PoolInner {}
unsafe impl Sync for PoolInner {}
impl Drop for PoolInner {
    fn drop(&mut self) {
        unsafe { ffi::kvpool_pool_release(self.ptr) }
    }
}

pub(crate) struct PoolMeta {
    pub(crate) name: String,
    pub(crate) layout: Layout,
    pub(crate) storage: Storage,
}

/// How [`Pool::register_blocks_with`] registers (the C API's kvpool_register_options).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegisterOptions {
    /// Send each block's checksum (XXH3-64 of its bytes): kvpoold can then tell that its
    /// bytes changed. Host pools only.
    pub checksum: bool,
    /// Send each block's token ids, so that KV events carry them (`kvpool-events --format
    /// vllm`: BlockStored.token_ids). Costs page_size * 4 bytes per block.
    pub send_tokens: bool,
}

/// One of kvpoold's pools. Cheap to clone; may be shared by threads.
#[derive(Clone)]
pub struct Pool {
    pub(crate) inner: Arc<PoolInner>,
    pub(crate) meta: Arc<PoolMeta>,
}

impl Pool {
    /// `count` mutable blocks, all or nothing (NotEnoughBlocks otherwise).
    pub fn allocate_blocks(&self, count: u32) -> Result<Vec<MutableBlock>> {
        let mut batch = ptr::null_mut();
        check(unsafe { ffi::kvpool_pool_allocate(self.inner.ptr, count, &mut batch) })?;
        unsafe { MutableBlock::from_batch(batch, &self.meta) }
    }

    /// Registers committed blocks (consumed, whatever the outcome) and returns, per block,
    /// the registered block that now holds its hash (its own, or the one it was
    /// deduplicated onto).
    pub fn register_blocks(&self, blocks: Vec<MutableBlock>) -> Result<Vec<ImmutableBlock>> {
        self.register_blocks_with(blocks, &RegisterOptions::default())
    }

    /// [`Pool::register_blocks`] with options: e.g. `send_tokens`, so that kvpoold's KV
    /// events carry the blocks' token ids.
    pub fn register_blocks_with(
        &self,
        blocks: Vec<MutableBlock>,
        options: &RegisterOptions,
    ) -> Result<Vec<ImmutableBlock>> {
        let raw: Vec<*mut ffi::kvpool_mutable_block> =
            blocks.into_iter().map(MutableBlock::into_raw).collect();
        let o = ffi::kvpool_register_options {
            struct_size: std::mem::size_of::<ffi::kvpool_register_options>() as u32,
            checksum: options.checksum as u32,
            send_tokens: options.send_tokens as u32,
        };
        let mut out = ptr::null_mut();
        check(unsafe {
            ffi::kvpool_pool_register_blocks_with(self.inner.ptr, raw.as_ptr(), raw.len(), &o, &mut out)
        })?;
        unsafe { immutables_from_batch(out, &self.meta) }
    }

    /// The longest prefix of `hashes` the pool holds, one reference each.
    pub fn match_sequence_hashes(&self, hashes: &[u64]) -> Result<Vec<ImmutableBlock>> {
        let mut out = ptr::null_mut();
        check(unsafe { ffi::kvpool_pool_match(self.inner.ptr, hashes.as_ptr(), hashes.len(), &mut out) })?;
        unsafe { immutables_from_batch(out, &self.meta) }
    }

    /// [`Pool::match_sequence_hashes`] with options: `onboard` continues the prefix from the
    /// pool's disk tier.
    pub fn match_sequence_hashes_with(
        &self,
        hashes: &[u64],
        options: &MatchOptions,
    ) -> Result<Vec<ImmutableBlock>> {
        let o = options.raw();
        let mut out = ptr::null_mut();
        check(unsafe {
            ffi::kvpool_pool_match_with(self.inner.ptr, hashes.as_ptr(), hashes.len(), &o, &mut out)
        })?;
        unsafe { immutables_from_batch(out, &self.meta) }
    }

    /// [`Pool::match_sequence_hashes_with`], sent now (hashes copied); completes when
    /// kvpoold answers (with `onboard`, once the disk reads are done).
    pub fn match_sequence_hashes_with_async(&self, hashes: &[u64], options: &MatchOptions) -> MatchFuture {
        MatchFuture::start_with(self, hashes, options)
    }

    /// The longest prefix of `hashes` here and then on another host (the peer tier,
    /// docs/peers.md): what this pool lacks is fetched by this host's kvpool-peer within
    /// `peers.deadline` and registered here. A failure of the peer path is a shorter
    /// prefix, never an error.
    pub fn match_sequence_hashes_with_peers(
        &self,
        hashes: &[u64],
        peers: &PeerFetchOptions,
    ) -> Result<Vec<ImmutableBlock>> {
        let holder = cstring(&peers.holder, "holder")?;
        let o = peers.raw(&holder);
        let mut out = ptr::null_mut();
        check(unsafe {
            ffi::kvpool_pool_match_peers(self.inner.ptr, hashes.as_ptr(), hashes.len(), &o, &mut out)
        })?;
        unsafe { immutables_from_batch(out, &self.meta) }
    }

    /// [`Pool::match_sequence_hashes_with_peers`], sent now; completes when the fetch ends.
    pub fn match_sequence_hashes_with_peers_async(
        &self,
        hashes: &[u64],
        peers: &PeerFetchOptions,
    ) -> MatchFuture {
        MatchFuture::start_with_peers(self, hashes, peers)
    }

    /// Dynamo's name for [`Pool::allocate_blocks`].
    pub fn allocate_blocks_blocking(&self, count: u32) -> Result<Vec<MutableBlock>> {
        self.allocate_blocks(count)
    }
    /// Dynamo's name for [`Pool::register_blocks`].
    pub fn register_blocks_blocking(&self, blocks: Vec<MutableBlock>) -> Result<Vec<ImmutableBlock>> {
        self.register_blocks(blocks)
    }
    /// Dynamo's name for [`Pool::match_sequence_hashes`].
    pub fn match_sequence_hashes_blocking(&self, hashes: &[u64]) -> Result<Vec<ImmutableBlock>> {
        self.match_sequence_hashes(hashes)
    }

    /// Sends the allocate now; the future completes when kvpoold answers (any executor:
    /// the client's completion thread wakes it).
    pub fn allocate_blocks_async(&self, count: u32) -> AllocateFuture {
        AllocateFuture::start(self, count)
    }

    /// Sends the match now (hashes copied); completes when kvpoold answers.
    pub fn match_sequence_hashes_async(&self, hashes: &[u64]) -> MatchFuture {
        MatchFuture::start(self, hashes)
    }

    pub fn name(&self) -> &str {
        &self.meta.name
    }
    pub fn layout(&self) -> &Layout {
        &self.meta.layout
    }
    pub fn page_size(&self) -> u32 {
        self.meta.layout.page_size
    }
    pub fn storage(&self) -> Storage {
        self.meta.storage
    }
    pub fn index(&self) -> u32 {
        unsafe { ffi::kvpool_pool_index(self.inner.ptr) }
    }
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// Device pools: the local CUDA ordinal of the pool's GPU (InvalidState for host pools).
    pub fn cuda_device(&self) -> Result<i32> {
        let mut d = 0;
        check(unsafe { ffi::kvpool_pool_cuda_device(self.inner.ptr, &mut d) })?;
        Ok(d)
    }

    /// How this pool hashes its blocks (what `MutableBlock::commit` uses).
    pub fn hash_scheme(&self) -> HashScheme {
        match unsafe { ffi::kvpool_pool_hash_scheme(self.inner.ptr) } {
            1 => HashScheme::DynamoRouter,
            _ => HashScheme::Dynamo02,
        }
    }

    /// (block hashes, sequence hashes) of the full blocks of `tokens` as this pool hashes
    /// them (its page size and hash scheme): the hashes to match, and the ones `commit`
    /// gives blocks started with the same salt.
    pub fn hash_tokens(&self, tokens: &[u32], salt: u64) -> Result<(Vec<u64>, Vec<u64>)> {
        let n = tokens.len() / self.page_size().max(1) as usize;
        let mut b = vec![0u64; n];
        let mut s = vec![0u64; n];
        let mut blocks = 0usize;
        check(unsafe {
            ffi::kvpool_pool_hash_tokens(
                self.inner.ptr,
                tokens.as_ptr(),
                tokens.len(),
                salt,
                b.as_mut_ptr(),
                s.as_mut_ptr(),
                n,
                &mut blocks,
            )
        })?;
        Ok((b, s))
    }

    /// Block counts, a moment old.
    pub fn counts(&self) -> Result<PoolCounts> {
        let mut c = ffi::kvpool_pool_counts {
            struct_size: std::mem::size_of::<ffi::kvpool_pool_counts>() as u32,
            ..Default::default()
        };
        check(unsafe { ffi::kvpool_pool_counts_get(self.inner.ptr, &mut c) })?;
        Ok(PoolCounts {
            total: c.total,
            free: c.free_blocks,
            inactive: c.inactive,
            active: c.active,
            mutable: c.mutable_blocks,
        })
    }
}
