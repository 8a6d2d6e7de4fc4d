// Where one pool's block bytes live, daemon side. The pool core hands out block ids and
// never touches memory; a PoolStorage turns the pool's layout into memory and tells
// clients, through PoolInfo and the welcome, how to reach it (docs/design.md §6):
//   host  an unnamed memfd (MFD_HUGETLB on hugetlbfs), zeroed, placed and pre-faulted with
//         progress in the log and STATUS= (host_pool_memory.hpp); every client gets a
//         read-write fd in its welcome.
//   cuda  one cudaMalloc slab on the configured device, zeroed, exported with
//         cudaIpcGetMemHandle; PoolInfo carries the handle and the device UUID, and the
//         welcome carries no fd (clients open the handle with cudaIpcOpenMemHandle).
// A cuMemCreate device pool would be one more kind here: its memory exported as a POSIX fd
// (cuMemExportToShareableHandle) that client_fd() returns, with proto::welcome_carries_fd
// true for it and the client importing the fd (cuMemImportFromShareableHandle + cuMemMap).
// Neither the pool core nor the request protocol change for it.
#pragma once

#include <string>

#include "daemon/config.hpp"
#include "daemon/host_pool_memory.hpp"
#include "kvpool/core/layout.hpp"
#include "kvpool/core/status.hpp"
#include "kvpool/cuda/device.hpp"
#include "kvpool/shm/segment.hpp"
#include "kvpool/shm/segment_layout.hpp"
#include "kvpool/shm/unique_fd.hpp"

namespace kvpool::daemon {

class PoolStorage {
 public:
  // Creates the memory of `pool` on `instance`. Errors name the pool, the storage (and
  // device) and the bytes asked: "pool 'g1' (cuda device 0, 1073741824 bytes): ...".
  static Result<PoolStorage> create(const std::string& instance, const PoolConfig& pool,
                                    const Layout& layout);

  // Host pools: takes over `data`, the data segment a previous daemon served this pool
  // from (daemon/adoption.hpp checked its shape and size): mapped read-write as it is,
  // nothing zeroed or pre-faulted, so the registered blocks keep their bytes.
  static Result<PoolStorage> adopt(const std::string& instance, const PoolConfig& pool,
                                   const Layout& layout, shm::UniqueFd data);

  PoolStorage() = default;
  PoolStorage(PoolStorage&&) noexcept = default;
  PoolStorage& operator=(PoolStorage&&) noexcept = default;

  shm::StorageKind kind() const { return kind_; }
  uint64_t bytes() const { return bytes_; }
  // Fills the storage fields of a pool's PoolInfo (shm_name, storage, device, data_bytes,
  // device_uuid, ipc_handle).
  void publish(shm::PoolInfo& info) const;
  // The descriptor a client's welcome carries for this pool; an invalid UniqueFd when this
  // storage travels without one (proto::welcome_carries_fd is false for its kind).
  Result<shm::UniqueFd> client_fd() const;
  // Host pools: the block bytes as the daemon maps them (read for checksums, never
  // written); nullptr for storage the daemon cannot read (device pools).
  const std::byte* host_bytes() const;
  // The same bytes to write: only the disk tier does, and only into blocks the daemon holds
  // as its own mutable blocks while it reads them from disk (daemon/disk/disk_tier.hpp).
  std::byte* host_bytes_for_onboard() const;
  // Nothing to remove today (host pools are memfds, which go with their last descriptor);
  // kept so that a storage kind with a name has its place to clean up.
  void remove() const;
  // For logs: "host memfd kvpool.default.pool.g2" or "cuda device 0 (GPU-...)".
  std::string describe() const;

 private:
  shm::StorageKind kind_ = shm::StorageKind::kHost;
  uint64_t bytes_ = 0;
  int32_t device_ = -1;
  HostPoolMemory host_;
  cuda::DeviceSlab slab_;
  cuda::IpcHandle handle_{};
};

}  // namespace kvpool::daemon
