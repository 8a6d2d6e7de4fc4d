// Endpoints to peers: dialing, accepting, the challenge-response (wire.hpp), closing.
#include <arpa/inet.h>
#include <spdlog/spdlog.h>

#include <cstring>

#include "address.hpp"
#include "service.hpp"
#include "service_state.hpp"

namespace kvpool::peer {
namespace {

// How long a forced close may take before its record is dropped anyway.
constexpr uint64_t kCloseBoundNs = 2'000'000'000ull;

template <typename T>
bool read_header(const Service::Event& e, T* out) {
  if (e.header.size() != sizeof(T)) return false;
  std::memcpy(out, e.header.data(), sizeof(T));
  return true;
}

ucp_ep_params_t ep_params(void* conn_arg, ucp_err_handler_cb_t cb) {
  ucp_ep_params_t p{};
  p.field_mask = UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  // Peer failure mode: a dead or unreachable peer fails the endpoint's operations (and
  // calls us) instead of leaving them pending forever.
  p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  p.err_handler.cb = cb;
  p.err_handler.arg = conn_arg;
  return p;
}

}  // namespace

Service::Conn* Service::conn_of(ucp_ep_h ep) {
  auto it = conn_by_ep_.find(ep);
  if (it == conn_by_ep_.end()) return nullptr;
  auto c = conns_.find(it->second);
  return c == conns_.end() ? nullptr : c->second.get();
}

// The usable endpoint to `address`, dialing it (and starting the handshake) when there is none.
Result<Service::Conn*> Service::outbound(const std::string& address) {
  if (auto it = conn_by_address_.find(address); it != conn_by_address_.end()) {
    auto c = conns_.find(it->second);
    if (c != conns_.end() && c->second->state != Conn::State::kClosing) return c->second.get();
    conn_by_address_.erase(it);
  }
  auto addr = parse_address(address);
  if (!addr) return addr.status();
  auto conn = std::make_unique<Conn>();
  conn->id = next_id_++;
  conn->outbound = true;
  conn->address = address;
  conn->created_ns = mono_ns();
  ucp_ep_params_t p = ep_params(this, &Service::ep_error_callback);
  p.field_mask |= UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
  p.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  p.sockaddr.addr = reinterpret_cast<const sockaddr*>(&*addr);
  p.sockaddr.addrlen = sizeof(*addr);
  if (ucs_status_t st = ucp_ep_create(worker_, &p, &conn->ep); st != UCS_OK)
    return Status(ErrorCode::kIoError,
                  "cannot connect to peer " + address + ": " + ucs_status_string(st));
  Conn* c = conn.get();
  conn_by_ep_[c->ep] = c->id;
  conn_by_address_[address] = c->id;
  conns_[c->id] = std::move(conn);
  Hello h{};
  h.magic = kWireMagic;
  h.version = kWireVersion;
  c->my_nonce = random_nonce();
  std::memcpy(h.nonce, c->my_nonce.data(), kNonceBytes);
  copy_name(h.name, options_.name);
  if (Status s = send_control(*c, kAmHello, &h, sizeof(h)); !s.is_ok()) {
    close_conn(*c, s.message());
    return s;
  }
  return c;
}

void Service::accept_conn(ucp_conn_request_h req) {
  ucp_conn_request_attr_t attr{};
  attr.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
  std::string from = "?";
  if (ucp_conn_request_query(req, &attr) == UCS_OK && attr.client_address.ss_family == AF_INET) {
    char buf[64] = {};
    const auto* in = reinterpret_cast<const sockaddr_in*>(&attr.client_address);
    ::inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
    from = std::string(buf) + ":" + std::to_string(ntohs(in->sin_port));
  }
  auto conn = std::make_unique<Conn>();
  conn->id = next_id_++;
  conn->address = from;
  conn->created_ns = mono_ns();
  ucp_ep_params_t p = ep_params(this, &Service::ep_error_callback);
  p.field_mask |= UCP_EP_PARAM_FIELD_CONN_REQUEST;
  p.conn_request = req;
  if (ucs_status_t st = ucp_ep_create(worker_, &p, &conn->ep); st != UCS_OK) {
    spdlog::warn("peer connection from {} refused: {}", from, ucs_status_string(st));
    return;
  }
  conn_by_ep_[conn->ep] = conn->id;
  conns_[conn->id] = std::move(conn);
}

// Starts a forced close: every send and receive on the endpoint completes (with an error
// if unfinished) before the close does, so nothing reads or writes pool memory after.
void Service::close_conn(Conn& c, const std::string& why) {
  if (c.state == Conn::State::kClosing) return;
  spdlog::info("peer {} ({}): closing: {}", c.key(), c.address, why);
  c.state = Conn::State::kClosing;
  c.closing_ns = mono_ns();
  c.why_closed = why;
  if (c.outbound) {
    auto it = conn_by_address_.find(c.address);
    if (it != conn_by_address_.end() && it->second == c.id) conn_by_address_.erase(it);
  }
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_EP_CLOSE_FLAG_FORCE;
  void* r = ucp_ep_close_nbx(c.ep, &p);
  c.close_request = UCS_PTR_IS_PTR(r) ? r : nullptr;
  // Fetches that waited for this endpoint's handshake will not be sent.
  std::vector<uint64_t> waiting;
  waiting.swap(c.waiting);
  for (uint64_t id : waiting)
    if (Fetch* f = fetch_of(id); f != nullptr && !f->answered) {
      metrics_.failed(f->peer, FetchFailure::kConnect);
      fail_fetch(*f, ErrorCode::kIoError, "peer " + c.key() + ": " + why);
    }
  // Fetches in flight on it end as their receives complete (with errors), or at once when
  // nothing is in flight.
  std::vector<uint64_t> mine;
  for (auto& [id, f] : fetches_)
    if (f->conn_id == c.id && !f->answered) mine.push_back(id);
  for (uint64_t id : mine)
    if (Fetch* f = fetch_of(id)) {
      metrics_.failed(f->peer, FetchFailure::kTransport);
      f->conn_id = 0;  // lost: it ends once its receives have (maybe_finish)
      maybe_finish(*f);
    }
}

void Service::reap_closed() {
  const uint64_t now = mono_ns();
  for (auto it = conns_.begin(); it != conns_.end();) {
    Conn& c = *it->second;
    bool gone = false;
    if (c.state == Conn::State::kClosing) {
      if (c.close_request == nullptr) {
        gone = true;
      } else if (ucp_request_check_status(c.close_request) != UCS_INPROGRESS) {
        ucp_request_free(c.close_request);
        c.close_request = nullptr;
        gone = true;
      } else if (now - c.closing_ns > kCloseBoundNs) {
        spdlog::warn("peer {}: endpoint close still pending after 2 s; forgetting it", c.key());
        gone = true;  // the request stays UCX's; it is freed with the worker
      }
    }
    if (gone) {
      conn_by_ep_.erase(c.ep);
      it = conns_.erase(it);
    } else {
      ++it;
    }
  }
}

Status Service::send_control(Conn& c, uint16_t id, const void* header, size_t len, const void* data,
                             size_t data_len) {
  auto* op = new OpContext{OpContext::kControl, this, c.id, 0, {}};
  op->header.assign(static_cast<const std::byte*>(header),
                    static_cast<const std::byte*>(header) + len);
  ucp_request_param_t p{};
  p.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER;
  p.cb.send = &Service::send_callback;
  p.user_data = op;
  void* r = ucp_am_send_nbx(c.ep, id, op->header.data(), op->header.size(), data, data_len, &p);
  if (UCS_PTR_IS_PTR(r)) return Status::ok();  // the callback frees op
  delete op;
  if (UCS_PTR_STATUS(r) != UCS_OK)
    return Status(ErrorCode::kIoError,
                  std::string("send to peer failed: ") + ucs_status_string(UCS_PTR_STATUS(r)));
  return Status::ok();
}

void Service::handle_am(Event& e) {
  Conn* c = conn_of(e.ep);
  if (e.desc != nullptr && e.am_id != kAmBlock) {
    ucp_am_data_release(worker_, e.desc);  // control messages are eager; this is not ours
    e.desc = nullptr;
  }
  if (c == nullptr || c->state == Conn::State::kClosing) {
    if (e.desc != nullptr) ucp_am_data_release(worker_, e.desc);
    return;
  }
  const bool ready = c->state == Conn::State::kReady;
  switch (e.am_id) {
    case kAmHello:
      if (Hello h{}; !c->outbound && read_header(e, &h)) return on_hello(*c, h);
      break;
    case kAmChallenge:
      if (Challenge ch{}; c->outbound && read_header(e, &ch)) return on_challenge(*c, ch);
      break;
    case kAmAuth:
      if (Auth a{}; !c->outbound && read_header(e, &a)) return on_auth(*c, a);
      break;
    case kAmAuthOk:
      if (c->outbound && !ready && c->got_hello) return on_auth_ok(*c);
      break;
    case kAmRefused:
      if (Refused r{}; read_header(e, &r)) return on_refused(*c, r);
      break;
    case kAmFetch:
      if (FetchRequest rq{}; !c->outbound && ready && read_header(e, &rq) && rq.count >= 1 &&
                             rq.count <= kMaxFetchHashes &&
                             e.data.size() == size_t{rq.count} * sizeof(uint64_t)) {
        std::vector<uint64_t> hashes(rq.count);
        std::memcpy(hashes.data(), e.data.data(), e.data.size());
        return on_fetch(*c, rq, hashes.data());
      }
      break;
    case kAmFetchReply:
      if (FetchReply r{}; c->outbound && ready && read_header(e, &r)) return on_fetch_reply(*c, r);
      break;
    case kAmBlock:
      if (BlockHeader h{}; c->outbound && ready && read_header(e, &h) && e.desc != nullptr) {
        void* desc = e.desc;
        e.desc = nullptr;
        return on_block(c->id, h, desc, e.length, true);
      }
      break;
  }
  if (e.desc != nullptr) ucp_am_data_release(worker_, e.desc);
  // Anything else is a peer breaking the protocol (or not authenticated): it goes.
  if (!ready) ++metrics_.of(c->key()).auth_failures;
  refuse(*c, ErrorCode::kProtocolError,
         "unexpected message " + std::to_string(e.am_id) + (ready ? "" : " before authentication"),
         true);
}

void Service::on_hello(Conn& c, const Hello& h) {
  if (h.magic != kWireMagic || h.version != kWireVersion || c.got_hello)
    return refuse(c, ErrorCode::kVersionMismatch, "peer protocol version differs", true);
  c.got_hello = true;
  c.peer_name = std::string(name_of(h.name));
  std::memcpy(c.their_nonce.data(), h.nonce, kNonceBytes);
  c.my_nonce = random_nonce();
  Challenge ch{};
  ch.magic = kWireMagic;
  ch.version = kWireVersion;
  ch.epoch = epoch_;
  std::memcpy(ch.nonce, c.my_nonce.data(), kNonceBytes);
  const Mac m = key_.holder_mac(c.their_nonce, c.my_nonce);
  std::memcpy(ch.mac, m.data(), kMacBytes);
  copy_name(ch.name, options_.name);
  if (Status s = send_control(c, kAmChallenge, &ch, sizeof(ch)); !s.is_ok())
    close_conn(c, s.message());
}

void Service::on_challenge(Conn& c, const Challenge& ch) {
  if (ch.magic != kWireMagic || ch.version != kWireVersion || c.got_hello)
    return refuse(c, ErrorCode::kVersionMismatch, "peer protocol version differs", true);
  std::memcpy(c.their_nonce.data(), ch.nonce, kNonceBytes);
  if (!macs_equal(ch.mac, key_.holder_mac(c.my_nonce, c.their_nonce))) {
    ++metrics_.of(c.key()).auth_failures;
    return close_conn(c, "the holder does not know the cluster key");
  }
  c.got_hello = true;
  c.peer_name = std::string(name_of(ch.name));
  c.peer_epoch = ch.epoch;
  Auth a{};
  const Mac m = key_.fetcher_mac(c.their_nonce, c.my_nonce);
  std::memcpy(a.mac, m.data(), kMacBytes);
  if (Status s = send_control(c, kAmAuth, &a, sizeof(a)); !s.is_ok()) close_conn(c, s.message());
}

void Service::on_auth(Conn& c, const Auth& a) {
  if (!c.got_hello || c.state != Conn::State::kHandshake)
    return refuse(c, ErrorCode::kProtocolError, "Auth before Hello", true);
  if (!macs_equal(a.mac, key_.fetcher_mac(c.my_nonce, c.their_nonce))) {
    ++metrics_.of(c.key()).auth_failures;
    spdlog::warn("peer {} ({}) failed authentication", c.key(), c.address);
    return refuse(c, ErrorCode::kPermissionDenied, "wrong cluster key", true);
  }
  c.state = Conn::State::kReady;
  if (Status s = send_control(c, kAmAuthOk, nullptr, 0); !s.is_ok()) close_conn(c, s.message());
}

void Service::on_auth_ok(Conn& c) {
  c.state = Conn::State::kReady;
  std::vector<uint64_t> waiting;
  waiting.swap(c.waiting);
  for (uint64_t id : waiting)
    if (Fetch* f = fetch_of(id); f != nullptr && !f->answered) send_fetch(*f, c);
}

void Service::on_refused(Conn& c, const Refused& r) {
  r.message[sizeof(r.message) - 1] == '\0'
      ? close_conn(c, "refused by peer: " + std::string(r.message))
      : close_conn(c, "refused by peer");
}

void Service::refuse(Conn& c, ErrorCode code, const std::string& why, bool close) {
  Refused r{};
  r.code = static_cast<uint32_t>(code);
  std::strncpy(r.message, why.c_str(), sizeof(r.message) - 1);
  (void)send_control(c, kAmRefused, &r, sizeof(r));
  if (close) close_conn(c, why);
}

// ---- UCX callbacks: they only queue what they saw (handle_events runs it) ----------------

ucs_status_t Service::am_callback(void* arg, const void* header, size_t header_length, void* data,
                                  size_t length, const ucp_am_recv_param_t* param) {
  auto* am = static_cast<AmArg*>(arg);
  Service* self = am->service;
  const uint16_t id = am->id;
  Event e;
  e.kind = Event::kAm;
  e.ep = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? param->reply_ep : nullptr;
  e.header.assign(static_cast<const std::byte*>(header),
                  static_cast<const std::byte*>(header) + header_length);
  e.length = length;
  const bool rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  e.am_id = id;
  if (id == kAmBlock && !rndv && header_length == sizeof(BlockHeader)) {
    // Eager block bytes are here now and only for the length of this call: copy them into
    // their block at once.
    BlockHeader h{};
    std::memcpy(&h, header, sizeof(h));
    Conn* c = self->conn_of(e.ep);
    if (c != nullptr && c->state == Conn::State::kReady && c->outbound)
      self->on_block(c->id, h, data, length, false);
    return UCS_OK;
  }
  if (rndv) {
    e.desc = data;  // received (or released) in handle_events
    self->events_.push_back(std::move(e));
    return UCS_INPROGRESS;
  }
  if (data != nullptr && length > 0)
    e.data.assign(static_cast<const std::byte*>(data),
                  static_cast<const std::byte*>(data) + length);
  self->events_.push_back(std::move(e));
  return UCS_OK;
}

void Service::conn_callback(ucp_conn_request_h req, void* arg) {
  auto* self = static_cast<Service*>(arg);
  Event e;
  e.kind = Event::kConnRequest;
  e.request = req;
  self->events_.push_back(std::move(e));
}

void Service::ep_error_callback(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* self = static_cast<Service*>(arg);
  Event e;
  e.kind = Event::kEpError;
  e.ep = ep;
  e.status = status;
  self->events_.push_back(std::move(e));
}

void Service::send_callback(void* request, ucs_status_t status, void* user_data) {
  auto* op = static_cast<OpContext*>(user_data);
  if (op->kind == OpContext::kBlockSend) {
    Event e;
    e.kind = Event::kBlockSent;
    e.id = op->id;
    e.index = op->index;
    e.status = status;
    op->service->events_.push_back(std::move(e));
  }
  delete op;
  ucp_request_free(request);
}

void Service::recv_callback(void* request, ucs_status_t status, size_t /*length*/,
                            void* user_data) {
  auto* op = static_cast<OpContext*>(user_data);
  Event e;
  e.kind = Event::kBlockReceived;
  e.id = op->id;
  e.index = op->index;
  e.status = status;
  op->service->events_.push_back(std::move(e));
  delete op;
  ucp_request_free(request);
}

}  // namespace kvpool::peer
