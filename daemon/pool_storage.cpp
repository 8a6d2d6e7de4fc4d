#include "daemon/pool_storage.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "kvpool/core/paths.hpp"
#include "kvpool/core/units.hpp"
#include "kvpool/service/notify.hpp"
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

// Pre-faulting a large pool takes seconds (tens for hundreds of GiB): say how far it got,
// in the log and in systemd's STATUS=, at most once a second. Pools under 1 GiB are quiet.
class PrefaultReporter {
 public:
  explicit PrefaultReporter(const PoolConfig& pool) : pool_(pool) {}
  void operator()(uint64_t done, uint64_t total) {
    if (total < (1ull << 30)) return;
    const auto now = std::chrono::steady_clock::now();
    if (done != 0 && done != total && now - last_ < std::chrono::seconds(1)) return;
    last_ = now;
    char line[160];
    std::snprintf(line, sizeof(line), "starting: pool '%s' pre-faulting %s of %s (%.0f%%)",
                  pool_.name.c_str(), gib_text(done).c_str(), gib_text(total).c_str(),
                  100.0 * static_cast<double>(done) / static_cast<double>(total));
    spdlog::info("{}", line + 10);  // without "starting: "
    service::notify_status(line);
    // Progress buys time: 30 s more from now, while each step takes well under a second.
    if (done != total) service::notify_extend_timeout(30'000'000);
  }

 private:
  const PoolConfig& pool_;
  std::chrono::steady_clock::time_point last_{};
};

std::string placement_text(const PoolConfig& pool) {
  std::string s;
  if (!pool.huge_pages.empty()) s += ", huge pages " + pool.huge_pages;
  if (pool.numa_node >= 0) s += ", NUMA node " + std::to_string(pool.numa_node);
  return s;
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
      // A sealed memfd, 0600 (daemon/host_pool_memory): clients get a descriptor over the
      // socket and can neither open it by name nor resize it.
      const auto t0 = std::chrono::steady_clock::now();
      PrefaultReporter report(pool);
      auto mem = create_host_pool_memory(pool_segment_name(instance, pool.name), s.bytes_,
                                         HostPoolPlacement{pool.huge_pages, pool.numa_node},
                                         std::ref(report));
      if (!mem) return named(pool, s.bytes_, mem.status());
      s.host_ = std::move(mem.value());
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double gibs = static_cast<double>(s.bytes_) / (1ull << 30);
      spdlog::log(s.bytes_ >= (1ull << 30) ? spdlog::level::info : spdlog::level::debug,
                  "pool '{}': {} of host memory ready in {:.3f} s ({:.3f} s/GiB{})", pool.name,
                  gib_text(s.bytes_), secs, gibs > 0 ? secs / gibs : 0.0, placement_text(pool));
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

Result<PoolStorage> PoolStorage::adopt(const std::string& instance, const PoolConfig& pool,
                                       const Layout& layout, shm::UniqueFd data) {
  PoolStorage s;
  s.kind_ = shm::StorageKind::kHost;
  s.bytes_ = layout.total_bytes();
  s.device_ = -1;
  auto seg = shm::Segment::map_fd(std::move(data), /*writable=*/true);
  if (!seg) return named(pool, s.bytes_, seg.status());
  if (seg->size() < s.bytes_)
    return named(pool, s.bytes_,
                 Status(ErrorCode::kInvalidState, "the adopted segment is too small"));
  s.host_.segment = std::move(seg.value());
  s.host_.name = pool_segment_name(instance, pool.name);
  s.host_.hugetlbfs = !pool.huge_pages.empty() && pool.huge_pages != "transparent";
  return s;
}

void PoolStorage::publish(shm::PoolInfo& info) const {
  std::memset(info.shm_name, 0, sizeof(info.shm_name));
  if (kind_ == shm::StorageKind::kHost) {
    const std::string& name = host_.name;
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
  return host_.segment.dup_fd();
}

const std::byte* PoolStorage::host_bytes() const {
  if (kind_ != shm::StorageKind::kHost) return nullptr;
  return static_cast<const std::byte*>(host_.segment.data());
}

std::byte* PoolStorage::host_bytes_for_onboard() const {
  if (kind_ != shm::StorageKind::kHost) return nullptr;
  return static_cast<std::byte*>(host_.segment.data());
}

void PoolStorage::remove() const {
  // Host pools are memfds: they go with their last descriptor. Nothing has a name.
}

std::string PoolStorage::describe() const {
  if (kind_ == shm::StorageKind::kCuda)
    return "cuda device " + std::to_string(device_) + " (" + cuda::uuid_string(slab_.uuid()) + ")";
  return (host_.hugetlbfs ? "host memfd (hugetlb) " : "host memfd ") + host_.name;
}

}  // namespace kvpool::daemon
