// kvpool-peer's pieces that need no network: the cluster key's challenge-response, the
// directory built from announcements and KV events, and the page map (tools/kvpool-peer).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "auth.hpp"
#include "directory.hpp"
#include "prefault.hpp"

namespace kvpool::peer {
namespace {

std::string stored(int64_t worker, std::initializer_list<uint64_t> seqs) {
  std::string blocks;
  for (uint64_t s : seqs) {  // piecewise: g++ 12 -O3's false -Wrestrict on "," + string
    if (!blocks.empty()) blocks += ',';
    blocks.append("{\"block_hash\":").append(std::to_string(s)).append(",\"tokens_hash\":1}");
  }
  return "{\"worker_id\":" + std::to_string(worker) +
         ",\"event\":{\"event_id\":1,\"data\":{\"stored\":{\"parent_hash\":null,\"blocks\":[" +
         blocks + "]}}}}";
}

std::string removed(int64_t worker, uint64_t seq) {
  return "{\"worker_id\":" + std::to_string(worker) +
         ",\"event\":{\"event_id\":2,\"data\":{\"removed\":{\"block_hashes\":[" +
         std::to_string(seq) + "]}}}}";
}

std::string announce(int64_t worker, const std::string& name, uint64_t epoch) {
  return "{\"worker_id\":" + std::to_string(worker) + ",\"name\":\"" + name +
         "\",\"address\":\"10.0.0." + std::to_string(worker) +
         ":13337\",\"epoch\":" + std::to_string(epoch) + ",\"pools\":{}}";
}

TEST(PeerAuth, BothSidesAgreeOnlyWithTheSameKey) {
  auto a = ClusterKey::from_bytes("0123456789abcdef-cluster");
  auto b = ClusterKey::from_bytes("0123456789abcdef-cluster\n");  // a trailing newline is not key
  auto other = ClusterKey::from_bytes("0123456789abcdef-another");
  ASSERT_TRUE(a && b && other);
  const Nonce nf = random_nonce(), nh = random_nonce();
  EXPECT_TRUE(macs_equal(a->holder_mac(nf, nh).data(), b->holder_mac(nf, nh)));
  EXPECT_FALSE(macs_equal(a->holder_mac(nf, nh).data(), other->holder_mac(nf, nh)));
  // The two directions differ, so a holder's proof cannot be replayed as a fetcher's.
  EXPECT_FALSE(macs_equal(a->holder_mac(nf, nh).data(), a->fetcher_mac(nh, nf)));
  // Fresh nonces give fresh proofs.
  EXPECT_FALSE(macs_equal(a->holder_mac(nf, nh).data(), a->holder_mac(random_nonce(), nh)));
}

TEST(PeerAuth, ShortKeysAreRefused) {
  auto k = ClusterKey::from_bytes("short\n");
  ASSERT_FALSE(k);
  EXPECT_EQ(k.status().code(), ErrorCode::kConfigError);
}

TEST(PeerDirectory, StoredRemovedAndClearedMoveTheIndex) {
  Directory d(1000, 60000, /*self=*/9);
  d.on_announce(announce(1, "A", 77));
  d.on_kv_event(stored(1, {100, 101}));
  auto h = d.holder_of(101, "B");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->address, "10.0.0.1:13337");
  EXPECT_EQ(h->epoch, 77u);
  d.on_kv_event(removed(1, 101));
  EXPECT_FALSE(d.holder_of(101, "B"));
  EXPECT_TRUE(d.holder_of(100, "B"));
  d.on_kv_event("{\"worker_id\":1,\"event\":{\"event_id\":3,\"data\":\"cleared\"}}");
  EXPECT_FALSE(d.holder_of(100, "B"));
}

TEST(PeerDirectory, OwnEventsAndUnknownPeersAreNotHolders) {
  Directory d(1000, 60000, /*self=*/9);
  d.on_kv_event(stored(9, {5}));  // this host's own
  d.on_kv_event(stored(2, {6}));  // a worker that never announced an address
  EXPECT_FALSE(d.holder_of(5, "B"));
  EXPECT_FALSE(d.holder_of(6, "B"));
  d.on_announce(announce(2, "C", 1));
  EXPECT_TRUE(d.holder_of(6, "B"));
  EXPECT_FALSE(d.holder_of(6, "C")) << "a host is never its own peer";
}

TEST(PeerDirectory, ANewEpochForgetsWhatThePeerHeld) {
  Directory d(1000, 60000, 9);
  d.on_announce(announce(1, "A", 1));
  d.on_kv_event(stored(1, {100}));
  d.on_announce(announce(1, "A", 2));  // restarted
  EXPECT_FALSE(d.holder_of(100, "B"));
  d.on_kv_event(stored(1, {100}));
  EXPECT_EQ(d.holder_of(100, "B")->epoch, 2u);
  d.forget_epoch("10.0.0.1:13337", 2);
  EXPECT_FALSE(d.holder_of(100, "B"));
}

TEST(PeerDirectory, TheIndexIsBoundedOldestFirst) {
  Directory d(3, 60000, 9);
  d.on_announce(announce(1, "A", 1));
  d.on_kv_event(stored(1, {1, 2, 3, 4, 5}));
  EXPECT_EQ(d.indexed(), 3u);
  EXPECT_FALSE(d.holder_of(1, "B"));
  EXPECT_FALSE(d.holder_of(2, "B"));
  EXPECT_TRUE(d.holder_of(5, "B"));
}

TEST(PeerDirectory, SilentPeersAreDropped) {
  Directory d(1000, /*peer_timeout_ms=*/0, 9);  // everyone is silent at once
  d.on_announce(announce(1, "A", 1));
  d.on_kv_event(stored(1, {100}));
  d.expire();
  EXPECT_FALSE(d.holder_of(100, "B"));
  EXPECT_EQ(d.indexed(), 0u);
}

// Resident pages of [p, p + bytes) of a memfd mapping (mincore: a page of the file exists).
size_t resident_pages(const std::byte* p, size_t bytes) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> v(bytes / page);
  if (::mincore(const_cast<std::byte*>(p), bytes, v.data()) != 0) return SIZE_MAX;
  size_t n = 0;
  for (unsigned char c : v) n += c & 1;
  return n;
}

// A memfd has no pages until they are touched; populating a block creates (and maps) them.
// The map populates each block once per use: a block whose pages were punched out after
// its populate is not populated again (so a fetch does not walk mapped pages every time).
TEST(PageMap, PopulatesEachBlockOnceForItsUse) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t block = 4 * page, blocks = 4;
  const int fd = ::memfd_create("kvpool-pagemap-test", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(block * blocks)), 0);
  void* m = ::mmap(nullptr, block * blocks, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(m, MAP_FAILED);
  auto* base = static_cast<std::byte*>(m);
  auto run = [&](uint32_t b) { return ByteRun{base + b * block, block}; };
  ASSERT_EQ(resident_pages(base, block * blocks), 0u);

  PageMap map(blocks);
  map.populate({1, 3}, {run(1), run(3)}, /*for_write=*/true);
  if (resident_pages(base + block, block) == 0) GTEST_SKIP() << "no MADV_POPULATE (kernel < 5.14)";
  EXPECT_EQ(resident_pages(base + block, block), 4u);
  EXPECT_EQ(resident_pages(base + 3 * block, block), 4u);
  EXPECT_EQ(resident_pages(base, block), 0u);
  EXPECT_EQ(resident_pages(base + 2 * block, block), 0u);

  // Block 1's pages go; the map remembers block 1 (for writing, which covers reading) and
  // leaves it, while block 2 is new and is populated.
  ASSERT_EQ(::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, block, block), 0);
  ASSERT_EQ(resident_pages(base + block, block), 0u);
  map.populate({1, 2}, {run(1), run(2)}, /*for_write=*/false);
  EXPECT_EQ(resident_pages(base + block, block), 0u);
  EXPECT_EQ(resident_pages(base + 2 * block, block), 4u);
  // Block ids past the map are left alone (not an error).
  map.populate({7}, {run(0)}, /*for_write=*/true);
  EXPECT_EQ(resident_pages(base, block), 0u);
  ::munmap(m, block * blocks);
  ::close(fd);
}

}  // namespace
}  // namespace kvpool::peer
