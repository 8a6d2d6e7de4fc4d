// A device pool as a client sees it: the daemon's CUDA slab, opened in this process with
// cudaIpcOpenMemHandle the first time an address or a copy needs it (a worker that never
// touches a device pool never initialises CUDA for it), and closed when the connection goes.
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>
#include <string>

#include "kvpool/core/status.hpp"
#include "kvpool/cuda/device.hpp"
#include "kvpool/shm/segment_layout.hpp"

namespace kvpool::detail {

class DeviceView {
 public:
  explicit DeviceView(const shm::PoolInfo& info);

  // The slab's base in this process (a device pointer). Opens it on the first call; a
  // failed open is reported to the caller and tried again by the next.
  Result<std::byte*> base();
  // The local CUDA ordinal of the slab's GPU (opens it, as base()).
  Result<int> device();

 private:
  Status open();

  std::string pool_;
  cuda::IpcHandle handle_{};
  cuda::DeviceUuid uuid_{};
  uint64_t bytes_ = 0;
  std::atomic<std::byte*> base_{nullptr};  // set once, under mu_, after mapping_ is valid
  std::mutex mu_;
  cuda::DeviceMapping mapping_;
};

}  // namespace kvpool::detail
