// libkvpool's connection to one kvpoold (internal): the policy over the client channel
// (shm/client_channel.hpp, which owns the wire: rings, wait loop, lease thread, gone watch).
// Here: the pools' mappings (read-write and read-only, pinned, device views), batched
// fire-and-forget releases, answers kept for their callers or given back when their futures
// were dropped, and the fork check. Reattach is ClientImpl's.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "kvpool/core/hash.hpp"
#include "kvpool/core/layout.hpp"
#include "kvpool/core/status.hpp"
#include "kvpool/pool/pool_core.hpp"
#include "kvpool/shm/client_channel.hpp"
#include "kvpool/shm/control_segment.hpp"
#include "kvpool/shm/protocol.hpp"
#include "kvpool/shm/segment.hpp"
#include "kvpool/shm/segment_layout.hpp"
#include "kvpool/shm/unique_fd.hpp"

namespace kvpool::cuda {
class HostRegistration;
}  // namespace kvpool::cuda

namespace kvpool::detail {

class DeviceView;  // device_view.hpp

using Response = shm::Answer;

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

class Connection : private shm::LeaseWork {
 public:
  static Result<std::unique_ptr<Connection>> open(const std::string& instance,
                                                  const ConnectionOptions& options);
  ~Connection() override;  // flushes the releases, then detaches (gives the lease back)

  uint32_t slot() const { return channel_->slot(); }
  uint32_t generation() const { return channel_->generation(); }
  // The daemon's start epoch (ControlHeader::restart): what a reattach names it by.
  uint64_t epoch() const { return control().restart.epoch; }
  // The request a reattach's claims must fit in (bytes of items after the header).
  uint64_t max_request_payload() const { return channel_->max_payload(); }
  // Why calls fail now that the daemon is gone: kDaemonGone, or kDisconnected when it cut
  // us off (or we forked).
  Status gone_reason() const;
  const std::vector<PoolView>& pools() const { return pools_; }
  const shm::ControlHeader& control() const { return channel_->control(); }
  // Pool `pool`'s block counts, a moment old (relaxed loads of the daemon's arena counters).
  pool::PoolCounts counts(uint32_t pool) const {
    return channel_->control_reader().arena(pool).counts();
  }
  // The checksum block `id` of pool `pool` was registered with (pool::ArenaView::checksum).
  uint64_t checksum(uint32_t pool, uint32_t id) const {
    return channel_->control_reader().arena(pool).checksum(id);
  }
  // The daemon died, stopped, or cut us off.
  bool gone() const { return channel_->gone(); }

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
  // The same for many, under one lock.
  void release(uint32_t pool, bool immutable, std::span<const pool::BlockRef> refs);
  void flush();
  // Work of the client above that the lease thread runs on its ticks too (ClientImpl's
  // references dropped but not given back yet). Null to stop; `w` outlives the setting.
  void set_upstream(shm::LeaseWork* w) { upstream_.store(w, std::memory_order_release); }
  // Wakes the lease thread if it parked: the upstream work just became pending. Not from
  // a forked child: the thread, and the descriptor that wakes it, are the parent's.
  void kick_lease();
  // The answer to `correlation_id` will never be read (its future was dropped): release
  // the blocks it carries once it arrives (`immutable`: references, else mutable blocks).
  // `on_failure`: mutable blocks the request handed over (a register's), given back when
  // the answer is an error.
  void abandon(uint64_t correlation_id, uint32_t pool, bool immutable,
               std::vector<pool::BlockRef> on_failure = {});

 private:
  Connection() = default;
  Status map_pools(const proto::Welcome& w, std::vector<shm::UniqueFd>& fds,
                   const ConnectionOptions& options);
  Result<PoolView> map_pool(const shm::PoolInfo& info, bool usable, shm::UniqueFd* data_fd,
                            const ConnectionOptions& options);
  // The lease thread's work (shm::LeaseWork): batched releases and abandoned answers.
  bool pending() const override;
  bool run() override;
  // `now`: wake a parked daemon for them at once (flush(), the lease thread), else leave
  // that to the lease thread's next tick (shm::ClientChannel::publish_deferred).
  Status flush_locked(bool now);                                                 // send_mutex_ held
  void drain_if_free();                                                          // send_mutex_ held
  void queue_release_locked(uint32_t pool, bool immutable, pool::BlockRef ref);  // send_mutex_
  // Releases gathered under recv_mutex_, made when this is destroyed (after the lock).
  struct LaterReleases {
    Connection* conn;
    std::vector<std::tuple<uint32_t, bool, pool::BlockRef>> items;
    ~LaterReleases();
  };
  void stash_locked(uint64_t corr, Response r, LaterReleases* later);  // recv_mutex_
  void drain_answers_locked(LaterReleases* later);                     // recv_mutex_
  Status check_usable() const;  // this process, a live daemon

  std::unique_ptr<shm::ClientChannel> channel_;
  std::vector<PoolView> pools_;
  uint64_t fork_generation_ = 0;  // detail::fork_generation() when connected

  std::mutex send_mutex_;  // the channel's sending side
  struct PendingRelease {
    uint32_t pool;
    bool immutable;
    std::vector<pool::BlockRef> refs;
  };
  std::vector<PendingRelease> pending_;
  std::atomic<uint32_t> pending_count_{0};
  std::atomic<shm::LeaseWork*> upstream_{nullptr};

  std::mutex recv_mutex_;               // the channel's receiving side
  bool reading_ = false;                // a thread reads the answer ring (wait())
  std::condition_variable answered_;    // early_ grew, or the reader stepped down
  std::map<uint64_t, Response> early_;  // answers that arrived for another waiter
  struct Abandoned {
    uint32_t pool;
    bool immutable;
    std::vector<pool::BlockRef> on_failure;
  };
  std::map<uint64_t, Abandoned> abandoned_;
  std::atomic<uint32_t> abandoned_count_{0};
};

}  // namespace kvpool::detail
