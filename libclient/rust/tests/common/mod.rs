//! A real kvpoold for the crate's tests (path in $KVPOOLD, which ctest sets): a JSON config
//! with a unique instance in a fresh runtime dir, NOTIFY_SOCKET to learn READY=1, every wait
//! bounded by a deadline on a condition. Plus a minimal executor for the async forms (std
//! only: a waker that unparks the waiting thread).
#![allow(dead_code)]

use std::future::Future;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// The kvpoold to test against: $KVPOOLD, else `kvpoold` on PATH, else the kvpool build
/// beside this crate (../../build/daemon/kvpoold).
fn find_kvpoold() -> Option<PathBuf> {
    if let Ok(k) = std::env::var("KVPOOLD") {
        return Some(PathBuf::from(k));
    }
    if let Some(paths) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&paths) {
            let k = dir.join("kvpoold");
            if k.is_file() {
                return Some(k);
            }
        }
    }
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../build/daemon/kvpoold");
    if built.is_file() {
        Some(built)
    } else {
        None
    }
}

pub struct Daemon {
    pub dir: PathBuf,
    pub instance: String,
    kvpoold: PathBuf,
    child: Option<Child>,
}

impl Daemon {
    /// kvpoold with one host pool "g" of `blocks` blocks, page size 4 (Dynamo's test layout);
    /// None, said on stderr, when no kvpoold binary is found (the test is then skipped).
    pub fn start(blocks: u32) -> Option<Daemon> {
        Self::start_with_scheme(blocks, "dynamo-0.2")
    }

    /// The same with the pool's "hash_scheme".
    pub fn start_with_scheme(blocks: u32, scheme: &str) -> Option<Daemon> {
        Daemon::start_pools(&format!(
            r#"[{{"name": "g", "num_blocks": {}, "hash_scheme": "{}", "layout":
               {{"num_layers": 2, "outer_dim": 2, "page_size": 4, "inner_dim": 8, "dtype": "bf16",
                 "alignment": 64}}}}]"#,
            blocks, scheme
        ))
    }

    /// kvpoold with the pools of `pools` (a JSON array of pool objects); None as `start`.
    pub fn start_pools(pools: &str) -> Option<Daemon> {
        let kvpoold = match find_kvpoold() {
            Some(k) => k,
            None => {
                eprintln!(
                    "SKIPPED: no kvpoold (set KVPOOLD, put kvpoold on PATH, or build kvpool in \
                     ../../build beside this crate)"
                );
                return None;
            }
        };
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let instance = format!("rs{}-{}", std::process::id(), n);
        let dir = std::env::temp_dir().join(format!("kvpool-rs-{}", instance));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let config = format!(
            r#"{{"instance": "{}", "runtime_dir": "{}", "max_clients": 16, "poll_us": 20,
               "uid_share_percent": 100, "log_level": "warn", "pools": {}}}"#,
            instance,
            dir.display(),
            pools
        );
        let config_path = dir.join("kvpoold.json");
        std::fs::write(&config_path, config).unwrap();
        let mut d = Daemon {
            dir,
            instance,
            kvpoold,
            child: None,
        };
        d.spawn();
        Some(d)
    }

    /// Starts kvpoold on this instance's config (again, after `kill`) and waits for READY=1.
    pub fn spawn(&mut self) {
        let config_path = self.dir.join("kvpoold.json");
        let notify = self.dir.join("notify");
        let _ = std::fs::remove_file(&notify);
        let sock = UnixDatagram::bind(&notify).unwrap();
        let kvpoold = &self.kvpoold;
        let mut child = Command::new(kvpoold)
            .arg("--config")
            .arg(&config_path)
            .env("NOTIFY_SOCKET", &notify)
            .env_remove("RUNTIME_DIRECTORY")
            .env_remove("WATCHDOG_USEC")
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {}", kvpoold.display(), e));
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut buf = [0u8; 4096];
        loop {
            if let Ok(Some(st)) = child.try_wait() {
                panic!("kvpoold exited ({}) before READY=1", st);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let _ = child.kill();
                panic!("kvpoold did not send READY=1 within 10 s");
            }
            // Bounded so that an exited kvpoold is noticed.
            sock.set_read_timeout(Some(left.min(Duration::from_millis(100))))
                .unwrap();
            if let Ok(n) = sock.recv(&mut buf) {
                if String::from_utf8_lossy(&buf[..n]).lines().any(|l| l == "READY=1") {
                    break;
                }
            }
        }
        self.child = Some(child);
    }

    pub fn connect(&self) -> kvpool::Client {
        let o = kvpool::ConnectOptions {
            runtime_dir: Some(self.dir.display().to_string()),
            connect_timeout: Duration::from_secs(10),
            poll_us: 20,
            // These tests kill the daemon and assert what calls say while none runs.
            reattach: false,
            ..Default::default()
        };
        kvpool::Client::connect_with(&self.instance, &o).expect("connect")
    }

    /// SIGKILL (std has no SIGTERM) and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
        // A killed daemon leaves its segments behind.
        let prefix = format!("kvpool.{}.", self.instance);
        if let Ok(entries) = std::fs::read_dir("/dev/shm") {
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().starts_with(&prefix) {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Waits (bounded) until `pred` holds on the pool's counts; releases are batched, so the
/// daemon applies them a moment after the drop. Each try flushes and pings (a round trip).
pub fn wait_counts(
    pool: &kvpool::Pool,
    what: &str,
    pred: impl Fn(&kvpool::PoolCounts) -> bool,
) -> kvpool::PoolCounts {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        pool.client().flush();
        let c = pool.counts().expect("counts");
        if pred(&c) {
            return c;
        }
        if Instant::now() > deadline {
            panic!("timed out after 10 s waiting for {}; seen {:?}", what, c);
        }
        pool.client().ping().expect("ping");
    }
}

struct ThreadWaker(std::thread::Thread);
impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs a future to completion on this thread (bounded: panics after 10 s).
pub fn block_on<F: Future>(fut: F) -> F::Output {
    let mut fut = Box::pin(fut);
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "future did not complete within 10 s");
        std::thread::park_timeout(left);
    }
}
