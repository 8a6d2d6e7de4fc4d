// The pool core against Dynamo 0.2.1's BlockPool behaviour (reference/dynamo_block_pool.rs)
// and a randomized model check.
#include "kvpool/pool/pool_core.hpp"

#include "kvpool/core/block_state.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <tuple>
#include <vector>

namespace kvpool::pool {
namespace {

struct RecordingSink : EventSink {
  std::vector<std::vector<StoredBlock>> stored;
  std::vector<uint64_t> removed;
  void on_stored(uint32_t, std::span<const StoredBlock> b) override {
    stored.emplace_back(b.begin(), b.end());
  }
  void on_removed(uint32_t, uint64_t h) override { removed.push_back(h); }
};

// An arena on the heap, as an embedded user would have it.
class HeapPool {
 public:
  explicit HeapPool(uint32_t blocks, uint32_t owners = 4, uint32_t holds = 0) {
    PoolCoreConfig c{blocks, owners, holds};
    auto bytes = PoolCore::arena_bytes(c);
    EXPECT_TRUE(bytes.is_ok());
    mem_ = static_cast<char*>(std::aligned_alloc(64, (*bytes + 63) / 64 * 64));
    auto core = PoolCore::create(mem_, *bytes, c, 0, "g2");
    EXPECT_TRUE(core.is_ok()) << core.status().to_string();
    core_ = std::move(core.value());
    core_.set_event_sink(&sink);
  }
  ~HeapPool() { std::free(mem_); }
  PoolCore* operator->() { return &core_; }
  PoolCore& core() { return core_; }

  std::vector<BlockRef> allocate(uint32_t n, uint32_t owner = 0) {
    std::vector<BlockRef> out(n);
    Status s = core_.allocate(owner, n, out.data());
    EXPECT_TRUE(s.is_ok()) << s.to_string();
    return out;
  }
  // Registers blocks with the given hashes (no parent) at a priority.
  std::vector<BlockRef> register_hashes(const std::vector<BlockRef>& blocks,
                                        const std::vector<uint64_t>& hashes, uint32_t owner = 0,
                                        uint32_t priority = 0) {
    std::vector<RegisterItem> items;
    for (size_t i = 0; i < blocks.size(); ++i)
      items.push_back(RegisterItem{blocks[i], hashes[i], hashes[i] ^ 0x55, 0, priority, 0});
    std::vector<BlockRef> out(blocks.size());
    Status s = core_.register_blocks(owner, items, out.data());
    EXPECT_TRUE(s.is_ok()) << s.to_string();
    return out;
  }
  std::vector<BlockRef> match(const std::vector<uint64_t>& hashes, uint32_t owner = 0) {
    std::vector<BlockRef> out(hashes.size());
    auto n = core_.match(owner, hashes, out.data());
    EXPECT_TRUE(n.is_ok());
    out.resize(*n);
    return out;
  }
  void expect_sound() {
    Status s = core_.check_invariants();
    EXPECT_TRUE(s.is_ok()) << s.to_string();
  }
  RecordingSink sink;

 private:
  char* mem_ = nullptr;
  PoolCore core_;
};

uint32_t available(PoolCore& c) { return c.counts().free + c.counts().inactive; }

// test_block_pool_state / test_block_pool: 7 blocks, allocate 1 leaves 6, dropping returns it.
TEST(PoolCore, AllocateAndDropReturnsToFreeSet) {
  HeapPool p(7);
  EXPECT_EQ(available(p.core()), 7u);
  auto b = p.allocate(1);
  EXPECT_EQ(available(p.core()), 6u);
  ASSERT_TRUE(p->release_mutable(0, b).is_ok());
  EXPECT_EQ(available(p.core()), 7u);
  auto again = p.allocate(1);
  EXPECT_EQ(available(p.core()), 6u);
  // FIFO: the first free block went to the tail, so the next one is a different block.
  EXPECT_NE(again[0].id, b[0].id);
  p.expect_sound();
}

// test_block_pool_blocking: nothing matches at first; register; drop; match finds it.
TEST(PoolCore, RegisterDropMatch) {
  constexpr uint64_t kHash = 14643705804678351452ull;
  HeapPool p(7);
  EXPECT_TRUE(p.match({kHash}).empty());
  auto b = p.allocate(1);
  auto imm = p.register_hashes(b, {kHash});
  ASSERT_EQ(imm.size(), 1u);
  EXPECT_EQ(imm[0], b[0]);
  EXPECT_EQ(p->block(imm[0].id).sequence_hash, kHash);
  EXPECT_EQ(p->counts().active, 1u);
  ASSERT_TRUE(p->release_immutable(0, imm).is_ok());
  EXPECT_EQ(p->counts().inactive, 1u);
  auto m = p.match({kHash});
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(p->block(m[0].id).sequence_hash, kHash);
  EXPECT_EQ(p->counts().active, 1u);
  p.expect_sound();
}

// test_block_pool_blocking end to end with the token state machine: page size 4, salt 1337.
TEST(PoolCore, DynamoBlockingTestWithTokenState) {
  constexpr uint64_t kExpected = 14643705804678351452ull;
  HeapPool p(7);
  EXPECT_TRUE(p.match({kExpected}).empty());
  auto b = p.allocate(1);
  EXPECT_EQ(available(p.core()), 6u);
  BlockState st(4);
  ASSERT_TRUE(st.init_sequence(1337).is_ok());
  for (Token t : {1u, 2u, 3u, 4u}) ASSERT_TRUE(st.add_token(t).is_ok());
  EXPECT_EQ(st.add_token(5).code(), ErrorCode::kBlockFull);
  ASSERT_TRUE(st.commit().is_ok());
  EXPECT_TRUE(st.is_complete());
  ASSERT_EQ(*st.sequence_hash(), kExpected);
  RegisterItem item{b[0], *st.sequence_hash(), *st.block_hash(), 0, 0, 0};
  std::vector<BlockRef> out(1);
  ASSERT_TRUE(p->register_blocks(0, {&item, 1}, out.data()).is_ok());
  EXPECT_EQ(p->block(out[0].id).sequence_hash, kExpected);
  ASSERT_TRUE(p->release_immutable(0, out).is_ok());  // drop: inactive, still matchable
  auto m = p.match({kExpected});
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(p->block(m[0].id).sequence_hash, kExpected);
}

// Dynamo's priority-key order: (p0,t2), (p1,t1), (p0,t3) are evicted (p0,t2), (p0,t3), (p1,t1).
TEST(PoolCore, EvictionFollowsPriorityThenReturnTick) {
  HeapPool p(3);
  auto blocks = p.allocate(3);
  auto a = p.register_hashes({blocks[0]}, {100}, 0, /*priority=*/0);
  auto b = p.register_hashes({blocks[1]}, {200}, 0, /*priority=*/1);
  auto c = p.register_hashes({blocks[2]}, {300}, 0, /*priority=*/0);
  ASSERT_TRUE(p->release_immutable(0, b).is_ok());  // t1
  ASSERT_TRUE(p->release_immutable(0, a).is_ok());  // t2
  ASSERT_TRUE(p->release_immutable(0, c).is_ok());  // t3
  p.sink.removed.clear();
  for (int i = 0; i < 3; ++i) p.allocate(1);
  EXPECT_EQ(p.sink.removed, (std::vector<uint64_t>{100, 300, 200}));
  p.expect_sound();
}

// A batch release returns the tail first, so the tail is evicted before its parents.
TEST(PoolCore, BatchReleaseEvictsTailFirst) {
  HeapPool p(3);
  auto imm = p.register_hashes(p.allocate(3), {1, 2, 3});
  ASSERT_TRUE(p->release_immutable(0, imm).is_ok());
  p.sink.removed.clear();
  p.allocate(3);
  EXPECT_EQ(p.sink.removed, (std::vector<uint64_t>{3, 2, 1}));
}

// Lifecycle: 10 blocks; a 2-block sequence registered, returned, matched again; allocating
// all 10 evicts both.
TEST(PoolCore, LifecycleReturnedBlocksMatchUntilEvicted) {
  HeapPool p(10);
  auto imm = p.register_hashes(p.allocate(2), {11, 22});
  EXPECT_EQ(p->counts().free, 8u);
  ASSERT_TRUE(p->release_immutable(0, imm).is_ok());
  EXPECT_EQ(p->counts().inactive, 2u);
  auto m = p.match({11, 22});
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0], imm[0]);
  EXPECT_EQ(m[1], imm[1]);
  ASSERT_TRUE(p->release_immutable(0, m).is_ok());
  auto all = p.allocate(10);
  EXPECT_EQ(all.size(), 10u);
  EXPECT_EQ(p.sink.removed.size(), 2u);
  EXPECT_TRUE(p.match({11}).empty());
  // The evicted blocks were reused: their old handles are stale now.
  EXPECT_EQ(p->release_immutable(0, imm).code(), ErrorCode::kInvalidHandle);
  p.expect_sound();
}

TEST(PoolCore, OneStoredBatchPerRegisterCallAndNoneForDuplicates) {
  HeapPool p(8, 2);
  auto first = p.register_hashes(p.allocate(3), {1, 2, 3});
  ASSERT_EQ(p.sink.stored.size(), 1u);
  EXPECT_EQ(p.sink.stored[0].size(), 3u);
  // Same hashes from another owner: deduplicated, no new Stored event.
  auto dup = p.register_hashes(p.allocate(3, 1), {1, 2, 3}, 1);
  EXPECT_EQ(p.sink.stored.size(), 1u);
  EXPECT_EQ(dup, first);
  EXPECT_EQ(p->block(first[0].id).refcount, 2u);
  EXPECT_EQ(p->counts().free, 5u);  // owner 1's blocks were recycled
  // Mixed batch: one new hash, one duplicate -> one batch of one.
  auto mixed = p.register_hashes(p.allocate(2), {3, 4});
  ASSERT_EQ(p.sink.stored.size(), 2u);
  ASSERT_EQ(p.sink.stored[1].size(), 1u);
  EXPECT_EQ(p.sink.stored[1][0].sequence_hash, 4u);
  EXPECT_TRUE(p.sink.removed.empty());
  p.expect_sound();
}

TEST(PoolCore, RegisterPromotesInactiveBlock) {
  HeapPool p(4);
  auto imm = p.register_hashes(p.allocate(1), {42});
  ASSERT_TRUE(p->release_immutable(0, imm).is_ok());
  EXPECT_EQ(p->counts().inactive, 1u);
  auto again = p.register_hashes(p.allocate(1), {42});
  EXPECT_EQ(again[0], imm[0]);
  EXPECT_EQ(p->counts().inactive, 0u);
  EXPECT_EQ(p->counts().active, 1u);
  EXPECT_EQ(p->counts().free, 3u);
  p.expect_sound();
}

TEST(PoolCore, StoredEventCarriesParentAndHashes) {
  HeapPool p(4);
  auto b = p.allocate(2);
  std::vector<RegisterItem> items{{b[0], 10, 11, 0, 3, 0}, {b[1], 20, 21, 10, 3, 1}};
  std::vector<BlockRef> out(2);
  ASSERT_TRUE(p->register_blocks(0, items, out.data()).is_ok());
  ASSERT_EQ(p.sink.stored.size(), 1u);
  const auto& ev = p.sink.stored[0];
  EXPECT_FALSE(ev[0].has_parent);
  EXPECT_TRUE(ev[1].has_parent);
  EXPECT_EQ(ev[1].parent_hash, 10u);
  EXPECT_EQ(ev[1].block_hash, 21u);
  EXPECT_EQ(ev[1].priority, 3u);
}

TEST(PoolCore, MatchStopsAtFirstMiss) {
  HeapPool p(8);
  p.register_hashes(p.allocate(3), {1, 2, 3});
  EXPECT_EQ(p.match({1, 2, 99, 3}).size(), 2u);
  EXPECT_EQ(p.match({99, 1}).size(), 0u);
  EXPECT_EQ(p->stats().match_queries.load(), 6u);
  EXPECT_EQ(p->stats().match_hits.load(), 2u);
}

TEST(PoolCore, AllocateIsAllOrNothing) {
  HeapPool p(4);
  auto held = p.allocate(3);
  std::vector<BlockRef> out(2);
  Status s = p->allocate(0, 2, out.data());
  EXPECT_EQ(s.code(), ErrorCode::kNotEnoughBlocks);
  EXPECT_NE(s.message().find("1 free or evictable blocks, 2 requested"), std::string::npos)
      << s.message();
  EXPECT_EQ(p->counts().free, 1u);
  p.expect_sound();
}

TEST(PoolCore, RejectsBadHandlesAndChangesNothing) {
  HeapPool p(8, 2);
  auto mine = p.allocate(2, 0);
  auto theirs = p.allocate(1, 1);
  std::vector<BlockRef> out(2);
  auto reg = [&](std::vector<RegisterItem> items) {
    return p->register_blocks(0, items, out.data()).code();
  };
  // Another owner's block.
  EXPECT_EQ(reg({{theirs[0], 1, 1, 0, 0, 0}}), ErrorCode::kInvalidHandle);
  // Unknown id, stale generation.
  EXPECT_EQ(reg({{BlockRef{999, 1}, 1, 1, 0, 0, 0}}), ErrorCode::kInvalidHandle);
  EXPECT_EQ(reg({{BlockRef{mine[0].id, mine[0].generation + 1}, 1, 1, 0, 0, 0}}),
            ErrorCode::kInvalidHandle);
  // The same block twice in one batch; a good item before a bad one changes nothing.
  EXPECT_EQ(reg({{mine[0], 1, 1, 0, 0, 0}, {mine[0], 2, 2, 0, 0, 0}}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(reg({{mine[0], 1, 1, 0, 0, 0}, {theirs[0], 2, 2, 0, 0, 0}}), ErrorCode::kInvalidHandle);
  EXPECT_EQ(p->counts().active, 0u);
  EXPECT_EQ(p->counts().mutable_blocks, 3u);
  // Releasing what one does not hold.
  EXPECT_EQ(p->release_mutable(0, theirs).code(), ErrorCode::kInvalidHandle);
  EXPECT_EQ(p->release_immutable(0, mine).code(), ErrorCode::kInvalidHandle);
  EXPECT_EQ(p->counts().mutable_blocks, 3u);
  // Owner out of range.
  EXPECT_EQ(p->allocate(7, 1, out.data()).code(), ErrorCode::kInvalidArgument);
  // A registered block cannot be registered again through its immutable handle.
  auto imm = p.register_hashes({mine[0]}, {5});
  EXPECT_EQ(reg({{imm[0], 6, 6, 0, 0, 0}}), ErrorCode::kInvalidHandle);
  // Another owner cannot release my reference.
  EXPECT_EQ(p->release_immutable(1, imm).code(), ErrorCode::kInvalidHandle);
  EXPECT_EQ(p->block(imm[0].id).refcount, 1u);
  EXPECT_GT(p->stats().rejected_handles.load(), 0u);
  p.expect_sound();
}

TEST(PoolCore, ReleaseOwnerReturnsEverythingItHeld) {
  HeapPool p(16, 3);
  auto shared = p.register_hashes(p.allocate(4, 0), {1, 2, 3, 4}, 0);
  p.match({1, 2, 3, 4}, 1);
  p.match({1, 2}, 1);  // owner 1 holds 1 and 2 twice
  p.allocate(3, 1);    // and three mutable blocks
  EXPECT_EQ(p->block(shared[0].id).refcount, 3u);
  uint32_t returned = p->release_owner(1);
  EXPECT_EQ(returned, 3u + 4u);
  EXPECT_EQ(p->block(shared[0].id).refcount, 1u);  // owner 0's reference is untouched
  EXPECT_EQ(p->counts().active, 4u);
  EXPECT_EQ(p->counts().mutable_blocks, 0u);
  EXPECT_EQ(p->owner_record(1).hold_refs, 0u);
  EXPECT_EQ(p->release_owner(0), 4u);
  EXPECT_EQ(p->counts().inactive, 4u);
  EXPECT_EQ(p->counts().free, 12u);
  p.expect_sound();
}

TEST(PoolCore, HoldCapacityIsEnforcedWithAClearError) {
  HeapPool p(8, 2, /*holds=*/2);
  p.register_hashes(p.allocate(2), {1, 2});
  std::vector<BlockRef> out(1);
  auto r = p->match(1, std::vector<uint64_t>{1}, out.data());
  EXPECT_EQ(r.status().code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("max_holds"), std::string::npos);
  p.expect_sound();
}

TEST(PoolCore, ArenaValidation) {
  EXPECT_FALSE(PoolCore::arena_bytes({0, 1, 0}).is_ok());
  EXPECT_FALSE(PoolCore::arena_bytes({8, 0, 0}).is_ok());
  auto bytes = PoolCore::arena_bytes({8, 1, 0});
  ASSERT_TRUE(bytes.is_ok());
  std::vector<char> small(64);
  EXPECT_FALSE(PoolCore::create(small.data(), small.size(), {8, 1, 0}).is_ok());
  alignas(64) static char garbage[4096] = {};
  EXPECT_EQ(PoolCore::attach(garbage, sizeof(garbage)).status().code(),
            ErrorCode::kVersionMismatch);
}

TEST(PoolCore, MetadataStaysWithinBudget) {
  // 64 bytes of block metadata, plus a registry slot, a heap slot and a checksum per block.
  auto bytes = PoolCore::arena_bytes({1u << 20, 1, 1});
  ASSERT_TRUE(bytes.is_ok());
  double per_block = static_cast<double>(*bytes) / (1u << 20);
  EXPECT_LE(per_block, 64 + 32 + 4 + 8 + 1);
}

// ---- per-block checksums: stored with the registration, poisoned on a mismatch ----------

std::vector<BlockRef> register_checksummed(HeapPool& p, const std::vector<BlockRef>& blocks,
                                           const std::vector<uint64_t>& hashes, uint64_t checksum,
                                           uint32_t owner = 0) {
  std::vector<RegisterItem> items;
  for (size_t i = 0; i < blocks.size(); ++i)
    items.push_back(RegisterItem{blocks[i], hashes[i], hashes[i] ^ 0x55, 0, 0, 0, checksum + i});
  std::vector<BlockRef> out(blocks.size());
  Status s = p->register_blocks(owner, items, out.data());
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  return out;
}

TEST(PoolCore, ChecksumIsKeptFromRegisterUntilTheBlockIsAllocatedAgain) {
  HeapPool p(2);
  auto imm = register_checksummed(p, p.allocate(1), {11}, 700);
  EXPECT_EQ(p->checksum(imm[0].id), 700u);
  // A deduplicated registration keeps the existing block's checksum: the same tokens may
  // have been computed into other bytes by another worker.
  auto dup = register_checksummed(p, p.allocate(1, 1), {11}, 900, 1);
  EXPECT_EQ(dup[0], imm[0]);
  EXPECT_EQ(p->checksum(imm[0].id), 700u);
  // Without the option, no checksum.
  ASSERT_TRUE(p->release_immutable(1, dup).is_ok());
  auto plain = p.register_hashes(p.allocate(1), {12});
  EXPECT_EQ(p->checksum(plain[0].id), 0u);
  // Evicted and handed out again: the new owner's bytes have none.
  ASSERT_TRUE(p->release_immutable(0, imm).is_ok());
  ASSERT_TRUE(p->release_immutable(0, plain).is_ok());
  auto again = p.allocate(2);
  for (auto r : again) EXPECT_EQ(p->checksum(r.id), 0u);
  EXPECT_EQ(p->stats().checksum_verified.load(), 0u);
  p.expect_sound();
}

TEST(PoolCore, MatchingChecksumChangesNothingButTheCount) {
  HeapPool p(4);
  auto imm = register_checksummed(p, p.allocate(1), {21}, 500);
  ASSERT_TRUE(p->release_immutable(0, imm).is_ok());
  EXPECT_EQ(p->record_checksum(imm[0].id, 500), proto::ChecksumOutcome::kOk);
  EXPECT_EQ(p->stats().checksum_verified.load(), 1u);
  EXPECT_EQ(p->stats().checksum_mismatches.load(), 0u);
  EXPECT_TRUE(p->registered(imm[0].id));
  EXPECT_EQ(p->counts().inactive, 1u);
  EXPECT_EQ(p.match({21}).size(), 1u);
  EXPECT_TRUE(p.sink.removed.empty());
  p.expect_sound();
}

TEST(PoolCore, InactiveBlockThatFailsItsChecksumIsFreedAtOnce) {
  HeapPool p(4);
  auto imm = register_checksummed(p, p.allocate(2), {31, 32}, 600);
  ASSERT_TRUE(p->release_immutable(0, imm).is_ok());
  ASSERT_EQ(p->counts().inactive, 2u);
  EXPECT_EQ(p->record_checksum(imm[0].id, 12345), proto::ChecksumOutcome::kMismatch);
  EXPECT_EQ(p->stats().checksum_mismatches.load(), 1u);
  EXPECT_EQ(p->block(imm[0].id).state, static_cast<uint8_t>(BlockStateCode::kFree));
  EXPECT_FALSE(p->poisoned(imm[0].id));  // free: nothing left to mark
  EXPECT_EQ(p->counts().inactive, 1u);
  EXPECT_EQ(p->counts().free, 3u);
  EXPECT_TRUE(p.match({31}).empty());  // gone from the registry, announced as removed
  ASSERT_EQ(p.sink.removed, std::vector<uint64_t>{31});
  EXPECT_EQ(p.match({32}).size(), 1u);  // its neighbour is untouched
  p.expect_sound();
}

TEST(PoolCore, ActiveBlockThatFailsStaysWithItsHoldersThenGoesFree) {
  HeapPool p(6);
  auto imm = register_checksummed(p, p.allocate(1), {41}, 800);
  auto other = p.match({41}, 1);  // a second holder
  ASSERT_EQ(other.size(), 1u);
  EXPECT_EQ(p->record_checksum(imm[0].id, 1), proto::ChecksumOutcome::kMismatch);
  EXPECT_TRUE(p->poisoned(imm[0].id));
  EXPECT_FALSE(p->registered(imm[0].id));
  EXPECT_EQ(p->counts().active, 1u);  // still readable by both holders
  EXPECT_TRUE(p->check_held(1, other[0]).is_ok());
  EXPECT_TRUE(p.match({41}, 2).empty());
  ASSERT_EQ(p.sink.removed, std::vector<uint64_t>{41});
  p.expect_sound();
  // The hash may be registered afresh, on another block, while the poisoned one is held.
  auto fresh = register_checksummed(p, p.allocate(1, 2), {41}, 801, 2);
  EXPECT_NE(fresh[0].id, imm[0].id);
  p.expect_sound();
  // Last reference gone: free, never inactive (nothing may find its bytes again).
  ASSERT_TRUE(p->release_immutable(0, imm).is_ok());
  EXPECT_TRUE(p->poisoned(imm[0].id));
  EXPECT_EQ(p->release_owner(1), 1u);
  EXPECT_EQ(p->block(imm[0].id).state, static_cast<uint8_t>(BlockStateCode::kFree));
  EXPECT_EQ(p->counts().inactive, 0u);
  EXPECT_EQ(p.match({41}, 2).size(), 1u);  // the fresh registration
  EXPECT_EQ(p.match({41}, 2)[0].id, fresh[0].id);
  p.expect_sound();
}

TEST(PoolCore, InvariantsRefuseAPoisonedBlockInTheRegistry) {
  HeapPool p(4);
  auto imm = register_checksummed(p, p.allocate(1), {51}, 900);
  p.expect_sound();
  // What a bug that poisons without unregistering would leave (simulated in the arena).
  const_cast<BlockMeta&>(p->block(imm[0].id)).flags |= kFlagPoisoned;
  Status s = p->check_invariants();
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("poisoned block"), std::string::npos) << s.message();
}

// Random operations against a plain model; counts add up and invariants hold throughout.
TEST(PoolCore, RandomizedModelCheck) {
  constexpr uint32_t kBlocks = 64, kOwners = 4;
  HeapPool p(kBlocks, kOwners);
  std::mt19937_64 rng(12345);
  struct OwnerModel {
    std::vector<BlockRef> mut;
    std::vector<BlockRef> imm;  // one entry per reference
  };
  std::vector<OwnerModel> owners(kOwners);
  std::set<uint64_t> registered;  // hashes the model believes are registered
  std::map<uint64_t, uint32_t> hash_of_block;
  for (int step = 0; step < 20000; ++step) {
    uint32_t o = rng() % kOwners;
    OwnerModel& om = owners[o];
    uint64_t h = 1 + rng() % 96;  // small hash space: plenty of dedup and hits
    switch (rng() % 6) {
      case 0: {
        uint32_t n = 1 + rng() % 6;
        uint32_t avail = available(p.core());
        std::vector<BlockRef> out(n);
        Status s = p->allocate(o, n, out.data());
        ASSERT_EQ(s.is_ok(), n <= avail);
        if (s.is_ok()) {
          for (auto r : out) {
            // An evicted block's hash is no longer registered.
            const BlockMeta& b = p->block(r.id);
            (void)b;
            auto it = hash_of_block.find(r.id);
            if (it != hash_of_block.end()) {
              registered.erase(it->second);
              hash_of_block.erase(it);
            }
            om.mut.push_back(r);
          }
        }
        break;
      }
      case 1: {
        if (om.mut.empty()) break;
        BlockRef b = om.mut.back();
        om.mut.pop_back();
        std::vector<BlockRef> out(1);
        RegisterItem it{b, h, h, 0, static_cast<uint32_t>(rng() % 3), 0};
        ASSERT_TRUE(p->register_blocks(o, {&it, 1}, out.data()).is_ok());
        if (registered.count(h)) {
          ASSERT_NE(out[0].id, b.id);  // deduplicated onto the existing block
        } else {
          ASSERT_EQ(out[0], b);
          registered.insert(h);
          hash_of_block[b.id] = h;
        }
        ASSERT_EQ(p->block(out[0].id).sequence_hash, h);
        om.imm.push_back(out[0]);
        break;
      }
      case 2: {
        std::vector<uint64_t> q{h, 1 + rng() % 96, 1 + rng() % 96};
        size_t expect = 0;
        while (expect < q.size() && registered.count(q[expect])) ++expect;
        auto m = p.match(q, o);
        ASSERT_EQ(m.size(), expect);
        for (auto r : m) om.imm.push_back(r);
        break;
      }
      case 3:
        if (!om.mut.empty()) {
          size_t i = rng() % om.mut.size();
          ASSERT_TRUE(p->release_mutable(o, {&om.mut[i], 1}).is_ok());
          om.mut.erase(om.mut.begin() + i);
        }
        break;
      case 4:
        if (!om.imm.empty()) {
          size_t i = rng() % om.imm.size();
          ASSERT_TRUE(p->release_immutable(o, {&om.imm[i], 1}).is_ok());
          om.imm.erase(om.imm.begin() + i);
        }
        break;
      case 5:
        if (rng() % 20 == 0) {  // a client dies
          p->release_owner(o);
          om = OwnerModel{};
        }
        break;
    }
    PoolCounts c = p->counts();
    ASSERT_EQ(c.free + c.mutable_blocks + c.active + c.inactive, kBlocks);
    size_t mut_total = 0;
    for (auto& m : owners) mut_total += m.mut.size();
    ASSERT_EQ(c.mutable_blocks, mut_total);
    if (step % 97 == 0) {
      Status s = p->check_invariants();
      ASSERT_TRUE(s.is_ok()) << "step " << step << ": " << s.to_string();
    }
  }
  for (uint32_t o = 0; o < kOwners; ++o) p->release_owner(o);
  EXPECT_EQ(p->counts().active, 0u);
  EXPECT_EQ(p->counts().mutable_blocks, 0u);
  p.expect_sound();
}

}  // namespace
}  // namespace kvpool::pool
