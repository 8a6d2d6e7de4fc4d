//! Dynamo-compatible hashing (no daemon needed). To match a pool's blocks hash as the pool
//! does: `Pool::hash_tokens`, or `hash_tokens_scheme(pool.hash_scheme(), ...)`. The free
//! `sequence_hash` and `hash_tokens` are the dynamo-0.2 scheme.

use crate::error::{check, Result};
use crate::ffi;

/// XXH3-64 of the tokens (little-endian u32) seeded with salt.
pub fn block_hash(tokens: &[u32], salt: u64) -> u64 {
    unsafe { ffi::kvpool_block_hash(tokens.as_ptr(), tokens.len(), salt) }
}

/// dynamo-0.2: a block's hash in the context of its prefix (the block hash itself without a
/// parent; else XXH3-64 of {parent, block_hash} seeded with salt).
pub fn sequence_hash(parent: Option<u64>, block_hash: u64, salt: u64) -> u64 {
    unsafe { ffi::kvpool_sequence_hash(parent.is_some() as i32, parent.unwrap_or(0), block_hash, salt) }
}

/// How a pool hashes its blocks (kvpoold's "hash_scheme").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HashScheme {
    /// "dynamo-0.2": the chain seed is the salt.
    Dynamo02 = 0,
    /// "dynamo-router": the chain seed is always 1337 (the salt seeds the blocks).
    DynamoRouter = 1,
}

impl HashScheme {
    pub fn name(self) -> &'static str {
        match self {
            HashScheme::Dynamo02 => "dynamo-0.2",
            HashScheme::DynamoRouter => "dynamo-router",
        }
    }
}

/// dynamo-0.2: (block hashes, sequence hashes) of the full blocks of `tokens`; a partial
/// tail is not hashed.
pub fn hash_tokens(tokens: &[u32], page_size: u32, salt: u64) -> Result<(Vec<u64>, Vec<u64>)> {
    hash_tokens_scheme(HashScheme::Dynamo02, tokens, page_size, salt)
}

/// `hash_tokens` in the given scheme.
pub fn hash_tokens_scheme(
    scheme: HashScheme,
    tokens: &[u32],
    page_size: u32,
    salt: u64,
) -> Result<(Vec<u64>, Vec<u64>)> {
    let n = if page_size == 0 {
        0
    } else {
        tokens.len() / page_size as usize
    };
    let mut b = vec![0u64; n];
    let mut s = vec![0u64; n];
    let mut blocks = 0usize;
    check(unsafe {
        ffi::kvpool_hash_tokens_scheme(
            scheme as i32,
            tokens.as_ptr(),
            tokens.len(),
            page_size,
            salt,
            b.as_mut_ptr(),
            s.as_mut_ptr(),
            n,
            &mut blocks,
        )
    })?;
    Ok((b, s))
}
