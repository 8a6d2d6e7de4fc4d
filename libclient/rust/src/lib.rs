//! kvpool: a Rust worker's connection to kvpoold, the host-local KV-cache block manager.
//!
//! The API follows NVIDIA Dynamo's block manager (`BlockPool`), whose semantics kvpool
//! implements across processes:
//!
//! ```no_run
//! let client = kvpool::Client::connect("default")?;
//! let pool = client.pool("g2")?;
//! let mut blocks = pool.allocate_blocks(1)?;            // Vec<MutableBlock>, all or nothing
//! let mut block = blocks.pop().unwrap();
//! block.init_sequence(1337)?;
//! block.add_tokens(&[1, 2, 3, 4])?;                     // page_size tokens
//! block.commit()?;                                      // computes the hashes
//! let hash = block.sequence_hash()?;
//! let shared = pool.register_blocks(vec![block])?;      // Vec<ImmutableBlock>
//! drop(shared);                                         // the reference goes; the block stays matchable
//! let hit = pool.match_sequence_hashes(&[hash])?;       // longest known prefix
//! assert_eq!(hit.len(), 1);
//! # Ok::<(), kvpool::Error>(())
//! ```
//!
//! Every call returns `Result<_, kvpool::Error>` whose `code()` is kvpool's stable error
//! code. Dropping a block releases it (batched and sent without waiting, as in C++).
//! Built over libkvpool_c (`kvpool.h`), std only.

mod batch_store;
mod block;
mod client;
mod error;
mod ffi;
mod future;
mod hash;

pub use batch_store::{BatchCompletion, BatchOp, BatchStore, BatchStoreOptions, KeyResult};
pub use block::{BlockState, ImmutableBlock, MutableBlock};
pub use client::{
    Client, ConnectOptions, PeerFetchOptions, DType, Layout, LayoutKind, MatchOptions, Pool, PoolCounts, RegisterOptions,
    Storage,
};
pub use error::{Error, ErrorCode, Result};
pub use future::{AllocateFuture, MatchFuture};
pub use hash::{block_hash, hash_tokens, hash_tokens_scheme, sequence_hash, HashScheme};

/// Dynamo's names for the hash types.
pub type SequenceHash = u64;
pub type BlockHash = u64;
pub type Token = u32;
pub type Salt = u64;

/// The C ABI version of the loaded libkvpool_c: (major << 16) | minor.
pub fn abi_version() -> u32 {
    unsafe { ffi::kvpool_abi_version() }
}
