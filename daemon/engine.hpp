// kvpoold's progress engine: the single writer of pool state. One thread drains every
// client's request ring in FIFO order (round robin across clients, a bounded batch each),
// answers on the response ring, accepts and reaps clients, and parks on epoll when idle.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/adoption.hpp"
#include "daemon/config.hpp"
#include "daemon/disk/disk_tier.hpp"
#include "daemon/disk/tier_sink.hpp"
#include "daemon/dispatch.hpp"
#include "daemon/event_publisher.hpp"
#include "daemon/pool_storage.hpp"
#include "daemon/previous_clients.hpp"
#include "daemon/served_pool.hpp"
#include "daemon/session.hpp"
#include "daemon/sessions.hpp"
#include "daemon/succession.hpp"
#include "kvpool/core/status.hpp"
#include "kvpool/pool/pool_core.hpp"
#include "kvpool/shm/control_segment.hpp"
#include "kvpool/shm/protocol.hpp"
#include "kvpool/shm/segment.hpp"
#include "kvpool/shm/segment_layout.hpp"
#include "kvpool/shm/unix_socket.hpp"

namespace kvpool::daemon {

struct EngineHooks {
  std::function<void()> ready;                     // every segment valid, socket listening
  std::function<void(const std::string&)> status;  // a one-line status, now and then
  std::function<void()> watchdog;                  // the engine loop is alive
};

class Engine {
 public:
  // Creates the control segment, the pools and the listening socket. Nothing is left
  // half-made on error: segments and socket file are removed again.
  static Result<std::unique_ptr<Engine>> create(const Config& config);
  ~Engine();

  // Runs until request_stop(); then tells clients, unlinks segments and returns.
  Status run(const EngineHooks& hooks = {});
  // Async-signal-safe: may be called from a signal handler or another thread.
  void request_stop();

  // --keep-cache: a stop (SIGTERM) leaves the segments in the supervisor's store, so that
  // the next kvpoold adopts them (an upgrade). Without it a stop removes them: the next
  // start is empty, as before adoption existed. A crash always leaves them.
  void keep_cache_on_stop(bool keep) { keep_cache_ = keep; }

  const std::string& socket_file() const { return socket_path_; }
  const std::string& runtime_dir() const { return runtime_dir_; }

 private:
  explicit Engine(Config config) : config_(std::move(config)) {}
  Status init();
  Status claim_instance();
  Status create_control_segment(const std::vector<pool::PoolCoreConfig>& core_configs);
  Status create_pools(const std::vector<pool::PoolCoreConfig>& core_configs);
  Status listen_and_watch();
  // Disk tiers of host pools that have one (daemon/disk/), watched by the epoll set.
  Status open_disk_tiers();
  void create_dispatcher();
  // kQuotaExceeded when `more` blocks for `owner` in `pool` would pass its uid's share.
  Status check_uid_share(uint32_t owner, uint32_t pool, uint32_t more);
  void handle_events(int timeout_ms);
  bool drain(Session& s, uint32_t budget);
  enum class Outcome { kDone, kBackpressure };
  Outcome process(Session& s, uint32_t type, const std::byte* payload, uint32_t len);
  bool any_request_pending();
  void note_request(uint64_t t);
  // Publishes ControlStats::clients_busy and clients_awake when they changed (callers' wait
  // policy, shm/cpu_share.hpp).
  void publish_busy(uint32_t busy, uint32_t awake);
  void show_cpu(bool parking);
  // Publishes `s`'s answers and notes whether its client needs our core (run()).
  void publish_answers(Session& s);
  void periodic();
  void service(const EngineHooks& hooks);
  void shutdown();
  // ---- restarts (engine_restart.cpp; what a restart hands over: daemon/succession.hpp) ----
  // Hands the control segment and the host pools' segments to the supervisor's store, then
  // drops the previous daemon's control segment from it; before any client is accepted,
  // so the stored control segment always describes the stored pool bytes.
  void store_segments();
  void forget_segments();  // a stop without --keep-cache
  // The pool-core owner that holds what the previous daemon's still running clients held
  // (every pool core has max_clients + 2 owners: the clients, this one, the disk tier).
  uint32_t keeper_owner() const { return config_.max_clients; }
  // The owner the disk tiers hold blocks as while they write or read them.
  uint32_t disk_owner() const { return config_.max_clients + 1; }
  // ---- kMatchOnboard (engine_onboard.cpp) ----
  // After the host part of a kMatchOnboard was matched into its claimed `answer`: when the
  // disk tier holds what follows, takes the claim back, starts the reads and returns true
  // (the answer goes out when they complete; on_onboard_done). False: publish as a kMatch.
  bool defer_match_onboard(Session& s, const Dispatcher::Request& req,
                           std::span<const std::byte> answer);
  void on_onboard_done(uint64_t cookie, std::span<const uint64_t> good);
  // Puts an answer on the client's response ring, or keeps it (in order) until there is room.
  void deliver(Session& s, std::vector<std::byte> answer);
  bool put_answer(Session& s, std::span<const std::byte> answer);  // false: the ring is full
  // Sends what deliver() kept for `s`; false while some still wait for room.
  bool flush_undelivered(Session& s);

  Config config_;
  std::string runtime_dir_;
  std::string socket_path_;
  shm::ControlWriter control_;  // control and registry segments, shm/control_segment.hpp
  shm::ControlHeader* ctl_ = nullptr;
  std::vector<ServedPool> pools_;
  std::unique_ptr<EventPublisher> events_;     // every pool core's event sink (null: no ring)
  std::unique_ptr<disk::TierSink> tier_sink_;  // events_ and the disk tiers
  // By pool index (null: no disk tier). After the sink: a tier finishing its I/O as it goes
  // may still register blocks, whose events go through the sink.
  std::vector<std::unique_ptr<disk::DiskTier>> disks_;
  shm::UniqueFd listen_fd_;
  shm::UniqueFd epoll_fd_;
  shm::UniqueFd stop_fd_;  // eventfd
  // Attach, liveness and reclaim (daemon/sessions.hpp); indexed by slot.
  Sessions sessions_{SessionLinks{config_, control_, pools_, epoll_fd_, listen_fd_}};
  std::vector<std::byte> scratch_;  // a copy of the request payload being processed
  Dispatcher dispatcher_;           // validates and runs ring records against the pools' cores
  uint64_t last_periodic_ns_ = 0;
  // The wait protocol (docs/design.md §4): when the last request came, and a moving average of
  // the gap between requests, which decides whether polling after an answer can pay.
  uint64_t last_request_ns_ = 0;
  uint64_t gap_avg_ns_ = 0;
  uint32_t park_word_ = 0;          // last value stored to ControlHeader::daemon_sleeping
  bool woke_local_client_ = false;  // since the last park: answered a client on our core
  uint32_t busy_published_ = 0;     // last value stored to ControlStats::clients_busy
  uint32_t awake_published_ = 0;    // last count stored to ControlStats::clients_awake
  uint64_t last_events_ns_ = 0;
  uint64_t status_ticks_ = 0;
  uint32_t rr_next_ = 0;
  std::vector<uint32_t> pass_slots_;  // the pass's copy of Sessions::live (kept: no allocation)
  // Checksum requests (kVerify, kScrub) the engine may still run in this pass: one per
  // pass over the clients, whoever sends them (drain()).
  uint32_t checks_left_ = 1;
  bool stopping_ = false;
  bool created_ = false;
  bool keep_cache_ = false;
  Succession succession_;  // the predecessor's segments and its clients that still run
  // kMatchOnboard answers waiting for their disk reads, by the cookie the tier calls back with.
  struct DeferredMatch {
    uint32_t slot = 0;
    uint32_t generation = 0;  // the session's: a slot reused meanwhile is another client
    uint64_t correlation_id = 0;
    uint32_t pool = 0;
    std::vector<pool::BlockRef> host;  // the host part, the client's references taken
    std::vector<uint64_t> rest;        // the hashes after it
  };
  std::unordered_map<uint64_t, DeferredMatch> deferred_;
  uint64_t next_deferred_ = 1;
  // Answers that found their client's response ring full, by slot, oldest first.
  struct Undelivered {
    uint32_t generation = 0;
    std::vector<std::byte> bytes;
  };
  std::vector<std::deque<Undelivered>> undelivered_;
};

}  // namespace kvpool::daemon
