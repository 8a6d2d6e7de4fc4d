// A read-only view of a running daemon's control segment, shared by kvpoolctl commands.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvpool/pool/pool_core.hpp"
#include "kvpool/shm/segment.hpp"
#include "kvpool/shm/segment_layout.hpp"

namespace kvpool::ctl {

struct ControlView {
  shm::Segment segment;
  const shm::ControlHeader* header = nullptr;
  std::vector<const shm::PoolInfo*> pool_infos;
  std::vector<pool::PoolCore> pools;  // const use only: the mapping is read-only
  const shm::SlotInfo* slots = nullptr;
};

// Asks the daemon of `instance` for its control segment. Throws CommandError with one
// clear line ("no kvpoold is running for instance 'x' (...)") when it cannot.
ControlView open_control(const std::string& instance, const std::string& runtime_dir);

// The `kvpoolctl status --json` document.
nlohmann::json status_json(const ControlView& v);

}  // namespace kvpool::ctl
