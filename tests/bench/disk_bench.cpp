// The disk tier's speed (issue 28): offload (write-behind) and onboard GB/s through the real
// DiskTier and its io_uring path, against fio --direct=1 run by this program on the same file
// system in the same run (the limit; target >= 80% of it); the latency of onboarding a
// 64-block prefix with the disk otherwise idle; and another client's host-only match
// p50/p99 through a real kvpoold while write-behind keeps its disk busy, against the same
// with the disk idle.
//   ./build/tests/bench/kvpool_disk_bench [--dir /var/tmp] [--block-kib 256] [--blocks 2048]
//       [--samples 2000] [--seconds 5] [--quick]
// Figures only, no thresholds. --dir must not be a tmpfs (the program says what it is).
#include <poll.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/disk/disk_tier.hpp"
#include "daemon/disk/slot_format.hpp"
#include "daemon/disk/tier_sink.hpp"
#include "kvpool/client.hpp"
#include "kvpool/core/layout.hpp"
#include "kvpool/shm/handshake.hpp"
#include "support/daemon_process.hpp"

using namespace kvpool;
using namespace kvpool::daemon;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

constexpr uint32_t kClient = 0;
constexpr uint32_t kTierOwner = 1;
constexpr uint32_t kPrefix = 64;  // blocks per onboard, as an engine's 1k-token prompt

struct Args {
  std::string dir = "/var/tmp";
  uint32_t block_kib = 256;
  uint32_t blocks = 2048;
  int samples = 2000;
  int seconds = 5;
  int gap_us = 200;
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "kvpool_disk_bench: %s\n", what.c_str());
  std::exit(1);
}

double secs(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

// 2 layers x K,V x 16 tokens x inner x 2 bytes: block_kib KiB, 4 KiB aligned regions.
LayoutConfig bench_layout(uint32_t num_blocks, uint32_t block_kib) {
  return LayoutConfig{
      num_blocks, 2, 2, 16, block_kib * 1024 / 128, 2, 4096, LayoutKind::kFullyContiguous};
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// A host pool in this process (its bytes and a pool core) with a disk tier over `file`.
struct TieredPool {
  TieredPool(const LayoutConfig& lc, const std::string& file, uint64_t slots)
      : layout(*Layout::create(lc)) {
    bytes.reset(static_cast<std::byte*>(std::aligned_alloc(4096, layout.total_bytes())));
    std::memset(bytes.get(), 0x5a, layout.total_bytes());  // touched: no page faults timed
    pool::PoolCoreConfig cc{lc.num_blocks, 2, 0};
    const size_t ab = (*pool::PoolCore::arena_bytes(cc) + 63) / 64 * 64;
    arena.reset(std::aligned_alloc(64, ab));
    core = *pool::PoolCore::create(arena.get(), ab, cc, 0, "bench");
    disk::DiskTierSetup s;
    s.pool = "bench";
    s.instance = "bench";
    s.config.enabled = true;
    s.config.path = file;
    s.config.num_blocks = slots;
    s.layout = lc;
    s.host_base = bytes.get();
    s.owner = kTierOwner;
    auto t = disk::DiskTier::open(s, core);
    if (!t) die("disk tier: " + t.status().message());
    tier = std::move(t.value());
    sink = std::make_unique<disk::TierSink>(nullptr, std::vector<disk::DiskTier*>{tier.get()});
    core.set_event_sink(sink.get());
    tier->set_onboard_done([this](uint64_t, std::span<const uint64_t> good) {
      onboarded += good.size();
      ++onboards_done;
    });
  }
  ~TieredPool() {
    tier.reset();
    core.set_event_sink(nullptr);
  }
  // One pass of the engine's epoll loop for the tier: waits up to 1 s for completions.
  void reap() {
    pollfd p{tier->event_fd(), POLLIN, 0};
    ::poll(&p, 1, 1000);
    timed([&] { tier->on_io_ready(); });
  }
  // What the tier costs the engine thread: its calls (pump, completions) timed.
  template <typename F>
  void timed(F&& f) {
    const auto t0 = Clock::now();
    f();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    engine_ms += ms;
    engine_max_ms = std::max(engine_max_ms, ms);
  }
  // Registers blocks [first, first + n) of one chain and drops the client's references.
  void register_range(uint64_t first, uint32_t n) {
    std::vector<pool::BlockRef> blocks(n), out(n);
    if (!core.allocate(kClient, n, blocks.data()).is_ok()) die("allocate");
    std::vector<pool::RegisterItem> items;
    for (uint32_t i = 0; i < n; ++i) {
      const uint64_t h = first + i + 1;
      items.push_back({blocks[i], h, h * 3, h - 1, 0, h > 1});
    }
    if (!core.register_blocks(kClient, items, out.data()).is_ok()) die("register");
    timed([&] { tier->pump(); });
    uint32_t rej = 0;
    (void)core.release_immutable(kClient, out, &rej);
  }

  Layout layout;
  std::unique_ptr<std::byte, FreeDeleter> bytes;
  std::unique_ptr<void, FreeDeleter> arena;
  pool::PoolCore core;
  std::unique_ptr<disk::DiskTier> tier;
  std::unique_ptr<disk::TierSink> sink;
  uint64_t onboarded = 0;
  uint64_t onboards_done = 0;
  double engine_ms = 0, engine_max_ms = 0;
};

// ---- fio, the limit -------------------------------------------------------------------

struct FioResult {
  double gbps = 0;
  std::string error;
};

FioResult run_fio(const std::string& file, const std::string& rw, uint64_t bs, uint64_t bytes,
                  uint32_t depth, bool dsync) {
  std::string cmd = "fio --output-format=json --name=limit --filename=" + file + " --rw=" + rw +
                    " --bs=" + std::to_string(bs) + " --size=" + std::to_string(bytes) +
                    " --direct=1 --ioengine=io_uring" + " --iodepth=" + std::to_string(depth) +
                    " --fallocate=posix" + (dsync ? " --sync=dsync" : "") + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return {0, "popen failed"};
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  const int rc = ::pclose(p);
  FioResult r;
  try {
    const size_t brace = out.find('{');
    auto j = nlohmann::json::parse(out.substr(brace == std::string::npos ? 0 : brace));
    const auto& side = j["jobs"][0][rw.find("read") != std::string::npos ? "read" : "write"];
    r.gbps = side["bw_bytes"].get<double>() / 1e9;
  } catch (const std::exception& e) {
    r.error = "fio (exit " + std::to_string(rc) + "): " + out.substr(0, 300);
  }
  return r;
}

// ---- offload and onboard through DiskTier ---------------------------------------------

struct TierFigures {
  double offload_gbps = 0, onboard_gbps = 0;
  uint64_t drops = 0, write_skipped = 0, checksum_failures = 0, io_errors = 0;
  std::vector<double> onboard_ms;  // one 64-block prefix at a time
  bool direct = false;
  std::string engine;
  uint32_t write_depth = 0;
  double offload_engine_pct = 0, offload_engine_max_ms = 0;  // the tier's calls, engine side
  double onboard_engine_pct = 0, onboard_engine_max_ms = 0;
};

TierFigures measure_tier(const Args& a, const std::string& file) {
  TierFigures f;
  const LayoutConfig lc = bench_layout(a.blocks, a.block_kib);
  {
    // Offload: register in batches of 64, as engines do, keeping the write queue fed but
    // never over its cap (a full queue drops; the figure is what the disk path sustains).
    TieredPool tp(lc, file, a.blocks);
    f.direct = tp.tier->direct();
    f.engine = tp.tier->io_name();
    f.write_depth = static_cast<uint32_t>(kDefaultDiskInflightBytes / tp.tier->slot_bytes());
    // The tier's queue cap (disk_tier.cpp: 4x the writes in flight, at least 64, at most a
    // quarter of the host pool); a batch goes in only when it fits whole.
    const size_t cap = std::min<size_t>(std::max<size_t>(f.write_depth * 4, 64),
                                        std::max<size_t>(a.blocks / 4, 16));
    const auto t0 = Clock::now();
    for (uint32_t done = 0; done < a.blocks; done += kPrefix) {
      const uint32_t n = std::min(kPrefix, a.blocks - done);
      const auto& s = tp.tier->stats();
      while (done - s.blocks_written - s.write_queue_drops - s.write_skipped + n > cap) tp.reap();
      tp.register_range(done, n);
    }
    while (!tp.tier->idle()) tp.reap();
    const double t = secs(t0, Clock::now());
    const auto& s = tp.tier->stats();
    f.offload_gbps = static_cast<double>(s.bytes_written) / t / 1e9;
    f.offload_engine_pct = 100 * tp.engine_ms / (t * 1e3);
    f.offload_engine_max_ms = tp.engine_max_ms;
    f.drops = s.write_queue_drops;
    f.write_skipped = s.write_skipped;
    f.io_errors = s.io_errors;
  }
  {
    // Onboard throughput: a fresh host pool (a restarted daemon: the index rebuilt from the
    // file), 4 prefixes of 64 in flight at once.
    TieredPool tp(lc, file, a.blocks);
    const uint32_t prefixes = a.blocks / kPrefix;
    std::vector<uint64_t> hashes(a.blocks);
    for (uint32_t i = 0; i < a.blocks; ++i) hashes[i] = i + 1;
    const auto t0 = Clock::now();
    uint32_t next = 0;
    while (tp.onboards_done < prefixes) {
      while (next < prefixes && next - tp.onboards_done < 4) {
        bool ok = false;
        tp.timed([&] {
          ok = tp.tier->start_onboard(next, std::span(hashes).subspan(next * kPrefix, kPrefix),
                                      kPrefix);
        });
        if (!ok) die("onboard could not start");
        ++next;
      }
      tp.reap();
    }
    const double t = secs(t0, Clock::now());
    f.onboard_gbps = static_cast<double>(tp.tier->stats().bytes_read) / t / 1e9;
    f.onboard_engine_pct = 100 * tp.engine_ms / (t * 1e3);
    f.onboard_engine_max_ms = tp.engine_max_ms;
    f.checksum_failures = tp.tier->stats().checksum_failures;
    f.io_errors += tp.tier->stats().io_errors;
    if (tp.onboarded != a.blocks)
      die("onboarded " + std::to_string(tp.onboarded) + " of " + std::to_string(a.blocks));
  }
  {
    // Latency: one 64-block prefix at a time, the disk otherwise idle (fresh host memory).
    TieredPool tp(lc, file, a.blocks);
    std::vector<uint64_t> hashes(a.blocks);
    for (uint32_t i = 0; i < a.blocks; ++i) hashes[i] = i + 1;
    for (uint32_t p = 0; p < a.blocks / kPrefix; ++p) {
      const uint64_t before = tp.onboards_done;
      const auto t0 = Clock::now();
      if (!tp.tier->start_onboard(p, std::span(hashes).subspan(p * kPrefix, kPrefix), kPrefix))
        die("onboard could not start");
      while (tp.onboards_done == before) tp.reap();
      f.onboard_ms.push_back(secs(t0, Clock::now()) * 1e3);
    }
  }
  return f;
}

// ---- another client's match while write-behind runs flat out ---------------------------

struct MatchFigures {
  double p50_idle = 0, p99_idle = 0;
  double p50_nodisk = 0, p99_nodisk = 0;  // the same writer into a pool without a disk tier
  double p50_busy = 0, p99_busy = 0;
  double busy_write_gbps = 0;
  uint64_t busy_drops = 0;
};

Client connect(const testsupport::DaemonProcess& d) {
  ConnectOptions o;
  o.runtime_dir = d.runtime_dir();
  o.connect_timeout = 10s;
  auto c = Client::connect(d.instance(), o);
  if (!c) die("connect: " + c.status().to_string());
  return std::move(c.value());
}

// Registers `n` blocks of chain `seed` (no bytes written: the disk does not care).
std::vector<ImmutableBlock> register_chain(Pool& pool, uint64_t seed, uint32_t n) {
  auto blocks = pool.allocate_blocks(n);
  if (!blocks) die("allocate: " + blocks.status().to_string());
  std::vector<Token> tokens(16);
  std::optional<SequenceHash> parent;
  for (uint32_t i = 0; i < n; ++i) {
    MutableBlock& b = (*blocks)[i];
    for (uint32_t t = 0; t < 16; ++t) tokens[t] = static_cast<Token>(seed * 1'000'003 + i * 16 + t);
    (void)b.init_sequence(7, parent);
    (void)b.add_tokens(tokens);
    (void)b.commit();
    parent = *b.sequence_hash();
  }
  auto imm = pool.register_blocks(std::move(*blocks));
  if (!imm) die("register: " + imm.status().to_string());
  return std::move(*imm);
}

MatchFigures measure_match(const Args& a, const std::string& file) {
  const LayoutConfig lc = bench_layout(1024, a.block_kib);
  nlohmann::json layout = {
      {"num_layers", lc.num_layers}, {"outer_dim", lc.outer_dim}, {"page_size", lc.page_size},
      {"inner_dim", lc.inner_dim},   {"dtype_bytes", 2},          {"alignment", 4096}};
  auto cfg = testsupport::test_config(nlohmann::json::array(
      {{{"name", "g"},
        {"num_blocks", lc.num_blocks},
        {"layout", layout},
        {"disk", {{"path", file}, {"num_blocks", a.blocks}, {"direct_io", "on"}}}},
       {{"name", "h"}, {"num_blocks", lc.num_blocks}, {"layout", layout}}}));
  cfg["log_level"] = "warn";
  cfg["uid_share_percent"] = 100;
  testsupport::DaemonProcess d(cfg);
  d.start(30s);
  auto view = shm::observe(d.instance(), d.runtime_dir());
  if (!view) die("observe: " + view.status().to_string());
  const shm::DiskTierInfo* disk = view->registry(0).disk_info();
  if (disk == nullptr) die("the daemon publishes no disk tier");
  Client victim = connect(d);
  auto vpool = victim.pool("g");
  if (!vpool) die("pool: " + vpool.status().to_string());
  auto hit = register_chain(*vpool, 1, 1);
  const SequenceHash h = hit[0].sequence_hash();

  auto sample = [&](std::vector<double>& us, double seconds_cap) {
    const auto end = Clock::now() + std::chrono::duration<double>(seconds_cap);
    for (int i = 0; i < a.samples && Clock::now() < end; ++i) {
      const auto s = Clock::now();
      auto m = vpool->match_sequence_hashes(std::vector<SequenceHash>{h});
      us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - s).count());
      if (!m || m->size() != 1) die("match: " + m.status().to_string());
      m->clear();
      std::this_thread::sleep_until(s + std::chrono::microseconds(a.gap_us));
    }
  };
  // Idle: wait for the victim's own block's write to finish first.
  while (disk->blocks_written.load(std::memory_order_relaxed) < 1) std::this_thread::sleep_for(1ms);
  MatchFigures mf;
  std::vector<double> idle;
  sample(idle, a.seconds);
  mf.p50_idle = pct(idle, 0.5);
  mf.p99_idle = pct(idle, 0.99);

  // A writer registering 64-block chains and dropping them at once (host LRU recycles):
  // into pool g, write-behind of every block keeps the disk busy; into pool h, the same
  // requests with no disk behind them (what the writer costs the engine by itself).
  auto with_writer = [&](const char* pool_name, std::vector<double>& us) {
    std::atomic<bool> stop{false};
    std::atomic<bool> started{false};
    std::thread writer([&] {
      Client c = connect(d);
      auto p = c.pool(pool_name);
      if (!p) die("pool: " + p.status().to_string());
      for (uint64_t seed = 100; !stop.load(std::memory_order_relaxed); ++seed) {
        auto blocks = register_chain(*p, seed, kPrefix);
        started.store(true);
      }
    });
    while (!started.load()) std::this_thread::sleep_for(1ms);
    const uint64_t w0 = disk->bytes_written.load(std::memory_order_relaxed);
    const uint64_t d0 = disk->write_queue_drops.load(std::memory_order_relaxed);
    const auto t0 = Clock::now();
    sample(us, a.seconds);
    const double t = secs(t0, Clock::now());
    stop.store(true);
    writer.join();
    return std::pair<double, uint64_t>(
        static_cast<double>(disk->bytes_written.load(std::memory_order_relaxed) - w0) / t / 1e9,
        disk->write_queue_drops.load(std::memory_order_relaxed) - d0);
  };
  std::vector<double> nodisk, busy;
  (void)with_writer("h", nodisk);
  mf.p50_nodisk = pct(nodisk, 0.5);
  mf.p99_nodisk = pct(nodisk, 0.99);
  std::tie(mf.busy_write_gbps, mf.busy_drops) = with_writer("g", busy);
  mf.p50_busy = pct(busy, 0.5);
  mf.p99_busy = pct(busy, 0.99);
  return mf;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) die(k + " needs a value");
      return argv[++i];
    };
    if (k == "--dir") {
      a.dir = val();
    } else if (k == "--block-kib") {
      a.block_kib = static_cast<uint32_t>(std::stoul(val()));
    } else if (k == "--blocks") {
      a.blocks = static_cast<uint32_t>(std::stoul(val()));
    } else if (k == "--samples") {
      a.samples = std::stoi(val());
    } else if (k == "--seconds") {
      a.seconds = std::stoi(val());
    } else if (k == "--quick") {
      a.blocks = 256;
      a.samples = 300;
      a.seconds = 1;
    } else {
      die("unknown option " + k +
          " (--dir D --block-kib K --blocks N --samples S --seconds T --quick)");
    }
  }
  if (a.block_kib < 16 || a.block_kib % 4 != 0) die("--block-kib: a multiple of 4, at least 16");
  a.blocks = std::max<uint32_t>(a.blocks / kPrefix * kPrefix, kPrefix);
  return a;
}

const char* fs_name(const std::string& dir) {
  struct statfs s {};
  if (::statfs(dir.c_str(), &s) != 0) return "unknown";
  switch (static_cast<uint64_t>(s.f_type)) {
    case 0xEF53:
      return "ext4";
    case 0x01021994:
      return "tmpfs";
    case 0x58465342:
      return "xfs";
    case 0x9123683E:
      return "btrfs";
    case 0x794c7630:
      return "overlayfs";
    default:
      return "other";
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  char tmpl[4096];
  std::snprintf(tmpl, sizeof(tmpl), "%s/kvpool-disk-bench-XXXXXX", a.dir.c_str());
  if (::mkdtemp(tmpl) == nullptr) die("mkdtemp in " + a.dir + ": " + std::strerror(errno));
  const std::string dir = tmpl;
  struct Cleanup {
    std::string d;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(d, ec);
    }
  } cleanup{dir};

  const uint64_t block_bytes = uint64_t{a.block_kib} * 1024;
  const uint64_t slot_bytes = disk::slot_bytes_for(block_bytes);
  std::printf("kvpool_disk_bench: %s (%s), %u blocks of %u KiB (slots of %llu B), %u cores\n",
              a.dir.c_str(), fs_name(a.dir), a.blocks, a.block_kib,
              static_cast<unsigned long long>(slot_bytes), std::thread::hardware_concurrency());
  std::fflush(stdout);

  const TierFigures tf = measure_tier(a, dir + "/tier.slots");
  const uint64_t fio_bytes = uint64_t{a.blocks} * slot_bytes;
  const uint32_t wdepth = std::min<uint32_t>(tf.write_depth, 256);
  const FioResult fw = run_fio(dir + "/fio.w", "write", slot_bytes, fio_bytes, wdepth, false);
  const FioResult fwd = run_fio(dir + "/fio.wd", "write", slot_bytes, fio_bytes, wdepth, true);
  const FioResult fr = run_fio(dir + "/fio.w", "read", slot_bytes, fio_bytes, 4 * kPrefix, false);
  for (const FioResult* r : {&fw, &fwd, &fr})
    if (!r->error.empty()) std::printf("fio failed: %s\n", r->error.c_str());

  std::printf(
      "\nthroughput (GB/s; DiskTier: %s, %s, %u writes in flight; fio: io_uring, "
      "bs = slot, same file system)\n",
      tf.engine.c_str(), tf.direct ? "O_DIRECT" : "buffered", tf.write_depth);
  std::printf("%-10s %10s %14s %20s %10s\n", "path", "DiskTier", "fio direct=1",
              "fio direct=1 dsync", "of fio");
  auto ratio = [](double a, double b) { return b > 0 ? 100.0 * a / b : 0.0; };
  std::printf("%-10s %10.3f %14.3f %20.3f %9.0f%%\n", "offload", tf.offload_gbps, fw.gbps, fwd.gbps,
              ratio(tf.offload_gbps, fwd.gbps > 0 ? std::max(fw.gbps, fwd.gbps) : fw.gbps));
  std::printf("%-10s %10.3f %14.3f %20s %9.0f%%\n", "onboard", tf.onboard_gbps, fr.gbps, "-",
              ratio(tf.onboard_gbps, fr.gbps));
  std::printf("(offload %% is of the faster fio write; DiskTier writes with RWF_DSYNC)\n");
  std::printf(
      "engine thread in the tier's calls (submit, completions): offload %.0f%% of the time, "
      "longest call %.2f ms; onboard %.0f%%, longest %.2f ms\n",
      tf.offload_engine_pct, tf.offload_engine_max_ms, tf.onboard_engine_pct,
      tf.onboard_engine_max_ms);
  std::printf("write-queue drops %llu, skipped %llu, checksum failures %llu, I/O errors %llu\n",
              static_cast<unsigned long long>(tf.drops),
              static_cast<unsigned long long>(tf.write_skipped),
              static_cast<unsigned long long>(tf.checksum_failures),
              static_cast<unsigned long long>(tf.io_errors));
  std::printf(
      "\nonboard of one %u-block prefix (%.1f MiB), disk otherwise idle, %zu samples: "
      "p50 %.2f ms, p99 %.2f ms\n",
      kPrefix, static_cast<double>(kPrefix * block_bytes) / (1 << 20), tf.onboard_ms.size(),
      pct(tf.onboard_ms, 0.5), pct(tf.onboard_ms, 0.99));
  std::fflush(stdout);

  const MatchFigures mf = measure_match(a, dir + "/daemon.slots");
  std::printf("\nanother client's host-only match-1 through kvpoold, every %d us (us):\n",
              a.gap_us);
  std::printf("%-28s %10s %10s\n", "disk", "p50", "p99");
  std::printf("%-28s %10.1f %10.1f\n", "idle", mf.p50_idle, mf.p99_idle);
  std::printf("%-28s %10.1f %10.1f\n", "writer, pool without disk", mf.p50_nodisk, mf.p99_nodisk);
  std::printf("%-28s %10.1f %10.1f\n", "writer, write-behind to disk", mf.p50_busy, mf.p99_busy);
  std::printf(
      "(while busy: %.3f GB/s written, %llu write-queue drops; busy/idle p50 %.2fx, "
      "p99 %.2fx)\n",
      mf.busy_write_gbps, static_cast<unsigned long long>(mf.busy_drops),
      mf.p50_idle > 0 ? mf.p50_busy / mf.p50_idle : 0.0,
      mf.p99_idle > 0 ? mf.p99_busy / mf.p99_idle : 0.0);
  return 0;
}
