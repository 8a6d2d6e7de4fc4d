//! A worker in Rust: reuse the prefix other workers computed, add the rest, share it.
//!     cargo run --example worker -- [instance] [runtime_dir]
fn main() -> Result<(), kvpool::Error> {
    let args: Vec<String> = std::env::args().collect();
    let options = kvpool::ConnectOptions { runtime_dir: args.get(2).cloned(), ..Default::default() };
    let client = kvpool::Client::connect_with(args.get(1).map_or("default", |s| s.as_str()), &options)?;
    let pool = client.pool("g2")?;
    let page = pool.page_size() as usize;

    let tokens: Vec<u32> = (1000..1000 + 4 * page as u32).collect(); // the prompt
    let (_, hashes) = pool.hash_tokens(&tokens, 0)?; // as the pool hashes (its scheme)
    let hit = pool.match_sequence_hashes(&hashes)?; // longest prefix already here
    let mut fresh = pool.allocate_blocks((hashes.len() - hit.len()) as u32)?; // all or nothing
    for (k, block) in (hit.len()..).zip(fresh.iter_mut()) {
        match k {
            0 => block.init_sequence(0)?,
            _ => block.init_sequence_with_parent(0, hashes[k - 1])?,
        }
        block.add_tokens(&tokens[k * page..(k + 1) * page])?;
        block.commit()?;
        block.region_mut(0, 0)?.fill(k as u8); // write this block's KV in place
    }
    let shared = pool.register_blocks(fresh)?; // now others match them too
    println!("matched {} of {} blocks, registered {}", hit.len(), hashes.len(), shared.len());
    Ok(()) // dropping `hit` and `shared` releases their references
}
