#include "daemon/pool_storage.hpp"

#include <algorithm>
#include <cstring>

#include "kvpool/core/paths.hpp"
#include "kvpool/shm/protocol.hpp"

namespace kvpool::daemon {
namespace {

Status named(const PoolConfig& pool, uint64_t bytes, const Status& why) {
  std::string where = pool.storage == shm::StorageKind::kCuda
                          ? "cuda device " + std::to_string(pool.device)
                          : std::string("host shared memory");
  return Status(why.code(), "pool '" + pool.name + "' (" + where + ", " + std::to_string(bytes) +
                                " bytes): " + why.message());
}

}  // namespace

Result<PoolStorage> PoolStorage::create(const std::string& instance, const PoolConfig& pool,
                                        const Layout& layout) {
  PoolStorage s;
  s.kind_ = pool.storage;
  s.bytes_ = layout.total_bytes();
  s.device_ = pool.device;
  switch (pool.storage) {
    case shm::StorageKind::kHost: {
      // A sealed memfd: clients get a descriptor over the socket and can neither open it by
      // name nor resize it (an ftruncate would SIGBUS every worker mapping it).
      auto seg = shm::Segment::create_anonymous(pool_segment_name(instance, pool.name), s.bytes_);
      if (!seg) return named(pool, s.bytes_, seg.status());
      s.host_ = std::move(seg.value());
      return s;
    }
    case shm::StorageKind::kCuda: {
      auto slab = cuda::DeviceSlab::allocate(pool.device, s.bytes_, pool.layout.alignment);
      if (!slab) return named(pool, s.bytes_, slab.status());
      auto handle = slab->export_handle();
      if (!handle) return named(pool, s.bytes_, handle.status());
      s.slab_ = std::move(slab.value());
      s.handle_ = *handle;
      return s;
    }
  }
  return named(pool, s.bytes_,
               Status(ErrorCode::kConfigError,
                      "unknown storage " + std::to_string(static_cast<uint32_t>(pool.storage))));
}

void PoolStorage::publish(shm::PoolInfo& info) const {
  std::memset(info.shm_name, 0, sizeof(info.shm_name));
  if (kind_ == shm::StorageKind::kHost) {
    const std::string& name = host_.name();
    std::memcpy(info.shm_name, name.data(), std::min(name.size(), sizeof(info.shm_name) - 1));
  }
  info.storage = static_cast<uint32_t>(kind_);
  info.device = device_;
  info.data_bytes = bytes_;
  std::memset(info.device_uuid, 0, sizeof(info.device_uuid));
  std::memset(info.ipc_handle, 0, sizeof(info.ipc_handle));
  if (kind_ == shm::StorageKind::kCuda) {
    std::memcpy(info.device_uuid, slab_.uuid().data(), sizeof(info.device_uuid));
    std::memcpy(info.ipc_handle, handle_.data(), sizeof(info.ipc_handle));
  }
}

Result<shm::UniqueFd> PoolStorage::client_fd() const {
  if (!proto::welcome_carries_fd(kind_)) return shm::UniqueFd();
  return host_.dup_fd();
}

void PoolStorage::remove() const {
  // Host pools are memfds: they go with their last descriptor. Nothing has a name.
}

std::string PoolStorage::describe() const {
  if (kind_ == shm::StorageKind::kCuda)
    return "cuda device " + std::to_string(device_) + " (" + cuda::uuid_string(slab_.uuid()) + ")";
  return "host memfd " + host_.name();
}

}  // namespace kvpool::daemon
