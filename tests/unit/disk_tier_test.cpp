// The disk tier (daemon/disk/) against real files: write-behind through io_uring (and the
// thread fallback), the index rebuilt from the file at a start, onboard that verifies every
// byte, flipped bytes never served, another layout reinitialising, a tmpfs for the buffered
// fallback, a size-limited mount for a full file system, the LRU order against a model,
// and a writer killed with SIGKILL at random points.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <list>
#include <memory>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "daemon/config.hpp"
#include "daemon/disk/disk_tier.hpp"
#include "daemon/disk/tier_sink.hpp"
#include "kvpool/core/layout.hpp"

namespace kvpool::daemon::disk {
namespace {

namespace fs = std::filesystem;
constexpr uint32_t kClient = 0;
constexpr uint32_t kTierOwner = 1;

LayoutConfig test_layout(uint32_t num_blocks, uint32_t inner = 128) {
  // 2 layers x 2 x (16 tokens x inner x 2 bytes): 16 KiB blocks of 4 KiB regions at inner 128.
  return LayoutConfig{num_blocks, 2, 2, 16, inner, 2, 4096, LayoutKind::kFullyContiguous};
}

// What block `hash` holds: every writer and reader agrees on it.
void fill(std::byte* p, uint64_t n, uint64_t hash) {
  for (uint64_t i = 0; i < n / 8; ++i) {
    const uint64_t w = hash ^ (i * 0x9E3779B97F4A7C15ull);
    std::memcpy(p + i * 8, &w, 8);
  }
}
bool holds(const std::byte* p, uint64_t n, uint64_t hash) {
  for (uint64_t i = 0; i < n / 8; ++i) {
    uint64_t w;
    std::memcpy(&w, p + i * 8, 8);
    if (w != (hash ^ (i * 0x9E3779B97F4A7C15ull))) return false;
  }
  return true;
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// A host pool in this process: its bytes, and a pool core over a heap arena.
struct HostPool {
  explicit HostPool(LayoutConfig lc) : config(lc), layout(*Layout::create(lc)) {
    bytes.reset(static_cast<std::byte*>(std::aligned_alloc(4096, layout.total_bytes())));
    pool::PoolCoreConfig cc{lc.num_blocks, 2, 0};
    const size_t ab = (*pool::PoolCore::arena_bytes(cc) + 63) / 64 * 64;
    arena.reset(std::aligned_alloc(64, ab));
    core = *pool::PoolCore::create(arena.get(), ab, cc, 0, "g2");
  }
  std::byte* block(uint32_t id) { return bytes.get() + layout.offset_unchecked(id, 0, 0); }

  LayoutConfig config;
  Layout layout;
  std::unique_ptr<std::byte, FreeDeleter> bytes;
  std::unique_ptr<void, FreeDeleter> arena;
  pool::PoolCore core;
};

// A temporary directory on the real file system (/var/tmp: not a tmpfs here).
struct DiskDir {
  DiskDir() {
    char tmpl[] = "/var/tmp/kvpool-disk-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~DiskDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string path;
};

// A file system mounted by the test (root only; otherwise the test skips): a tmpfs of
// `size`, or a ramfs (which refuses O_DIRECT; tmpfs takes it since Linux 6.6).
struct TmpfsMount {
  explicit TmpfsMount(const std::string& size, const char* type = "tmpfs") {
    char tmpl[] = "/tmp/kvpool-tmpfs-XXXXXX";
    path = ::mkdtemp(tmpl);
    mounted = ::mount(type, path.c_str(), type, 0, ("size=" + size).c_str()) == 0;
  }
  ~TmpfsMount() {
    if (mounted) ::umount2(path.c_str(), MNT_DETACH);
    ::rmdir(path.c_str());
  }
  std::string path;
  bool mounted = false;
};

class Tier {
 public:
  Tier(HostPool& pool, const std::string& path, uint64_t slots,
       IoBackend backend = IoBackend::kAuto, DirectIo direct = DirectIo::kAuto,
       uint64_t max_inflight_bytes = 0, DiskEventSink* events = nullptr)
      : pool_(pool) {
    DiskTierSetup s;
    s.pool = "g2";
    s.instance = "test";
    s.config.enabled = true;
    s.config.path = path;
    s.config.num_blocks = slots;
    s.config.direct_io = direct;
    s.config.max_inflight_bytes = max_inflight_bytes;
    s.layout = pool.config;
    s.host_base = pool.bytes.get();
    s.owner = kTierOwner;
    s.backend = backend;
    s.events = events;
    s.pool_index = 3;
    auto t = DiskTier::open(s, pool.core);
    status = t.status();
    if (!t) return;
    tier = std::move(t.value());
    sink = std::make_unique<TierSink>(nullptr, std::vector<DiskTier*>{tier.get()});
    pool.core.set_event_sink(sink.get());
    tier->set_onboard_done([this](uint64_t, std::span<const uint64_t> good) {
      onboarded.assign(good.begin(), good.end());
      matched.resize(good.size());
      ASSERT_EQ(*pool_.core.match(kClient, good, matched.data()), good.size());
    });
  }
  ~Tier() { pool_.core.set_event_sink(nullptr); }

  // Runs completions until nothing is in flight (the engine's epoll loop, here).
  void settle() {
    for (int i = 0; i < 10000 && !(tier->idle()); ++i) {
      pollfd p{tier->event_fd(), POLLIN, 0};
      ::poll(&p, 1, 1000);
      tier->on_io_ready();
    }
    ASSERT_TRUE(tier->idle()) << "disk I/O did not complete";
  }

  // Registers blocks of a chain with their bytes, then lets the client drop them.
  std::vector<uint64_t> register_chain(uint64_t first_hash, uint32_t n, bool release = true) {
    std::vector<pool::BlockRef> blocks(n), out(n);
    EXPECT_TRUE(pool_.core.allocate(kClient, n, blocks.data()).is_ok());
    std::vector<pool::RegisterItem> items;
    std::vector<uint64_t> hashes;
    for (uint32_t i = 0; i < n; ++i) {
      const uint64_t h = first_hash + i;
      fill(pool_.block(blocks[i].id), pool_.layout.block_bytes(), h);
      items.push_back({blocks[i], h, h * 3, i == 0 ? 0 : h - 1, 0, i == 0 ? 0u : 1u});
      hashes.push_back(h);
    }
    EXPECT_TRUE(pool_.core.register_blocks(kClient, items, out.data()).is_ok());
    tier->pump();
    if (release) {
      uint32_t rej = 0;
      EXPECT_TRUE(pool_.core.release_immutable(kClient, out, &rej).is_ok());
    }
    return hashes;
  }

  // Onboards `hashes` (host memory emptied of them first) and checks every byte served.
  uint32_t onboard(std::span<const uint64_t> hashes) {
    onboarded.clear();
    matched.clear();
    if (!tier->start_onboard(7, hashes, static_cast<uint32_t>(hashes.size()))) return 0;
    settle();
    for (size_t i = 0; i < matched.size(); ++i)
      EXPECT_TRUE(holds(pool_.block(matched[i].id), pool_.layout.block_bytes(), onboarded[i]))
          << "block " << onboarded[i] << " served with other bytes";
    uint32_t rej = 0;
    EXPECT_TRUE(pool_.core.release_immutable(kClient, matched, &rej).is_ok());
    return static_cast<uint32_t>(onboarded.size());
  }

  Status status;
  std::unique_ptr<DiskTier> tier;
  std::unique_ptr<TierSink> sink;
  std::vector<uint64_t> onboarded;
  std::vector<pool::BlockRef> matched;

 private:
  HostPool& pool_;
};

// Evicts every inactive block of the pool (allocates them all, then frees them).
void flush_host(HostPool& pool) {
  const uint32_t n = pool.core.counts().free + pool.core.counts().inactive;
  std::vector<pool::BlockRef> b(n);
  ASSERT_TRUE(pool.core.allocate(kClient, n, b.data()).is_ok());
  uint32_t rej = 0;
  ASSERT_TRUE(pool.core.release_mutable(kClient, b, &rej).is_ok());
}

TEST(DiskTier, WritesBehindThenServesTheSameBytesAfterARestart) {
  DiskDir dir;
  const std::string file = dir.path + "/g2.slots";
  std::vector<uint64_t> hashes;
  {
    HostPool pool(test_layout(128));
    Tier t(pool, file, 64);
    ASSERT_TRUE(t.status.is_ok()) << t.status.message();
    EXPECT_TRUE(t.tier->direct()) << "ext4 under /var/tmp takes O_DIRECT";
    hashes = t.register_chain(1000, 20);
    t.settle();
    EXPECT_EQ(t.tier->slots_used(), 20u);
    EXPECT_EQ(t.tier->stats().blocks_written, 20u);
    EXPECT_EQ(t.tier->stats().io_errors, 0u);
    // Every hold the writes took is back: the pool's blocks are all inactive or free.
    EXPECT_EQ(pool.core.counts().active, 0u);
  }
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // A new daemon: empty host memory, the index rebuilt from the file.
  HostPool pool(test_layout(128));
  Tier t(pool, file, 64);
  ASSERT_TRUE(t.status.is_ok()) << t.status.message();
  EXPECT_EQ(t.tier->slots_used(), 20u);
  EXPECT_EQ(t.tier->disk_prefix(hashes), 20u);
  EXPECT_EQ(t.onboard(hashes), 20u);
  EXPECT_EQ(t.tier->stats().checksum_failures, 0u);
  EXPECT_EQ(t.tier->stats().bytes_read, 20 * pool.layout.block_bytes());
  // Onboarded blocks are registered in host memory now: a plain match finds them.
  std::vector<pool::BlockRef> refs(20);
  EXPECT_EQ(*pool.core.match(kClient, hashes, refs.data()), 20u);
}

TEST(DiskTier, ThreadFallbackWritesAndReadsTheSameFormat) {
  DiskDir dir;
  const std::string file = dir.path + "/g2.slots";
  std::vector<uint64_t> hashes;
  {
    HostPool pool(test_layout(16));
    Tier t(pool, file, 16, IoBackend::kThreads);
    ASSERT_TRUE(t.status.is_ok()) << t.status.message();
    EXPECT_STREQ(t.tier->io_name(), "threads");
    hashes = t.register_chain(50, 8);
    t.settle();
    EXPECT_EQ(t.tier->slots_used(), 8u);
  }
  HostPool pool(test_layout(16));
  Tier t(pool, file, 16, IoBackend::kUring);
  ASSERT_TRUE(t.status.is_ok()) << t.status.message();
  EXPECT_EQ(t.onboard(hashes), 8u);
}

TEST(DiskTier, FlippedBytesAreNeverServed) {
  DiskDir dir;
  const std::string file = dir.path + "/g2.slots";
  std::vector<uint64_t> hashes;
  uint64_t slot_of_third = 0, slot_bytes = 0;
  {
    HostPool pool(test_layout(16));
    Tier t(pool, file, 16);
    ASSERT_TRUE(t.status.is_ok());
    hashes = t.register_chain(7000, 6);
    t.settle();
    slot_of_third = t.tier->index().find(hashes[2]);
    slot_bytes = t.tier->slot_bytes();
  }
  // One byte of the third block's data, in the file.
  const int fd = ::open(file.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const off_t at = static_cast<off_t>(slot_offset(slot_bytes, slot_of_third) + kSectorBytes + 100);
  char c;
  ASSERT_EQ(::pread(fd, &c, 1, at), 1);
  c = static_cast<char>(c ^ 0x40);
  ASSERT_EQ(::pwrite(fd, &c, 1, at), 1);
  ::close(fd);

  HostPool pool(test_layout(16));
  Tier t(pool, file, 16);
  ASSERT_TRUE(t.status.is_ok());
  EXPECT_EQ(t.onboard(hashes), 2u) << "the prefix stops before the flipped block";
  EXPECT_EQ(t.tier->stats().checksum_failures, 1u);
  EXPECT_EQ(t.tier->index().find(hashes[2]), kNoSlot) << "the bad slot leaves the index";
  EXPECT_EQ(pool.core.counts().mutable_blocks, 0u) << "the blocks read past it go back";
}

TEST(DiskTier, AnotherLayoutReinitialisesTheFile) {
  DiskDir dir;
  const std::string file = dir.path + "/g2.slots";
  {
    HostPool pool(test_layout(16));
    Tier t(pool, file, 16);
    ASSERT_TRUE(t.status.is_ok());
    t.register_chain(1, 4);
    t.settle();
  }
  {
    HostPool pool(test_layout(16, 256));  // other bytes per token
    Tier t(pool, file, 16);
    ASSERT_TRUE(t.status.is_ok());
    EXPECT_EQ(t.tier->slots_used(), 0u);
    t.register_chain(1, 2);
    t.settle();
  }
  // And back: the first layout's slots do not come back either (a new generation).
  HostPool pool(test_layout(16));
  Tier t(pool, file, 16);
  ASSERT_TRUE(t.status.is_ok());
  EXPECT_EQ(t.tier->slots_used(), 0u);
}

TEST(DiskTier, AFileSystemWithoutODirectFallsBackToBufferedAndOnIsRefused) {
  TmpfsMount m("64m", "ramfs");
  if (!m.mounted) GTEST_SKIP() << "mounting a tmpfs needs root";
  HostPool pool(test_layout(16));
  {
    Tier t(pool, m.path + "/g2.slots", 8);
    ASSERT_TRUE(t.status.is_ok()) << t.status.message();
    EXPECT_FALSE(t.tier->direct());
    auto hashes = t.register_chain(10, 4);
    t.settle();
    flush_host(pool);
    EXPECT_EQ(t.onboard(hashes), 4u);
  }
  HostPool pool2(test_layout(16));
  Tier on(pool2, m.path + "/g2.slots", 8, IoBackend::kAuto, DirectIo::kOn);
  EXPECT_EQ(on.status.code(), ErrorCode::kConfigError);
  EXPECT_NE(on.status.message().find("O_DIRECT"), std::string::npos) << on.status.message();
}

TEST(DiskTier, AFullFileSystemFailsAtStartNamingPathAndBytes) {
  TmpfsMount m("1m");
  if (!m.mounted) GTEST_SKIP() << "mounting a tmpfs needs root";
  HostPool pool(test_layout(16));
  const std::string file = m.path + "/g2.slots";
  Tier t(pool, file, 256);  // 256 x 20 KiB = 5 MiB on a 1 MiB file system
  ASSERT_FALSE(t.status.is_ok());
  EXPECT_EQ(t.status.code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(t.status.message().find(file), std::string::npos) << t.status.message();
  EXPECT_NE(t.status.message().find(std::to_string(file_bytes_for(20480, 256))), std::string::npos)
      << t.status.message();
}

// The disk's eviction order against a model: a list, most recent use at the back; a write
// or an onboard is a use; a full disk reuses the front.
TEST(DiskTier, UnalignedPoolRegionsGoBuffered) {
  DiskDir dir;
  HostPool pool(test_layout(16, 64));  // 2 KiB regions: O_DIRECT cannot use them in place
  {
    Tier t(pool, dir.path + "/g2.slots", 8);
    ASSERT_TRUE(t.status.is_ok()) << t.status.message();
    EXPECT_FALSE(t.tier->direct());
    auto hashes = t.register_chain(10, 4);
    t.settle();
    flush_host(pool);
    EXPECT_EQ(t.onboard(hashes), 4u);
  }
  HostPool pool2(test_layout(16, 64));
  Tier on(pool2, dir.path + "/g2.slots", 8, IoBackend::kAuto, DirectIo::kOn);
  EXPECT_EQ(on.status.code(), ErrorCode::kConfigError);
  EXPECT_NE(on.status.message().find("not 4 KiB aligned"), std::string::npos)
      << on.status.message();
}

TEST(DiskTier, EvictionIsLeastRecentlyUsedAsTheModelSays) {
  DiskDir dir;
  HostPool pool(test_layout(64));
  Tier t(pool, dir.path + "/g2.slots", 8);
  ASSERT_TRUE(t.status.is_ok());
  std::list<uint64_t> model;
  auto use = [&](uint64_t h) {
    model.remove(h);
    model.push_back(h);
    if (model.size() > 8) model.pop_front();
  };
  std::mt19937_64 rng(42);
  uint64_t next = 1;
  for (int step = 0; step < 200; ++step) {
    if (rng() % 3 != 0 || model.empty()) {
      const uint64_t h = next++ * 1000;  // a one-block chain of its own
      t.register_chain(h, 1);
      t.settle();
      use(h);
    } else {
      auto it = model.begin();
      std::advance(it, static_cast<long>(rng() % model.size()));
      const uint64_t h = *it;
      flush_host(pool);
      ASSERT_EQ(t.onboard(std::span(&h, 1)), 1u);
      use(h);
    }
    ASSERT_EQ(t.tier->index().lru_order(), std::vector<uint64_t>(model.begin(), model.end()))
        << "step " << step;
  }
  EXPECT_GT(t.tier->stats().evictions, 0u);
}

TEST(DiskTier, AFullWriteQueueSkipsAndCounts) {
  DiskDir dir;
  HostPool pool(test_layout(256));
  // A budget of one slot in flight: the queue takes 64 blocks (its floor), never waits.
  Tier t(pool, dir.path + "/g2.slots", 512, IoBackend::kAuto, DirectIo::kAuto, 20480);
  ASSERT_TRUE(t.status.is_ok());
  // 200 blocks in one register call: more than the queue takes before a pump.
  std::vector<pool::BlockRef> blocks(200), out(200);
  ASSERT_TRUE(pool.core.allocate(kClient, 200, blocks.data()).is_ok());
  std::vector<pool::RegisterItem> items;
  for (uint32_t i = 0; i < 200; ++i) items.push_back({blocks[i], 90000 + i, 1, 0, 0, 0});
  ASSERT_TRUE(pool.core.register_blocks(kClient, items, out.data()).is_ok());
  t.tier->pump();
  t.settle();
  EXPECT_EQ(t.tier->stats().write_queue_drops, 136u);
  EXPECT_EQ(t.tier->stats().blocks_written, 64u);
  EXPECT_EQ(t.tier->slots_used(), 64u);
}

// A writer killed with SIGKILL at a random point of its writes; then a cold start: every
// block the index serves has its writer's bytes; torn slots are dropped, never served.
TEST(DiskTier, Kill9DuringWritesThenColdStartServesOnlyWritersBytes) {
  DiskDir dir;
  const std::string file = dir.path + "/g2.slots";
  std::mt19937 rng(std::random_device{}());
  for (int round = 0; round < 5; ++round) {
    // The point: after a random number of completed writes, with more in flight.
    const uint64_t kill_after = 1 + rng() % 60;
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(ready[0]);
      HostPool pool(test_layout(64));
      Tier t(pool, file, 48);
      if (!t.status.is_ok()) ::_exit(2);
      uint64_t h = 1'000'000ull * (round + 1);
      bool told = false;
      for (;;) {  // write forever, evicting host and disk blocks as it goes
        t.register_chain(h, 4);
        h += 4;
        pollfd p{t.tier->event_fd(), POLLIN, 0};
        ::poll(&p, 1, 0);
        t.tier->on_io_ready();
        if (!told && t.tier->stats().blocks_written >= kill_after) {
          char c = 1;
          if (::write(ready[1], &c, 1) != 1) ::_exit(3);
          told = true;
        }
      }
    }
    ::close(ready[1]);
    char c;
    ASSERT_EQ(::read(ready[0], &c, 1), 1) << "the writer did not start writing";
    ::close(ready[0]);
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status));

    HostPool pool(test_layout(64));
    Tier t(pool, file, 48);
    ASSERT_TRUE(t.status.is_ok()) << t.status.message();
    ASSERT_GT(t.tier->slots_used(), 0u);
    const std::vector<uint64_t> all = t.tier->index().lru_order();
    uint32_t served = 0;
    for (uint64_t h : all) served += t.onboard(std::span(&h, 1));  // onboard checks bytes
    EXPECT_EQ(served + t.tier->stats().checksum_failures + t.tier->stats().io_errors, all.size());
  }
}

// What a disk tier tells routers (issue 28 item 8), recorded.
struct RecordedDiskEvents final : DiskEventSink {
  struct Batch {
    bool stored;
    std::vector<pool::StoredBlock> blocks;  // stored
    uint64_t removed = 0;
  };
  void on_disk_stored(uint32_t pool, std::span<const pool::StoredBlock> b) override {
    EXPECT_EQ(pool, 3u);
    EXPECT_FALSE(b.empty());
    batches.push_back({true, {b.begin(), b.end()}});
  }
  void on_disk_removed(uint32_t pool, uint64_t h) override {
    EXPECT_EQ(pool, 3u);
    batches.push_back({false, {}, h});
  }
  // The hashes the events say are on disk: each Stored of a hash not held, each Removed of
  // one held (a router's view must never be told twice or about what it does not have).
  std::set<uint64_t> fold() const {
    std::set<uint64_t> s;
    for (const Batch& b : batches) {
      if (b.stored) {
        for (const auto& x : b.blocks)
          EXPECT_TRUE(s.insert(x.sequence_hash).second) << x.sequence_hash;
      } else {
        EXPECT_EQ(s.erase(b.removed), 1u) << b.removed;
      }
    }
    return s;
  }
  std::vector<Batch> batches;
};

std::set<uint64_t> published(const DiskTier& t) {
  const auto o = t.index().lru_order();
  return {o.begin(), o.end()};
}

// Stored / Removed follow the index exactly: a Stored once a slot is published (never for
// a write still in flight), a Removed for each slot evicted or dropped, and a start
// announces what the file gave back as one batch, parents first.
TEST(DiskTier, ItsEventsFollowTheIndexExactly) {
  DiskDir dir;
  const std::string file = dir.path + "/g2.slots";
  RecordedDiskEvents ev;
  {
    HostPool pool(test_layout(64));
    Tier t(pool, file, 8, IoBackend::kAuto, DirectIo::kAuto, 0, &ev);
    ASSERT_TRUE(t.status.is_ok());
    EXPECT_TRUE(ev.batches.empty()) << "an empty file announces nothing";
    std::mt19937_64 rng(7);
    uint64_t next = 1;
    for (int step = 0; step < 120; ++step) {
      if (rng() % 3 != 0) {
        t.register_chain(next++ * 1000, 1 + static_cast<uint32_t>(rng() % 3));
        EXPECT_EQ(ev.fold(), published(*t.tier)) << "before the writes complete, step " << step;
        t.settle();
      } else {
        const auto lru = t.tier->index().lru_order();
        if (lru.empty()) continue;
        const uint64_t h = lru[rng() % lru.size()];
        flush_host(pool);
        ASSERT_EQ(t.onboard(std::span(&h, 1)), 1u);
      }
      ASSERT_EQ(ev.fold(), published(*t.tier)) << "step " << step;
    }
    EXPECT_GT(t.tier->stats().evictions, 0u);
  }
  const std::set<uint64_t> on_disk = ev.fold();
  // A new daemon: one batch of everything the file holds, parents before children.
  RecordedDiskEvents cold;
  {
    HostPool pool(test_layout(64));
    Tier t(pool, file, 8, IoBackend::kAuto, DirectIo::kAuto, 0, &cold);
    ASSERT_TRUE(t.status.is_ok());
    ASSERT_EQ(cold.batches.size(), 1u);
    EXPECT_EQ(cold.fold(), on_disk);
    std::set<uint64_t> seen;
    for (const auto& b : cold.batches[0].blocks) {
      if (b.has_parent && on_disk.count(b.parent_hash)) {
        EXPECT_TRUE(seen.count(b.parent_hash)) << b.sequence_hash << " before its parent";
      }
      seen.insert(b.sequence_hash);
    }
  }
  // A flipped byte: the onboard that meets it drops the slot and says so.
  const uint64_t victim = *on_disk.begin();
  uint64_t slot = 0, slot_bytes = 0;
  {
    HostPool pool(test_layout(64));
    Tier t(pool, file, 8);
    slot = t.tier->index().find(victim);
    slot_bytes = t.tier->slot_bytes();
  }
  const int fd = ::open(file.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const off_t at = static_cast<off_t>(slot_offset(slot_bytes, slot) + kSectorBytes + 10);
  char c;
  ASSERT_EQ(::pread(fd, &c, 1, at), 1);
  c = static_cast<char>(c ^ 0x01);
  ASSERT_EQ(::pwrite(fd, &c, 1, at), 1);
  ::close(fd);
  RecordedDiskEvents bad;
  HostPool pool(test_layout(64));
  Tier t(pool, file, 8, IoBackend::kAuto, DirectIo::kAuto, 0, &bad);
  ASSERT_TRUE(t.status.is_ok());
  EXPECT_EQ(t.onboard(std::span(&victim, 1)), 0u);
  ASSERT_EQ(bad.batches.size(), 2u);
  EXPECT_FALSE(bad.batches[1].stored);
  EXPECT_EQ(bad.batches[1].removed, victim);
  EXPECT_EQ(bad.fold(), published(*t.tier));
}

TEST(DiskConfigParse, FieldsAreCheckedLikeEveryOther) {
  auto pool_with = [](const std::string& disk) {
    return R"({"pools":[{"name":"g2","num_blocks":16,"disk":)" + disk + "}]}";
  };
  auto ok = parse_config(pool_with(
      R"({"path":"/var/tmp/x.slots","num_blocks":100,"direct_io":"off","max_inflight_bytes":1048576,"admit":"second_hit","io":"threads"})"));
  ASSERT_TRUE(ok.is_ok()) << ok.status().message();
  const DiskConfig& d = ok->pools[0].disk;
  EXPECT_TRUE(d.enabled);
  EXPECT_EQ(d.num_blocks, 100u);
  EXPECT_EQ(d.direct_io, DirectIo::kOff);
  EXPECT_EQ(d.admit, DiskAdmit::kSecondHit);
  EXPECT_EQ(d.io, DiskIoEngine::kThreads);
  auto again = parse_config(config_to_json(*ok));
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(*again, *ok) << "round trip";

  auto bad = [&](const std::string& disk, const std::string& needle) {
    auto r = parse_config(pool_with(disk));
    ASSERT_FALSE(r.is_ok()) << disk;
    EXPECT_EQ(r.status().code(), ErrorCode::kConfigError);
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  bad(R"({"num_blocks":1,"bytes":1})", "pools[0].disk: give exactly one");
  bad(R"({})", "pools[0].disk: give exactly one");
  bad(R"({"num_blocks":1,"direct_io":"yes"})", "pools[0].disk.direct_io");
  bad(R"({"num_blocks":1,"admit":"often"})", "pools[0].disk.admit");
  bad(R"({"num_blocks":1,"io":"aio"})", "pools[0].disk.io");
  bad(R"({"num_blocks":1,"path":"rel/x"})", "pools[0].disk.path: must be an absolute path");
  bad(R"({"num_blocks":1,"speed":3})", "unknown field 'pools[0].disk.speed'");
  auto cuda = parse_config(
      R"({"pools":[{"name":"g1","storage":"cuda","device":0,"num_blocks":16,"disk":{"num_blocks":1}}]})");
  ASSERT_FALSE(cuda.is_ok());
  EXPECT_NE(cuda.status().message().find("host pools only"), std::string::npos);
  EXPECT_EQ(default_disk_path("default", "g2").rfind("/", 0), 0u);
}

}  // namespace
}  // namespace kvpool::daemon::disk
