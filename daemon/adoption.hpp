// A restarted kvpoold takes over the host pools of the daemon before it (issue 15): their
// data segments (the KV bytes, untouched) and their registries, rebuilt from the previous
// control segment's arenas (pool::PoolCore::adopt_registry says what is kept and why that
// is safe). Both arrive as descriptors the supervisor kept (daemon/fd_store.hpp).
//
// A previous pool is taken over only when everything that fixes where a block's bytes lie
// and what its hashes mean is unchanged: host storage, the same layout (block count and
// every dimension), dtype and hash scheme, an arena of this build's version whose header
// is sound, and, when the previous daemon died between two pool calls, an arena that
// passes every pool invariant (a scribble is caught there). Otherwise that pool starts
// empty, with a log line saying why. Device pools always start empty: their memory died
// with the process that allocated it.
#pragma once

#include <bitset>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "daemon/config.hpp"
#include "daemon/fd_store.hpp"
#include "kvpool/core/status.hpp"
#include "kvpool/pool/pool_core.hpp"
#include "kvpool/shm/control_segment.hpp"
#include "kvpool/shm/registry_segment.hpp"
#include "kvpool/shm/segment.hpp"
#include "kvpool/shm/segment_layout.hpp"

namespace kvpool::daemon {

class Adoption {
 public:
  struct Pool {  // a previous host pool this daemon may take over
    std::string name;
    shm::UniqueFd data;           // its data segment
    const void* arena = nullptr;  // its arena, in the previous registry segment (read-only)
    size_t arena_bytes = 0;
    bool interrupted = false;  // its daemon died inside a pool call
  };

  // Sorts what the supervisor passed at start: the newest previous control segment, mapped
  // read-only, and the pool data segments. Logs what it found and what it cannot use.
  static Adoption prepare(std::vector<InheritedFd> fds);

  bool has_previous() const { return previous_.valid(); }
  uint64_t previous_epoch() const { return previous_epoch_; }
  // The store name of the previous control segment ("" when none).
  const std::string& previous_control_name() const { return previous_control_name_; }
  // The store names of its registry segments.
  std::vector<std::string> previous_registry_names() const;

  struct StoredRegistry {  // a previous pool's registry segment (header checked)
    std::string name;
    shm::Segment segment;
  };

  // The previous daemon's pool that may serve `pc`, taken out (once); nullopt, with a log
  // line saying why when there was one, otherwise.
  std::optional<Pool> take(const PoolConfig& pc);
  // Previous pool segments that no configured pool took: removed from the store and
  // closed, so their memory is gone before the new pools are made. Call after the takes.
  void release_unused();

  // Rebuilds the registry of `core` (freshly created) from `p`'s arena and notes the tags
  // of its generations (taken_tags). What clients of the previous daemon that still run
  // held goes to owner `keeper`, each block listed in `pins` with who held it (see
  // take_live_clients). On error the caller starts the pool empty.
  Result<pool::AdoptCounts> adopt_registry(const Pool& p, pool::PoolCore& core, uint32_t keeper,
                                           std::vector<pool::AdoptPin>* pins);
  // The previous daemon's clients that still ran at start (they may read or write what
  // they held): daemon/previous_clients.hpp gives it back when they reattach, or releases
  // it when they exit.
  struct LiveClient {
    uint32_t slot;
    uint32_t slot_generation;
    int32_t pid;
    uint32_t uid;  // a reclaim must come from the same user (a reused pid may not be)
    shm::UniqueFd pidfd;
    uint64_t start_ticks = 0;  // with pid and uid, names the process to the next daemon
    // Not a slot of the previous daemon: a process its keeper kept blocks for (it had
    // missed a restart already; daemon/kept_processes.hpp). It cannot reclaim anything.
    bool inherited = false;
  };
  // The previous daemon's clients that still run, then the processes its keeper kept
  // blocks for that still run (inherited).
  std::vector<LiveClient> take_live_clients() { return std::move(live_clients_); }
  // The previous daemon's keeper owner (its max_clients): what adoption pinned under it
  // is kept for the inherited clients.
  uint32_t previous_keeper() const { return previous_keeper_; }
  // The store name of the previous daemon's kept-process list ("" when none).
  const std::string& previous_kept_name() const { return previous_kept_name_; }
  // Generation tags that generations of the adopted arenas carry, and the previous
  // daemon's own: a new daemon picks another (daemon/epoch.hpp).
  const std::bitset<256>& taken_tags() const { return tags_; }

  // Unmaps the previous control segment (after adoption; the store keeps it until the new
  // daemon has stored its own).
  void close() {
    previous_ = shm::ControlReader();
    registries_.clear();
  }

 private:
  // Keeps the registry segments of the daemon of `epoch` (with its slot count); the others
  // are dropped from the store.
  void keep_registries_of(uint64_t epoch, uint32_t max_clients);

  shm::ControlReader previous_;  // a dead daemon's, graded (shm::ControlGrade::kDead)
  uint64_t previous_epoch_ = 0;
  std::string previous_control_name_;
  std::map<std::string, shm::UniqueFd> data_;  // pool name -> data segment
  std::vector<StoredRegistry> registries_;     // of the previous daemon
  std::bitset<256> tags_;
  // previous owner -> its process still runs (the last one: the previous keeper, see
  // prepare)
  std::vector<uint8_t> live_owners_;
  std::vector<LiveClient> live_clients_;
  uint32_t previous_keeper_ = pool::kNone;
  std::string previous_kept_name_;
  std::map<std::string, shm::UniqueFd> kept_;  // stored kept-process lists, by store name
  // Reads the previous daemon's kept-process list; says whether its keeper's blocks must
  // stay kept (some process they were kept for still runs, or the list is missing).
  bool inherit_kept(const shm::ControlHeader& h, uint64_t epoch);
};

}  // namespace kvpool::daemon
