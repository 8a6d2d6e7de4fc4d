#include "support/raw_connection.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>
#include <future>

#include "kvpool/core/paths.hpp"
#include "kvpool/shm/handshake.hpp"
#include "kvpool/shm/lease_mutex.hpp"
#include "kvpool/shm/unix_socket.hpp"

namespace kvpool::testsupport {
namespace {

// How long one futex sleep lasts before the waiter looks at the daemon again.
constexpr auto kFutexTimeout = std::chrono::milliseconds(20);
// How long kvpoold may take to pick a request up before a waiter stops polling and sleeps
// (as libkvpool: shm::PollPolicy).
constexpr std::chrono::nanoseconds kStartGrace = std::chrono::microseconds(20);

}  // namespace

Result<std::unique_ptr<RawConnection>> RawConnection::open(const std::string& instance,
                                                           const RawOptions& options) {
  KVPOOL_RETURN_IF_ERROR(validate_instance_name(instance));
  std::unique_ptr<RawConnection> c(new RawConnection());
  KVPOOL_RETURN_IF_ERROR(c->handshake(instance, options));
  return c;
}

Status RawConnection::handshake(const std::string& instance, const RawOptions& options) {
  poll_ = shm::PollPolicy{
      std::chrono::microseconds(options.poll_us),
      std::min<std::chrono::nanoseconds>(std::chrono::microseconds(options.poll_us), kStartGrace)};
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
  KVPOOL_RETURN_IF_ERROR(map_pools(w, *fds));
  // Ready only once the lease is held: from then on the daemon judges us by it.
  KVPOOL_RETURN_IF_ERROR(hold_lease());
  return proto::send_ready(sock_.get());
}

// After the first three descriptors, one per pool open to us whose storage travels as one
// (proto::welcome_carries_fd), in pool order.
Status RawConnection::map_pools(const proto::Welcome& w, std::vector<shm::UniqueFd>& fds) {
  const std::span<const shm::PoolInfo> infos = control_.pool_infos();
  size_t next_fd = 3;
  for (uint32_t i = 0; i < infos.size(); ++i) {
    shm::PoolInfo info = infos[i];
    info.name[sizeof(info.name) - 1] = '\0';
    auto layout = Layout::create(info.layout);
    if (!layout) return layout.status();
    RawPool p{info.name, info, layout.value(), shm::Segment(),
              i < 32 && (w.pool_mask & (1u << i)) != 0};
    if (p.usable && proto::welcome_carries_fd(static_cast<shm::StorageKind>(info.storage))) {
      if (next_fd >= fds.size())
        return Status(ErrorCode::kProtocolError, "welcome carries too few pool descriptors");
      auto data = shm::Segment::map_fd(std::move(fds[next_fd++]), /*writable=*/true);
      if (!data) return data.status();
      if (data->size() < layout->total_bytes())
        return Status(ErrorCode::kProtocolError,
                      "pool '" + p.name + "' data is smaller than its layout");
      p.data = std::move(data.value());
    }
    pools_.push_back(std::move(p));
  }
  if (next_fd != fds.size())
    return Status(ErrorCode::kProtocolError, "welcome carries " + std::to_string(fds.size()) +
                                                 " descriptors, " + std::to_string(next_fd) +
                                                 " expected");
  return Status::ok();
}

Status RawConnection::hold_lease() {
  stop_fd_ = shm::UniqueFd(::eventfd(0, EFD_CLOEXEC));
  if (!stop_fd_) return io_error("eventfd", errno);
  std::promise<Status> locked;
  auto taken = locked.get_future();
  lease_thread_ = std::thread([this, &locked] {
    const shm::LockResult lr = shm::lock(client_header()->lease);
    if (lr != shm::LockResult::kAcquired && lr != shm::LockResult::kOwnerDied) {
      locked.set_value(Status(ErrorCode::kInternal, "cannot take the lease mutex: " +
                                                        std::string(shm::lock_result_name(lr))));
      return;
    }
    locked.set_value(Status::ok());
    watch_socket();
    (void)shm::unlock(client_header()->lease);  // a clean detach
  });
  return taken.get();
}

// The lease thread's wait: until we detach, or until the daemon writes to the socket,
// which after the welcome it does only to cut us off (with the reason) before it hangs up.
void RawConnection::watch_socket() {
  pollfd fds[2] = {{sock_.get(), POLLIN | POLLRDHUP, 0}, {stop_fd_.get(), POLLIN, 0}};
  while (true) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if (fds[0].revents != 0) break;
  }
  disconnect_reason_ = proto::read_disconnect_notice(sock_.get());
  gone_.store(true, std::memory_order_release);  // after the reason: readers see both
  // Wake a caller asleep on the response ring; it looks at gone() next.
  auto* ring =
      reinterpret_cast<shm::RingHeader*>(client_.as<char>() + client_header()->response_offset);
  ring->consumer_bell.seq.fetch_add(1, std::memory_order_release);
  shm::futex_wake_all(&ring->consumer_bell.seq);
  uint64_t v = 0;
  while (::read(stop_fd_.get(), &v, sizeof(v)) < 0 && errno == EINTR) {
  }
}

RawConnection::~RawConnection() {
  if (!lease_thread_.joinable()) return;
  const uint64_t one = 1;
  ssize_t r = ::write(stop_fd_.get(), &one, sizeof(one));
  (void)r;
  lease_thread_.join();
}

bool RawConnection::gone() const {
  if (gone_.load(std::memory_order_acquire)) return true;
  // state() loads with acquire: a stopping daemon is seen as gone at once.
  return control_.state() != shm::DaemonState::kReady;
}

Status RawConnection::gone_status(const std::string& when) const {
  if (gone_.load(std::memory_order_acquire) && disconnect_reason_)
    return Status(ErrorCode::kDisconnected, *disconnect_reason_ + " (" + when + ")");
  return proto::daemon_gone(when);
}

// Dekker with the engine: our tail store (release, then the seq_cst fence) precedes the
// load of daemon_sleeping; the engine stores daemon_sleeping then re-reads our tail.
void RawConnection::publish() {
  requests_->publish();
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if ((control().daemon_sleeping.load(std::memory_order_relaxed) & 1u) != 0) {
    const uint64_t one = 1;
    ssize_t r = ::write(bell_.get(), &one, sizeof(one));
    (void)r;
  }
}

// Room for one record, waiting while the ring is full and the daemon alive. Answers that
// came meanwhile are read and kept, or the daemon would stop taking requests.
Result<void*> RawConnection::claim(uint32_t type, uint32_t len) {
  while (true) {
    auto c = requests_->try_claim(type, len);
    if (!c || *c) return c;
    if (gone()) return gone_status("while waiting for room on the request ring");
    while (true) {
      auto got = read_answer();
      if (!got) return got.status();
      if (!*got) break;
      early_.insert(std::move(**got));
    }
    (void)requests_->wait_for_space(len, poll_, kFutexTimeout);
  }
}

Result<uint64_t> RawConnection::send(proto::Opcode op, uint32_t pool, uint32_t count,
                                     const void* items, size_t item_bytes) {
  if (gone()) return gone_status("before the request was sent");
  const uint64_t bytes = sizeof(proto::RequestHeader) + item_bytes;
  if (bytes > requests_->max_payload())
    return Status(ErrorCode::kInvalidArgument, "request of " + std::to_string(bytes) +
                                                   " bytes exceeds the ring's " +
                                                   std::to_string(requests_->max_payload()));
  auto c = claim(static_cast<uint32_t>(op), static_cast<uint32_t>(bytes));
  if (!c) return c.status();
  const uint64_t corr = next_correlation_++;
  const proto::RequestHeader h{corr, pool, count};
  std::memcpy(*c, &h, sizeof(h));
  if (item_bytes) std::memcpy(static_cast<std::byte*>(*c) + sizeof(h), items, item_bytes);
  publish();
  return corr;
}

Status RawConnection::send_raw(uint32_t type, const void* bytes, uint32_t len) {
  auto c = requests_->try_claim(type, len);
  if (!c) return c.status();
  if (!*c) return Status(ErrorCode::kResourceExhausted, "request ring full");
  if (len) std::memcpy(*c, bytes, len);
  publish();
  return Status::ok();
}

// One answer off the response ring, decoded; nullopt when the ring is empty.
Result<std::optional<std::pair<uint64_t, RawResponse>>> RawConnection::read_answer() {
  auto rec = responses_->poll();
  if (!rec)
    return Status(ErrorCode::kProtocolError, "response ring corrupt: " + rec.status().message());
  if (rec->empty()) return std::optional<std::pair<uint64_t, RawResponse>>();
  proto::ResponseHeader h{};
  RawResponse r;
  if (rec->payload_len >= sizeof(h)) {
    std::memcpy(&h, rec->payload, sizeof(h));
    const uint64_t refs_bytes = uint64_t{h.count} * sizeof(pool::BlockRef);
    if (sizeof(h) + refs_bytes + h.message_len <= rec->payload_len) {
      r.code = static_cast<ErrorCode>(h.status);
      r.refs.resize(h.count);
      if (h.count > 0) std::memcpy(r.refs.data(), rec->payload + sizeof(h), refs_bytes);
      r.message.assign(reinterpret_cast<const char*>(rec->payload) + sizeof(h) + refs_bytes,
                       h.message_len);
    } else {
      r.code = ErrorCode::kProtocolError;
      r.message = "malformed response";
    }
  }
  responses_->consume();
  return std::optional<std::pair<uint64_t, RawResponse>>(std::in_place, h.correlation_id,
                                                         std::move(r));
}

Result<RawResponse> RawConnection::wait(uint64_t correlation_id) {
  if (auto it = early_.find(correlation_id); it != early_.end()) {
    RawResponse r = std::move(it->second);
    early_.erase(it);
    return r;
  }
  while (true) {
    auto got = read_answer();
    if (!got) return got.status();
    if (*got) {
      if ((*got)->first == correlation_id) return std::move((*got)->second);
      early_.insert(std::move(**got));
      continue;
    }
    if (gone()) return gone_status("while waiting for an answer");
    // Poll while kvpoold works on our request, sleep once it has not even taken it after
    // the grace; at once when it last ran on our core (it cannot run while we poll).
    auto started = [this] { return requests_->consumer_caught_up(); };
    shm::PollPolicy policy = poll_;
    if ((control().daemon_sleeping.load(std::memory_order_relaxed) >> 1) == shm::cpu_tag())
      policy.budget = std::chrono::nanoseconds::zero();
    (void)responses_->wait_for_data(policy, started, kFutexTimeout);
  }
}

Result<RawResponse> RawConnection::call(proto::Opcode op, uint32_t pool, uint32_t count,
                                        const void* items, size_t item_bytes) {
  auto corr = send(op, pool, count, items, item_bytes);
  if (!corr) return corr.status();
  return wait(*corr);
}

}  // namespace kvpool::testsupport
