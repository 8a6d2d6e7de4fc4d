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
#include <tuple>
#include <vector>

#include "kvpool/core/hash.hpp"
#include "kvpool/core/layout.hpp"
#include "kvpool/core/status.hpp"
#include "kvpool/pool/pool_core.hpp"
#include "kvpool/shm/control_segment.hpp"
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
  shm::Segment data;     // host pools: the block bytes, mapped read-write
  shm::Segment data_ro;  // the same bytes mapped read-only: immutable blocks' addresses
  bool usable = true;    // false: closed to this client by the pool's allow-lists
  // Host pools: the data segment's file (st_dev, st_ino): a restarted daemon that adopted
  // the pool hands out the same one.
  uint64_t data_dev = 0;
  uint64_t data_ino = 0;
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
  uint32_t poll_us = 50;  // ConnectOptions::poll_us
  std::chrono::milliseconds unresponsive_after{10000};
  // Override of the layout version in Hello (tests of version refusal only).
  uint16_t layout_major = shm::kLayoutMajor;
  // cudaHostRegister every host pool's mapping (ConnectOptions::pin_host_pools).
  bool pin_host_pools = false;
};

class Connection {
 public:
  static Result<std::unique_ptr<Connection>> open(const std::string& instance,
                                                  const ConnectionOptions& options);
  ~Connection();  // detaches: releases the lease, closes the socket

  uint32_t slot() const { return slot_; }
  uint32_t generation() const { return generation_; }
  // The daemon's start epoch (ControlHeader::restart): what a reattach names it by.
  uint64_t epoch() const { return control().restart.epoch; }
  // The request a reattach's claims must fit in (bytes of items after the header).
  uint64_t max_request_payload() const { return requests_->max_payload(); }
  // Why calls fail now that the daemon is gone: kDaemonGone, or kDisconnected when it cut
  // us off (or we forked).
  Status gone_reason() const;
  const std::vector<PoolView>& pools() const { return pools_; }
  const shm::ControlHeader& control() const { return control_.header(); }
  // Pool `pool`'s block counts, a moment old (relaxed loads of the daemon's arena counters).
  pool::PoolCounts counts(uint32_t pool) const { return control_.arena(pool).counts(); }
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
  // The answer to `correlation_id` will never be read (its future was dropped): release
  // the blocks it carries once it arrives (`immutable`: references, else mutable blocks).
  // `on_failure`: mutable blocks the request handed over (a register's), given back when
  // the answer is an error.
  void abandon(uint64_t correlation_id, uint32_t pool, bool immutable,
               std::vector<pool::BlockRef> on_failure = {});

  // Raw access for hostile-client tests: a record with any type and bytes.
  Status send_raw(uint32_t type, const void* bytes, uint32_t len);
  shm::ClientHeader* client_header() { return client_.as<shm::ClientHeader>(); }
  int socket_fd() const { return sock_.get(); }  // hostile-client tests only

 private:
  Connection() = default;
  Status handshake(const std::string& instance, const ConnectionOptions& options);
  void lease_main(std::promise<Status>* locked);
  Status flush_locked();                                                         // send_mutex_ held
  Result<void*> claim(uint32_t type, uint32_t len);                              // send_mutex_ held
  void queue_release_locked(uint32_t pool, bool immutable, pool::BlockRef ref);  // send_mutex_
  Result<std::optional<std::pair<uint64_t, Response>>> read_answer_locked();     // recv_mutex_
  // Releases gathered under recv_mutex_, made when this is destroyed (after the lock).
  struct LaterReleases {
    Connection* conn;
    std::vector<std::tuple<uint32_t, bool, pool::BlockRef>> items;
    ~LaterReleases();
  };
  void stash_locked(uint64_t corr, Response r, LaterReleases* later);  // recv_mutex_
  void drain_answers_locked(LaterReleases* later);                     // recv_mutex_
  Status check_heartbeat(const std::string& when) const;
  Status publish_locked();
  void wake_daemon();
  void mark_gone();
  void kick();
  Status gone_status(
      const std::string& when) const;  // kDisconnected with the reason, or kDaemonGone
  Status check_usable() const;         // this process, a live and responsive daemon
  void read_disconnect_notice();

  shm::UniqueFd sock_;
  shm::UniqueFd bell_;  // eventfd: wakes a parked daemon
  shm::ControlReader control_;
  shm::Segment client_;
  std::vector<PoolView> pools_;
  uint32_t slot_ = 0;
  uint32_t generation_ = 0;
  shm::PollPolicy poll_;
  uint64_t unresponsive_ns_ = 0;
  uint64_t fork_generation_ = 0;  // detail::fork_generation() when connected

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
  struct Abandoned {
    uint32_t pool;
    bool immutable;
    std::vector<pool::BlockRef> on_failure;
  };
  std::map<uint64_t, Abandoned> abandoned_;
  std::atomic<uint32_t> abandoned_count_{0};
  // The lease thread sleeps without a timeout (a release must kick it awake).
  std::atomic<bool> lease_parked_{false};

  std::atomic<bool> gone_{false};
  mutable std::mutex gone_mutex_;
  std::string disconnect_reason_;  // what the daemon said when it cut us off (gone_mutex_)
  std::atomic<bool> stop_{false};
  shm::UniqueFd stop_fd_;  // eventfd: stops or kicks the lease thread
  std::thread lease_thread_;
};

}  // namespace kvpool::detail
