// A pool's disk tier as kvpoolctl status / pools and the metrics show it (issue 28 item 9):
// read from the pool's registry segment (shm/disk_tier_info.hpp), each counter a moment old.
#include <cstring>

#include "control_view.hpp"

namespace kvpool::ctl {

const shm::DiskTierInfo* disk_info(const ControlView& v, size_t k) {
  return v.control.registry(v.pool_index[k]).disk_info();
}

nlohmann::json disk_json(const shm::DiskTierInfo& d) {
  auto rl = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  const uint64_t onboards = rl(d.onboard_latency.count);
  return {
      {"path", std::string(d.path, strnlen(d.path, sizeof(d.path)))},
      {"slots_used", rl(d.slots_used)},
      {"slots_total", d.slots_total},
      {"slot_bytes", d.slot_bytes},
      {"block_bytes", d.block_bytes},
      {"direct_io", d.direct_io != 0},
      {"io_engine", std::string(d.io_engine, strnlen(d.io_engine, sizeof(d.io_engine)))},
      {"bytes_written", rl(d.bytes_written)},
      {"bytes_read", rl(d.bytes_read)},
      {"blocks_written", rl(d.blocks_written)},
      {"blocks_onboarded", rl(d.blocks_onboarded)},
      {"write_queue_drops", rl(d.write_queue_drops)},
      {"write_skipped", rl(d.write_skipped)},
      {"evictions", rl(d.evictions)},
      {"checksum_failures", rl(d.checksum_failures)},
      {"io_errors", rl(d.io_errors)},
      {"onboards", onboards},
      {"onboard_mean_seconds", onboards == 0 ? 0.0
                                             : static_cast<double>(rl(d.onboard_latency.sum_ns)) /
                                                   1e9 / static_cast<double>(onboards)},
      {"onboard_max_seconds", static_cast<double>(rl(d.onboard_ns_max)) / 1e9}};
}

}  // namespace kvpool::ctl
