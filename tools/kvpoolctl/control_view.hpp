// A read-only view of a running daemon's control segment, shared by kvpoolctl commands.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "kvpool/pool/arena_view.hpp"
#include "kvpool/shm/control_segment.hpp"
#include "kvpool/shm/disk_tier_info.hpp"
#include "kvpool/shm/segment_layout.hpp"

namespace kvpool::ctl {

// Only what the caller may read: the pools whose registry segment the daemon gave it (the
// pools' allow-lists; root and the daemon's uid get all), and the clients of those pools.
struct ControlView {
  shm::ControlReader control;  // validated once (shm/control_segment.hpp); const access only
  const shm::ControlHeader* header = nullptr;
  // The pools this caller may read, in pool order: pool_index[k] is the daemon's index of
  // pool_infos[k] and pools[k] (control.arena(pool_index[k])).
  std::vector<const shm::PoolInfo*> pool_infos;
  std::vector<pool::ArenaView> pools;
  std::vector<uint32_t> pool_index;
  // Client slot i as this caller may see it (free and zero unless it shares a pool with it).
  const shm::SlotInfo& slot(uint32_t i) const { return control.slot(i); }
  // The position in `pools` of the daemon's pool `index`, or -1 when this caller may not
  // read it.
  int position_of(uint32_t index) const;
};

// Asks the daemon of `instance` for its control segment. Throws CommandError with one
// clear line ("no kvpoold is running for instance 'x' (...)") when it cannot.
ControlView open_control(const std::string& instance, const std::string& runtime_dir);

// The `kvpoolctl status --json` document.
nlohmann::json status_json(const ControlView& v);

// ---- helpers of the commands that read a daemon (control_view.cpp) -----------------------

// --instance, --runtime-dir and --json, the options every daemon-reading command takes.
struct ViewOptions {
  std::string instance = "default";
  std::string runtime_dir;
  bool json = false;
};
void add_view_options(CLI::App* cmd, ViewOptions& options);

// "free", "attaching", "attached", "suspect" (or "unknown(N)").
std::string slot_state_name(uint32_t state);
// "host", "cuda".
std::string storage_name(uint32_t storage);
// The config file's names: "fully_contiguous", "layer_separate".
std::string layout_kind_config_name(LayoutKind kind);

// What one client slot holds in one pool (ArenaView::holdings). Read from the live arena: a
// moment old, never torn per field.
using SlotHoldings = pool::OwnerHoldings;
SlotHoldings slot_holdings(const pool::ArenaView& pool, uint32_t slot);

// The request latency histogram, when the daemon writes one (layout minor >= 2).
const shm::LatencyHistogram* request_latency(const ControlView& v);

// The disk tier of pools[k], or null when that pool has none (disk_view.cpp).
const shm::DiskTierInfo* disk_info(const ControlView& v, size_t k);
// Its `disk` object of status --json and pools --json: path, slots, direct I/O, engine,
// counters, onboard latency (mean and max).
nlohmann::json disk_json(const shm::DiskTierInfo& d);

// Columns two spaces apart, numbers right-aligned, text left-aligned; one line per row.
std::string format_table(const std::vector<std::vector<std::string>>& rows);

}  // namespace kvpool::ctl
