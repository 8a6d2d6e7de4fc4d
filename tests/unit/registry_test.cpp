// The registry (registry.hpp): what the table holds and what subscribers hear agree.
#include "kvpool/pool/registry.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "formatted_arena.hpp"

namespace kvpool::pool {
namespace {

struct Heard : EventSink {
  std::vector<std::pair<uint32_t, size_t>> stored;  // (pool, batch size)
  std::vector<std::pair<uint32_t, uint64_t>> removed;
  void on_stored(uint32_t pool, std::span<const StoredBlock> b) override {
    stored.emplace_back(pool, b.size());
  }
  void on_removed(uint32_t pool, uint64_t h) override { removed.emplace_back(pool, h); }
};

TEST(Registry, InsertFindRemoveAndTheRemovedEvent) {
  FormattedArena a(8);
  Registry r(a.regions(), /*pool_index=*/3);
  Heard heard;
  r.set_sink(&heard);
  r.insert(0xABCD, 5);
  r.insert(0x1234, 6);
  EXPECT_EQ(r.size(), 2u);
  EXPECT_EQ(r.find(0xABCD), 5u);
  EXPECT_EQ(r.find(0x9999), kNone);
  EXPECT_TRUE(heard.removed.empty());  // inserting says nothing: its batch does
  r.remove(0xABCD);
  EXPECT_EQ(r.find(0xABCD), kNone);
  EXPECT_EQ(r.find(0x1234), 6u);
  EXPECT_EQ(r.size(), 1u);
  ASSERT_EQ(heard.removed.size(), 1u);
  EXPECT_EQ(heard.removed[0], std::make_pair(3u, uint64_t{0xABCD}));
}

TEST(Registry, OneStoredBatchPerCallAndNoneForAnEmptyOne) {
  FormattedArena a(8);
  Registry r(a.regions(), 1);
  Heard heard;
  r.set_sink(&heard);
  std::vector<StoredBlock> batch(3);
  r.publish_stored(batch);
  r.publish_stored({});
  ASSERT_EQ(heard.stored.size(), 1u);
  EXPECT_EQ(heard.stored[0], std::make_pair(1u, size_t{3}));
}

TEST(Registry, WorksWithoutASink) {
  FormattedArena a(4);
  Registry r(a.regions(), 0);
  r.insert(7, 1);
  r.remove(7);
  r.publish_stored(std::vector<StoredBlock>(1));
  EXPECT_EQ(r.size(), 0u);
}

}  // namespace
}  // namespace kvpool::pool
