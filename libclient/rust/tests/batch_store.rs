//! The batch store (opaque keys, kvpool.h 1.2) from Rust against a real kvpoold: set, exists,
//! get (exact bytes), exists_prefix, delete, the eventfd, a dead daemon's completion.

mod common;

use common::Daemon;
use kvpool::{BatchOp, BatchStore, BatchStoreOptions, ErrorCode, KeyResult};

// Blocks of 576 bytes of header and key room plus 2048 of value.
const POOLS: &str = r#"[{"name": "kv", "num_blocks": 16, "layout": {"num_layers": 1,
    "outer_dim": 1, "page_size": 1, "inner_dim": 2624, "dtype_bytes": 1, "alignment": 64}}]"#;

#[test]
fn set_get_exists_delete() {
    let d = match Daemon::start_pools(POOLS) {
        Some(d) => d,
        None => return, // no kvpoold to test against: skipped (said on stderr)
    };
    let c = d.connect();
    let mut s = BatchStore::open(&c, "kv", &BatchStoreOptions::default()).unwrap();
    assert_eq!(s.value_capacity(), 2048);
    let a: Vec<u8> = (0..2048u32).map(|i| (i * 7) as u8).collect();
    let b: Vec<u8> = (0..1000u32).map(|i| (i * 13 + 1) as u8).collect();
    let keys: [&[u8]; 2] = [b"vllm\x00\x00\x00\x01", b"sglang-page"];
    let done = s.set(&keys, &[&a, &b]).unwrap();
    assert!(done.error.is_none());
    assert_eq!(done.hits(), vec![true, true]);

    let mut out_a = vec![0u8; 2048];
    let mut out_b = vec![0u8; 2048];
    let mut out_c = vec![0u8; 16];
    let ask: [&[u8]; 3] = [keys[0], keys[1], b"never"];
    let got = s.get(&ask, &mut [&mut out_a, &mut out_b, &mut out_c]).unwrap();
    assert_eq!(got.results, vec![KeyResult::Ok, KeyResult::Ok, KeyResult::Miss]);
    assert_eq!(got.value_sizes, vec![2048, 1000, 0]);
    assert_eq!(out_a, a);
    assert_eq!(&out_b[..1000], &b[..]);

    let id = s
        .submit(BatchOp::ExistsPrefix, &[keys[0], keys[1], b"never"])
        .unwrap();
    assert_eq!(s.wait(id, std::time::Duration::from_secs(20)).unwrap().prefix, 2);
    let id = s.submit(BatchOp::Delete, &[keys[1]]).unwrap();
    assert_eq!(
        s.wait(id, std::time::Duration::from_secs(20)).unwrap().hits(),
        vec![true]
    );

    // The eventfd says when next() has something.
    let id = s.submit(BatchOp::Exists, &keys).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let c2 = loop {
        let mut fds = [libc_pollfd(s.event_fd())];
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        assert!(!left.is_zero(), "no completion within 20 s");
        unsafe { poll(fds.as_mut_ptr(), 1, left.as_millis() as i32) };
        if let Some(c) = s.next() {
            break c;
        }
    };
    assert_eq!(c2.id, id);
    assert_eq!(c2.hits(), vec![true, false]);
    assert!(s.next().is_none());
}

#[test]
fn dead_daemon_completes_with_an_error() {
    let mut d = match Daemon::start_pools(POOLS) {
        Some(d) => d,
        None => return, // no kvpoold to test against: skipped (said on stderr)
    };
    let c = d.connect();
    let mut s = BatchStore::open(&c, "kv", &BatchStoreOptions::default()).unwrap();
    d.kill();
    let id = s.submit(BatchOp::Exists, &[b"x"]).unwrap();
    let done = s.wait(id, std::time::Duration::from_secs(20)).unwrap();
    assert_eq!(done.error.unwrap().code(), ErrorCode::DaemonGone);
    assert_eq!(done.results, vec![KeyResult::Failed]);
}

#[repr(C)]
struct PollFd {
    fd: i32,
    events: i16,
    revents: i16,
}
fn libc_pollfd(fd: i32) -> PollFd {
    PollFd {
        fd,
        events: 1,
        revents: 0,
    } // POLLIN
}
extern "C" {
    fn poll(fds: *mut PollFd, nfds: u64, timeout: i32) -> i32;
}
