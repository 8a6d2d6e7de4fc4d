// The client's transport to kvpoold (internal; tests use it to speak raw protocol):
// the socket handshake, the mapped segments, the two rings, and the lease thread that
// holds this client's robust mutex and watches the socket for the daemon's death.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kvpool/core/hash.hpp"
#include "kvpool/core/layout.hpp"
#include "kvpool/core/status.hpp"
#include "kvpool/pool/pool_core.hpp"
#include "kvpool/shm/protocol.hpp"
#include "kvpool/shm/ring.hpp"
#include "kvpool/shm/segment.hpp"
#include "kvpool/shm/segment_layout.hpp"
#include "kvpool/shm/unique_fd.hpp"

namespace kvpool::cuda {
class HostRegistration;
}  // namespace kvpool::cuda

namespace kvpool::detail {

class DeviceView;  // device_view.hpp

struct Response {
  ErrorCode code = ErrorCode::kOk;
  std::string message;
  std::vector<pool::BlockRef> refs;
  Status status() const { return code == ErrorCode::kOk ? Status() : Status(code, message); }
};

struct PoolView {
  std::string name;
  shm::PoolInfo info;
  Layout layout;
  shm::Segment data;  // host pools: the block bytes, mapped read-write
  // Host pools with pin_host_pools: the cudaHostRegister of `data`. Declared after `data`
  // so that it is dropped (unregistered) before the mapping goes.
  std::shared_ptr<cuda::HostRegistration> pinned;
  // Device pools: the daemon's CUDA slab, opened in this process on first use.
  std::shared_ptr<DeviceView> device;

  // A scheme this build does not know reads as such (hash_scheme_name says "unknown").
  HashScheme hash_scheme() const { return static_cast<HashScheme>(info.hash_scheme); }
  bool is_device() const { return info.storage == static_cast<uint32_t>(shm::StorageKind::kCuda); }
};

struct ConnectionOptions {
  std::string runtime_dir;  // "" -> default_runtime_dir()
  std::chrono::milliseconds connect_timeout{5000};
  uint32_t spin_iterations = 4000;  // before parking on the response doorbell
  // Override of the layout version in Hello (tests of version refusal only).
  uint16_t layout_major = shm::kLayoutMajor;
  // cudaHostRegister every host pool's mapping (ConnectOptions::pin_host_pools).
  bool pin_host_pools = false;
};

class Connection {
 public:
  static Result<std::unique_ptr<Connection>> open(const std::string& instance,
                                                  const ConnectionOptions& options);
  // kvpoolctl: the control segment of a running daemon, read-only, without attaching.
  static Result<shm::Segment> observe(const std::string& instance, const std::string& runtime_dir);
  ~Connection();  // detaches: releases the lease, closes the socket

  uint32_t slot() const { return slot_; }
  uint32_t generation() const { return generation_; }
  const std::vector<PoolView>& pools() const { return pools_; }
  const shm::ControlHeader& control() const { return *control_.as<shm::ControlHeader>(); }
  // The daemon died, stopped, or cut us off.
  bool gone() const;

  // Puts one request on the ring (waiting for room while the daemon lives) and returns its
  // correlation id. Pending releases are flushed first, so the daemon sees them in order.
  Result<uint64_t> send(proto::Opcode op, uint32_t pool, uint32_t count, const void* items,
                        size_t item_bytes);
  // Waits for the answer to `correlation_id`. DaemonGone within ~50 ms of the daemon's death.
  Result<Response> wait(uint64_t correlation_id);
  Result<Response> call(proto::Opcode op, uint32_t pool, uint32_t count, const void* items,
                        size_t item_bytes);

  // Batched fire-and-forget releases; sent when 64 are queued, before the next request,
  // on flush(), or by the lease thread within ~10 ms.
  void release(uint32_t pool, bool immutable, pool::BlockRef ref);
  void flush();

  // Raw access for hostile-client tests: a record with any type and bytes.
  Status send_raw(uint32_t type, const void* bytes, uint32_t len);
  shm::ClientHeader* client_header() { return client_.as<shm::ClientHeader>(); }

 private:
  Connection() = default;
  Status handshake(const std::string& instance, const ConnectionOptions& options);
  void lease_main(std::promise<Status>* locked);
  Status flush_locked();  // send_mutex_ held
  Status publish_locked();
  void wake_daemon();
  void mark_gone();

  shm::UniqueFd sock_;
  shm::UniqueFd bell_;  // eventfd: wakes a parked daemon
  shm::Segment control_;
  shm::Segment client_;
  std::vector<PoolView> pools_;
  uint32_t slot_ = 0;
  uint32_t generation_ = 0;
  uint32_t spin_iterations_ = 4000;

  std::mutex send_mutex_;
  std::optional<shm::RingProducer> requests_;
  uint64_t next_correlation_ = 1;
  struct PendingRelease {
    uint32_t pool;
    bool immutable;
    std::vector<pool::BlockRef> refs;
  };
  std::vector<PendingRelease> pending_;
  std::atomic<uint32_t> pending_count_{0};

  std::mutex recv_mutex_;
  std::optional<shm::RingConsumer> responses_;
  std::map<uint64_t, Response> early_;  // answers that arrived for another waiter

  std::atomic<bool> gone_{false};
  std::atomic<bool> stop_{false};
  shm::UniqueFd stop_fd_;  // eventfd: stops the lease thread
  std::thread lease_thread_;
};

}  // namespace kvpool::detail
