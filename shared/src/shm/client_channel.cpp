#include "kvpool/shm/client_channel.hpp"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>
#include <future>

#include "kvpool/core/clock.hpp"
#include "kvpool/shm/cpu_share.hpp"
#include "kvpool/shm/futex.hpp"
#include "kvpool/shm/lease_mutex.hpp"

namespace kvpool::shm {
namespace {

// How long one sleep on a doorbell lasts before the waiter looks at the daemon again.
constexpr auto kFutexTimeout = std::chrono::milliseconds(20);
// How long kvpoold may take to pick a request up before the caller stops polling for the
// answer and sleeps (PollPolicy). Waking a parked kvpoold on an idle core takes 5-20 us on
// the development VM; one that has not started after this is waiting for a core.
constexpr std::chrono::nanoseconds kStartGrace = std::chrono::microseconds(20);
constexpr int kLeaseTickMs = 10;
// Quiet ticks the lease thread stays awake after its work did something (about a second):
// an engine releases every step, so in use the thread never parks and needs no kick.
constexpr uint32_t kLingerTicks = 100;

void write_one(int fd) {
  const uint64_t one = 1;
  ssize_t r = ::write(fd, &one, sizeof(one));
  (void)r;  // an eventfd's counter cannot overflow from ones; nothing to do if it did
}

}  // namespace

Result<Answer> decode_answer(const RecordView& rec, uint64_t* correlation_id) {
  proto::ResponseHeader h{};
  if (rec.payload_len < sizeof(h))
    return Status(ErrorCode::kProtocolError,
                  "kvpoold sent an answer of " + std::to_string(rec.payload_len) +
                      " bytes, shorter than its " + std::to_string(sizeof(h)) +
                      "-byte header; the daemon is broken or not a kvpoold of this version");
  std::memcpy(&h, rec.payload, sizeof(h));  // copied once: the peer may still write it
  *correlation_id = h.correlation_id;
  Answer a;
  const uint64_t refs_bytes = uint64_t{h.count} * sizeof(proto::BlockRef);
  if (sizeof(h) + refs_bytes + h.message_len > rec.payload_len) {
    a.code = ErrorCode::kProtocolError;
    a.message = "malformed response";
    return a;
  }
  a.code = static_cast<ErrorCode>(h.status);
  a.refs.resize(h.count);
  // memcpy with a null pointer (an empty vector's data()) is undefined even for 0 bytes.
  if (h.count > 0) std::memcpy(a.refs.data(), rec.payload + sizeof(h), refs_bytes);
  a.message.assign(reinterpret_cast<const char*>(rec.payload) + sizeof(h) + refs_bytes,
                   h.message_len);
  return a;
}

ClientChannel::ClientChannel(ClientAttach& at, const ChannelOptions& options)
    : sock_(std::move(at.sock)),
      bell_(std::move(at.bell)),
      control_(std::move(at.control)),
      client_(std::move(at.client)),
      welcome_(at.welcome),
      requests_(at.requests, at.welcome.ring_capacity),
      responses_(at.responses, at.welcome.ring_capacity),
      poll_{options.poll, std::min<std::chrono::nanoseconds>(options.poll, kStartGrace)},
      unresponsive_ns_(static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(options.unresponsive_after)
              .count())) {}

Result<std::unique_ptr<ClientChannel>> ClientChannel::create(ClientAttach& attach,
                                                             const ChannelOptions& options) {
  std::unique_ptr<ClientChannel> c(new ClientChannel(attach, options));
  // attach_client checked both rings against the Welcome; a view that still refuses them
  // has found their positions corrupt.
  KVPOOL_RETURN_IF_ERROR(c->requests_.status());
  KVPOOL_RETURN_IF_ERROR(c->responses_.status());
  c->stop_fd_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!c->stop_fd_) return io_error("eventfd", errno);
  return c;
}

ClientChannel::~ClientChannel() { stop(); }

// ---- the lease thread and the gone watch -------------------------------------------------

Status ClientChannel::start(LeaseWork* work) {
  std::promise<Status> locked;
  auto taken = locked.get_future();
  lease_thread_ = std::thread([this, work, &locked] {
    // Named for `top -H` and for tests that watch it (15 characters at most).
    (void)pthread_setname_np(pthread_self(), "kvpool-lease");
    const LockResult lr = lock(client_header()->lease);
    if (lr != LockResult::kAcquired && lr != LockResult::kOwnerDied) {
      locked.set_value(Status(ErrorCode::kInternal,
                              "cannot take the lease mutex: " + std::string(lock_result_name(lr))));
      return;
    }
    locked.set_value(Status::ok());
    lease_main(work);
    // A clean detach: the daemon tells it from a crash by the lease given back.
    (void)unlock(client_header()->lease);
  });
  KVPOOL_RETURN_IF_ERROR(taken.get());
  return proto::send_ready(sock_.get());
}

void ClientChannel::stop() {
  if (!lease_thread_.joinable()) return;
  stop_.store(true, std::memory_order_release);
  write_one(stop_fd_.get());
  lease_thread_.join();
}

void ClientChannel::kick() { write_one(stop_fd_.get()); }

void ClientChannel::kick_if_parked() {
  // Dekker with lease_main: the owner made pending() true, then looks whether we park.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (lease_parked_.load(std::memory_order_relaxed)) kick();
}

void ClientChannel::lease_main(LeaseWork* work) {
  pollfd fds[2] = {{sock_.get(), POLLIN | POLLRDHUP, 0}, {stop_fd_.get(), POLLIN, 0}};
  auto pending = [this, work] {
    return bell_owed_.load(std::memory_order_relaxed) || (work != nullptr && work->pending());
  };
  uint32_t linger = 0;  // quiet ticks left before parking
  while (!stop_.load(std::memory_order_acquire)) {
    // An idle client costs nothing: with no work and none recently, park until the daemon
    // hangs up or the owner kicks us.
    bool has_work = pending();
    int timeout = kLeaseTickMs;
    if (!has_work && linger == 0) {
      // Dekker with kick_if_parked: we say we park, then look at the work once more; the
      // owner makes work, then looks whether we park. One sees the other's store.
      lease_parked_.store(true, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      has_work = pending();
      if (!has_work) timeout = -1;
    }
    const int n = ::poll(fds, 2, timeout);
    lease_parked_.store(false, std::memory_order_relaxed);
    if (!has_work && linger > 0 && n == 0) --linger;
    if (n > 0 && (fds[0].revents & (POLLIN | POLLHUP | POLLRDHUP | POLLERR))) {
      // After the welcome the daemon writes only to cut us off (with the reason), then hangs
      // up: readable means we are done either way.
      mark_gone();
      return;
    }
    if (n > 0 && (fds[1].revents & POLLIN)) {
      uint64_t v;
      ssize_t r = ::read(stop_fd_.get(), &v, sizeof(v));
      (void)r;
      // Kicked: the owner is releasing again. Stay awake (ticking) for the linger, so that
      // the next releases find us unparked and need no kick.
      linger = kLingerTicks;
      if (!has_work) continue;  // let the work gather for one tick first
    }
    if (work != nullptr && work->run()) linger = kLingerTicks;
    ring_if_owed();
  }
}

void ClientChannel::ring_if_owed() {
  // acquire: pairs with publish_deferred's release, so the tail it published is seen.
  if (!bell_owed_.exchange(false, std::memory_order_acquire)) return;
  // The Dekker of publish(), once more: the tail is visible, then we look whether the
  // daemon parks. A daemon that parked after taking our records costs one spurious wake.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!requests_.consumer_caught_up() &&
      (control().daemon_sleeping.load(std::memory_order_relaxed) & 1u) != 0)
    write_one(bell_.get());
}

void ClientChannel::mark_gone() {
  if (auto reason = proto::read_disconnect_notice(sock_.get())) disconnect_reason_ = *reason;
  gone_.store(true, std::memory_order_release);  // after the reason: readers see both
  // Wake a caller asleep on the response doorbell; it looks at gone() next.
  auto* ring = reinterpret_cast<RingHeader*>(client_.as<char>() + client_header()->response_offset);
  ring->consumer_bell.seq.fetch_add(1, std::memory_order_release);
  futex_wake_all(&ring->consumer_bell.seq);
}

bool ClientChannel::gone() const {
  if (gone_.load(std::memory_order_acquire)) return true;
  // state() loads with acquire: a stopping daemon is seen as gone at once.
  return control_.state() != DaemonState::kReady;
}

Status ClientChannel::gone_status(const std::string& when) const {
  if (gone_.load(std::memory_order_acquire) && !disconnect_reason_.empty())
    return Status(ErrorCode::kDisconnected, disconnect_reason_ + " (" + when + ")");
  return proto::daemon_gone(when);
}

// A daemon that runs (its pid lives, the socket is open) but whose engine loop has not
// stored a heartbeat for longer than the bound is stalled: say so rather than wait forever.
Status ClientChannel::check_heartbeat(const std::string& when) const {
  if (unresponsive_ns_ == 0) return Status::ok();
  const uint64_t beat = control().heartbeat_ns.load(std::memory_order_relaxed);
  const uint64_t now = now_ns(CLOCK_MONOTONIC);
  if (beat == 0 || now <= beat || now - beat <= unresponsive_ns_) return Status::ok();
  return Status(ErrorCode::kDaemonUnresponsive,
                "kvpoold (pid " + std::to_string(control().daemon_pid) + ") has not run for " +
                    std::to_string((now - beat) / 1'000'000) + " ms (" + when +
                    "); it is stopped or wedged (unresponsive_after " +
                    std::to_string(unresponsive_ns_ / 1'000'000) + " ms)");
}

// Whether polling for an answer can pay now. Not when kvpoold last ran on our core (it
// cannot run while we poll), nor while kvpoold and the clients in a call outnumber its cores
// (shm/cpu_share.hpp): our poll would hold a core that one of them needs.
bool ClientChannel::may_poll() const {
  const ControlHeader& c = control();
  if ((c.daemon_sleeping.load(std::memory_order_relaxed) >> 1) == cpu_tag()) return false;
  // relaxed: hints, a moment old; the header always covers them (stats since minor 0).
  return polling_pays(clients_competing(c.stats.clients_busy.load(std::memory_order_relaxed),
                                        c.stats.clients_awake.load(std::memory_order_relaxed)),
                      c.stats.engine_cpus.load(std::memory_order_relaxed));
}

// ---- sending -----------------------------------------------------------------------------

Result<void*> ClientChannel::claim(uint32_t type, uint32_t len,
                                   const std::function<void()>& on_full) {
  while (true) {
    auto c = requests_.try_claim(type, len);
    if (!c || *c) return c;
    if (gone()) return gone_status("while waiting for room on the request ring");
    if (on_full) on_full();
    if (requests_.wait_for_space(len, poll_, kFutexTimeout) == WaitResult::kTimedOut)
      KVPOOL_RETURN_IF_ERROR(check_heartbeat("while waiting for room on the request ring"));
  }
}

void ClientChannel::publish() {
  requests_.publish();
  // Dekker with the engine: our tail store (release, then this fence) precedes the load of
  // daemon_sleeping; the engine stores daemon_sleeping (seq_cst), then re-reads every tail.
  // One of us sees the other's store: the request is found, or the eventfd rung.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if ((control().daemon_sleeping.load(std::memory_order_relaxed) & 1u) != 0) write_one(bell_.get());
}

void ClientChannel::publish_deferred() {
  requests_.publish();
  std::atomic_thread_fence(std::memory_order_seq_cst);  // as publish()
  if ((control().daemon_sleeping.load(std::memory_order_relaxed) & 1u) == 0) return;
  if (!lease_thread_.joinable()) {
    write_one(bell_.get());  // nobody to ring later
    return;
  }
  bell_owed_.store(true, std::memory_order_release);
  // Parked (no release for a second): wake the thread, which rings at its next tick.
  kick_if_parked();
}

Result<uint64_t> ClientChannel::send(proto::Opcode op, uint32_t pool, uint32_t count,
                                     const void* items, size_t item_bytes,
                                     const std::function<void()>& on_full) {
  const uint64_t bytes = sizeof(proto::RequestHeader) + item_bytes;
  if (bytes > requests_.max_payload())
    return Status(ErrorCode::kInvalidArgument,
                  "request of " + std::to_string(count) + " items (" + std::to_string(bytes) +
                      " bytes) exceeds what one request can carry (" +
                      std::to_string(requests_.max_payload()) + " bytes; raise ring_bytes)");
  auto c = claim(static_cast<uint32_t>(op), static_cast<uint32_t>(bytes), on_full);
  if (!c) return c.status();
  const uint64_t corr = next_correlation_++;
  const proto::RequestHeader h{corr, pool, count};
  std::memcpy(*c, &h, sizeof(h));
  if (item_bytes) std::memcpy(static_cast<std::byte*>(*c) + sizeof(h), items, item_bytes);
  publish();
  return corr;
}

// ---- receiving ---------------------------------------------------------------------------

Result<std::optional<std::pair<uint64_t, Answer>>> ClientChannel::read_answer() {
  auto rec = responses_.poll();
  if (!rec)
    return Status(ErrorCode::kProtocolError, "response ring corrupt: " + rec.status().message());
  if (rec->empty()) return std::optional<std::pair<uint64_t, Answer>>();
  uint64_t corr = 0;
  auto a = decode_answer(*rec, &corr);
  // A record without a correlation id is left unconsumed: every later read refuses it too.
  if (!a) return a.status();
  responses_.consume();
  return std::optional<std::pair<uint64_t, Answer>>(std::in_place, corr, std::move(*a));
}

Result<Answer> ClientChannel::wait(uint64_t correlation_id,
                                   const std::function<void(uint64_t, Answer&&)>& other) {
  while (true) {
    auto got = read_answer();
    if (!got) return got.status();
    if (*got) {
      if ((*got)->first == correlation_id) return std::move((*got)->second);
      other((*got)->first, std::move((*got)->second));
      continue;
    }
    if (gone()) return gone_status("while waiting for an answer");
    // Poll while kvpoold works on our request; once it has not even taken it after the
    // grace, it is waiting for a core (maybe ours): sleep. When it last ran on our core, it
    // cannot run while we poll: sleep at once.
    auto started = [this] { return requests_.consumer_caught_up(); };
    PollPolicy policy = poll_;
    if (!may_poll()) policy.budget = std::chrono::nanoseconds::zero();
    if (responses_.wait_for_data(policy, started, kFutexTimeout) == WaitResult::kTimedOut)
      KVPOOL_RETURN_IF_ERROR(check_heartbeat("while waiting for an answer"));
  }
}

}  // namespace kvpool::shm
