// The replay's two-tier model (tools/replay/tier_sim.hpp): without a disk it is the pool
// core's own simulation, block for block; with a disk that holds every distinct block and
// no uncached request it reaches the trace's ceiling exactly; on a hand-made trace it
// takes host hits, then disk hits, in the order the model states; and a cold restart empties
// host memory and puts the disk back in write order, as kvpoold's DiskIndex::load does.
#include <gtest/gtest.h>

#include "simulate.hpp"
#include "tier_sim.hpp"
#include "trace.hpp"

namespace kvpool::replay {
namespace {

std::vector<TraceRequest> bundled(size_t limit) {
  auto all = load_trace(KVPOOL_REPLAY_TRACE);
  EXPECT_TRUE(all.is_ok()) << all.status().to_string();
  return slice(*all, 0, limit, 0);
}

TEST(TierSim, WithoutADiskItIsThePoolCoresSimulation) {
  const auto reqs = bundled(3000);
  const TraceFigures tf = trace_figures(reqs);
  for (double pct : {2.0, 10.0, 40.0}) {
    const uint32_t cap = static_cast<uint32_t>(double(tf.distinct_blocks) * pct / 100);
    auto core = simulate(reqs, SimOptions{cap, 10, 0});
    auto tiers = simulate_tiers(reqs, SimOptions{cap, 10, 0}, 0);
    ASSERT_TRUE(core.is_ok() && tiers.is_ok());
    EXPECT_EQ(tiers->host_hits, core->matched_blocks) << pct << "%";
    EXPECT_EQ(tiers->uncached_requests, core->uncached_requests) << pct << "%";
    EXPECT_EQ(tiers->host_evictions, core->evictions) << pct << "%";
    EXPECT_EQ(tiers->disk_hits, 0u);
  }
}

TEST(TierSim, ADiskOfEveryDistinctBlockReachesTheCeiling) {
  const auto reqs = bundled(3000);
  const TraceFigures tf = trace_figures(reqs);
  const uint32_t cap = static_cast<uint32_t>(double(tf.distinct_blocks) * 0.2);
  auto t = simulate_tiers(reqs, SimOptions{cap, 10, 0}, tf.distinct_blocks);
  ASSERT_TRUE(t.is_ok());
  ASSERT_EQ(t->uncached_requests, 0u) << "the host must take every request for this check";
  EXPECT_EQ(t->host_hits + t->disk_hits, tf.ceiling_hits);
  EXPECT_GT(t->disk_hits, 0u);
  EXPECT_EQ(t->disk_writes, tf.distinct_blocks);
  EXPECT_EQ(t->disk_evictions, 0u);
}

TraceRequest req(uint64_t t, std::vector<uint64_t> ids) {
  TraceRequest r;
  r.timestamp_ms = t;
  r.output_length = 1;  // held 10 ms
  r.ids = std::move(ids);
  return r;
}

TEST(TierSim, HostFirstThenDiskThenNewBlocksWithDiskLru) {
  // Host 2 blocks, disk 3 slots. Each request is released before the next arrives; a batch
  // is released last block first, so its last block is the first evicted.
  const std::vector<TraceRequest> reqs{
      req(0, {1, 2}),    // new: host {1,2}; disk [1,2]
      req(100, {3, 4}),  // new: host evicts 2, 1 -> {3,4}; disk writes 3, 4, evicting 1: [2,3,4]
      req(200, {1}),     // 1 is on neither: new; host evicts 4 -> {3,1}; disk evicts 2: [3,4,1]
      req(300, {3, 4}),  // 3 from host, 4 from disk (onboarded; host evicts 1)
  };
  auto t = simulate_tiers(reqs, SimOptions{2, 10, 0}, 3);
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ(t->prompt_blocks, 7u);
  EXPECT_EQ(t->host_hits, 1u);
  EXPECT_EQ(t->disk_hits, 1u);
  EXPECT_EQ(t->disk_writes, 5u);     // 1, 2, 3, 4, then 1 again
  EXPECT_EQ(t->disk_evictions, 2u);  // 1, then 2
  EXPECT_EQ(t->uncached_requests, 0u);
}

TEST(TierSim, AColdRestartEmptiesHostMemoryAndRebuildsTheDiskInWriteOrder) {
  // Host 2 blocks, disk 3 slots; kvpoold is killed and started cold before request 4.
  const std::vector<TraceRequest> reqs{
      req(0, {1}),    // new: disk [1]
      req(100, {2}),  // new: disk [1,2]
      req(200, {3}),  // new: host evicts 1 -> {2,3}; disk [1,2,3]
      req(300, {1}),  // 1 onboarded (disk read: [2,3,1]); host evicts 2 -> {3,1}
      // restart: host empty; the disk in write order again, the read forgotten: [1,2,3]
      req(400, {4}),  // new: the disk evicts 1 (not 2, as it would have kept the read): [2,3,4]
      req(500, {3}),  // 3 was in host memory before the restart: from disk now ([2,4,3])
      req(600, {2}),  // still on disk
  };
  auto t = simulate_tiers_cold_restart(reqs, SimOptions{2, 10, 0}, 3, 4);
  ASSERT_TRUE(t.is_ok());
  const auto& [before, after] = *t;
  EXPECT_EQ(before.prompt_blocks, 4u);
  EXPECT_EQ(before.host_hits, 0u);
  EXPECT_EQ(before.disk_hits, 1u);
  EXPECT_EQ(before.disk_writes, 3u);
  EXPECT_EQ(after.prompt_blocks, 3u);
  EXPECT_EQ(after.host_hits, 0u);
  EXPECT_EQ(after.disk_hits, 2u);
  EXPECT_EQ(after.disk_writes, 1u);
  EXPECT_EQ(after.disk_evictions, 1u);
}

}  // namespace
}  // namespace kvpool::replay
