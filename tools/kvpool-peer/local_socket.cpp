// Workers on this host ask through a Unix socket (kvpool/peer/local_request.hpp).
#include <spdlog/spdlog.h>
#include <sys/epoll.h>

#include <algorithm>
#include <cstring>

#include "directory.hpp"
#include "service.hpp"
#include "service_state.hpp"

namespace kvpool::peer {
namespace {
constexpr size_t kMaxWaiters = 1024;
}  // namespace

void Service::accept_waiters() {
  for (;;) {
    auto fd = shm::accept_unix(local_fd_.get());
    if (!fd || !*fd) return;
    if (waiters_.size() >= kMaxWaiters) continue;  // closed: the worker sees a hang-up (a miss)
    const int raw = fd->get();
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = kTagWaiter | (uint64_t(raw) << 8);
    if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, raw, &ev) != 0) continue;
    auto w = std::make_unique<Waiter>();
    w->fd = std::move(*fd);
    waiters_[raw] = std::move(w);
  }
}

void Service::on_waiter_readable(int fd) {
  auto it = waiters_.find(fd);
  if (it == waiters_.end()) return;
  Waiter& w = *it->second;
  std::vector<std::byte> buf(sizeof(LocalRequestHeader) + kMaxFetchHashes * sizeof(uint64_t));
  auto n = shm::recv_message(fd, buf, nullptr, 0);
  if (!n && n.status().code() == ErrorCode::kTimeout) return;
  if (!n || *n == 0) return drop_waiter(fd);  // hung up (or broke the framing)
  uint32_t magic = 0;
  if (*n >= sizeof(magic)) std::memcpy(&magic, buf.data(), sizeof(magic));
  if (magic == kLocalStatusMagic) {
    const std::string js = status_json();
    (void)shm::send_message(fd, {reinterpret_cast<const std::byte*>(js.data()), js.size()});
    return;
  }
  LocalRequestHeader h{};
  if (*n < sizeof(h) || w.asked)
    return answer_waiter(fd, ErrorCode::kProtocolError, 0, "one request per connection");
  std::memcpy(&h, buf.data(), sizeof(h));
  if (h.magic != kLocalRequestMagic || h.version != kLocalVersion)
    return answer_waiter(fd, ErrorCode::kVersionMismatch, 0, "kvpool-peer speaks local version 1");
  if (h.count == 0 || h.count > kMaxFetchHashes ||
      *n != sizeof(h) + size_t{h.count} * sizeof(uint64_t) || h.deadline_ms == 0)
    return answer_waiter(
        fd, ErrorCode::kInvalidArgument, 0,
        "count must be 1.." + std::to_string(kMaxFetchHashes) + " and deadline_ms at least 1");
  // A longer deadline than this host allows is shortened to it (docs/peers.md: "at most
  // --max-deadline-ms"), not refused: the worker still gets what arrives in that time.
  h.deadline_ms = std::min(h.deadline_ms, options_.max_deadline_ms);
  std::vector<uint64_t> hashes(h.count);
  std::memcpy(hashes.data(), buf.data() + sizeof(h), hashes.size() * sizeof(uint64_t));
  w.asked = true;
  start_fetch(w, h, std::move(hashes));
}

void Service::answer_waiter(int fd, ErrorCode code, uint32_t fetched, const std::string& why) {
  LocalAnswer a{};
  a.magic = kLocalAnswerMagic;
  a.code = static_cast<uint32_t>(code);
  a.fetched = fetched;
  std::strncpy(a.message, why.c_str(), sizeof(a.message) - 1);
  if (waiters_.count(fd) == 0) return;
  (void)shm::send_message(fd, {reinterpret_cast<const std::byte*>(&a), sizeof(a)});
}

void Service::drop_waiter(int fd) {
  for (auto& [id, f] : fetches_)
    if (f->waiter_fd == fd) f->waiter_fd = -1;
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, fd, nullptr);
  waiters_.erase(fd);  // its held blocks go back with it
}

std::string Service::status_json() const {
  nlohmann::json peers = metrics_.to_json();
  nlohmann::json conns = nlohmann::json::array();
  for (const auto& [id, c] : conns_)
    conns.push_back({{"peer", c->key()},
                     {"address", c->address},
                     {"direction", c->outbound ? "out" : "in"},
                     {"state", c->state == Conn::State::kReady       ? "ready"
                               : c->state == Conn::State::kHandshake ? "handshake"
                                                                     : "closing"},
                     {"epoch", c->peer_epoch}});
  nlohmann::json pools = nlohmann::json::array();
  for (const auto& p : pools_)
    pools.push_back({{"name", p.name},
                     {"exported", p.exported},
                     {"fingerprint", p.fingerprint},
                     {"usable", p.unusable.empty()}});
  // Each transfer's progress, so an operator (and the fault tests) can see a transfer under
  // way: on the holder, blocks handed to UCX; on the fetcher, the intact prefix so far.
  uint64_t pinned = 0;
  nlohmann::json serves = nlohmann::json::array();
  for (const auto& [id, s] : serves_) {
    pinned += s->pins.size();
    serves.push_back({{"peer", s->peer},
                      {"pool", pools_[s->pool].name},
                      {"blocks", s->pins.size()},
                      {"sent", s->next - s->sending},
                      {"cut", s->cut}});
  }
  nlohmann::json fetches = nlohmann::json::array();
  for (const auto& [id, f] : fetches_) {
    uint32_t prefix = 0;
    while (prefix < f->state.size() && f->state[prefix] == Fetch::kReceived) ++prefix;
    fetches.push_back({{"peer", f->peer},
                       {"pool", pools_[f->pool].name},
                       {"asked", f->hashes.size()},
                       {"pinned_by_holder", f->expected},
                       {"intact_prefix", prefix},
                       {"answered", f->answered}});
  }
  nlohmann::json out = {{"name", options_.name},
                        {"epoch", epoch_},
                        {"listen", options_.listen},
                        {"pools", pools},
                        {"connections", conns},
                        {"serves_in_flight", serves_.size()},
                        {"blocks_pinned_for_peers", pinned},
                        {"serves", serves},
                        {"serves_waiting_for_disk", onboards_.size()},
                        {"fetches_in_flight", fetches_.size()},
                        {"fetches", fetches},
                        {"peers", peers}};
  if (directory_ != nullptr) out["directory"] = directory_->to_json();
  return out.dump();
}

}  // namespace kvpool::peer
