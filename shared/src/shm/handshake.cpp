#include "kvpool/shm/handshake.hpp"

#include <algorithm>
#include <cstring>
#include <span>

#include "kvpool/core/paths.hpp"
#include "kvpool/core/version.hpp"
#include "kvpool/shm/segment.hpp"
#include "kvpool/shm/unix_socket.hpp"

namespace kvpool::proto {

Status daemon_gone(const std::string& why) {
  return Status(ErrorCode::kDaemonGone, "kvpoold is gone (" + why + "); reconnect when it is back");
}

Result<std::vector<shm::UniqueFd>> exchange_hello(int fd, const std::string& instance, MsgType type,
                                                  uint16_t layout_major, int timeout_ms,
                                                  Welcome* welcome) {
  Hello h{};
  h.magic = kHelloMagic;
  h.type = type;
  h.layout_major = layout_major;
  h.layout_minor = shm::kLayoutMinor;
  h.client_version = version_packed();
  std::memcpy(h.instance, instance.data(), std::min(instance.size(), sizeof(h.instance) - 1));
  // A connect can land in the backlog of a listener whose daemon is dying (a kill -9 closes
  // the lease sockets before the listener): the hello then meets a reset, which is a daemon
  // that is gone, as a hang-up before the welcome is, not a cut-off with a reason.
  if (Status sent = shm::send_message(fd, std::as_bytes(std::span(&h, 1))); !sent.is_ok()) {
    if (sent.code() == ErrorCode::kDisconnected)
      return daemon_gone("it closed the connection during the handshake");
    return sent;
  }
  alignas(8) std::byte buf[512];
  std::vector<shm::UniqueFd> fds;
  auto n = shm::recv_message(fd, buf, &fds, timeout_ms);
  if (!n) return n.status();
  if (*n == 0) return daemon_gone("it closed the connection during the handshake");
  if (*n == sizeof(Refusal)) {
    Refusal r;
    std::memcpy(&r, buf, sizeof(r));
    r.message[sizeof(r.message) - 1] = '\0';
    if (r.magic == kHelloMagic && r.type == MsgType::kRefusal)
      return Status(static_cast<ErrorCode>(r.code), std::string("kvpoold refused: ") + r.message);
  }
  if (*n != sizeof(Welcome))
    return Status(ErrorCode::kProtocolError,
                  "unexpected handshake answer of " + std::to_string(*n) + " bytes");
  std::memcpy(welcome, buf, sizeof(*welcome));
  if (welcome->magic != kHelloMagic || welcome->type != MsgType::kWelcome ||
      welcome->num_fds != fds.size())
    return Status(ErrorCode::kProtocolError, "malformed welcome from kvpoold");
  return fds;
}

Status check_daemon_peer(int fd, const std::string& socket_file) {
  auto cred = shm::peer_credentials(fd);
  if (!cred) return cred.status();
  return check_daemon_uid(socket_file, cred->uid);
}

Status send_ready(int fd) {
  Ready r{kHelloMagic, MsgType::kReady};
  Status sent = shm::send_message(fd, std::as_bytes(std::span(&r, 1)));
  // Killed between its welcome and our ready: gone, like a hang-up during the hello.
  if (sent.code() == ErrorCode::kDisconnected)
    return daemon_gone("it closed the connection before the client was ready");
  return sent;
}

std::optional<std::string> read_disconnect_notice(int fd) {
  alignas(8) std::byte buf[sizeof(Refusal)];
  auto n = shm::recv_message(fd, buf, nullptr, 0);
  if (!n || *n != sizeof(Refusal)) return std::nullopt;
  Refusal r;
  std::memcpy(&r, buf, sizeof(r));
  r.message[sizeof(r.message) - 1] = '\0';
  if (r.magic != kHelloMagic || r.type != MsgType::kDisconnect) return std::nullopt;
  return std::string(r.message);
}

Result<Hello> parse_hello(const void* msg, size_t len) {
  Hello h{};
  if (len != sizeof(h))
    return Status(ErrorCode::kProtocolError, "malformed hello (" + std::to_string(len) + " bytes)");
  std::memcpy(&h, msg, sizeof(h));
  if (h.magic != kHelloMagic || (h.type != MsgType::kHello && h.type != MsgType::kObserve))
    return Status(ErrorCode::kProtocolError, "not a kvpool hello");
  if (h.layout_major != shm::kLayoutMajor)
    return Status(ErrorCode::kVersionMismatch,
                  "client speaks shm layout " + std::to_string(h.layout_major) + "." +
                      std::to_string(h.layout_minor) + ", kvpoold speaks " +
                      std::to_string(shm::kLayoutMajor) + "." + std::to_string(shm::kLayoutMinor) +
                      "; rebuild the worker against a matching libkvpool");
  h.instance[sizeof(h.instance) - 1] = '\0';
  return h;
}

bool is_ready(const void* msg, size_t len) {
  if (len != sizeof(Ready)) return false;
  Ready r;
  std::memcpy(&r, msg, sizeof(r));
  return r.magic == kHelloMagic && r.type == MsgType::kReady;
}

Welcome make_welcome() {
  Welcome w{};
  w.magic = kHelloMagic;
  w.type = MsgType::kWelcome;
  w.layout_major = shm::kLayoutMajor;
  w.layout_minor = shm::kLayoutMinor;
  return w;
}

void send_refusal(int fd, MsgType type, ErrorCode code, const std::string& message) {
  Refusal r{};
  r.magic = kHelloMagic;
  r.type = type;
  r.code = static_cast<uint16_t>(code);
  std::memcpy(r.message, message.data(), std::min(message.size(), sizeof(r.message) - 1));
  (void)shm::send_message(fd, std::as_bytes(std::span(&r, 1)));
}

}  // namespace kvpool::proto

namespace kvpool::shm {

namespace {

// The daemon's socket for `instance`, connected, its peer checked.
Result<UniqueFd> connect_daemon(const std::string& instance, const std::string& runtime_dir) {
  KVPOOL_RETURN_IF_ERROR(validate_instance_name(instance));
  std::string dir = runtime_dir;
  if (dir.empty()) {
    auto found = find_runtime_dir(instance);
    if (!found) return found.status();
    dir = *found;
  }
  auto sock = connect_unix(socket_path(dir, instance));
  if (!sock) return sock.status();
  KVPOOL_RETURN_IF_ERROR(proto::check_daemon_peer(sock->get(), socket_path(dir, instance)));
  return sock;
}

// The control segment (fds[0]) and, after the `first` descriptors, one registry segment per
// pool of `pool_mask` in pool order, each followed by that pool's data descriptor when it
// travels as one (host pools: proto::welcome_carries_fd). The registry descriptors are
// taken out of `fds`; data descriptors stay, so they start at index `first`.
Result<ControlReader> map_control(std::vector<UniqueFd>& fds, size_t first, uint32_t pool_mask) {
  auto seg = Segment::map_fd(std::move(fds[0]), /*writable=*/false);
  if (!seg) return seg.status();
  auto ctl = ControlReader::open(std::move(seg.value()));
  if (!ctl) return ctl.status();
  std::vector<UniqueFd> data;
  size_t next = first;
  for (uint32_t i = 0; i < ctl->num_pools() && i < 32; ++i) {
    if ((pool_mask & (1u << i)) == 0) continue;
    if (next >= fds.size())
      return Status(ErrorCode::kProtocolError, "welcome carries too few descriptors for its pools");
    auto reg = Segment::map_fd(std::move(fds[next++]), /*writable=*/false);
    if (!reg) return reg.status();
    KVPOOL_RETURN_IF_ERROR(ctl->add_registry(i, std::move(reg.value())));
    const auto kind = static_cast<StorageKind>(ctl->pool_info(i).storage);
    if (proto::welcome_carries_fd(kind)) {
      if (next >= fds.size())
        return Status(ErrorCode::kProtocolError,
                      "welcome carries too few descriptors for its pools");
      data.push_back(std::move(fds[next++]));
    }
  }
  if (next != fds.size())
    return Status(ErrorCode::kProtocolError, "welcome carries " + std::to_string(fds.size()) +
                                                 " descriptors, " + std::to_string(next) +
                                                 " expected");
  fds.resize(first);
  for (UniqueFd& d : data) fds.push_back(std::move(d));
  return ctl;
}

}  // namespace

Result<ClientAttach> attach_client(const std::string& instance, const std::string& runtime_dir,
                                   uint16_t layout_major, int timeout_ms) {
  auto sock = connect_daemon(instance, runtime_dir);
  if (!sock) return sock.status();
  ClientAttach a;
  a.sock = std::move(sock.value());
  auto fds = proto::exchange_hello(a.sock.get(), instance, proto::MsgType::kHello, layout_major,
                                   timeout_ms, &a.welcome);
  if (!fds) return fds.status();
  if (fds->size() < 3)
    return Status(ErrorCode::kProtocolError, "welcome carries too few descriptors");
  auto ctl = map_control(*fds, 3, a.welcome.pool_mask);
  if (!ctl) return ctl.status();
  a.control = std::move(ctl.value());
  auto cseg = Segment::map_fd(std::move((*fds)[1]), /*writable=*/true);
  if (!cseg) return cseg.status();
  a.client = std::move(cseg.value());
  a.bell = std::move((*fds)[2]);
  const auto lay = client_segment_layout(a.welcome.ring_capacity);
  const auto* ch = a.client.as<ClientHeader>();
  if (a.client.size() < lay.total_bytes || ch->magic != kClientMagic ||
      ch->request_offset != lay.request_offset || ch->response_offset != lay.response_offset)
    return Status(ErrorCode::kProtocolError, "the client segment does not match the welcome");
  a.requests = reinterpret_cast<RingHeader*>(a.client.as<char>() + lay.request_offset);
  a.responses = reinterpret_cast<RingHeader*>(a.client.as<char>() + lay.response_offset);
  a.fds = std::move(fds.value());
  return a;
}

Result<ControlReader> observe(const std::string& instance, const std::string& runtime_dir) {
  auto sock = connect_daemon(instance, runtime_dir);
  if (!sock) return sock.status();
  proto::Welcome w{};
  auto fds = proto::exchange_hello(sock->get(), instance, proto::MsgType::kObserve, kLayoutMajor,
                                   5000, &w);
  if (!fds) return fds.status();
  if (fds->empty()) return Status(ErrorCode::kProtocolError, "observe answer carries no segment");
  // An observer gets no data descriptors: only the registries of the pools it may read.
  auto seg = Segment::map_fd(std::move((*fds)[0]), /*writable=*/false);
  if (!seg) return seg.status();
  auto ctl = ControlReader::open(std::move(seg.value()));
  if (!ctl) return ctl.status();
  size_t next = 1;
  for (uint32_t i = 0; i < ctl->num_pools() && i < 32; ++i) {
    if ((w.pool_mask & (1u << i)) == 0) continue;
    if (next >= fds->size())
      return Status(ErrorCode::kProtocolError, "observe answer carries too few segments");
    auto reg = Segment::map_fd(std::move((*fds)[next++]), /*writable=*/false);
    if (!reg) return reg.status();
    KVPOOL_RETURN_IF_ERROR(ctl->add_registry(i, std::move(reg.value())));
  }
  if (next != fds->size())
    return Status(ErrorCode::kProtocolError, "observe answer carries more segments than pools");
  return ctl;
}

}  // namespace kvpool::shm
