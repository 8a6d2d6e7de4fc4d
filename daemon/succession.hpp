// The succession room (issue 29 item 2): everything one kvpoold hands to the next, owned in
// one place. At start it takes the predecessor's segments from the supervisor's store
// (daemon/adoption.hpp: the graded open of its control segment, its host pools' data and
// registries), names the predecessor's clients that still run (daemon/previous_clients.hpp,
// which then answers their kReclaim and releases what they held when they exit), and
// publishes who this daemon is; once this daemon has stored its own segments, the
// predecessor's leave the store. The engine creates the pools and asks this room, per pool,
// for the storage and the registry to start from.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "daemon/adoption.hpp"
#include "daemon/config.hpp"
#include "daemon/fd_store.hpp"
#include "daemon/pool_storage.hpp"
#include "daemon/previous_clients.hpp"
#include "kvpool/core/layout.hpp"
#include "kvpool/core/status.hpp"
#include "kvpool/pool/pool_core.hpp"
#include "kvpool/shm/control_segment.hpp"

namespace kvpool::daemon {

class Succession {
 public:
  Succession() = default;
  // Once, before any pool is made: sorts the supervisor's descriptors `fds`, names the
  // previous clients that still run (their blocks go to owner `keeper`), takes for each of
  // `pools` the predecessor's pool that may serve it, and releases the rest of its pool
  // segments, so their memory is gone before the new pools take theirs.
  static Succession begin(std::vector<InheritedFd> fds, const std::vector<PoolConfig>& pools,
                          uint32_t keeper);

  // Pool i's storage: the predecessor's data segment when one was taken and maps (else the
  // pool starts empty, with a log line), or new memory.
  Result<PoolStorage> storage_for(uint32_t i, const std::string& instance, const PoolConfig& pc,
                                  const Layout& layout);
  // Pool i's registry rebuilt in `core` (freshly created) from the predecessor's arena, when
  // its storage was adopted; on failure `core` is re-created empty. Counts go to pool i's
  // PoolInfo and the control header's RestartInfo.
  void adopt_registry(uint32_t i, shm::ControlWriter& control,
                      const pool::PoolCoreConfig& core_config, pool::PoolCore& core);
  // After the pools: who this daemon is (ControlHeader::restart: its epoch, the one it
  // succeeds, its generation tag, how long adoption took). Unmaps the predecessor's segments.
  void publish_identity(shm::ControlWriter& control);
  // Once this daemon's own segments are in the store: the predecessor's leave it.
  void forget_predecessor() const;

  // The predecessor's clients that still run (kReclaim, reaping, the kept-process list).
  PreviousClients& clients() { return clients_; }
  const PreviousClients& clients() const { return clients_; }

 private:
  Adoption adoption_;
  std::vector<std::optional<Adoption::Pool>> taken_;  // per configured pool
  PreviousClients clients_;
  uint32_t keeper_ = 0;
  uint64_t started_ns_ = 0;            // CLOCK_MONOTONIC at begin: RestartInfo::adoption_ns
  std::string previous_control_name_;  // in the store until ours is
  std::vector<std::string> previous_registry_names_;  // likewise
  std::string previous_kept_name_;                    // likewise (daemon/kept_processes.hpp)
};

}  // namespace kvpool::daemon
