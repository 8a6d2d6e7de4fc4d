//! Dynamo-compatible hashing (no daemon needed).

use crate::error::{check, Result};
use crate::ffi;

/// XXH3-64 of the tokens (little-endian u32) seeded with salt.
pub fn block_hash(tokens: &[u32], salt: u64) -> u64 {
    unsafe { ffi::kvpool_block_hash(tokens.as_ptr(), tokens.len(), salt) }
}

/// A block's hash in the context of its prefix: the block hash itself without a parent.
pub fn sequence_hash(parent: Option<u64>, block_hash: u64, salt: u64) -> u64 {
    unsafe { ffi::kvpool_sequence_hash(parent.is_some() as i32, parent.unwrap_or(0), block_hash, salt) }
}

/// (block hashes, sequence hashes) of the full blocks of `tokens`; a partial tail is not hashed.
pub fn hash_tokens(tokens: &[u32], page_size: u32, salt: u64) -> Result<(Vec<u64>, Vec<u64>)> {
    let n = if page_size == 0 {
        0
    } else {
        tokens.len() / page_size as usize
    };
    let mut b = vec![0u64; n];
    let mut s = vec![0u64; n];
    let mut blocks = 0usize;
    check(unsafe {
        ffi::kvpool_hash_tokens(
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
