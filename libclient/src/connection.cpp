#include "connection.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <future>

#include "device_view.hpp"
#include "kvpool/core/paths.hpp"
#include "kvpool/core/version.hpp"
#include "kvpool/cuda/device.hpp"
#include "kvpool/shm/futex.hpp"
#include "kvpool/shm/lease_mutex.hpp"
#include "kvpool/shm/unix_socket.hpp"

namespace kvpool::detail {
namespace {

constexpr auto kFutexTimeout = std::chrono::milliseconds(20);
constexpr int kLeaseTickMs = 10;
constexpr uint32_t kReleaseBatch = 64;

Status daemon_gone(const std::string& why) {
  return Status(ErrorCode::kDaemonGone, "kvpoold is gone (" + why + "); reconnect when it is back");
}

Result<std::vector<shm::UniqueFd>> exchange_hello(int fd, const std::string& instance,
                                                  proto::MsgType type, uint16_t major,
                                                  int timeout_ms, proto::Welcome* welcome) {
  proto::Hello h{};
  h.magic = proto::kHelloMagic;
  h.type = type;
  h.layout_major = major;
  h.layout_minor = shm::kLayoutMinor;
  h.client_version = version_packed();
  std::memcpy(h.instance, instance.data(), std::min(instance.size(), sizeof(h.instance) - 1));
  KVPOOL_RETURN_IF_ERROR(shm::send_message(fd, std::as_bytes(std::span(&h, 1))));
  alignas(8) std::byte buf[512];
  std::vector<shm::UniqueFd> fds;
  auto n = shm::recv_message(fd, buf, &fds, timeout_ms);
  if (!n) return n.status();
  if (*n == 0) return daemon_gone("it closed the connection during the handshake");
  if (*n == sizeof(proto::Refusal)) {
    proto::Refusal r;
    std::memcpy(&r, buf, sizeof(r));
    r.message[sizeof(r.message) - 1] = '\0';
    if (r.magic == proto::kHelloMagic && r.type == proto::MsgType::kRefusal)
      return Status(static_cast<ErrorCode>(r.code), std::string("kvpoold refused: ") + r.message);
  }
  if (*n != sizeof(proto::Welcome))
    return Status(ErrorCode::kProtocolError,
                  "unexpected handshake answer of " + std::to_string(*n) + " bytes");
  std::memcpy(welcome, buf, sizeof(*welcome));
  if (welcome->magic != proto::kHelloMagic || welcome->type != proto::MsgType::kWelcome ||
      welcome->num_fds != fds.size())
    return Status(ErrorCode::kProtocolError, "malformed welcome from kvpoold");
  return fds;
}

Result<shm::Segment> map_control(shm::UniqueFd fd) {
  auto seg = shm::Segment::map_fd(std::move(fd), /*writable=*/false);
  if (!seg) return seg.status();
  auto* h = seg->as<shm::ControlHeader>();
  if (seg->size() < sizeof(shm::ControlHeader) || h->magic != shm::kControlMagic)
    return Status(ErrorCode::kProtocolError, "the control segment is not a kvpool segment");
  if (h->layout_major != shm::kLayoutMajor)
    return Status(ErrorCode::kVersionMismatch,
                  "kvpoold uses shm layout " + std::to_string(h->layout_major) + ", this library " +
                      std::to_string(shm::kLayoutMajor));
  if (h->state.load(std::memory_order_acquire) != static_cast<uint32_t>(shm::DaemonState::kReady))
    return daemon_gone("it is not ready");
  if (h->total_bytes > seg->size())
    return Status(ErrorCode::kProtocolError, "the control segment is smaller than its header says");
  return seg;
}

}  // namespace

Result<shm::Segment> Connection::observe(const std::string& instance,
                                         const std::string& runtime_dir) {
  KVPOOL_RETURN_IF_ERROR(validate_instance_name(instance));
  std::string dir = runtime_dir.empty() ? default_runtime_dir() : runtime_dir;
  auto sock = shm::connect_unix(socket_path(dir, instance));
  if (!sock) return sock.status();
  proto::Welcome w{};
  auto fds =
      exchange_hello(sock->get(), instance, proto::MsgType::kObserve, shm::kLayoutMajor, 5000, &w);
  if (!fds) return fds.status();
  if (fds->size() != 1)
    return Status(ErrorCode::kProtocolError, "observe answer carries no segment");
  return map_control(std::move((*fds)[0]));
}

Result<std::unique_ptr<Connection>> Connection::open(const std::string& instance,
                                                     const ConnectionOptions& options) {
  KVPOOL_RETURN_IF_ERROR(validate_instance_name(instance));
  std::unique_ptr<Connection> c(new Connection());
  KVPOOL_RETURN_IF_ERROR(c->handshake(instance, options));
  return c;
}

Status Connection::handshake(const std::string& instance, const ConnectionOptions& options) {
  spin_iterations_ = options.spin_iterations;
  if (options.pin_host_pools && !cuda::built_with_cuda())
    return Status(ErrorCode::kUnsupported, "pin_host_pools: " + cuda::no_device_reason());
  std::string dir = options.runtime_dir.empty() ? default_runtime_dir() : options.runtime_dir;
  auto sock = shm::connect_unix(socket_path(dir, instance));
  if (!sock) return sock.status();
  sock_ = std::move(sock.value());
  proto::Welcome w{};
  auto fds = exchange_hello(sock_.get(), instance, proto::MsgType::kHello, options.layout_major,
                            static_cast<int>(options.connect_timeout.count()), &w);
  if (!fds) return fds.status();
  if (fds->size() < 3)
    return Status(ErrorCode::kProtocolError, "welcome carries too few descriptors");
  auto ctl = map_control(std::move((*fds)[0]));
  if (!ctl) return ctl.status();
  control_ = std::move(ctl.value());
  auto cseg = shm::Segment::map_fd(std::move((*fds)[1]), true);
  if (!cseg) return cseg.status();
  client_ = std::move(cseg.value());
  bell_ = std::move((*fds)[2]);
  slot_ = w.slot;
  generation_ = w.generation;

  auto* ch = client_.as<shm::ClientHeader>();
  auto lay = shm::client_segment_layout(w.ring_capacity);
  if (client_.size() < lay.total_bytes || ch->magic != shm::kClientMagic ||
      ch->request_offset != lay.request_offset || ch->response_offset != lay.response_offset)
    return Status(ErrorCode::kProtocolError, "the client segment does not match the welcome");
  requests_.emplace(reinterpret_cast<shm::RingHeader*>(client_.as<char>() + lay.request_offset),
                    w.ring_capacity);
  responses_.emplace(reinterpret_cast<shm::RingHeader*>(client_.as<char>() + lay.response_offset),
                     w.ring_capacity);

  const auto& ctl_h = control();
  auto* infos =
      reinterpret_cast<const shm::PoolInfo*>(control_.as<const char>() + ctl_h.pools_offset);
  // After the first three, one descriptor per pool whose storage travels as one, in pool
  // order (proto::welcome_carries_fd): host pools. Device pools come as an IPC handle.
  size_t pool_fds = 0;
  for (uint32_t i = 0; i < ctl_h.num_pools; ++i) {
    auto kind = static_cast<shm::StorageKind>(infos[i].storage);
    if (kind != shm::StorageKind::kHost && kind != shm::StorageKind::kCuda)
      return Status(
          ErrorCode::kVersionMismatch,
          "pool " + std::to_string(i) + " has storage kind " + std::to_string(infos[i].storage) +
              ", unknown to this libkvpool; rebuild the worker against a matching libkvpool");
    pool_fds += proto::welcome_carries_fd(kind) ? 1 : 0;
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
    auto layout = Layout::create(info.layout);
    if (!layout) return layout.status();
    PoolView view{info.name, info, layout.value(), shm::Segment(), nullptr, nullptr};
    if (view.is_device()) {
      if (info.data_bytes < layout->total_bytes())
        return Status(ErrorCode::kProtocolError,
                      std::string("pool '") + info.name + "' slab is smaller than its layout");
      view.device = std::make_shared<DeviceView>(info);
    } else {
      auto data = shm::Segment::map_fd(std::move((*fds)[next_fd++]), true);
      if (!data) return data.status();
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
  proto::Ready r{proto::kHelloMagic, proto::MsgType::kReady};
  return shm::send_message(sock_.get(), std::as_bytes(std::span(&r, 1)));
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
  while (!stop_.load(std::memory_order_acquire)) {
    int n = ::poll(fds, 2, kLeaseTickMs);
    if (n > 0 && (fds[0].revents & (POLLIN | POLLHUP | POLLRDHUP | POLLERR))) {
      // The daemon never writes to the socket after the welcome: readable means hang-up.
      mark_gone();
      break;
    }
    if (pending_count_.load(std::memory_order_relaxed) > 0) {
      std::unique_lock lk(send_mutex_, std::try_to_lock);
      if (lk.owns_lock()) (void)flush_locked();
    }
  }
  // Clean detach: give the lease back so the daemon can tell a detach from a crash.
  (void)shm::unlock(client_header()->lease);
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
  return control_.data() != nullptr && control().state.load(std::memory_order_acquire) !=
                                           static_cast<uint32_t>(shm::DaemonState::kReady);
}

void Connection::wake_daemon() {
  // Dekker with the engine: our tail store (release, then the seq_cst fence in publish)
  // precedes this load; the engine stores daemon_sleeping then re-reads our tail.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (control().daemon_sleeping.load(std::memory_order_relaxed) != 0) {
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

// Claims room for one record, waiting while the ring is full and the daemon alive.
static Result<void*> claim(shm::RingProducer& ring, uint32_t type, uint32_t len,
                           const std::function<bool()>& gone) {
  while (true) {
    auto c = ring.try_claim(type, len);
    if (!c) return c.status();
    if (*c) return c;
    if (gone()) return daemon_gone("while waiting for room on the request ring");
    (void)ring.wait_for_space(len, 1000, kFutexTimeout);
  }
}

Status Connection::flush_locked() {
  if (pending_.empty()) return Status::ok();
  auto is_gone = [this] { return gone(); };
  for (auto& p : pending_) {
    if (p.refs.empty()) continue;
    uint32_t bytes = static_cast<uint32_t>(sizeof(proto::RequestHeader) +
                                           p.refs.size() * sizeof(pool::BlockRef));
    auto c = claim(*requests_,
                   static_cast<uint32_t>(p.immutable ? proto::Opcode::kReleaseImmutable
                                                     : proto::Opcode::kReleaseMutable),
                   bytes, is_gone);
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
  std::lock_guard lk(send_mutex_);
  if (pending_.empty() || pending_.back().pool != pool || pending_.back().immutable != immutable) {
    pending_.push_back(PendingRelease{pool, immutable, {}});
    pending_.back().refs.reserve(kReleaseBatch);  // one allocation per batch, not seven
  }
  pending_.back().refs.push_back(ref);
  if (pending_count_.fetch_add(1, std::memory_order_relaxed) + 1 >= kReleaseBatch)
    (void)flush_locked();
}

void Connection::flush() {
  std::lock_guard lk(send_mutex_);
  (void)flush_locked();
}

Result<uint64_t> Connection::send(proto::Opcode op, uint32_t pool, uint32_t count,
                                  const void* items, size_t item_bytes) {
  if (gone()) return daemon_gone("before the request was sent");
  std::lock_guard lk(send_mutex_);
  auto is_gone = [this] { return gone(); };
  // Releases first: the daemon must see them before a request that may depend on them.
  if (!pending_.empty()) KVPOOL_RETURN_IF_ERROR(flush_locked());
  uint64_t bytes = sizeof(proto::RequestHeader) + item_bytes;
  if (bytes > requests_->max_payload())
    return Status(ErrorCode::kInvalidArgument,
                  "request of " + std::to_string(count) + " items (" + std::to_string(bytes) +
                      " bytes) exceeds what one request can carry (" +
                      std::to_string(requests_->max_payload()) + " bytes; raise ring_bytes)");
  auto c = claim(*requests_, static_cast<uint32_t>(op), static_cast<uint32_t>(bytes), is_gone);
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

Result<Response> Connection::wait(uint64_t correlation_id) {
  std::lock_guard lk(recv_mutex_);
  if (auto it = early_.find(correlation_id); it != early_.end()) {
    Response r = std::move(it->second);
    early_.erase(it);
    return r;
  }
  while (true) {
    auto rec = responses_->poll();
    if (!rec)
      return Status(ErrorCode::kProtocolError, "response ring corrupt: " + rec.status().message());
    if (!rec->empty()) {
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
      if (h.correlation_id == correlation_id) return r;
      early_.emplace(h.correlation_id, std::move(r));
      continue;
    }
    if (gone()) return daemon_gone("while waiting for an answer");
    (void)responses_->wait_for_data(spin_iterations_, kFutexTimeout);
  }
}

Result<Response> Connection::call(proto::Opcode op, uint32_t pool, uint32_t count,
                                  const void* items, size_t item_bytes) {
  auto corr = send(op, pool, count, items, item_bytes);
  if (!corr) return corr.status();
  return wait(*corr);
}

}  // namespace kvpool::detail
