// Who a daemon's keeper holds blocks for, named across any number of restarts (issue 27,
// item 4). Adoption keeps out of circulation what clients of the previous daemon that still
// run held (daemon/previous_clients.hpp), under the keeper owner, until they reattach or
// exit. A client that misses the next restart too (idle across two quick restarts) is no
// slot of the daemon that kept its blocks; without its name, the daemon after that could
// only keep them forever. So every daemon that adopted writes the processes it keeps
// blocks for to a small sealed memfd in the supervisor's descriptor store
// ("kvpool-kept-<epoch>"): pid, uid and start time (clock ticks since boot,
// /proc/<pid>/stat field 22), which together name one process for as long as the machine
// runs (a pid reused by another process has another start time). The next daemon keeps the
// previous keeper's blocks only while one of those processes runs, watches them through
// pidfds, lets the blocks go when the last one exits, and writes the list again, still
// alive ones only, for its own successor.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvpool/core/status.hpp"
#include "kvpool/shm/unique_fd.hpp"

namespace kvpool::daemon {

inline constexpr const char* kFdNameKeptPrefix = "kvpool-kept-";
std::string fd_name_kept(uint64_t epoch);

struct KeptProcess {
  int32_t pid;
  uint32_t uid;
  uint64_t start_ticks;
};
static_assert(sizeof(KeptProcess) == 16);

// Field 22 of /proc/<pid>/stat (its start time in clock ticks since boot); nullopt when the
// process is gone or the file cannot be read.
std::optional<uint64_t> process_start_ticks(pid_t pid);

// A pidfd of `p` if that very process still runs (same start time); nullopt otherwise. The
// pidfd is taken first and the start time read after: a process that had exited before
// cannot pass.
std::optional<shm::UniqueFd> open_if_same_process(const KeptProcess& p);

// The list as a sealed memfd (the supervisor keeps it), for the daemon of `epoch`.
Result<shm::UniqueFd> write_kept(uint64_t epoch, std::span<const KeptProcess> processes);
// Reads a list written by write_kept for `epoch`. Hostile input (anyone of the daemon's uid
// may have written it): an error for a wrong magic, epoch or size; at most kMaxKept entries.
Result<std::vector<KeptProcess>> read_kept(int fd, uint64_t epoch);
inline constexpr uint32_t kMaxKept = 65536;

}  // namespace kvpool::daemon
