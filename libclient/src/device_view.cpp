#include "device_view.hpp"

#include <cstring>

namespace kvpool::detail {

DeviceView::DeviceView(const shm::PoolInfo& info) : pool_(info.name), bytes_(info.data_bytes) {
  std::memcpy(handle_.data(), info.ipc_handle, handle_.size());
  std::memcpy(uuid_.data(), info.device_uuid, uuid_.size());
}

Status DeviceView::open() {
  std::lock_guard lk(mu_);
  if (base_.load(std::memory_order_relaxed) != nullptr) return Status::ok();
  auto m = cuda::DeviceMapping::open(handle_, uuid_, bytes_);
  if (!m) return Status(m.status().code(), "device pool '" + pool_ + "': " + m.status().message());
  mapping_ = std::move(m.value());
  base_.store(static_cast<std::byte*>(mapping_.data()), std::memory_order_release);
  return Status::ok();
}

Result<std::byte*> DeviceView::base() {
  if (std::byte* b = base_.load(std::memory_order_acquire)) return b;
  KVPOOL_RETURN_IF_ERROR(open());
  return base_.load(std::memory_order_acquire);
}

Result<int> DeviceView::device() {
  KVPOOL_RETURN_IF_ERROR(base().status());
  return mapping_.device();
}

}  // namespace kvpool::detail
