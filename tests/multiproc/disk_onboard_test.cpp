// Onboard from the disk tier (issue 28 item 6) against a real kvpoold with a real slot file:
// bytes right after an onboard are the writer's; a kill -9 during writes and a cold start
// (no descriptor store: host memory is gone) serve, for every block, its writer's bytes;
// bytes flipped in the file are never served; another client is answered while onboard
// reads are in flight (the disk I/O threads held stopped: a condition, not a timing).
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "client_helpers.hpp"
#include "daemon/disk/slot_format.hpp"
#include "harness.hpp"

namespace kvpool::mptest {
namespace {

namespace dk = kvpool::daemon::disk;

// Page 128 x inner 16 x 2 bytes: 4 KiB regions, so the tier can use O_DIRECT where the
// file system takes it.
constexpr uint32_t kPage = 128;
constexpr uint64_t kBlockBytes = 4 * uint64_t{kPage} * 16 * 2;  // 2 layers x (K, V)

// A directory on the real file system (/var/tmp: not a tmpfs here), removed at the end.
struct DiskDir {
  DiskDir() {
    char tmpl[] = "/var/tmp/kvpool-disk-mp-XXXXXX";
    if (!::mkdtemp(tmpl)) throw HarnessError(errno_text("mkdtemp"));
    path = tmpl;
  }
  ~DiskDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file() const { return path + "/g.slots"; }
  std::string path;
};

nlohmann::json disk_config(const std::string& file, uint32_t host_blocks, uint32_t slots,
                           const std::string& io = "auto") {
  auto pool = host_pool("g", host_blocks, kPage);
  pool["disk"] = {{"path", file}, {"num_blocks", slots}, {"io", io}};
  return test_config(nlohmann::json::array({pool}));
}

// Block i of chain `salt`: its bytes, a function of both (so any reader can check them).
uint8_t byte_at(uint64_t salt, uint32_t i, uint32_t region, uint64_t k) {
  uint64_t x =
      (salt * 0x9E3779B97F4A7C15ull) ^ (uint64_t{i} << 40) ^ (uint64_t{region} << 32) ^ (k / 8);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<uint8_t>(x >> (8 * (k % 8)));
}

// Registers a chain of `n` blocks holding byte_at(salt, i, ...); returns their hashes. The
// references go at once: the blocks are inactive (evictable) in host memory.
std::vector<SequenceHash> write_chain(Pool& p, uint64_t salt, uint32_t n) {
  auto blocks = p.allocate_blocks(n);
  if (!blocks) throw HarnessError("allocate: " + blocks.status().to_string());
  const LayoutConfig& l = p.layout();
  const uint64_t rb = region_bytes(p.layout());
  std::optional<SequenceHash> parent;
  std::vector<SequenceHash> hashes;
  for (uint32_t i = 0; i < n; ++i) {
    MutableBlock& b = (*blocks)[i];
    if (!b.init_sequence(salt, parent).is_ok()) throw HarnessError("init_sequence");
    std::vector<Token> t(kPage);
    for (uint32_t k = 0; k < kPage; ++k) t[k] = static_cast<Token>(salt * 7919 + i * kPage + k);
    if (!b.add_tokens(t)) throw HarnessError("add_tokens");
    for (uint32_t r = 0; r < l.num_layers * l.outer_dim; ++r) {
      auto a = b.address(r / l.outer_dim, r % l.outer_dim);
      if (!a) throw HarnessError("address: " + a.status().to_string());
      for (uint64_t k = 0; k < rb; ++k) (*a)[k] = std::byte{byte_at(salt, i, r, k)};
    }
    if (!b.commit().is_ok()) throw HarnessError("commit");
    parent = *b.sequence_hash();
    hashes.push_back(*parent);
  }
  auto reg = p.register_blocks(std::move(*blocks));
  if (!reg) throw HarnessError("register: " + reg.status().to_string());
  return hashes;
}

// Whether block `b` holds block i of chain `salt`, byte for byte.
bool holds_chain_bytes(const Pool& p, const ImmutableBlock& b, uint64_t salt, uint32_t i) {
  const LayoutConfig& l = p.layout();
  const uint64_t rb = region_bytes(p.layout());
  for (uint32_t r = 0; r < l.num_layers * l.outer_dim; ++r) {
    auto a = b.address(r / l.outer_dim, r % l.outer_dim);
    if (!a) return false;
    for (uint64_t k = 0; k < rb; ++k)
      if ((*a)[k] != std::byte{byte_at(salt, i, r, k)}) return false;
  }
  return true;
}

Result<std::vector<ImmutableBlock>> onboard(Pool& p, std::span<const SequenceHash> h) {
  MatchOptions o;
  o.onboard = true;
  return p.match_sequence_hashes(h, o);
}

// The sealed slots of the file now (sequence hash -> slot), read as a start reads them;
// `block_bytes` != 0: only those whose data matches its checksum too (not torn).
std::map<uint64_t, uint32_t> slots_in(const std::string& path, uint64_t block_bytes = 0) {
  std::map<uint64_t, uint32_t> out;
  shm::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return out;
  dk::FileHeader fh{};
  if (::pread(fd.get(), &fh, sizeof(fh), 0) != sizeof(fh) || fh.magic != dk::kFileMagic ||
      !dk::sealed(fh))
    return out;
  for (uint64_t s = 0; s < fh.num_slots; ++s) {
    dk::SlotHeader h{};
    const auto at = static_cast<off_t>(dk::slot_offset(fh.slot_bytes, s));
    if (::pread(fd.get(), &h, sizeof(h), at) != sizeof(h)) break;
    if (h.magic != dk::kSlotMagic || !dk::sealed(h) || h.generation != fh.generation || h.slot != s)
      continue;
    if (block_bytes != 0) {
      std::vector<char> data(block_bytes);
      if (::pread(fd.get(), data.data(), block_bytes, at + static_cast<off_t>(dk::kSectorBytes)) !=
              static_cast<ssize_t>(block_bytes) ||
          XXH3_64bits(data.data(), block_bytes) != h.data_checksum)
        continue;
    }
    out[h.sequence_hash] = static_cast<uint32_t>(s);
  }
  return out;
}

// Blocks of `hashes` whole in the file (header and data).
size_t on_disk(const std::string& path, std::span<const SequenceHash> hashes) {
  const auto s = slots_in(path, kBlockBytes);
  size_t n = 0;
  for (SequenceHash h : hashes) n += s.count(h);
  return n;
}

void wait_on_disk(const DaemonProcess& d, const std::string& path,
                  std::span<const SequenceHash> hashes) {
  wait_until([&] { return on_disk(path, hashes) == hashes.size(); }, 20s,
             std::to_string(hashes.size()) + " blocks in " + path, [&] { return d.stderr_text(); });
}

// Evicts every evictable block from host memory (an allocate of all of them), until no block
// of `hashes` is found there, each asked alone (a prefix match stops at the first miss). The
// tier holds a block until its write completed and was published in the disk index: gone
// from host memory means published on disk.
void evict_from_host(const DaemonProcess& d, Pool& p, std::span<const SequenceHash> hashes) {
  wait_until(
      [&] {
        const BlockCounts c = p.counts();
        if (c.free + c.inactive > 0) (void)p.allocate_blocks(c.free + c.inactive);
        for (SequenceHash h : hashes) {
          auto m = p.match_sequence_hashes(std::span(&h, 1));
          if (!m || !m->empty()) return false;
        }
        return true;
      },
      20s, "the chain to leave host memory", [&] { return d.view().describe(); });
}

TEST(DiskOnboard, BytesRightAfterOnboardAreTheWriters) {
  DiskDir dir;
  DaemonProcess d(disk_config(dir.file(), 64, 256));
  d.start();
  Client c = connect_client(d);
  Pool p = pool_of(c);
  const auto hashes = write_chain(p, 7, 8);
  wait_on_disk(d, dir.file(), hashes);
  evict_from_host(d, p, hashes);

  auto m = onboard(p, hashes);
  ASSERT_TRUE(m) << m.status().to_string();
  ASSERT_EQ(m->size(), hashes.size()) << d.stderr_text();
  for (uint32_t i = 0; i < m->size(); ++i) {
    EXPECT_EQ((*m)[i].sequence_hash(), hashes[i]);
    EXPECT_TRUE(holds_chain_bytes(p, (*m)[i], 7, i)) << "block " << i;
  }
  // Registered in host memory now: a plain match finds them.
  auto again = p.match_sequence_hashes(hashes);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->size(), hashes.size());
  // A longer list stops where both tiers end; a plain match never reads the disk.
  std::vector<SequenceHash> longer = hashes;
  longer.push_back(0x5eed);
  auto m2 = onboard(p, longer);
  ASSERT_TRUE(m2);
  EXPECT_EQ(m2->size(), hashes.size());
  m->clear();
  again->clear();
  m2->clear();
  expect_invariants(d.view());
}

TEST(DiskOnboard, HostPrefixThenDiskPrefixIsOneAnswer) {
  DiskDir dir;
  DaemonProcess d(disk_config(dir.file(), 64, 256));
  d.start();
  Client c = connect_client(d);
  Pool p = pool_of(c);
  const auto hashes = write_chain(p, 11, 6);
  wait_on_disk(d, dir.file(), hashes);
  evict_from_host(d, p, hashes);
  // The first two back in host memory (onboarded); the other four only on disk.
  auto first = onboard(p, std::span(hashes).first(2));
  ASSERT_TRUE(first);
  ASSERT_EQ(first->size(), 2u);
  auto m = onboard(p, hashes);
  ASSERT_TRUE(m) << m.status().to_string();
  ASSERT_EQ(m->size(), hashes.size());
  for (uint32_t i = 0; i < m->size(); ++i) EXPECT_TRUE(holds_chain_bytes(p, (*m)[i], 11, i)) << i;
}

TEST(DiskOnboard, ColdStartAfterKill9DuringWritesServesOnlyTheWritersBytes) {
  DiskDir dir;
  DaemonProcess d(disk_config(dir.file(), 64, 1024));
  d.start();
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  const size_t kill_after = 8 + rng() % 96;  // blocks seen sealed in the file
  SCOPED_TRACE("seed " + std::to_string(seed) + ": kill -9 after " + std::to_string(kill_after) +
               " blocks are on disk");
  std::mutex mu;
  std::vector<std::pair<uint64_t, std::vector<SequenceHash>>> chains;  // (salt, hashes)
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    try {
      Client c = connect_client(d);
      Pool p = pool_of(c);
      for (uint64_t salt = 1000; salt < 1200 && !stop;) {
        // Hashes are known before the register: a chain the daemon died under counts too.
        auto h = p.hash_tokens(
            [&] {
              std::vector<Token> t(4 * kPage);
              for (uint32_t i = 0; i < 4; ++i)
                for (uint32_t k = 0; k < kPage; ++k)
                  t[i * kPage + k] = static_cast<Token>(salt * 7919 + i * kPage + k);
              return t;
            }(),
            salt);
        if (!h) break;
        {
          std::lock_guard lk(mu);
          if (chains.empty() || chains.back().first != salt)
            chains.emplace_back(salt, h->sequence_hashes());
        }
        try {
          write_chain(p, salt, 4);
          ++salt;
        } catch (const HarnessError&) {
          // Every host block held by writes in flight (allocate refused), or the daemon died
          // under the call: try the chain again until the test says stop.
          c.flush();
        }
      }
    } catch (const std::exception&) {
      // The daemon died: what it wrote is what the test checks.
    }
  });
  // Whatever fails below, the writer stops and is joined.
  struct Join {
    std::atomic<bool>& stop;
    std::thread& t;
    ~Join() {
      stop = true;
      if (t.joinable()) t.join();
    }
  } join{stop, writer};
  wait_until([&] { return slots_in(dir.file()).size() >= kill_after; }, 30s,
             std::to_string(kill_after) + " blocks on disk", [&] { return d.stderr_text(); });
  d.kill(SIGKILL);
  ASSERT_TRUE(d.wait_exit(10s).has_value());
  stop = true;
  writer.join();
  // Whole on disk when it died (header and data): what a start must find again. A slot
  // whose write was cut short is torn: dropped, never served.
  const auto durable = slots_in(dir.file(), kBlockBytes);
  d.restart();  // no descriptor store: host memory starts empty
  auto v = d.view();
  EXPECT_EQ(v.counts().inactive, 0u) << "a cold start has no host cache";
  Client c = connect_client(d);
  Pool p = pool_of(c);
  size_t served = 0, owed = 0;
  for (const auto& [salt, hashes] : chains) {
    size_t durable_prefix = 0;
    while (durable_prefix < hashes.size() && durable.count(hashes[durable_prefix]))
      ++durable_prefix;
    auto m = onboard(p, hashes);
    ASSERT_TRUE(m) << m.status().to_string();
    EXPECT_GE(m->size(), durable_prefix) << "chain " << salt << ": sealed slots lost";
    for (uint32_t i = 0; i < m->size(); ++i) {
      EXPECT_EQ((*m)[i].sequence_hash(), hashes[i]);
      EXPECT_TRUE(holds_chain_bytes(p, (*m)[i], salt, i)) << "chain " << salt << " block " << i;
    }
    served += m->size();
    owed += durable_prefix;
  }
  EXPECT_GE(served, owed);
  EXPECT_GT(served, 0u);
}

TEST(DiskOnboard, FlippedBytesInTheFileAreNeverServed) {
  DiskDir dir;
  DaemonProcess d(disk_config(dir.file(), 64, 256));
  d.start();
  std::vector<SequenceHash> hashes;
  {
    Client c = connect_client(d);
    Pool p = pool_of(c);
    hashes = write_chain(p, 21, 6);
    wait_on_disk(d, dir.file(), hashes);
  }
  d.kill(SIGKILL);
  ASSERT_TRUE(d.wait_exit(10s).has_value());
  // One byte of block 3's data, in the file.
  const uint32_t slot = slots_in(dir.file()).at(hashes[3]);
  {
    shm::UniqueFd fd(::open(dir.file().c_str(), O_RDWR | O_CLOEXEC));
    ASSERT_TRUE(fd);
    dk::FileHeader fh{};
    ASSERT_EQ(::pread(fd.get(), &fh, sizeof(fh), 0), static_cast<ssize_t>(sizeof(fh)));
    const auto at =
        static_cast<off_t>(dk::slot_offset(fh.slot_bytes, slot) + dk::kSectorBytes + 100);
    uint8_t b = 0;
    ASSERT_EQ(::pread(fd.get(), &b, 1, at), 1);
    b ^= 0x40;
    ASSERT_EQ(::pwrite(fd.get(), &b, 1, at), 1);
    ASSERT_EQ(::fsync(fd.get()), 0);
  }
  d.restart();
  Client c = connect_client(d);
  Pool p = pool_of(c);
  auto m = onboard(p, hashes);
  ASSERT_TRUE(m) << m.status().to_string();
  ASSERT_EQ(m->size(), 3u) << "the prefix ends at the flipped block; " << d.stderr_text();
  for (uint32_t i = 0; i < 3; ++i) EXPECT_TRUE(holds_chain_bytes(p, (*m)[i], 21, i)) << i;
  const std::string log = d.stderr_text();
  EXPECT_TRUE(contains(log, "slot " + std::to_string(slot)) && contains(log, "checksum mismatch"))
      << log;
  // Dropped from the index: asked again, it is not read again, and still not served.
  auto again = onboard(p, hashes);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->size(), 3u);
}

// ---- reads held in flight ----------------------------------------------------------------

// The tier's I/O threads ("io": "threads"), stopped with ptrace until released: reads
// submitted meanwhile stay in flight. Stopped only while the tier is idle (no I/O queued)
// and every one of them sleeps: then none holds the queue's mutex, which the engine takes to
// submit (a thread stopped holding it would stop the engine too).
class StoppedIoThreads {
 public:
  explicit StoppedIoThreads(pid_t daemon) {
    wait_until(
        [&] {
          tids_ = io_threads(daemon);
          if (tids_.size() != 4) return false;
          for (pid_t t : tids_)
            if (proc_state("/proc/" + std::to_string(daemon) + "/task/" + std::to_string(t) +
                           "/stat") != 'S')
              return false;
          return true;
        },
        10s, "kvpoold's 4 kvpool-disk-io threads, asleep");
    for (pid_t t : tids_) {
      if (::ptrace(PTRACE_SEIZE, t, nullptr, nullptr) != 0)
        throw HarnessError(errno_text("PTRACE_SEIZE"));
      if (::ptrace(PTRACE_INTERRUPT, t, nullptr, nullptr) != 0)
        throw HarnessError(errno_text("PTRACE_INTERRUPT"));
      int st = 0;
      if (::waitpid(t, &st, __WALL) != t || !WIFSTOPPED(st))
        throw HarnessError("thread " + std::to_string(t) + " did not stop");
    }
  }
  ~StoppedIoThreads() { release(); }
  void release() {
    for (pid_t t : tids_) ::ptrace(PTRACE_DETACH, t, nullptr, nullptr);
    tids_.clear();
  }

 private:
  static std::vector<pid_t> io_threads(pid_t pid) {
    std::vector<pid_t> out;
    const std::string dir = "/proc/" + std::to_string(pid) + "/task";
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      if (read_file(e.path().string() + "/comm") == "kvpool-disk-io\n")
        out.push_back(static_cast<pid_t>(std::stol(e.path().filename().string())));
    }
    return out;
  }
  std::vector<pid_t> tids_;
};

// While an onboard's reads cannot complete (the I/O threads are stopped), another client
// and another thread of the same client are answered. The second half once hung: the
// client library held its receive lock for the whole wait of the onboard's answer, so the
// same client's next call waited behind it (libclient/src/connection.cpp: wait()).
TEST(DiskOnboard, AnotherClientIsAnsweredWhileOnboardReadsAreInFlight) {
  DiskDir dir;
  DaemonProcess d(disk_config(dir.file(), 64, 256, "threads"));
  d.start();
  Client a = connect_client(d);
  Pool pa = pool_of(a);
  const auto on_disk_only = write_chain(pa, 31, 8);
  wait_on_disk(d, dir.file(), on_disk_only);
  evict_from_host(d, pa, on_disk_only);
  Client b = connect_client(d);
  Pool pb = pool_of(b);
  const auto in_host = write_chain(pb, 32, 2);
  // The tier idle: both blocks written (their holds gone), nothing else held or queued.
  b.flush();
  wait_counts(d.view(), Want{-1, 0, 0, -1}, 20s);

  StoppedIoThreads stopped(d.pid());
  MatchOptions o;
  o.onboard = true;
  auto f = pa.match_sequence_hashes_async(on_disk_only, o);
  std::atomic<bool> answered{false};
  Result<std::vector<ImmutableBlock>> got = Status(ErrorCode::kInternal, "not answered");
  std::thread waiter([&] {
    got = f.get();
    answered = true;
  });
  // Whatever fails below, the threads run again and the waiter is joined.
  struct Finally {
    StoppedIoThreads& s;
    std::thread& t;
    ~Finally() {
      s.release();
      if (t.joinable()) t.join();
    }
  } finally{stopped, waiter};
  // A's requests are served in order: once its ping is answered, its onboard was taken and
  // its reads submitted, to threads that cannot run them.
  ASSERT_TRUE(a.ping().is_ok());
  auto host = pb.match_sequence_hashes(in_host);
  ASSERT_TRUE(host) << host.status().to_string();
  EXPECT_EQ(host->size(), 2u);
  auto own = pa.match_sequence_hashes(in_host);  // A's own next call too
  ASSERT_TRUE(own);
  EXPECT_EQ(own->size(), 2u);
  EXPECT_FALSE(answered.load()) << "the onboard cannot be answered while its reads are held";

  stopped.release();
  waiter.join();
  ASSERT_TRUE(got) << got.status().to_string();
  ASSERT_EQ(got->size(), on_disk_only.size());
  for (uint32_t i = 0; i < got->size(); ++i) EXPECT_TRUE(holds_chain_bytes(pa, (*got)[i], 31, i));
}

}  // namespace
}  // namespace kvpool::mptest
