//! The crate beyond Dynamo's three tests: errors and their codes, chains across two
//! clients with the bytes, async match, hashing, and kvpoold dying under a client.
mod common;

use common::{block_on, wait_counts, Daemon};
use kvpool::ErrorCode;

#[test]
fn errors_carry_codes_and_messages() {
    let d = match Daemon::start(4) {
        Some(d) => d,
        None => return, // no kvpoold to test against: skipped (said on stderr)
    };
    let client = d.connect();
    let e = client.pool("nosuch").err().unwrap();
    assert_eq!(e.code(), ErrorCode::NotFound);
    assert!(e.message().contains("nosuch"), "{}", e);
    assert!(e.to_string().starts_with("NotFound: "), "{}", e);

    let pool = client.pool("g").unwrap();
    let e = pool.allocate_blocks(5).err().unwrap();
    assert_eq!(e.code(), ErrorCode::NotEnoughBlocks);

    let mut b = pool.allocate_blocks(1).unwrap().pop().unwrap();
    assert_eq!(b.sequence_hash().unwrap_err().code(), ErrorCode::InvalidState);
    b.init_sequence(0).unwrap();
    assert_eq!(b.pop_token().unwrap_err().code(), ErrorCode::BlockEmpty);
    assert_eq!(b.add_tokens(&[1, 2, 3]).unwrap(), 3);
    assert_eq!(b.commit().unwrap_err().code(), ErrorCode::IncompleteBlock);
    assert!(b.state().is_partial());
    let e = pool.register_blocks(vec![b]).err().unwrap();
    assert_eq!(e.code(), ErrorCode::InvalidState);
    // register consumed the block: it went back to the pool
    wait_counts(&pool, "all free", |c| c.free == 4);

    let opts = kvpool::ConnectOptions {
        runtime_dir: Some(d.dir.display().to_string()),
        ..Default::default()
    };
    let e = kvpool::Client::connect_with("nosuch", &opts).err().unwrap();
    assert_eq!(e.code(), ErrorCode::NotFound);
    assert_eq!(ErrorCode::from_raw(10), ErrorCode::DaemonGone);
    assert_eq!(ErrorCode::DaemonGone.name(), "DaemonGone");
    assert_eq!(ErrorCode::from_raw(99), ErrorCode::Unknown(99));
}

#[test]
fn chains_bytes_and_async_across_clients() {
    let d = match Daemon::start(8) {
        Some(d) => d,
        None => return, // no kvpoold to test against: skipped (said on stderr)
    };
    let writer = d.connect();
    let pool = writer.pool("g").unwrap();
    assert_eq!(pool.page_size(), 4);
    assert_eq!(pool.layout().num_blocks, 8);
    assert_eq!(pool.layout().region_bytes, 4 * 8 * 2);
    assert_eq!(pool.layout().dtype, Some(kvpool::DType::Bf16));
    assert_eq!(kvpool::DType::Bf16.name(), "bf16");
    assert_eq!(pool.storage(), kvpool::Storage::Host);
    assert_eq!(pool.cuda_device().unwrap_err().code(), ErrorCode::InvalidState);
    assert_eq!(writer.pool_names(), vec!["g".to_string()]);
    writer.ping().unwrap();
    assert!(writer.daemon_alive());

    let tokens: Vec<u32> = (100..112).collect();
    let (block_hashes, hashes) = kvpool::hash_tokens(&tokens, 4, 7).unwrap();
    assert_eq!(hashes.len(), 3);
    assert_eq!(hashes[0], kvpool::sequence_hash(None, block_hashes[0], 7));
    assert_eq!(
        hashes[1],
        kvpool::sequence_hash(Some(hashes[0]), kvpool::block_hash(&tokens[4..8], 7), 7)
    );

    let mut blocks = pool.allocate_blocks(3).unwrap();
    let mut parent = None;
    for (i, b) in blocks.iter_mut().enumerate() {
        match parent {
            None => b.init_sequence(7).unwrap(),
            Some(p) => b.init_sequence_with_parent(7, p).unwrap(),
        }
        b.add_tokens(&tokens[i * 4..(i + 1) * 4]).unwrap();
        b.commit().unwrap();
        b.set_priority(i as u32);
        assert_eq!(b.priority(), i as u32);
        assert_eq!(b.block_hash().unwrap(), block_hashes[i]);
        assert_eq!(b.sequence_hash().unwrap(), hashes[i]);
        b.region_mut(1, 1).unwrap().fill(i as u8 + 1);
        parent = Some(hashes[i]);
    }
    let shared = pool.register_blocks(blocks).unwrap();
    assert_eq!(shared.len(), 3);

    let reader = d.connect();
    let rpool = reader.pool("g").unwrap();
    let mut query = hashes.clone();
    query.push(12345);
    let hit = block_on(rpool.match_sequence_hashes_async(&query)).unwrap();
    assert_eq!(hit.len(), 3);
    for (i, b) in hit.iter().enumerate() {
        assert_eq!(b.sequence_hash().unwrap(), hashes[i]);
        assert_eq!(b.block_id(), shared[i].block_id());
        assert!(b.region(1, 1).unwrap().iter().all(|&x| x == i as u8 + 1));
        assert!(b.address(2, 0).is_err());
    }
    // A clone keeps the reference past the rest.
    let keep = hit[0].clone();
    drop(hit);
    drop(shared);
    wait_counts(&pool, "two inactive, one still referenced", |c| {
        c.inactive == 2 && c.active == 1
    });
    drop(keep);
    wait_counts(&pool, "three inactive", |c| c.inactive == 3 && c.active == 0);

    let e = block_on(rpool.allocate_blocks_async(100)).err().unwrap();
    assert_eq!(e.code(), ErrorCode::NotEnoughBlocks);
    let more = block_on(rpool.allocate_blocks_async(2)).unwrap();
    assert_eq!(more.len(), 2);
}

#[test]
fn daemon_gone_is_an_error_not_a_hang() {
    let mut d = match Daemon::start(4) {
        Some(d) => d,
        None => return, // no kvpoold to test against: skipped (said on stderr)
    };
    let client = d.connect();
    let pool = client.pool("g").unwrap();
    let held = pool.allocate_blocks(1).unwrap();
    d.kill();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while client.daemon_alive() && std::time::Instant::now() < deadline {
        let _ = client.ping();
    }
    assert!(!client.daemon_alive());
    assert_eq!(client.ping().unwrap_err().code(), ErrorCode::DaemonGone);
    assert_eq!(
        pool.match_sequence_hashes(&[1]).unwrap_err().code(),
        ErrorCode::DaemonGone
    );
    assert_eq!(
        block_on(pool.match_sequence_hashes_async(&[1]))
            .unwrap_err()
            .code(),
        ErrorCode::DaemonGone
    );
    drop(held); // releasing into a dead daemon is harmless
}

#[test]
fn abi_version_matches() {
    assert_eq!(kvpool::abi_version() >> 16, 1);
}

#[test]
fn register_with_send_tokens_registers_like_a_plain_register() {
    let d = match Daemon::start(8) {
        Some(d) => d,
        None => return, // no kvpoold to test against: skipped (said on stderr)
    };
    let client = d.connect();
    let pool = client.pool("g").unwrap();
    let tokens: Vec<u32> = (4_000_000_000..4_000_000_008).collect();
    let (_, hashes) = kvpool::hash_tokens(&tokens, 4, 0).unwrap();
    let mut blocks = pool.allocate_blocks(2).unwrap();
    for (i, b) in blocks.iter_mut().enumerate() {
        if i == 0 {
            b.init_sequence(0).unwrap();
        } else {
            b.init_sequence_with_parent(0, hashes[0]).unwrap();
        }
        b.add_tokens(&tokens[i * 4..(i + 1) * 4]).unwrap();
        b.commit().unwrap();
    }
    let options = kvpool::RegisterOptions { send_tokens: true, ..Default::default() };
    assert!(!kvpool::RegisterOptions::default().send_tokens);
    let shared = pool.register_blocks_with(blocks, &options).unwrap();
    assert_eq!(shared.len(), 2);
    let hit = pool.match_sequence_hashes(&hashes).unwrap();
    assert_eq!(hit.len(), 2);
}

/// Hashing comes from the pool (issue 27): on pools of either scheme, `Pool::hash_tokens`
/// gives the hashes `commit` gives, so a prompt registered block by block matches whole; the
/// free dynamo-0.2 `hash_tokens` agrees with a dynamo-router pool on the first block only.
#[test]
fn a_pool_hashes_tokens_with_its_own_scheme() {
    for (scheme, want) in [
        ("dynamo-0.2", kvpool::HashScheme::Dynamo02),
        ("dynamo-router", kvpool::HashScheme::DynamoRouter),
    ] {
        let d = match Daemon::start_with_scheme(8, scheme) {
            Some(d) => d,
            None => return,
        };
        let c = d.connect();
        let pool = c.pool("g").unwrap();
        assert_eq!(pool.hash_scheme(), want);
        assert_eq!(want.name(), scheme);
        let page = pool.page_size() as usize;
        let tokens: Vec<u32> = (500..500 + 4 * page as u32).collect();
        let salt = 9;
        let (blocks, seqs) = pool.hash_tokens(&tokens, salt).unwrap();
        assert_eq!(
            (blocks.clone(), seqs.clone()),
            kvpool::hash_tokens_scheme(want, &tokens, page as u32, salt).unwrap()
        );
        let (_, free) = kvpool::hash_tokens(&tokens, page as u32, salt).unwrap();
        assert_eq!(free[0], seqs[0]);
        assert_eq!(free[1] == seqs[1], want == kvpool::HashScheme::Dynamo02);
        let mut fresh = pool.allocate_blocks(4).unwrap();
        for (k, b) in fresh.iter_mut().enumerate() {
            match k {
                0 => b.init_sequence(salt).unwrap(),
                _ => b.init_sequence_with_parent(salt, seqs[k - 1]).unwrap(),
            }
            b.add_tokens(&tokens[k * page..(k + 1) * page]).unwrap();
            b.commit().unwrap();
            assert_eq!(b.sequence_hash().unwrap(), seqs[k]);
        }
        let shared = pool.register_blocks(fresh).unwrap();
        assert_eq!(pool.match_sequence_hashes(&seqs).unwrap().len(), 4);
        drop(shared);
    }
}

/// Issue 27 item 8: with reattach on (the default), a client whose kvpoold is gone gets
/// `DaemonGone` from each call (a cache miss for the engine, never a stalled step: each call
/// waits at most `reattach_timeout`, 50 ms by default), and reattaches on its own once a
/// kvpoold serves the instance again.
#[test]
fn a_dead_daemon_fails_each_call_and_the_client_reattaches_when_one_is_back() {
    let mut d = match Daemon::start(8) {
        Some(d) => d,
        None => return, // no kvpoold to test against: skipped (said on stderr)
    };
    let o = kvpool::ConnectOptions {
        runtime_dir: Some(d.dir.display().to_string()),
        connect_timeout: std::time::Duration::from_secs(10),
        ..Default::default()
    };
    assert!(o.reattach, "reattach is on by default");
    let client = kvpool::Client::connect_with(&d.instance, &o).expect("connect");
    let pool = client.pool("g").unwrap();
    drop(pool.allocate_blocks(1).unwrap());
    d.kill();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while client.ping().is_ok() {
        assert!(std::time::Instant::now() < deadline, "calls still succeed 10 s after kill -9");
    }
    for _ in 0..20 {
        assert_eq!(
            pool.match_sequence_hashes(&[1]).unwrap_err().code(),
            ErrorCode::DaemonGone
        );
    }
    d.spawn();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while client.ping().is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "no reattach within 10 s of the new kvpoold"
        );
    }
    let again = client.pool("g").unwrap();
    assert_eq!(again.allocate_blocks(2).unwrap().len(), 2);
}

#[test]
fn onboard_continues_a_match_from_the_disk_tier() {
    // A slot file on the real file system (/var/tmp: not a tmpfs), removed at the end.
    let dir = std::env::temp_dir().join(format!("kvpool-rs-disk-{}", std::process::id()));
    let dir = if std::path::Path::new("/var/tmp").is_dir() {
        std::path::PathBuf::from("/var/tmp").join(dir.file_name().unwrap())
    } else {
        dir
    };
    std::fs::create_dir_all(&dir).unwrap();
    let slots = dir.join("g.slots");
    let d = match Daemon::start_pools(&format!(
        r#"[{{"name": "g", "num_blocks": 16, "layout":
           {{"num_layers": 2, "outer_dim": 2, "page_size": 4, "inner_dim": 8, "dtype": "bf16",
             "alignment": 64}}, "disk": {{"path": "{}", "num_blocks": 64}}}}]"#,
        slots.display()
    )) {
        Some(d) => d,
        None => return,
    };
    let client = d.connect();
    let pool = client.pool("g").unwrap();
    let tokens: Vec<u32> = (500..512).collect();
    let (_, hashes) = pool.hash_tokens(&tokens, 3).unwrap();
    let mut blocks = pool.allocate_blocks(3).unwrap();
    for (i, b) in blocks.iter_mut().enumerate() {
        match i {
            0 => b.init_sequence(3).unwrap(),
            _ => b.init_sequence_with_parent(3, hashes[i - 1]).unwrap(),
        }
        b.add_tokens(&tokens[i * 4..(i + 1) * 4]).unwrap();
        b.commit().unwrap();
        b.region_mut(1, 0).unwrap().fill(40 + i as u8);
    }
    drop(pool.register_blocks(blocks).unwrap());
    // Out of host memory: every evictable block taken by an allocate, until a plain match
    // finds none of them (the disk tier holds each block until its write is durable).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let c = pool.counts().unwrap();
        drop(pool.allocate_blocks(c.free + c.inactive));
        if pool.match_sequence_hashes(&hashes).unwrap().is_empty() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the blocks never left host memory");
        client.ping().unwrap();
    }
    let onboard = kvpool::MatchOptions { onboard: true };
    let hit = pool.match_sequence_hashes_with(&hashes, &onboard).unwrap();
    assert_eq!(hit.len(), 3);
    for (i, b) in hit.iter().enumerate() {
        assert_eq!(b.sequence_hash().unwrap(), hashes[i]);
        assert!(b.region(1, 0).unwrap().iter().all(|&x| x == 40 + i as u8));
    }
    drop(hit);
    let again = block_on(pool.match_sequence_hashes_with_async(&hashes, &onboard)).unwrap();
    assert_eq!(again.len(), 3);
    drop(again);
    drop(d);
    let _ = std::fs::remove_dir_all(&dir);
}
