#include "daemon/engine.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "daemon/epoll_tags.hpp"
#include "kvpool/core/clock.hpp"
#include "kvpool/core/counter.hpp"
#include "kvpool/core/paths.hpp"
#include "kvpool/core/version.hpp"
#include "kvpool/shm/cpu_share.hpp"
#include "kvpool/shm/fields.hpp"
#include "kvpool/shm/futex.hpp"
#include "kvpool/shm/handshake.hpp"
#include "kvpool/shm/lease_mutex.hpp"
#include "kvpool/shm/protocol.hpp"
#include "kvpool/shm/unix_socket.hpp"

namespace kvpool::daemon {
namespace {

using shm::SlotState;
using shm::UniqueFd;

// A client that sends this many malformed records is cut off: it is broken or hostile.
constexpr uint32_t kMaxProtocolErrors = 64;
// ... and one whose releases name this many handles it does not hold.
constexpr uint64_t kMaxRejectedHandles = 65536;
// Engine time one client may take in one round before the others get their turn.
constexpr uint64_t kDrainTimeNs = 500'000;
// Records drained from one client before the engine moves to the next (fairness).
constexpr uint32_t kDrainBudget = 32;
// Checksum requests run per pass over the clients, all clients together. Each hashes up to
// proto::kCheckSliceBytes: one per pass bounds what a flood of them (from one client
// or from sixteen) adds to anyone else's wait to one slice. A client whose check must wait
// waits with its whole ring (its requests stay in order): the cost is the requester's.
constexpr uint32_t kChecksPerPass = 1;

bool is_check(uint32_t type) {
  return type == static_cast<uint32_t>(proto::Opcode::kVerify) ||
         type == static_cast<uint32_t>(proto::Opcode::kScrub);
}
// Pauses between two polling passes over the rings (~0.5-1 us): short enough that a
// request is seen within a microsecond, long enough not to hammer the slot table.
constexpr int kPausesPerPass = 16;
// How long the engine parks at most: bounds suspect re-checks and watchdog pings.
constexpr int kTickMs = 100;
// How long the engine polls on after a pass that took a record, whatever the gaps between
// requests (run()): a caller in a conversation (the next request of a step, the release of
// what it dropped at once) is back within microseconds, and finds the engine awake.
constexpr uint64_t kLingerNs = 20'000;
constexpr uint64_t kEventPollNs = 100'000;
constexpr uint64_t kPeriodicNs = 50'000'000;

// `kvpoolctl metrics` turns this into kvpool_request_duration_seconds.
void record_latency(shm::LatencyHistogram& h, uint64_t ns) {
  size_t i = 0;
  while (i < shm::kLatencyBounds && ns > shm::kLatencyBoundsNs[i]) ++i;
  bump(h.buckets[i], 1);
  bump(h.count, 1);
  bump(h.sum_ns, ns);
}

Status make_runtime_dir(const std::string& dir) {
  std::error_code ec;
  const bool shared_tmp = dir.rfind("/tmp/", 0) == 0;
  if (shared_tmp && ::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return io_error("cannot create runtime_dir " + dir, errno);
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return Status(ErrorCode::kIoError, "cannot create runtime_dir " + dir + ": " + ec.message());
  // In world-writable /tmp another user may have made the directory first, to serve a fake
  // daemon to our clients or to read theirs: use it only if it is ours and private.
  struct stat st {};
  if (shared_tmp && (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
                     st.st_uid != ::geteuid() || (st.st_mode & 022) != 0))
    return Status(ErrorCode::kPermissionDenied,
                  "runtime_dir " + dir + " exists but is not a private directory of uid " +
                      std::to_string(::geteuid()) +
                      " (another user may have created it); remove it or set runtime_dir");
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::create(const Config& config) {
  KVPOOL_RETURN_IF_ERROR(validate_config(config));
  std::unique_ptr<Engine> e(new Engine(config));
  Status s = e->init();
  if (!s.is_ok()) return s;  // the destructor removes what init made
  return e;
}

Engine::~Engine() {
  // A tier finishing its reads as it goes must not call back into what is being destroyed.
  for (auto& d : disks_)
    if (d) d->set_onboard_done(nullptr);
  if (!created_) return;
  // The segments are memfds: they go with the last descriptor. Only the socket has a name.
  if (listen_fd_) ::unlink(socket_path_.c_str());
}

Status Engine::init() {
  KVPOOL_RETURN_IF_ERROR(claim_instance());
  std::vector<pool::PoolCoreConfig> core_configs;
  for (const PoolConfig& pc : config_.pools)
    // One owner per client slot, the keeper of the previous daemon's clients' blocks, and
    // the disk tier's.
    core_configs.push_back({pc.layout.num_blocks, config_.max_clients + 2, pc.max_holds});
  KVPOOL_RETURN_IF_ERROR(create_control_segment(core_configs));
  KVPOOL_RETURN_IF_ERROR(create_pools(core_configs));
  KVPOOL_RETURN_IF_ERROR(listen_and_watch());
  KVPOOL_RETURN_IF_ERROR(open_disk_tiers());
  create_dispatcher();
  return Status::ok();
}

// The runtime dir exists and no live daemon serves this instance. From here on the
// destructor cleans up (created_).
Status Engine::claim_instance() {
  runtime_dir_ = config_.runtime_dir.empty() ? default_runtime_dir() : config_.runtime_dir;
  KVPOOL_RETURN_IF_ERROR(make_runtime_dir(runtime_dir_));
  socket_path_ = socket_path(runtime_dir_, config_.instance);

  // A live daemon on this instance answers its socket: refuse to replace it. A dead one
  // left at most a socket file (its segments are memfds and died with it): replace it.
  if (auto probe = shm::connect_unix(socket_path_); probe.is_ok()) {
    return Status(ErrorCode::kResourceExhausted,
                  "instance '" + config_.instance + "' is already served by a running kvpoold (" +
                      socket_path_ + " answers); stop it or pick another instance");
  }
  if (struct stat st{}; ::lstat(socket_path_.c_str(), &st) == 0)
    spdlog::warn("replacing the stale socket {} of a daemon that is gone", socket_path_);
  created_ = true;
  return Status::ok();
}

// Control segment and the pools' registry segments: shm/control_segment.hpp places every
// part and fills the headers.
Status Engine::create_control_segment(const std::vector<pool::PoolCoreConfig>& core_configs) {
  auto placed = shm::control_layout(config_.max_clients, core_configs, config_.event_ring_slots);
  if (!placed) return placed.status();
  std::vector<std::string> names;
  for (const PoolConfig& pc : config_.pools) names.push_back(pc.name);
  auto ctl = shm::ControlWriter::create(config_.instance, config_.max_clients,
                                        std::move(placed.value()), names, config_.event_ring_slots);
  if (!ctl) return ctl.status();
  control_ = std::move(ctl.value());
  ctl_ = &control_.header();
  if (config_.event_ring_slots != 0) {
    std::vector<shm::EventRingWriter> rings;
    for (uint32_t i = 0; i < control_.num_pools(); ++i) rings.push_back(control_.event_ring(i));
    events_ = std::make_unique<EventPublisher>(std::move(rings));
  }
  return Status::ok();
}

// Each pool's storage (host shm or a CUDA slab), its core in the control segment, and its
// PoolInfo for clients.
Status Engine::create_pools(const std::vector<pool::PoolCoreConfig>& core_configs) {
  const uint32_t np = static_cast<uint32_t>(config_.pools.size());
  // A previous daemon's host pools, kept by a supervisor: taken over where they fit
  // (daemon/succession.hpp); those that do not go before the new pools take memory.
  succession_ = Succession::begin(take_inherited_fds(), config_.pools, keeper_owner());

  for (uint32_t i = 0; i < np; ++i) {
    const PoolConfig& pc = config_.pools[i];
    auto layout = Layout::create(pc.layout);
    if (!layout)
      return Status(ErrorCode::kConfigError,
                    "pool '" + pc.name + "': " + layout.status().message());
    // Host shm or a CUDA slab; a failure names the pool, device and bytes, and the
    // destructor removes what earlier pools made (the daemon never starts half-configured).
    auto storage = succession_.storage_for(i, config_.instance, pc, *layout);
    if (!storage) return storage.status();
    auto core = control_.create_pool_core(i, core_configs[i], pc.name);
    if (!core) {
      storage->remove();
      return core.status();
    }
    succession_.adopt_registry(i, control_, core_configs[i], *core);
    shm::PoolInfo& info = control_.pool_info(i);
    shm::copy_name(info.name, pc.name);
    info.layout = pc.layout;
    info.dtype = static_cast<uint32_t>(pc.dtype);
    storage->publish(info);  // shm name or CUDA IPC handle + device UUID, storage, bytes
    info.hash_scheme = static_cast<uint32_t>(pc.hash_scheme);
    // The IPC handle opens the slab: only the pool's own clients get it (its registry
    // segment), never everyone who maps the control segment.
    shm::RegistryHeader& reg = control_.registry(i).header();
    std::memcpy(reg.device_uuid, info.device_uuid, sizeof(reg.device_uuid));
    std::memcpy(reg.ipc_handle, info.ipc_handle, sizeof(reg.ipc_handle));
    std::memset(info.ipc_handle, 0, sizeof(info.ipc_handle));
    pools_.push_back(ServedPool{pc, std::move(storage.value()), std::move(core.value())});
  }
  succession_.publish_identity(control_);
  // Every registry change goes to the event ring (kvpool-events forwards it to NATS).
  for (auto& p : pools_) {
    p.core.set_generation_tag(static_cast<uint8_t>(ctl_->restart.generation_tag));
    p.core.set_event_sink(events_.get());
    if (Status q = p.core.set_quota(config_.quota); !q.is_ok())
      return Status(ErrorCode::kConfigError, "quota: " + q.message());
  }
  return Status::ok();
}

// The listening socket, and the epoll set with it and the stop eventfd.
Status Engine::listen_and_watch() {
  auto lfd = shm::listen_unix(socket_path_);
  if (!lfd) return lfd.status();
  listen_fd_ = std::move(lfd.value());
  // Group members may attach (the systemd unit's group); others are refused by the OS.
  ::chmod(socket_path_.c_str(), 0660);

  epoll_fd_ = UniqueFd(::epoll_create1(EPOLL_CLOEXEC));
  stop_fd_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!epoll_fd_ || !stop_fd_) return io_error("epoll/eventfd", errno);
  auto add = [&](int fd, uint64_t data) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = data;
    return ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &ev);
  };
  if (add(listen_fd_.get(), event_tag(kListen, 0)) != 0 ||
      add(stop_fd_.get(), event_tag(kStop, 0)) != 0)
    return io_error("epoll_ctl", errno);
  return Status::ok();
}

Status Engine::open_disk_tiers() {
  disks_.resize(pools_.size());
  std::vector<disk::DiskTier*> tiers(pools_.size(), nullptr);
  for (uint32_t i = 0; i < pools_.size(); ++i) {
    ServedPool& p = pools_[i];
    if (!p.config.disk.enabled) continue;
    disk::DiskTierSetup setup;
    setup.pool = p.config.name;
    setup.instance = config_.instance;
    setup.config = p.config.disk;
    setup.layout = p.config.layout;
    setup.dtype = static_cast<uint32_t>(p.config.dtype);
    setup.hash_scheme = static_cast<uint32_t>(p.config.hash_scheme);
    setup.host_base = p.storage.host_bytes_for_onboard();
    setup.owner = disk_owner();
    setup.published = &control_.registry(i).disk_info();  // kvpoolctl, the exporter
    setup.events = events_.get();  // its Stored / Removed, flagged disk, in the pool's ring
    setup.pool_index = i;
    setup.backend = p.config.disk.io == DiskIoEngine::kIoUring   ? disk::IoBackend::kUring
                    : p.config.disk.io == DiskIoEngine::kThreads ? disk::IoBackend::kThreads
                                                                 : disk::IoBackend::kAuto;
    auto tier = disk::DiskTier::open(setup, p.core);
    if (!tier) return tier.status();
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = event_tag(kDisk, i);
    if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, (*tier)->event_fd(), &ev) != 0)
      return io_error("epoll_ctl (disk tier)", errno);
    (*tier)->set_onboard_done(
        [this](uint64_t cookie, std::span<const uint64_t> good) { on_onboard_done(cookie, good); });
    tiers[i] = tier->get();
    disks_[i] = std::move(tier.value());
  }
  undelivered_.resize(sessions_.size());
  if (std::none_of(tiers.begin(), tiers.end(), [](auto* t) { return t != nullptr; }))
    return Status::ok();
  tier_sink_ = std::make_unique<disk::TierSink>(events_.get(), std::move(tiers));
  for (auto& p : pools_) p.core.set_event_sink(tier_sink_.get());
  return Status::ok();
}

// The dispatcher runs ring records against the pools' cores; kVerify and kScrub check
// host pools' bytes.
void Engine::create_dispatcher() {
  uint32_t max_payload = shm::max_ring_payload(config_.ring_bytes);
  scratch_.resize(max_payload);
  std::vector<pool::PoolCore*> cores;
  for (auto& p : pools_) cores.push_back(&p.core);
  dispatcher_ = Dispatcher(std::move(cores), max_payload);  // the answers' ring is as large
  std::vector<BlockChecker> checkers(pools_.size());
  for (size_t i = 0; i < pools_.size(); ++i) {
    if (const std::byte* bytes = pools_[i].storage.host_bytes())
      checkers[i] = BlockChecker(bytes, *Layout::create(pools_[i].config.layout));
  }
  dispatcher_.set_checkers(std::move(checkers));  // kVerify, kScrub: host pools only
  std::vector<uint32_t> page_sizes;
  for (const auto& p : pools_) page_sizes.push_back(p.config.layout.page_size);
  dispatcher_.set_page_sizes(std::move(page_sizes));  // kRegisterTokens
  // One uid's share of each pool, over all its clients (uid_share_percent).
  if (uid_share_applies(config_))
    dispatcher_.set_admission([this](uint32_t owner, uint32_t pool, uint32_t more) {
      return check_uid_share(owner, pool, more);
    });
  // kReclaim: only the caller's own process may take back what it held.
  dispatcher_.set_previous_clients(&succession_.clients());
}

// What a uid holds of a pool is what its clients hold together: mutable blocks and distinct
// registered blocks each references (a block two of its clients share counts twice, which
// errs on the safe side).
Status Engine::check_uid_share(uint32_t owner, uint32_t pool, uint32_t more) {
  const pool::PoolCore& core = pools_[pool].core;
  const uint32_t cap = blocks_per_uid(config_, core.num_blocks());
  if (cap == 0) return Status::ok();
  const uid_t uid = sessions_[owner].uid;
  uint64_t held = 0;
  uint32_t clients = 0;
  // The ready slots only (Sessions::live): a client not yet Ready holds nothing, and this
  // runs for every request that takes blocks, where a look at every slot (max_clients) cost
  // a cold Session per slot (docs/performance.md, "The slots a request looks at").
  for (uint32_t slot : sessions_.live()) {
    const Session& s = sessions_[slot];
    if (s.state == SlotState::kFree || s.uid != uid) continue;
    const pool::OwnerRecord& o = core.owner_record(s.slot);
    held += uint64_t{o.mutable_count} + o.hold_entries;
    ++clients;
  }
  if (held + more <= cap) return Status::ok();
  return Status(ErrorCode::kQuotaExceeded,
                "uid " + std::to_string(uid) + " holds " + std::to_string(held) + " of pool '" +
                    core.name() + "''s " + std::to_string(core.num_blocks()) + " blocks over " +
                    std::to_string(clients) + " client(s); " + std::to_string(more) +
                    " more would pass its share of " + std::to_string(cap) +
                    " (uid_share_percent " + std::to_string(config_.uid_share_percent) +
                    "; where every worker runs as one uid, set allowed_uids to it, or "
                    "uid_share_percent to 100)");
}

void Engine::request_stop() {
  uint64_t one = 1;
  ssize_t r = ::write(stop_fd_.get(), &one, sizeof(one));
  (void)r;
}

// ---- the loop ----------------------------------------------------------------------------

Status Engine::run(const EngineHooks& hooks) {
  store_segments();  // before any client can change a block
  // Callers poll for an answer only while the engine and the busy clients fit these.
  ctl_->stats.engine_cpus.store(shm::allowed_cpu_count(), std::memory_order_relaxed);
  ctl_->stats.clients_awake.store(shm::kAwakePublished, std::memory_order_relaxed);  // 0 awake
  // Everything is valid: say so last (a release store), so readers that see kReady see it all.
  control_.publish_ready();
  spdlog::info("kvpoold ready: instance '{}', socket {}, {} pool(s), max_clients {}, epoch {:016x}",
               config_.instance, socket_path_, pools_.size(), config_.max_clients,
               ctl_->restart.epoch);
  for (auto& p : pools_)
    spdlog::info("pool '{}': {} blocks of {} bytes in {}", p.config.name, p.core.num_blocks(),
                 Layout::create(p.config.layout)->block_bytes(), p.storage.describe());
  if (hooks.ready) hooks.ready();

  const uint64_t poll_ns = uint64_t{config_.poll_us} * 1000;
  uint64_t loops = 0;
  while (!stopping_) {
    ++loops;
    bool worked = false;
    show_cpu(false);
    checks_left_ = kChecksPerPass;
    // One pass serves every ring that holds a record and counts the clients in a call: a
    // request taken within kBusyWindowNs, or an answer they have not read yet (they wait for
    // a core to read it on). Callers poll for answers only while those and we fit the cores.
    const uint64_t pass_ns = now_ns(CLOCK_MONOTONIC);
    uint32_t busy = 0, awake = 0;
    // The ready slots only (Sessions::live), copied: a drain may end a session, and with it
    // change the list. A slot's Session is cold after a park; with a few clients of 64 slots
    // the pass now touches a few.
    pass_slots_.assign(sessions_.live().begin(), sessions_.live().end());
    const uint32_t n = static_cast<uint32_t>(pass_slots_.size());
    for (uint32_t k = 0; k < n; ++k) {
      Session& s = sessions_[pass_slots_[(rr_next_ + k) % n]];
      if (!s.ready || s.state != SlotState::kAttached) continue;
      if (drain(s, kDrainBudget)) {
        worked = true;
        s.last_request_ns = pass_ns;
      }
      if (s.state == SlotState::kAttached && (pass_ns - s.last_request_ns < shm::kBusyWindowNs ||
                                              !s.responses->consumer_caught_up())) {
        ++busy;
        if (!s.responses->consumer_asleep()) ++awake;
      }
    }
    publish_busy(busy, awake);
    rr_next_ = (rr_next_ + 1) % std::max<uint32_t>(n, 1);
    // Write-behind of what those requests registered: holds taken, writes started.
    if (worked)
      for (auto& d : disks_)
        if (d) d->pump();
    const uint64_t t = now_ns(CLOCK_MONOTONIC);
    if (worked) {
      note_request(t);
      if ((loops & 15) == 0) service(hooks);
      continue;
    }
    // Poll on only while requests come closer together than the poll budget: then the next
    // one is likely to land while we look, and catching it costs neither side a wake-up.
    // At an engine's cadence (a call every few ms) polling would only burn the core a woken
    // client needs; park at once instead. Between passes we pause, never sched_yield: a
    // yield to a CPU-bound neighbour costs its whole time slice (shm::PollPolicy).
    // Nor right after answering a client on our own core (publish_answers): it needs the
    // core now.
    // (Parking at once also while the busy clients outnumber the cores was tried: every
    // request then paid an eventfd write and an epoll wake-up, 15-18% more of each per call,
    // for no gain measurable here; docs/performance.md.)
    // Whatever the average, poll on for kLingerNs after the last pass that took a
    // record (the one that answered, or a release after it). The average alone
    // could not learn that calls come back to back: once parked after each answer, each
    // gap it measures holds our own wake-up (tens of us here), so it stayed above the poll
    // budget, and a caller that sends its release without ringing (publish_deferred) gave
    // it no short gap either; back-to-back calls then paid a wake-up each for hundreds of
    // calls (docs/performance.md). At an engine's cadence the linger costs up to 20 us of
    // our core per call.
    const uint64_t poll_for =
        gap_avg_ns_ < poll_ns ? poll_ns : std::min<uint64_t>(poll_ns, kLingerNs);
    if (poll_ns > 0 && !woke_local_client_ && t - last_request_ns_ < poll_for) {
      for (int i = 0; i < kPausesPerPass; ++i) shm::cpu_relax();
      if ((loops & 15) == 0) service(hooks);
      continue;
    }
    // Park. Dekker with clients: we store daemon_sleeping then re-read every tail; a client
    // stores its tail then reads daemon_sleeping. One of us sees the other's store, so a
    // request is either found here or its client rings our eventfd.
    woke_local_client_ = false;
    publish_busy(0, 0);  // nobody calls often enough to keep us awake: a caller may poll again
    show_cpu(true);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (!any_request_pending()) {
      bump(ctl_->stats.engine_sleeps, 1);
      handle_events(kTickMs);
    }
    show_cpu(false);
    service(hooks);
  }
  shutdown();
  if (!keep_cache_) forget_segments();
  return Status::ok();
}

// The engine's park word (ControlHeader::daemon_sleeping): bit 0 set while it parks, the
// rest its CPU tag. Parking stores with seq_cst (the Dekker store, see run()). Otherwise the
// word changes only when the engine moved to another CPU: a client reads it after each
// request to learn whether kvpoold shares its core (then it sleeps at once instead of
// polling for an answer that cannot come while it holds the core).
void Engine::show_cpu(bool parking) {
  const uint32_t word = (shm::cpu_tag() << 1) | (parking ? 1u : 0u);
  if (parking) {
    ctl_->daemon_sleeping.store(word, std::memory_order_seq_cst);
  } else if (word != park_word_) {
    ctl_->daemon_sleeping.store(word, std::memory_order_relaxed);
  }
  park_word_ = word;
}

// Attaches, hang-ups and pidfds are looked at every ~100 us even while busy, so a dead
// client's blocks come back within a fraction of a millisecond; periodic work (heartbeat,
// suspects, watchdog, status) every 50 ms, busy or not.
void Engine::service(const EngineHooks& hooks) {
  uint64_t t = now_ns(CLOCK_MONOTONIC);
  if (t - last_events_ns_ > kEventPollNs) {
    last_events_ns_ = t;
    handle_events(0);
  }
  if (t - last_periodic_ns_ < kPeriodicNs) return;
  last_periodic_ns_ = t;
  periodic();
  if (hooks.watchdog) hooks.watchdog();
  if (hooks.status && (++status_ticks_ % 20) == 0) {  // about once a second
    std::string line = "clients " + std::to_string(sessions_.in_use());
    for (auto& p : pools_) {
      auto c = p.core.counts();
      line += ", pool '" + p.config.name + "' free " + std::to_string(c.free) + " inactive " +
              std::to_string(c.inactive) + " of " + std::to_string(c.total);
    }
    for (auto& d : disks_)
      if (d)
        line +=
            ", disk " + std::to_string(d->slots_used()) + "/" + std::to_string(d->slots_total());
    hooks.status(line);
  }
}

// A pass found work at `t`: fold the gap since the previous one into a moving average
// (1/8 weight; gaps over a second count as a second, so one long pause is forgotten fast).
void Engine::note_request(uint64_t t) {
  const uint64_t gap = std::min<uint64_t>(t - last_request_ns_, 1'000'000'000ull);
  gap_avg_ns_ = gap_avg_ns_ - gap_avg_ns_ / 8 + gap / 8;
  last_request_ns_ = t;
}

void Engine::publish_busy(uint32_t busy, uint32_t awake) {
  // relaxed: hints a caller reads before it decides to poll; a stale value costs one
  // answer a wake-up it could have polled for, or a poll that sleeps after its budget.
  if (busy != busy_published_) {
    ctl_->stats.clients_busy.store(busy, std::memory_order_relaxed);
    busy_published_ = busy;
  }
  if (awake != awake_published_) {
    ctl_->stats.clients_awake.store(shm::kAwakePublished | awake, std::memory_order_relaxed);
    awake_published_ = awake;
  }
}

bool Engine::any_request_pending() {
  for (uint32_t slot : sessions_.live()) {
    Session& s = sessions_[slot];
    if (!s.ready || s.state != SlotState::kAttached || s.backpressured) continue;
    auto r = s.requests->poll();
    if (!r || !r->empty()) return true;  // a record, or an error to handle
  }
  return false;
}

void Engine::periodic() {
  uint64_t t = now_ns(CLOCK_MONOTONIC);
  ctl_->heartbeat_ns.store(t, std::memory_order_relaxed);
  if (succession_.clients().waiting() != 0) {
    std::vector<pool::PoolCore*> all;
    for (auto& p : pools_) all.push_back(&p.core);
    succession_.clients().reap(all);
  }
  // Suspects: hung up but the lease was held. Reclaimed only once death is proven.
  for (auto& s : sessions_)
    if (s.state == SlotState::kSuspect) sessions_.check_liveness(s, "re-check");
  sessions_.expire(t);  // no Hello, no Ready, EMFILE back-off
}

// Everything but the rings comes through the epoll set: connections and their Hello,
// hang-ups, process exits and doorbells go to the sessions; a stop ends the loop.
void Engine::handle_events(int timeout_ms) {
  epoll_event evs[64];
  int n = ::epoll_wait(epoll_fd_.get(), evs, 64, timeout_ms);
  for (int i = 0; i < n; ++i) {
    const uint64_t d = evs[i].data.u64;
    const uint32_t idx = event_index(d);
    switch (event_kind(d)) {
      case kListen:
        sessions_.accept_clients();
        break;
      case kStop:
        stopping_ = true;
        break;
      case kPending:
        sessions_.on_pending_readable(static_cast<int>(idx));
        break;
      case kSock:
        sessions_.on_session_socket(idx, evs[i].events);
        break;
      case kPid:
        sessions_.on_process_exit(idx);
        break;
      case kBell:
        sessions_.clear_doorbell(idx);
        break;
      case kDisk:
        if (idx < disks_.size() && disks_[idx]) disks_[idx]->on_io_ready();
        break;
    }
  }
}

// ---- requests ----------------------------------------------------------------------------

bool Engine::drain(Session& s, uint32_t budget) {
  bool worked = false;
  uint64_t t_start = 0;  // read only once a record is there: an empty ring costs no clock
  uint64_t t_round = 0;
  // Deferred answers that found the ring full go first; while they wait, so do its requests.
  if (!undelivered_.empty() && !undelivered_[s.slot].empty() && !flush_undelivered(s)) {
    s.backpressured = true;
    return false;
  }
  for (uint32_t k = 0; k < budget; ++k) {
    auto r = s.requests->poll();
    if (!r) {
      sessions_.disconnect(s, "request ring corrupt: " + r.status().message());
      return true;
    }
    if (r->empty()) break;
    // The pass's check is spent: this client's ring waits for the next pass (which comes
    // at once: the engine does not park while a ring holds a record).
    if (is_check(r->type)) {
      if (checks_left_ == 0) break;
      --checks_left_;
    }
    // Copy once: the client may keep writing its ring while we work.
    if (t_start == 0) t_round = t_start = now_ns(CLOCK_MONOTONIC);
    uint32_t len = r->payload_len;
    std::memcpy(scratch_.data(), r->payload, len);
    if (process(s, r->type, scratch_.data(), len) == Outcome::kBackpressure) {
      // The client is not reading its answers: leave the request where it is and let the
      // engine park; it retries on its next pass (at the latest one tick later).
      s.backpressured = true;
      break;
    }
    s.backpressured = false;
    // One clock read per record: the end of this one is the start of the next.
    const uint64_t t_end = now_ns(CLOCK_MONOTONIC);
    record_latency(ctl_->request_latency, t_end - t_start);
    t_start = t_end;
    if (s.state == SlotState::kFree) return true;  // disconnected while processing
    s.requests->consume();
    worked = true;
    if (t_end - t_round > kDrainTimeNs) break;  // the others' turn
  }
  return worked;
}

Engine::Outcome Engine::process(Session& s, uint32_t type, const std::byte* payload, uint32_t len) {
  bump(ctl_->stats.requests, 1);
  sessions_.bump_slot(s, &shm::SlotInfo::requests, 1);
  // The header is decoded once, from our private copy of the record.
  const Dispatcher::Request req = Dispatcher::decode(type, {payload, len});
  // Room for the largest answer first: once the pool changed, the answer must fit.
  // Answers fit one response record by construction: header + refs + room for a message.
  const uint32_t answer_bytes = dispatcher_.answer_capacity(req);
  std::span<std::byte> answer;
  if (answer_bytes > 0) {
    auto claim = s.responses->try_claim(Dispatcher::answer_type(type), answer_bytes);
    if (!claim) {
      sessions_.disconnect(s, "response ring corrupt: " + claim.status().message());
      return Outcome::kDone;
    }
    if (*claim == nullptr) return Outcome::kBackpressure;  // the client is not reading yet
    answer = {static_cast<std::byte*>(*claim), answer_bytes};
  }
  const Dispatcher::Outcome done =
      dispatcher_.dispatch({s.slot, s.pid, s.uid, s.pool_mask}, req, answer);
  const bool is_match = type == static_cast<uint32_t>(proto::Opcode::kMatch) ||
                        type == static_cast<uint32_t>(proto::Opcode::kMatchOnboard);
  // The prefix continues on disk: the answer goes out when the reads are done.
  if (type == static_cast<uint32_t>(proto::Opcode::kMatchOnboard) && done.code == ErrorCode::kOk &&
      defer_match_onboard(s, req, answer.first(done.answer_bytes)))
    return Outcome::kDone;
  if (is_match && done.code == ErrorCode::kOk &&
      done.answer_bytes >= sizeof(proto::ResponseHeader)) {
    // A successful answer carries no message: what follows the header is the hits.
    sessions_.bump_slot(
        s, &shm::SlotInfo::match_hits,
        (done.answer_bytes - sizeof(proto::ResponseHeader)) / sizeof(pool::BlockRef));
  }
  if (done.rejected != 0) {
    s.rejected_handles += done.rejected;
    sessions_.bump_slot(s, &shm::SlotInfo::rejected_handles, done.rejected);
    // A worker releases only what it was given; one that keeps releasing handles it does
    // not hold is broken or hostile, and each costs the engine a look-up.
    if (s.rejected_handles > kMaxRejectedHandles) {
      sessions_.disconnect(s, "more than " + std::to_string(kMaxRejectedHandles) +
                                  " release handles refused (stale, foreign or unknown)");
      return Outcome::kDone;
    }
  }
  if (done.code == ErrorCode::kProtocolError) {
    bump(ctl_->stats.protocol_errors, 1);
    sessions_.bump_slot(s, &shm::SlotInfo::protocol_errors, 1);
    if (++s.protocol_errors > kMaxProtocolErrors) {
      sessions_.disconnect(
          s, "more than " + std::to_string(kMaxProtocolErrors) + " malformed records");
      return Outcome::kDone;
    }
  }
  if (answer_bytes > 0) publish_answers(s);
  return Outcome::kDone;
}

// A client we answer on our own core can run only once we stop, so run() parks at once
// instead of polling on: one we woke from its sleep there, and one whose request came from
// there. The second has not slept: the ring of its request woke us onto its core and we
// preempted it before it could, so it waits for the core, runnable, and every microsecond
// we poll it waits too (one run of kvpool_cadence_split_bench at 20 ms gaps: preempted
// callers waited 30-74 us for the core, our answer plus the linger; docs/performance.md).
void Engine::publish_answers(Session& s) {
  const uint32_t woke = s.responses->publish();
  if (shm::answered_on_our_core(woke, s.requests ? s.requests->producer_cpu() : 0, shm::cpu_tag()))
    woke_local_client_ = true;
}

void Engine::shutdown() {
  spdlog::info("kvpoold stopping: telling {} client(s)", sessions_.in_use());
  for (auto& d : disks_)
    if (d) d->set_onboard_done(nullptr);  // the clients waiting on reads are told below
  control_.publish_stopping();
  for (auto& s : sessions_) {
    if (s.state == SlotState::kFree) continue;
    // Wake a client parked on its response ring so it sees the hang-up at once.
    if (s.responses) s.responses->publish();
    s = Session{};
  }
  sessions_.drop_pending();
  ::unlink(socket_path_.c_str());
  listen_fd_.reset();
}

}  // namespace kvpool::daemon
