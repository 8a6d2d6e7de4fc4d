// The memory of a host pool: a shared-memory object every client maps through the fd in
// its welcome, created, placed and pre-faulted here before the daemon says READY.
//
//   object     an unnamed memfd, mode 0600, sealed against resizing (MFD_HUGETLB when
//              "huge_pages" names a hugetlbfs mount, whose page size it then uses);
//   placement  "numa_node": every page bound to that node (mbind MPOL_BIND on the object,
//              which for shared memory is the object's policy, whoever faults it);
//              "huge_pages": "transparent": madvise(MADV_HUGEPAGE);
//   pre-fault  in chunks with posix_fallocate (MADV_POPULATE_WRITE for transparent huge
//              pages, whose advice only a fault through the mapping sees), both of which
//              return an error where a touch would SIGBUS: a full /dev/shm or hugetlbfs pool
//              is an error at start, naming what is free, never a SIGBUS in some client
//              later. `progress` is called after each chunk.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "kvpool/core/status.hpp"
#include "kvpool/shm/segment.hpp"

namespace kvpool::daemon {

struct HostPoolPlacement {
  std::string huge_pages;  // "" | "transparent" | hugetlbfs directory
  int32_t numa_node = -1;
};

struct HostPoolMemory {
  shm::Segment segment;  // mapped read-write in the daemon; its fd goes to clients
  std::string name;      // the memfd's debug name ("kvpool.default.pool.g2")
  bool hugetlbfs = false;
};

// done and total bytes, after every pre-faulted chunk (and once at 0).
using PrefaultProgress = std::function<void(uint64_t done, uint64_t total)>;

// `shm_name` is the memfd's debug name. The object may be larger than `bytes` (rounded up
// to the huge page size). Errors: kResourceExhausted (not enough memory / huge pages, with what is
// free), kConfigError (not a hugetlbfs mount, no such NUMA node, NUMA unavailable), kIoError.
Result<HostPoolMemory> create_host_pool_memory(const std::string& shm_name, uint64_t bytes,
                                               const HostPoolPlacement& placement,
                                               const PrefaultProgress& progress);

// Nothing to remove: the memfd goes with its last descriptor (kept for callers' symmetry).
void remove_host_pool_memory(const HostPoolMemory& memory);

}  // namespace kvpool::daemon
