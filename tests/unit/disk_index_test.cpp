// The disk index's eviction order (daemon/disk/disk_index.hpp): a write counts as a use when
// it starts, so the order does not depend on which of the writes in flight completes first.
#include <gtest/gtest.h>

#include <vector>

#include "daemon/disk/disk_index.hpp"

namespace kvpool::daemon::disk {
namespace {

uint32_t claim(DiskIndex& ix, uint64_t hash) {
  uint64_t evicted = 0;
  bool did_evict = false;
  return ix.claim(hash, &evicted, &did_evict);
}

void publish(DiskIndex& ix, uint32_t slot, uint64_t hash) {
  SlotHeader h{};
  h.sequence_hash = hash;
  ix.publish(slot, h);
}

TEST(DiskIndex, WritesCompletingOutOfOrderKeepTheOrderTheyStartedIn) {
  DiskIndex ix(8);
  const uint32_t s1 = claim(ix, 1), s2 = claim(ix, 2), s3 = claim(ix, 3);
  publish(ix, s3, 3);
  publish(ix, s1, 1);
  publish(ix, s2, 2);
  EXPECT_EQ(ix.lru_order(), (std::vector<uint64_t>{1, 2, 3}));
}

TEST(DiskIndex, AReadWhileAWriteIsInFlightIsTheLaterUse) {
  DiskIndex ix(8);
  publish(ix, claim(ix, 10), 10);
  const uint32_t s1 = claim(ix, 1), s2 = claim(ix, 2);
  ix.touch(ix.find(10));  // read after both writes started
  publish(ix, s2, 2);
  publish(ix, s1, 1);
  EXPECT_EQ(ix.lru_order(), (std::vector<uint64_t>{1, 2, 10}));
  // The least recently used goes first when the slots run out.
  DiskIndex full(2);
  publish(full, claim(full, 1), 1);
  publish(full, claim(full, 2), 2);
  full.touch(full.find(1));
  uint64_t evicted = 0;
  bool did_evict = false;
  full.claim(3, &evicted, &did_evict);
  EXPECT_TRUE(did_evict);
  EXPECT_EQ(evicted, 2u);
}

}  // namespace
}  // namespace kvpool::daemon::disk
