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

#include "daemon/client_segment.hpp"
#include "daemon/liveness.hpp"
#include "kvpool/core/paths.hpp"
#include "kvpool/core/version.hpp"
#include "kvpool/shm/futex.hpp"
#include "kvpool/shm/handshake.hpp"
#include "kvpool/shm/lease_mutex.hpp"
#include "kvpool/shm/protocol.hpp"
#include "kvpool/shm/unix_socket.hpp"

namespace kvpool::daemon {
namespace {

using shm::SlotState;
using shm::UniqueFd;

enum Kind : uint64_t { kListen = 1, kStop = 2, kPending = 3, kSock = 4, kPid = 5, kBell = 6 };
constexpr uint64_t tag(Kind k, uint32_t i) { return (static_cast<uint64_t>(k) << 32) | i; }

// A client that sends this many malformed records is cut off: it is broken or hostile.
constexpr uint32_t kMaxProtocolErrors = 64;
// ... and one whose releases name this many handles it does not hold.
constexpr uint64_t kMaxRejectedHandles = 65536;
// Engine time one client may take in one round before the others get their turn.
constexpr uint64_t kDrainTimeNs = 500'000;
// Records drained from one client before the engine moves to the next (fairness).
constexpr uint32_t kDrainBudget = 32;
// Pauses between two polling passes over the rings (~0.5-1 us): short enough that a
// request is seen within a microsecond, long enough not to hammer the slot table.
constexpr int kPausesPerPass = 16;
// How long the engine parks at most: bounds suspect re-checks and watchdog pings.
constexpr int kTickMs = 100;
constexpr uint64_t kEventPollNs = 100'000;
constexpr uint64_t kPeriodicNs = 50'000'000;

uint64_t now_ns(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

template <typename T, typename D>
void bump(std::atomic<T>& a, D d) {
  a.store(a.load(std::memory_order_relaxed) + static_cast<T>(d), std::memory_order_relaxed);
}

// `kvpoolctl metrics` turns this into kvpool_request_duration_seconds.
void record_latency(shm::LatencyHistogram& h, uint64_t ns) {
  size_t i = 0;
  while (i < shm::kLatencyBounds && ns > shm::kLatencyBoundsNs[i]) ++i;
  bump(h.buckets[i], 1);
  bump(h.count, 1);
  bump(h.sum_ns, ns);
}

void copy_name(char (&dst)[shm::kNameBytes], const std::string& src) {
  std::memset(dst, 0, sizeof(dst));
  std::memcpy(dst, src.data(), std::min(src.size(), sizeof(dst) - 1));
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
  if (!created_) return;
  // The segments are memfds: they go with the last descriptor. Only the socket has a name.
  if (listen_fd_) ::unlink(socket_path_.c_str());
}

Status Engine::init() {
  KVPOOL_RETURN_IF_ERROR(claim_instance());
  std::vector<pool::PoolCoreConfig> core_configs;
  for (const PoolConfig& pc : config_.pools)
    // One owner per client slot, and the keeper of the previous daemon's clients' blocks.
    core_configs.push_back({pc.layout.num_blocks, config_.max_clients + 1, pc.max_holds});
  KVPOOL_RETURN_IF_ERROR(create_control_segment(core_configs));
  KVPOOL_RETURN_IF_ERROR(create_pools(core_configs));
  sessions_.resize(config_.max_clients);
  for (uint32_t i = 0; i < config_.max_clients; ++i) sessions_[i].slot = i;
  KVPOOL_RETURN_IF_ERROR(listen_and_watch());
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

// Control segment: shm/control_segment.hpp places every part and fills the header.
Status Engine::create_control_segment(const std::vector<pool::PoolCoreConfig>& core_configs) {
  auto placed = shm::control_layout(config_.max_clients, core_configs, config_.event_ring_slots);
  if (!placed) return placed.status();
  auto ctl = shm::ControlWriter::create(config_.instance, config_.max_clients,
                                        std::move(placed.value()), config_.event_ring_slots);
  if (!ctl) return ctl.status();
  control_ = std::move(ctl.value());
  ctl_ = &control_.header();
  slots_info_ = control_.slots();
  if (control_.event_ring().valid())
    events_ = std::make_unique<EventPublisher>(control_.event_ring());
  return Status::ok();
}

// Each pool's storage (host shm or a CUDA slab), its core in the control segment, and its
// PoolInfo for clients.
Status Engine::create_pools(const std::vector<pool::PoolCoreConfig>& core_configs) {
  const uint32_t np = static_cast<uint32_t>(config_.pools.size());
  // A previous daemon's host pools, kept by a supervisor: taken over where they fit
  // (daemon/adoption.hpp); those that do not go before the new pools take memory.
  const uint64_t adoption_t0 = now_ns(CLOCK_MONOTONIC);
  Adoption adoption = Adoption::prepare(take_inherited_fds());
  std::vector<std::optional<Adoption::Pool>> previous(np);
  for (uint32_t i = 0; i < np; ++i) previous[i] = adoption.take(config_.pools[i]);
  adoption.release_unused();

  for (uint32_t i = 0; i < np; ++i) {
    const PoolConfig& pc = config_.pools[i];
    auto layout = Layout::create(pc.layout);
    if (!layout)
      return Status(ErrorCode::kConfigError,
                    "pool '" + pc.name + "': " + layout.status().message());
    // Host shm or a CUDA slab; a failure names the pool, device and bytes, and the
    // destructor removes what earlier pools made (the daemon never starts half-configured).
    auto storage = pool_storage_for(pc, *layout, previous[i]);
    if (!storage) return storage.status();
    auto core = control_.create_pool_core(i, core_configs[i], pc.name);
    if (!core) {
      storage->remove();
      return core.status();
    }
    if (previous[i]) adopt_pool_registry(adoption, *previous[i], i, core_configs[i], *core);
    shm::PoolInfo& info = control_.pool_info(i);  // its arena's place is filled in already
    copy_name(info.name, pc.name);
    info.layout = pc.layout;
    info.dtype = static_cast<uint32_t>(pc.dtype);
    storage->publish(info);  // shm name or CUDA IPC handle + device UUID, storage, bytes
    info.hash_scheme = static_cast<uint32_t>(pc.hash_scheme);
    pools_.push_back(ServedPool{pc, std::move(storage.value()), std::move(core.value())});
  }
  publish_identity(adoption, now_ns(CLOCK_MONOTONIC) - adoption_t0);
  previous_clients_ = adoption.take_live_clients();
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
  if (add(listen_fd_.get(), tag(kListen, 0)) != 0 || add(stop_fd_.get(), tag(kStop, 0)) != 0)
    return io_error("epoll_ctl", errno);
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
}

void Engine::request_stop() {
  uint64_t one = 1;
  ssize_t r = ::write(stop_fd_.get(), &one, sizeof(one));
  (void)r;
}

// ---- the loop ----------------------------------------------------------------------------

Status Engine::run(const EngineHooks& hooks) {
  store_segments();  // before any client can change a block
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
    const uint32_t n = static_cast<uint32_t>(sessions_.size());
    for (uint32_t k = 0; k < n; ++k) {
      Session& s = sessions_[(rr_next_ + k) % n];
      if (s.ready && s.state == SlotState::kAttached) worked |= drain(s, kDrainBudget);
    }
    rr_next_ = (rr_next_ + 1) % std::max<uint32_t>(n, 1);
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
    // Nor right after waking a client that sleeps on our own core: it needs the core now.
    if (poll_ns > 0 && !woke_local_client_ && gap_avg_ns_ < poll_ns &&
        t - last_request_ns_ < poll_ns) {
      for (int i = 0; i < kPausesPerPass; ++i) shm::cpu_relax();
      if ((loops & 15) == 0) service(hooks);
      continue;
    }
    // Park. Dekker with clients: we store daemon_sleeping then re-read every tail; a client
    // stores its tail then reads daemon_sleeping. One of us sees the other's store, so a
    // request is either found here or its client rings our eventfd.
    woke_local_client_ = false;
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
    uint32_t clients = 0;
    for (auto& s : sessions_) clients += s.state != SlotState::kFree;
    std::string line = "clients " + std::to_string(clients);
    for (auto& p : pools_) {
      auto c = p.core.counts();
      line += ", pool '" + p.config.name + "' free " + std::to_string(c.free) + " inactive " +
              std::to_string(c.inactive) + " of " + std::to_string(c.total);
    }
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

bool Engine::any_request_pending() {
  for (auto& s : sessions_) {
    if (!s.ready || s.state != SlotState::kAttached || s.backpressured) continue;
    auto r = s.requests->poll();
    if (!r || !r->empty()) return true;  // a record, or an error to handle
  }
  return false;
}

void Engine::periodic() {
  uint64_t t = now_ns(CLOCK_MONOTONIC);
  ctl_->heartbeat_ns.store(t, std::memory_order_relaxed);
  release_previous_clients();
  // Suspects: hung up but the lease was held. Reclaimed only once death is proven.
  for (auto& s : sessions_)
    if (s.state == SlotState::kSuspect) check_liveness(s, "re-check");
  const uint64_t attach_ns = uint64_t{config_.attach_timeout_ms} * 1'000'000;
  // Connections that never said Hello.
  for (size_t i = 0; i < pending_.size();) {
    if (t - pending_[i].accepted_ns > attach_ns) {
      spdlog::warn("dropping a connection of uid {} that sent no hello within {} ms",
                   pending_[i].uid, config_.attach_timeout_ms);
      pending_.erase(pending_.begin() + static_cast<long>(i));
    } else {
      ++i;
    }
  }
  // Clients welcomed that never said Ready: each holds a slot and a segment.
  for (auto& s : sessions_)
    if (s.state == SlotState::kAttaching && t - s.hello_mono_ns > attach_ns)
      end_session(s, false,
                  "no Ready within attach_timeout_ms (" +
                      std::to_string(config_.attach_timeout_ms) + " ms)");
  // EMFILE back-off over: listen again.
  if (accept_paused_until_ns_ != 0 && t >= accept_paused_until_ns_) {
    accept_paused_until_ns_ = 0;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag(kListen, 0);
    ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, listen_fd_.get(), &ev);
  }
}

void Engine::handle_events(int timeout_ms) {
  epoll_event evs[64];
  int n = ::epoll_wait(epoll_fd_.get(), evs, 64, timeout_ms);
  for (int i = 0; i < n; ++i) {
    uint64_t d = evs[i].data.u64;
    auto kind = static_cast<Kind>(d >> 32);
    auto idx = static_cast<uint32_t>(d & 0xFFFFFFFFu);
    switch (kind) {
      case kListen:
        accept_clients();
        break;
      case kStop:
        stopping_ = true;
        break;
      case kPending: {
        for (size_t p = 0; p < pending_.size(); ++p)
          if (static_cast<uint32_t>(pending_[p].sock.get()) == idx) {
            on_pending_readable(p);
            break;
          }
        break;
      }
      case kSock:
        on_session_socket(idx, evs[i].events);
        break;
      case kPid:
        if (idx < sessions_.size() && sessions_[idx].state != SlotState::kFree)
          check_liveness(sessions_[idx], "process exited");
        break;
      case kBell: {
        if (idx < sessions_.size() && sessions_[idx].doorbell) {
          uint64_t v;
          ssize_t r = ::read(sessions_[idx].doorbell.get(), &v, sizeof(v));
          (void)r;  // only clears the eventfd; the rings are drained by the loop
        }
        break;
      }
    }
  }
}

// ---- attach ------------------------------------------------------------------------------

void Engine::accept_clients() {
  while (true) {
    auto c = shm::accept_unix(listen_fd_.get());
    if (!c) {
      // EMFILE/ENFILE leave the connection queued and the listen fd readable: retrying at
      // once would spin the engine. Stop listening for a while instead.
      pause_accepting(c.status().to_string());
      return;
    }
    if (!c.value()) return;  // EAGAIN
    auto cred = shm::peer_credentials(c->get());
    const uid_t uid = cred ? cred->uid : static_cast<uid_t>(-1);
    if (!admit_pending(c->get(), uid)) continue;  // closed by the UniqueFd
    int fd = c->get();
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = tag(kPending, static_cast<uint32_t>(fd));
    if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) continue;
    pending_.push_back(Pending{std::move(c.value()), now_ns(CLOCK_MONOTONIC), uid});
  }
}

// Connections that have not said Hello cost an fd each and may come from anyone who can
// reach the socket: cap them in total and per uid, so one user cannot starve the others.
bool Engine::admit_pending(int fd, uid_t uid) {
  const size_t mine = static_cast<size_t>(std::count_if(
      pending_.begin(), pending_.end(), [uid](const Pending& p) { return p.uid == uid; }));
  std::string why;
  if (pending_.size() >= config_.max_pending_connections) {
    why = "already " + std::to_string(pending_.size()) +
          " connections wait for their hello (max_pending_connections)";
  } else if (mine >= config_.max_pending_per_uid) {
    why = "uid " + std::to_string(uid) + " already has " + std::to_string(mine) +
          " connections waiting for their hello (max_pending_per_uid)";
  }
  if (why.empty()) return true;
  refuse(fd, ErrorCode::kResourceExhausted, why);
  return false;
}

void Engine::pause_accepting(const std::string& why) {
  constexpr uint64_t kPauseNs = 100'000'000;
  const uint64_t t = now_ns(CLOCK_MONOTONIC);
  if (accept_paused_until_ns_ == 0)
    ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, listen_fd_.get(), nullptr);
  accept_paused_until_ns_ = t + kPauseNs;
  bump(ctl_->stats.refused_attaches, 1);
  // One line a second at most, however hard someone pushes.
  if (t - accept_log_ns_ >= 1'000'000'000ull) {
    spdlog::warn("accept: {}; not accepting for 100 ms ({} similar messages suppressed)", why,
                 accept_log_suppressed_);
    accept_log_ns_ = t;
    accept_log_suppressed_ = 0;
  } else {
    ++accept_log_suppressed_;
  }
}

void Engine::refuse(int fd, ErrorCode code, const std::string& message) {
  proto::send_refusal(fd, proto::MsgType::kRefusal, code, message);
  bump(ctl_->stats.refused_attaches, 1);
  const uint64_t t = now_ns(CLOCK_MONOTONIC);
  if (t - accept_log_ns_ >= 100'000'000ull) {  // at most ten lines a second
    spdlog::warn("refused a client: {}", message);
    accept_log_ns_ = t;
  }
}

void Engine::on_pending_readable(size_t index) {
  Pending p = std::move(pending_[index]);
  pending_.erase(pending_.begin() + static_cast<long>(index));
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, p.sock.get(), nullptr);
  alignas(8) std::byte buf[256];
  auto n = shm::recv_message(p.sock.get(), buf, nullptr, 0);
  if (!n || *n == 0) return;  // hung up or garbage before hello: just drop it
  on_hello(std::move(p.sock), buf, *n);
}

// Hello -> Welcome (or a refusal that says why): an observer gets the control segment
// read-only; a worker gets a slot, its own segment with its rings, and the pools' fds.
void Engine::on_hello(UniqueFd sock, const void* msg, size_t len) {
  auto hello = proto::parse_hello(msg, len);  // size, magic, type, layout major
  if (!hello) {
    refuse(sock.get(), hello.status().code(), hello.status().message());
    return;
  }
  const proto::Hello& h = hello.value();
  auto cred = vet_caller(sock.get(), h);
  if (!cred) return;
  spdlog::debug("{} from pid {} uid {}: libkvpool {}",
                h.type == proto::MsgType::kObserve ? "observe" : "hello", cred->pid, cred->uid,
                unpack_version(h.client_version));
  auto ro = control_.open_readonly_fd();
  if (!ro) {
    refuse(sock.get(), ErrorCode::kInternal, ro.status().message());
    return;
  }
  if (h.type == proto::MsgType::kObserve) {
    // kvpoolctl: the control segment, read-only, and nothing else.
    proto::Welcome w = proto::make_welcome();
    int fds[1] = {ro->get()};
    w.num_fds = 1;
    w.slot = 0xFFFFFFFFu;
    (void)shm::send_message(sock.get(), std::as_bytes(std::span(&w, 1)), fds);
    return;
  }
  if (Session* s = free_slot_for(sock.get(), cred->uid))
    attach(*s, std::move(sock), *cred, ro->get());
}

// The hello is for this instance, from a peer whose credentials the kernel vouches for and
// whom the allow-lists admit. nullopt once refused.
std::optional<shm::PeerCred> Engine::vet_caller(int fd, const proto::Hello& h) {
  if (config_.instance != h.instance) {
    refuse(fd, ErrorCode::kNotFound,
           std::string("this socket serves instance '") + config_.instance + "', not '" +
               h.instance + "'");
    return std::nullopt;
  }
  auto cred = shm::peer_credentials(fd);
  if (!cred) {
    refuse(fd, ErrorCode::kPermissionDenied, cred.status().message());
    return std::nullopt;
  }
  auto allowed = [](const auto& list, auto v) {
    return list.empty() || std::find(list.begin(), list.end(), v) != list.end();
  };
  // Root may always observe (kvpoolctl, kvpool-exporter: the control segment read-only):
  // the allow-lists decide who attaches as a worker, not who may look.
  const bool root_observer = h.type == proto::MsgType::kObserve && cred->uid == 0;
  if (!root_observer &&
      (!allowed(config_.allowed_uids, cred->uid) || !allowed(config_.allowed_gids, cred->gid))) {
    refuse(fd, ErrorCode::kPermissionDenied,
           "uid " + std::to_string(cred->uid) + " / gid " + std::to_string(cred->gid) +
               " may not attach to instance '" + config_.instance +
               "' (allowed_uids/allowed_gids)");
    return std::nullopt;
  }
  return cred.value();
}

// A free slot for a worker of `uid`, within max_clients_per_uid; null once refused.
Session* Engine::free_slot_for(int fd, uid_t uid) {
  if (config_.max_clients_per_uid != 0) {
    const auto mine = std::count_if(sessions_.begin(), sessions_.end(), [&](const Session& s) {
      return s.state != SlotState::kFree && s.uid == uid;
    });
    if (static_cast<uint64_t>(mine) >= config_.max_clients_per_uid) {
      refuse(fd, ErrorCode::kResourceExhausted,
             "uid " + std::to_string(uid) + " already holds " + std::to_string(mine) +
                 " client slots of instance '" + config_.instance + "' (max_clients_per_uid)");
      return nullptr;
    }
  }
  auto free_it = std::find_if(sessions_.begin(), sessions_.end(),
                              [](const Session& s) { return s.state == SlotState::kFree; });
  if (free_it == sessions_.end()) {
    refuse(fd, ErrorCode::kResourceExhausted,
           "instance '" + config_.instance + "' has all " + std::to_string(config_.max_clients) +
               " client slots in use (raise max_clients)");
    return nullptr;
  }
  return &*free_it;
}

// Makes the worker's segment, sends the Welcome with every descriptor it needs, and starts
// its session in slot `s` (Attaching until it sends Ready).
void Engine::attach(Session& s, UniqueFd sock, const shm::PeerCred& cred, int control_fd) {
  auto seg = create_client_segment(s.slot, s.generation + 1, config_.ring_bytes);
  if (!seg) {
    refuse(sock.get(), seg.status().code(), seg.status().message());
    return;
  }
  auto pidfd = shm::pidfd_open(cred.pid);
  UniqueFd bell(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  auto segfd = seg->segment.dup_fd();
  if (!pidfd || !bell || !segfd) {
    refuse(sock.get(), ErrorCode::kInternal, "cannot set up the client segment");
    return;
  }
  std::vector<int> fds{control_fd, segfd->get(), bell.get()};
  const uint32_t pool_mask = pool_mask_for(cred.uid, cred.gid);
  std::vector<UniqueFd> pool_fds;  // kept open until the Welcome is sent
  if (!add_pool_fds(sock.get(), pool_mask, fds, pool_fds)) return;
  proto::Welcome w = proto::make_welcome();
  w.slot = s.slot;
  w.generation = s.generation + 1;
  w.num_fds = static_cast<uint32_t>(fds.size());
  w.pool_mask = pool_mask;
  w.ring_capacity = config_.ring_bytes;
  if (auto sent = shm::send_message(sock.get(), std::as_bytes(std::span(&w, 1)), fds);
      !sent.is_ok()) {
    spdlog::warn("welcome to pid {} failed: {}", cred.pid, sent.to_string());
    return;
  }
  s.generation += 1;
  s.state = SlotState::kAttaching;
  s.ready = false;
  s.sock = std::move(sock);
  s.pidfd = std::move(pidfd.value());
  s.doorbell = std::move(bell);
  s.header = seg->header;
  s.requests.emplace(seg->requests, config_.ring_bytes);
  s.responses.emplace(seg->responses, config_.ring_bytes);
  s.segment = std::move(seg->segment);
  s.pid = cred.pid;
  s.uid = cred.uid;
  s.gid = cred.gid;
  s.attach_ns = now_ns(CLOCK_REALTIME);
  s.hello_mono_ns = now_ns(CLOCK_MONOTONIC);
  s.pool_mask = pool_mask;
  s.protocol_errors = 0;
  s.rejected_handles = 0;
  watch_session(s);
}

// Then, in pool order, a data fd for each pool this client may use whose storage travels
// as one (host pools; device pools publish their CUDA IPC handle in PoolInfo):
// proto::welcome_carries_fd. Pools closed to it by their allow-lists send nothing.
// False once refused.
bool Engine::add_pool_fds(int fd, uint32_t pool_mask, std::vector<int>& fds,
                          std::vector<UniqueFd>& keep) {
  for (size_t i = 0; i < pools_.size(); ++i) {
    if ((pool_mask & (1u << i)) == 0) continue;
    auto d = pools_[i].storage.client_fd();
    if (!d) {
      refuse(fd, ErrorCode::kInternal, d.status().message());
      return false;
    }
    if (!d->valid()) continue;
    fds.push_back(d->get());
    keep.push_back(std::move(d.value()));
  }
  return true;
}

// A new session's slot counters start from zero, and its socket and pidfd join the epoll set.
void Engine::watch_session(Session& s) {
  // A new client starts from zero, not from its slot's previous owner's counters.
  slots_info_[s.slot].requests.store(0, std::memory_order_relaxed);
  slots_info_[s.slot].protocol_errors.store(0, std::memory_order_relaxed);
  slots_info_[s.slot].rejected_handles.store(0, std::memory_order_relaxed);
  slots_info_[s.slot].match_hits.store(0, std::memory_order_relaxed);
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.u64 = tag(kSock, s.slot);
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, s.sock.get(), &ev);
  ev.events = EPOLLIN;
  ev.data.u64 = tag(kPid, s.slot);
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, s.pidfd.get(), &ev);
  publish_slot(s);
}

uint32_t Engine::pool_mask_for(uid_t uid, gid_t gid) const {
  auto allowed = [](const auto& list, auto v) {
    return list.empty() || std::find(list.begin(), list.end(), v) != list.end();
  };
  uint32_t mask = 0;
  for (size_t i = 0; i < pools_.size(); ++i) {
    const PoolConfig& pc = pools_[i].config;
    if (allowed(pc.allowed_uids, uid) && allowed(pc.allowed_gids, gid)) mask |= 1u << i;
  }
  return mask;
}

void Engine::on_session_socket(uint32_t slot, uint32_t events) {
  if (slot >= sessions_.size()) return;
  Session& s = sessions_[slot];
  if (s.state == SlotState::kFree) return;
  if (events & EPOLLIN) {
    alignas(8) std::byte buf[64];
    auto n = shm::recv_message(s.sock.get(), buf, nullptr, 0);
    if (!n) {  // too long, or carrying descriptors: a client that breaks the protocol
      disconnect(s, "malformed message on the socket: " + n.status().message());
      return;
    }
    if (!s.ready && proto::is_ready(buf, *n)) {
      on_ready(s);
      return;
    }
    if (*n > 0) {
      disconnect(s, "unexpected message on the socket");
      return;
    }
    // n == 0: orderly hang-up, handled below.
  }
  check_liveness(s, "socket hang-up");
}

void Engine::on_ready(Session& s) {
  s.ready = true;
  s.state = SlotState::kAttached;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = tag(kBell, s.slot);
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, s.doorbell.get(), &ev);
  bump(ctl_->stats.clients_attached, 1);
  publish_slot(s);
  spdlog::info("client attached: slot {} gen {} pid {} uid {}", s.slot, s.generation, s.pid, s.uid);
}

// Decides whether a client that hung up (or whose process exited) is gone, from the pidfd
// and one atomic load of its lease word (daemon/liveness.hpp); never a pthread call on the
// client's memory. A live client keeps its blocks: it is flagged suspect and re-checked.
void Engine::check_liveness(Session& s, const char* why) {
  liveness_check_ns_ = now_ns(CLOCK_MONOTONIC);
  if (!s.ready) {
    end_session(s, false, std::string(why) + " before attach completed");
    return;
  }
  const Judgement j = judge(s.pidfd.get(), s.pid, shm::peek(s.header->lease));
  switch (j.verdict) {
    case Verdict::kDied:
      end_session(s, true, std::string(why) + ": " + j.reason);
      return;
    case Verdict::kDetached:
      end_session(s, false, std::string(why) + ": " + j.reason);
      return;
    case Verdict::kAlive:
      if (s.state != SlotState::kSuspect) {
        spdlog::warn("client slot {} pid {}: {} but {}; not reclaiming a live client", s.slot,
                     s.pid, why, j.reason);
        s.state = SlotState::kSuspect;
        // Its socket has hung up and would stay readable forever in the level-triggered set;
        // the pidfd (still watched) and the periodic re-check decide from here on.
        if (s.sock) ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, s.sock.get(), nullptr);
        publish_slot(s);
      }
      return;
  }
}

void Engine::end_session(Session& s, bool died, const std::string& why) {
  uint32_t returned = 0;
  if (s.ready)
    for (auto& p : pools_) returned += p.core.release_owner(s.slot);
  if (died) {
    ctl_->stats.last_reclaim_noticed_ns.store(liveness_check_ns_, std::memory_order_relaxed);
    ctl_->stats.last_reclaim_done_ns.store(now_ns(CLOCK_MONOTONIC), std::memory_order_relaxed);
    bump(ctl_->stats.reclaimed_blocks, returned);
    // Release: the times above are visible to whoever sees the counter move.
    ctl_->stats.reclaimed_clients.store(
        ctl_->stats.reclaimed_clients.load(std::memory_order_relaxed) + 1,
        std::memory_order_release);
    spdlog::info("client reclaimed: slot {} pid {} uid {} ({}), {} blocks returned", s.slot, s.pid,
                 s.uid, why, returned);
  } else {
    if (s.ready) bump(ctl_->stats.clients_detached, 1);
    spdlog::info("client detached: slot {} pid {} uid {} ({}), {} blocks returned", s.slot, s.pid,
                 s.uid, why, returned);
  }
  if (s.sock) ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, s.sock.get(), nullptr);
  if (s.pidfd) ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, s.pidfd.get(), nullptr);
  if (s.doorbell) ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, s.doorbell.get(), nullptr);
  uint32_t slot = s.slot, gen = s.generation;
  s = Session{};
  s.slot = slot;
  s.generation = gen;  // the next attach bumps it
  publish_slot(s);
}

void Engine::disconnect(Session& s, const std::string& why) {
  spdlog::warn("disconnecting client slot {} pid {}: {}", s.slot, s.pid, why);
  bump(ctl_->stats.disconnects, 1);
  // Say why before hanging up, so the client reports kDisconnected with the reason
  // rather than guessing that the daemon died.
  if (s.sock) {
    proto::send_refusal(s.sock.get(), proto::MsgType::kDisconnect, ErrorCode::kDisconnected,
                        "kvpoold disconnected this client: " + why);
  }
  // Cutting the socket is what the client notices (its calls then fail); its blocks are
  // returned now, since it can no longer use them through us.
  end_session(s, false, "disconnected: " + why);
}

void Engine::publish_slot(const Session& s) {
  shm::SlotInfo& i = slots_info_[s.slot];
  i.pid.store(s.pid, std::memory_order_relaxed);
  i.uid.store(s.uid, std::memory_order_relaxed);
  i.attach_time_ns.store(s.attach_ns, std::memory_order_relaxed);
  i.generation.store(s.generation, std::memory_order_relaxed);
  i.state.store(static_cast<uint32_t>(s.state), std::memory_order_release);
}

// ---- requests ----------------------------------------------------------------------------

bool Engine::drain(Session& s, uint32_t budget) {
  bool worked = false;
  uint64_t t_start = 0;  // read only once a record is there: an empty ring costs no clock
  uint64_t t_round = 0;
  for (uint32_t k = 0; k < budget; ++k) {
    auto r = s.requests->poll();
    if (!r) {
      disconnect(s, "request ring corrupt: " + r.status().message());
      return true;
    }
    if (r->empty()) break;
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
  bump(slots_info_[s.slot].requests, 1);
  // The header is decoded once, from our private copy of the record.
  const Dispatcher::Request req = Dispatcher::decode(type, {payload, len});
  // Room for the largest answer first: once the pool changed, the answer must fit.
  // Answers fit one response record by construction: header + refs + room for a message.
  const uint32_t answer_bytes = dispatcher_.answer_capacity(req);
  std::span<std::byte> answer;
  if (answer_bytes > 0) {
    auto claim = s.responses->try_claim(Dispatcher::answer_type(type), answer_bytes);
    if (!claim) {
      disconnect(s, "response ring corrupt: " + claim.status().message());
      return Outcome::kDone;
    }
    if (*claim == nullptr) return Outcome::kBackpressure;  // the client is not reading yet
    answer = {static_cast<std::byte*>(*claim), answer_bytes};
  }
  const Dispatcher::Outcome done = dispatcher_.dispatch(s.slot, req, answer, s.pool_mask);
  if (type == static_cast<uint32_t>(proto::Opcode::kMatch) && done.code == ErrorCode::kOk &&
      done.answer_bytes >= sizeof(proto::ResponseHeader)) {
    // A successful answer carries no message: what follows the header is the hits.
    bump(slots_info_[s.slot].match_hits,
         (done.answer_bytes - sizeof(proto::ResponseHeader)) / sizeof(pool::BlockRef));
  }
  if (done.rejected != 0) {
    s.rejected_handles += done.rejected;
    bump(slots_info_[s.slot].rejected_handles, done.rejected);
    // A worker releases only what it was given; one that keeps releasing handles it does
    // not hold is broken or hostile, and each costs the engine a look-up.
    if (s.rejected_handles > kMaxRejectedHandles) {
      disconnect(s, "more than " + std::to_string(kMaxRejectedHandles) +
                        " release handles refused (stale, foreign or unknown)");
      return Outcome::kDone;
    }
  }
  if (done.code == ErrorCode::kProtocolError) {
    bump(ctl_->stats.protocol_errors, 1);
    bump(slots_info_[s.slot].protocol_errors, 1);
    if (++s.protocol_errors > kMaxProtocolErrors) {
      disconnect(s, "more than " + std::to_string(kMaxProtocolErrors) + " malformed records");
      return Outcome::kDone;
    }
  }
  // A client we wake on our own core can run only once we stop: see run().
  if (answer_bytes > 0) {
    const uint32_t woke = s.responses->publish();
    if (woke != 0 && woke == shm::cpu_tag()) woke_local_client_ = true;
  }
  return Outcome::kDone;
}

void Engine::shutdown() {
  spdlog::info("kvpoold stopping: telling {} client(s)",
               std::count_if(sessions_.begin(), sessions_.end(),
                             [](const Session& s) { return s.state != SlotState::kFree; }));
  control_.publish_stopping();
  for (auto& s : sessions_) {
    if (s.state == SlotState::kFree) continue;
    // Wake a client parked on its response ring so it sees the hang-up at once.
    if (s.responses) s.responses->publish();
    s = Session{};
  }
  pending_.clear();
  ::unlink(socket_path_.c_str());
  listen_fd_.reset();
}

}  // namespace kvpool::daemon
