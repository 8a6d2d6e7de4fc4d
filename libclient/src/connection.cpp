#include "connection.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <future>

#include "device_view.hpp"
#include "kvpool/core/paths.hpp"
#include "kvpool/core/version.hpp"
#include "kvpool/cuda/device.hpp"
#include "kvpool/shm/futex.hpp"
#include "kvpool/shm/handshake.hpp"
#include "kvpool/shm/lease_mutex.hpp"
#include "kvpool/shm/unix_socket.hpp"

namespace kvpool::detail {
namespace {

constexpr auto kFutexTimeout = std::chrono::milliseconds(20);
// How long kvpoold may take to pick a request up before the caller stops polling for the
// answer and sleeps (shm::PollPolicy). Waking a parked kvpoold on an idle core takes
// 5-20 us on the development VM; one that has not started after this is waiting for a core.
constexpr std::chrono::nanoseconds kStartGrace = std::chrono::microseconds(20);
constexpr int kLeaseTickMs = 10;
// Quiet ticks the lease thread stays awake after a release (about a second): an engine
// releases every step, so in use it never parks and no release has to wake it.
constexpr uint32_t kLingerTicks = 100;
constexpr uint32_t kReleaseBatch = 64;

// Bumped in every child of fork(): a Client inherited by a child shares the parent's socket
// and rings but has no lease thread, and its calls would hang once the parent is gone.
std::atomic<uint64_t> g_fork_generation{0};
uint64_t fork_generation() {
  static std::once_flag once;
  std::call_once(once, [] {
    ::pthread_atfork(nullptr, nullptr,
                     [] { g_fork_generation.fetch_add(1, std::memory_order_relaxed); });
  });
  return g_fork_generation.load(std::memory_order_relaxed);
}

uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

Result<std::unique_ptr<Connection>> Connection::open(const std::string& instance,
                                                     const ConnectionOptions& options) {
  KVPOOL_RETURN_IF_ERROR(validate_instance_name(instance));
  std::unique_ptr<Connection> c(new Connection());
  KVPOOL_RETURN_IF_ERROR(c->handshake(instance, options));
  return c;
}

Status Connection::handshake(const std::string& instance, const ConnectionOptions& options) {
  poll_ = shm::PollPolicy{
      std::chrono::microseconds(options.poll_us),
      std::min<std::chrono::nanoseconds>(std::chrono::microseconds(options.poll_us), kStartGrace)};
  unresponsive_ns_ = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(options.unresponsive_after).count());
  fork_generation_ = fork_generation();
  if (options.pin_host_pools && !cuda::built_with_cuda())
    return Status(ErrorCode::kUnsupported, "pin_host_pools: " + cuda::no_device_reason());
  auto at = shm::attach_client(instance, options.runtime_dir, options.layout_major,
                               static_cast<int>(options.connect_timeout.count()));
  if (!at) return at.status();
  sock_ = std::move(at->sock);
  const proto::Welcome w = at->welcome;
  control_ = std::move(at->control);
  client_ = std::move(at->client);
  bell_ = std::move(at->bell);
  slot_ = w.slot;
  generation_ = w.generation;
  requests_.emplace(at->requests, w.ring_capacity);
  responses_.emplace(at->responses, w.ring_capacity);
  std::vector<shm::UniqueFd>* fds = &at->fds;

  const auto& ctl_h = control();
  const std::span<const shm::PoolInfo> infos = control_.pool_infos();
  // After the first three (registry segments already taken by attach_client), one data
  // descriptor per pool whose storage travels as one, in pool order
  // (proto::welcome_carries_fd): host pools. Device pools come as an IPC handle.
  size_t pool_fds = 0;
  auto usable = [&w](uint32_t i) { return i < 32 && (w.pool_mask & (1u << i)) != 0; };
  for (uint32_t i = 0; i < ctl_h.num_pools; ++i) {
    auto kind = static_cast<shm::StorageKind>(infos[i].storage);
    if (kind != shm::StorageKind::kHost && kind != shm::StorageKind::kCuda)
      return Status(
          ErrorCode::kVersionMismatch,
          "pool " + std::to_string(i) + " has storage kind " + std::to_string(infos[i].storage) +
              ", unknown to this libkvpool; rebuild the worker against a matching libkvpool");
    // A scheme this build cannot compute: every hash it made would silently never match.
    if (infos[i].hash_scheme > kMaxHashScheme)
      return Status(ErrorCode::kVersionMismatch,
                    "pool " + std::to_string(i) + " hashes with scheme " +
                        std::to_string(infos[i].hash_scheme) +
                        ", unknown to this libkvpool; rebuild the worker against a matching "
                        "libkvpool");
    pool_fds += usable(i) && proto::welcome_carries_fd(kind) ? 1 : 0;
  }
  if (fds->size() != 3 + pool_fds)
    return Status(ErrorCode::kProtocolError,
                  "welcome carries " + std::to_string(fds->size()) + " descriptors for " +
                      std::to_string(ctl_h.num_pools) + " pools, " + std::to_string(pool_fds) +
                      " of them with a data descriptor");
  size_t next_fd = 3;
  for (uint32_t i = 0; i < ctl_h.num_pools; ++i) {
    shm::PoolInfo info = infos[i];
    info.name[sizeof(info.name) - 1] = '\0';
    // A device pool's IPC handle travels only in its registry segment (its clients').
    if (usable(i) && control_.has_pool(i))
      std::memcpy(info.ipc_handle, control_.registry(i).header().ipc_handle,
                  sizeof(info.ipc_handle));
    auto layout = Layout::create(info.layout);
    if (!layout) return layout.status();
    PoolView view{info.name, info, layout.value(), shm::Segment(), shm::Segment(), usable(i),
                  0,         0,    nullptr,        nullptr};
    if (!view.usable) {
      // Closed to us by its allow-lists: listed (so pool indices match), never mapped.
    } else if (view.is_device()) {
      if (info.data_bytes < layout->total_bytes())
        return Status(ErrorCode::kProtocolError,
                      std::string("pool '") + info.name + "' slab is smaller than its layout");
      view.device = std::make_shared<DeviceView>(info);
    } else {
      shm::UniqueFd data_fd = std::move((*fds)[next_fd++]);
      struct stat st {};
      if (::fstat(data_fd.get(), &st) != 0) return io_error("fstat pool descriptor", errno);
      view.data_dev = st.st_dev;
      view.data_ino = st.st_ino;
      auto ro_fd = shm::UniqueFd(::fcntl(data_fd.get(), F_DUPFD_CLOEXEC, 0));
      if (!ro_fd) return io_error("dup pool descriptor", errno);
      auto data = shm::Segment::map_fd(std::move(data_fd), true);
      if (!data) return data.status();
      auto data_ro = shm::Segment::map_fd(std::move(ro_fd), false);
      if (!data_ro) return data_ro.status();
      view.data_ro = std::move(data_ro.value());
      if (data->size() < layout->total_bytes())
        return Status(ErrorCode::kProtocolError,
                      std::string("pool '") + info.name + "' data is smaller than its layout");
      view.data = std::move(data.value());
      if (options.pin_host_pools) {
        auto pin = cuda::HostRegistration::pin(view.data.data(), view.data.size());
        if (!pin)
          return Status(pin.status().code(), std::string("pin_host_pools: pool '") + info.name +
                                                 "' (" + std::to_string(view.data.size()) +
                                                 " bytes): " + pin.status().message());
        view.pinned = std::make_shared<cuda::HostRegistration>(std::move(pin.value()));
      }
    }
    pools_.push_back(std::move(view));
  }

  // The lease thread takes the robust mutex and keeps it as long as we are attached;
  // only then do we tell the daemon we are Ready.
  stop_fd_ = shm::UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!stop_fd_) return io_error("eventfd", errno);
  std::promise<Status> locked;
  auto fut = locked.get_future();
  lease_thread_ = std::thread([this, &locked] { lease_main(&locked); });
  Status st = fut.get();
  if (!st.is_ok()) return st;
  return proto::send_ready(sock_.get());
}

void Connection::lease_main(std::promise<Status>* locked) {
  shm::LockResult lr = shm::lock(client_header()->lease);
  if (lr != shm::LockResult::kAcquired && lr != shm::LockResult::kOwnerDied) {
    locked->set_value(Status(ErrorCode::kInternal, std::string("cannot take the lease mutex: ") +
                                                       std::string(shm::lock_result_name(lr))));
    return;
  }
  locked->set_value(Status::ok());
  pollfd fds[2] = {{sock_.get(), POLLIN | POLLRDHUP, 0}, {stop_fd_.get(), POLLIN, 0}};
  uint32_t linger = 0;  // quiet ticks left before parking
  while (!stop_.load(std::memory_order_acquire)) {
    // An idle client costs nothing: with no release waiting to be batched and no recent
    // one, park until the daemon hangs up or a release kicks us (kick()). A client in use
    // keeps ticking for kLingerTicks after its last release, so that its releases (one
    // batch per engine step) find us awake and cost no kick, no wake-up of this thread
    // on a core the worker and the daemon need.
    bool work = pending_count_.load(std::memory_order_relaxed) > 0 ||
                abandoned_count_.load(std::memory_order_relaxed) > 0;
    int timeout = kLeaseTickMs;
    if (!work && linger == 0) {
      // Dekker with queue_release_locked: we say we park, then look at the count once
      // more; a releaser adds to the count, then looks whether we park. One of the two
      // sees the other's store (both fences are seq_cst), so no release waits unflushed.
      lease_parked_.store(true, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      work = pending_count_.load(std::memory_order_relaxed) > 0 ||
             abandoned_count_.load(std::memory_order_relaxed) > 0;
      if (!work) timeout = -1;
    }
    int n = ::poll(fds, 2, timeout);
    lease_parked_.store(false, std::memory_order_relaxed);
    if (!work && linger > 0 && n == 0) --linger;
    if (n > 0 && (fds[0].revents & (POLLIN | POLLHUP | POLLRDHUP | POLLERR))) {
      // After the welcome the daemon writes only to cut us off (with the reason), then hangs
      // up: readable means we are done either way.
      read_disconnect_notice();
      mark_gone();
      break;
    }
    if (n > 0 && (fds[1].revents & POLLIN)) {
      uint64_t v;
      ssize_t r = ::read(stop_fd_.get(), &v, sizeof(v));
      (void)r;
      if (!work) continue;  // kicked: let the batch gather for one tick first
    }
    // Answers whose futures were dropped unread: give back what they carry.
    if (abandoned_count_.load(std::memory_order_relaxed) > 0) {
      LaterReleases later{this, {}};
      std::unique_lock rl(recv_mutex_, std::try_to_lock);
      if (rl.owns_lock()) drain_answers_locked(&later);
    }
    if (pending_count_.load(std::memory_order_relaxed) > 0) {
      linger = kLingerTicks;
      std::unique_lock lk(send_mutex_, std::try_to_lock);
      if (lk.owns_lock()) (void)flush_locked();
    }
  }
  // Clean detach: give the lease back so the daemon can tell a detach from a crash.
  (void)shm::unlock(client_header()->lease);
}

void Connection::read_disconnect_notice() {
  auto reason = proto::read_disconnect_notice(sock_.get());
  if (!reason) return;
  std::lock_guard lk(gone_mutex_);
  disconnect_reason_ = std::move(*reason);
}

Status Connection::gone_status(const std::string& when) const {
  {
    std::lock_guard lk(gone_mutex_);
    if (!disconnect_reason_.empty())
      return Status(ErrorCode::kDisconnected, disconnect_reason_ + " (" + when + ")");
  }
  return proto::daemon_gone(when);
}

Status Connection::gone_reason() const {
  if (Status s = check_usable(); !s.is_ok()) return s;
  return gone_status("now");
}

Status Connection::check_usable() const {
  if (fork_generation() != fork_generation_)
    return Status(ErrorCode::kDisconnected,
                  "this kvpool client was connected before fork(); it belongs to the parent "
                  "process: connect a new Client in the child");
  if (gone()) return gone_status("before the request was sent");
  return Status::ok();
}

void Connection::mark_gone() {
  gone_.store(true, std::memory_order_release);
  // Wake a caller parked on the response doorbell; it checks gone() next.
  auto* ring =
      reinterpret_cast<shm::RingHeader*>(client_.as<char>() + client_header()->response_offset);
  ring->consumer_bell.seq.fetch_add(1, std::memory_order_release);
  shm::futex_wake_all(&ring->consumer_bell.seq);
}

Connection::~Connection() {
  if (lease_thread_.joinable()) {
    if (!gone()) {
      std::lock_guard lk(send_mutex_);
      (void)flush_locked();
    }
    stop_.store(true, std::memory_order_release);
    uint64_t one = 1;
    ssize_t r = ::write(stop_fd_.get(), &one, sizeof(one));
    (void)r;
    lease_thread_.join();
  }
}

bool Connection::gone() const {
  if (gone_.load(std::memory_order_acquire)) return true;
  // state() loads with acquire: a stopping daemon is seen as gone at once.
  return control_.valid() && control_.state() != shm::DaemonState::kReady;
}

void Connection::wake_daemon() {
  // Dekker with the engine: our tail store (release, then the seq_cst fence in publish)
  // precedes this load; the engine stores daemon_sleeping then re-reads our tail.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if ((control().daemon_sleeping.load(std::memory_order_relaxed) & 1u) != 0) {  // parked
    uint64_t one = 1;
    ssize_t r = ::write(bell_.get(), &one, sizeof(one));
    (void)r;
  }
}

Status Connection::publish_locked() {
  requests_->publish();
  wake_daemon();
  return Status::ok();
}

// A daemon that runs (its pid lives, the socket is open) but whose engine loop has not
// stored a heartbeat for longer than the configured bound is stalled: say so rather than
// wait for it forever.
Status Connection::check_heartbeat(const std::string& when) const {
  if (unresponsive_ns_ == 0) return Status::ok();
  const uint64_t beat = control().heartbeat_ns.load(std::memory_order_relaxed);
  const uint64_t now = monotonic_ns();
  if (beat == 0 || now <= beat || now - beat <= unresponsive_ns_) return Status::ok();
  return Status(ErrorCode::kDaemonUnresponsive,
                "kvpoold (pid " + std::to_string(control().daemon_pid) + ") has not run for " +
                    std::to_string((now - beat) / 1'000'000) + " ms (" + when +
                    "); it is stopped or wedged (unresponsive_after " +
                    std::to_string(unresponsive_ns_ / 1'000'000) + " ms)");
}

// Claims room for one record, waiting while the ring is full and the daemon alive.
Result<void*> Connection::claim(uint32_t type, uint32_t len) {
  while (true) {
    auto c = requests_->try_claim(type, len);
    if (!c) return c.status();
    if (*c) return c;
    if (gone()) return gone_status("while waiting for room on the request ring");
    // The daemon stops taking requests while our answers are unread (backpressure); a
    // thread that issues many async calls before reading any would wait here forever.
    // Read them for their futures (try_lock: a waiter holding it reads them anyway).
    if (std::unique_lock rl(recv_mutex_, std::try_to_lock); rl.owns_lock()) {
      drain_answers_locked(nullptr);  // we hold send_mutex_: releases queue at once
    }
    if (requests_->wait_for_space(len, poll_, kFutexTimeout) == shm::WaitResult::kTimedOut)
      KVPOOL_RETURN_IF_ERROR(check_heartbeat("while waiting for room on the request ring"));
  }
}

Status Connection::flush_locked() {
  if (pending_.empty()) return Status::ok();
  for (auto& p : pending_) {
    if (p.refs.empty()) continue;
    uint32_t bytes = static_cast<uint32_t>(sizeof(proto::RequestHeader) +
                                           p.refs.size() * sizeof(pool::BlockRef));
    auto c = claim(static_cast<uint32_t>(p.immutable ? proto::Opcode::kReleaseImmutable
                                                     : proto::Opcode::kReleaseMutable),
                   bytes);
    if (!c) {
      pending_.clear();
      pending_count_.store(0, std::memory_order_relaxed);
      return c.status();
    }
    proto::RequestHeader h{0, p.pool, static_cast<uint32_t>(p.refs.size())};
    std::memcpy(*c, &h, sizeof(h));
    std::memcpy(static_cast<std::byte*>(*c) + sizeof(h), p.refs.data(),
                p.refs.size() * sizeof(pool::BlockRef));
  }
  pending_.clear();
  pending_count_.store(0, std::memory_order_relaxed);
  return publish_locked();
}

void Connection::release(uint32_t pool, bool immutable, pool::BlockRef ref) {
  if (gone()) return;  // the daemon reclaims everything of ours anyway
  if (fork_generation() != fork_generation_) return;  // the parent's blocks, not ours
  std::lock_guard lk(send_mutex_);
  queue_release_locked(pool, immutable, ref);
}

// Wakes the lease thread (it sleeps without a timeout while there is nothing to flush).
void Connection::kick() {
  uint64_t one = 1;
  ssize_t r = ::write(stop_fd_.get(), &one, sizeof(one));
  (void)r;
}

void Connection::queue_release_locked(uint32_t pool, bool immutable, pool::BlockRef ref) {
  if (pending_.empty() || pending_.back().pool != pool || pending_.back().immutable != immutable) {
    pending_.push_back(PendingRelease{pool, immutable, {}});
    pending_.back().refs.reserve(kReleaseBatch);  // one allocation per batch, not seven
  }
  pending_.back().refs.push_back(ref);
  const uint32_t queued = pending_count_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (queued >= kReleaseBatch) {
    (void)flush_locked();
  } else if (queued == 1) {
    // The first of a batch: the lease thread flushes it within one tick. Wake it only if
    // it parked (Dekker with lease_main: the count above, then this look).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (lease_parked_.load(std::memory_order_relaxed)) kick();
  }
}

void Connection::flush() {
  std::lock_guard lk(send_mutex_);
  (void)flush_locked();
}

Result<uint64_t> Connection::send(proto::Opcode op, uint32_t pool, uint32_t count,
                                  const void* items, size_t item_bytes) {
  KVPOOL_RETURN_IF_ERROR(check_usable());
  std::lock_guard lk(send_mutex_);
  // Releases first: the daemon must see them before a request that may depend on them.
  if (!pending_.empty()) KVPOOL_RETURN_IF_ERROR(flush_locked());
  uint64_t bytes = sizeof(proto::RequestHeader) + item_bytes;
  if (bytes > requests_->max_payload())
    return Status(ErrorCode::kInvalidArgument,
                  "request of " + std::to_string(count) + " items (" + std::to_string(bytes) +
                      " bytes) exceeds what one request can carry (" +
                      std::to_string(requests_->max_payload()) + " bytes; raise ring_bytes)");
  auto c = claim(static_cast<uint32_t>(op), static_cast<uint32_t>(bytes));
  if (!c) return c.status();
  uint64_t corr = next_correlation_++;
  proto::RequestHeader h{corr, pool, count};
  std::memcpy(*c, &h, sizeof(h));
  if (item_bytes) std::memcpy(static_cast<std::byte*>(*c) + sizeof(h), items, item_bytes);
  KVPOOL_RETURN_IF_ERROR(publish_locked());
  return corr;
}

Status Connection::send_raw(uint32_t type, const void* bytes, uint32_t len) {
  std::lock_guard lk(send_mutex_);
  auto c = requests_->try_claim(type, len);
  if (!c) return c.status();
  if (!*c) return Status(ErrorCode::kResourceExhausted, "request ring full");
  if (len) std::memcpy(*c, bytes, len);
  return publish_locked();
}

// One answer off the response ring, decoded: nullopt when the ring is empty. recv_mutex_ held.
Result<std::optional<std::pair<uint64_t, Response>>> Connection::read_answer_locked() {
  auto rec = responses_->poll();
  if (!rec)
    return Status(ErrorCode::kProtocolError, "response ring corrupt: " + rec.status().message());
  if (rec->empty()) return std::optional<std::pair<uint64_t, Response>>();
  proto::ResponseHeader h{};
  Response r;
  if (rec->payload_len >= sizeof(h)) {
    std::memcpy(&h, rec->payload, sizeof(h));
    uint64_t need = sizeof(h) + uint64_t{h.count} * sizeof(pool::BlockRef) + h.message_len;
    if (need <= rec->payload_len) {
      r.code = static_cast<ErrorCode>(h.status);
      r.refs.resize(h.count);
      // memcpy with a null pointer (an empty vector's data()) is undefined even for 0 bytes.
      if (h.count > 0)
        std::memcpy(r.refs.data(), rec->payload + sizeof(h), h.count * sizeof(pool::BlockRef));
      r.message.assign(reinterpret_cast<const char*>(rec->payload) + sizeof(h) +
                           h.count * sizeof(pool::BlockRef),
                       h.message_len);
    } else {
      r.code = ErrorCode::kProtocolError;
      r.message = "malformed response";
    }
  }
  responses_->consume();
  return std::optional<std::pair<uint64_t, Response>>(std::in_place, h.correlation_id,
                                                      std::move(r));
}

Connection::LaterReleases::~LaterReleases() {
  for (const auto& [pool, immutable, ref] : items) conn->release(pool, immutable, ref);
}

// An answer for another caller: kept for it, or, when its future was dropped unread,
// what it carries goes back to the daemon. recv_mutex_ held. `later` null: the caller also
// holds send_mutex_ and the releases are queued at once; else they are made once the
// caller has let go of recv_mutex_ (lock order: never send_mutex_ inside recv_mutex_).
void Connection::stash_locked(uint64_t corr, Response r, LaterReleases* later) {
  auto it = abandoned_.find(corr);
  if (it == abandoned_.end()) {
    early_.emplace(corr, std::move(r));
    return;
  }
  Abandoned a = std::move(it->second);
  abandoned_.erase(it);
  abandoned_count_.store(static_cast<uint32_t>(abandoned_.size()), std::memory_order_relaxed);
  // Success: what the answer carries. Failure: nothing changed daemon-side, so the blocks
  // the request handed over (a register's) are still ours to give back.
  const bool ok = r.code == ErrorCode::kOk;
  const bool immutable = ok ? a.immutable : false;
  for (const pool::BlockRef& ref : ok ? r.refs : a.on_failure) {
    if (later == nullptr) {
      queue_release_locked(a.pool, immutable, ref);
    } else {
      later->items.emplace_back(a.pool, immutable, ref);
    }
  }
}

void Connection::abandon(uint64_t corr, uint32_t pool, bool immutable,
                         std::vector<pool::BlockRef> on_failure) {
  LaterReleases later{this, {}};
  std::lock_guard lk(recv_mutex_);
  abandoned_.emplace(corr, Abandoned{pool, immutable, std::move(on_failure)});
  kick();  // the lease thread reads the answer when it comes
  if (auto it = early_.find(corr); it != early_.end()) {
    Response r = std::move(it->second);
    early_.erase(it);
    stash_locked(corr, std::move(r), &later);
    return;
  }
  abandoned_count_.store(static_cast<uint32_t>(abandoned_.size()), std::memory_order_relaxed);
}

// Reads every answer there is, for whoever will ask (or for nobody: abandoned ones are
// released). recv_mutex_ held.
void Connection::drain_answers_locked(LaterReleases* later) {
  while (true) {
    auto got = read_answer_locked();
    if (!got || !*got) return;
    stash_locked((*got)->first, std::move((*got)->second), later);
  }
}

Result<Response> Connection::wait(uint64_t correlation_id) {
  if (fork_generation() != fork_generation_) return check_usable();
  LaterReleases later{this, {}};  // destroyed after the lock below is let go
  std::lock_guard lk(recv_mutex_);
  if (auto it = early_.find(correlation_id); it != early_.end()) {
    Response r = std::move(it->second);
    early_.erase(it);
    return r;
  }
  while (true) {
    auto got = read_answer_locked();
    if (!got) return got.status();
    if (*got) {
      if ((*got)->first == correlation_id) return std::move((*got)->second);
      stash_locked((*got)->first, std::move((*got)->second), &later);
      continue;
    }
    if (gone()) return gone_status("while waiting for an answer");
    // Poll while kvpoold works on our request; once it has not even taken it after the
    // grace, it is waiting for a core (maybe ours): sleep (shm::wait). When it last ran on
    // our core, it cannot run while we poll: sleep at once.
    auto started = [this] { return requests_->consumer_caught_up(); };
    shm::PollPolicy policy = poll_;
    if ((control().daemon_sleeping.load(std::memory_order_relaxed) >> 1) == shm::cpu_tag())
      policy.budget = std::chrono::nanoseconds::zero();
    if (responses_->wait_for_data(policy, started, kFutexTimeout) == shm::WaitResult::kTimedOut) {
      KVPOOL_RETURN_IF_ERROR(check_heartbeat("while waiting for an answer"));
    }
  }
}

Result<Response> Connection::call(proto::Opcode op, uint32_t pool, uint32_t count,
                                  const void* items, size_t item_bytes) {
  auto corr = send(op, pool, count, items, item_bytes);
  if (!corr) return corr.status();
  return wait(*corr);
}

}  // namespace kvpool::detail
