// Helpers shared by the kvpoolctl commands that read a running daemon.
#include <algorithm>
#include <cstddef>

#include "control_view.hpp"

namespace kvpool::ctl {

void add_view_options(CLI::App* cmd, ViewOptions& options) {
  cmd->add_option("--instance", options.instance, "daemon instance")->capture_default_str();
  cmd->add_option("--runtime-dir", options.runtime_dir,
                  "directory of the daemon's socket (default: where kvpoold puts it)");
  cmd->add_flag("--json", options.json, "print JSON");
}

std::string slot_state_name(uint32_t state) {
  switch (static_cast<shm::SlotState>(state)) {
    case shm::SlotState::kFree:
      return "free";
    case shm::SlotState::kAttaching:
      return "attaching";
    case shm::SlotState::kAttached:
      return "attached";
    case shm::SlotState::kSuspect:
      return "suspect";
  }
  return "unknown(" + std::to_string(state) + ")";
}

std::string storage_name(uint32_t storage) {
  switch (static_cast<shm::StorageKind>(storage)) {
    case shm::StorageKind::kHost:
      return "host";
    case shm::StorageKind::kCuda:
      return "cuda";
  }
  return "unknown(" + std::to_string(storage) + ")";
}

std::string layout_kind_config_name(LayoutKind kind) {
  switch (kind) {
    case LayoutKind::kFullyContiguous:
      return "fully_contiguous";
    case LayoutKind::kLayerSeparate:
      return "layer_separate";
  }
  return "unknown(" + std::to_string(static_cast<uint32_t>(kind)) + ")";
}

int ControlView::position_of(uint32_t index) const {
  for (size_t k = 0; k < pool_index.size(); ++k)
    if (pool_index[k] == index) return static_cast<int>(k);
  return -1;
}

SlotHoldings slot_holdings(const pool::ArenaView& pool, uint32_t slot) {
  return pool.holdings(slot);
}

const shm::LatencyHistogram* request_latency(const ControlView& v) {
  return v.control.request_latency();
}

std::string format_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  std::vector<bool> numeric;  // right-aligned: every cell below the header is a number
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    if (width.size() < r.size()) {
      width.resize(r.size(), 0);
      numeric.resize(r.size(), true);
    }
    for (size_t c = 0; c < r.size(); ++c) {
      width[c] = std::max(width[c], r[c].size());
      if (i > 0 && (r[c].empty() || r[c].find_first_not_of("0123456789.-") != std::string::npos))
        numeric[c] = false;
    }
  }
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (size_t c = 0; c < r.size(); ++c) {
      if (c > 0) line += "  ";
      std::string pad(width[c] - r[c].size(), ' ');
      line += numeric[c] ? pad + r[c] : r[c] + pad;
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

}  // namespace kvpool::ctl
