// Attaching a client (docs/design.md §5): accepting a connection within the caps on those that
// have not said Hello, vetting the Hello (instance, credentials, allow-lists, slots), and
// the Welcome that hands a worker its segment, doorbell and the pools' descriptors.
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <span>

#include "daemon/client_segment.hpp"
#include "daemon/epoll_tags.hpp"
#include "daemon/sessions.hpp"
#include "kvpool/core/clock.hpp"
#include "kvpool/core/counter.hpp"
#include "kvpool/core/version.hpp"
#include "kvpool/shm/handshake.hpp"

namespace kvpool::daemon {

using shm::SlotState;
using shm::UniqueFd;

void Sessions::accept_clients() {
  while (true) {
    auto c = shm::accept_unix(links_.listen.get());
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
    ev.data.u64 = event_tag(kPending, static_cast<uint32_t>(fd));
    if (::epoll_ctl(links_.epoll.get(), EPOLL_CTL_ADD, fd, &ev) != 0) continue;
    pending_.push_back(Pending{std::move(c.value()), now_ns(CLOCK_MONOTONIC), uid});
  }
}

// Connections that have not said Hello cost an fd each and may come from anyone who can
// reach the socket: cap them in total and per uid, so one user cannot starve the others.
bool Sessions::admit_pending(int fd, uid_t uid) {
  const size_t mine = static_cast<size_t>(std::count_if(
      pending_.begin(), pending_.end(), [uid](const Pending& p) { return p.uid == uid; }));
  std::string why;
  if (pending_.size() >= links_.config.max_pending_connections) {
    why = "already " + std::to_string(pending_.size()) +
          " connections wait for their hello (max_pending_connections)";
  } else if (mine >= links_.config.max_pending_per_uid) {
    why = "uid " + std::to_string(uid) + " already has " + std::to_string(mine) +
          " connections waiting for their hello (max_pending_per_uid)";
  }
  if (why.empty()) return true;
  refuse(fd, ErrorCode::kResourceExhausted, why);
  return false;
}

void Sessions::pause_accepting(const std::string& why) {
  constexpr uint64_t kPauseNs = 100'000'000;
  const uint64_t t = now_ns(CLOCK_MONOTONIC);
  if (accept_paused_until_ns_ == 0)
    ::epoll_ctl(links_.epoll.get(), EPOLL_CTL_DEL, links_.listen.get(), nullptr);
  accept_paused_until_ns_ = t + kPauseNs;
  bump(links_.control.header().stats.refused_attaches, 1);
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

void Sessions::refuse(int fd, ErrorCode code, const std::string& message) {
  proto::send_refusal(fd, proto::MsgType::kRefusal, code, message);
  bump(links_.control.header().stats.refused_attaches, 1);
  const uint64_t t = now_ns(CLOCK_MONOTONIC);
  if (t - accept_log_ns_ >= 100'000'000ull) {  // at most ten lines a second
    spdlog::warn("refused a client: {}", message);
    accept_log_ns_ = t;
  }
}

// A pending connection sent something: it is taken out of the pending set either way,
// and what it sent must be its Hello.
void Sessions::on_pending_readable(int fd) {
  auto it = std::find_if(pending_.begin(), pending_.end(),
                         [fd](const Pending& p) { return p.sock.get() == fd; });
  if (it == pending_.end()) return;
  Pending p = std::move(*it);
  pending_.erase(it);
  ::epoll_ctl(links_.epoll.get(), EPOLL_CTL_DEL, p.sock.get(), nullptr);
  alignas(8) std::byte buf[256];
  auto n = shm::recv_message(p.sock.get(), buf, nullptr, 0);
  if (!n || *n == 0) return;  // hung up or garbage before hello: just drop it
  on_hello(std::move(p.sock), buf, *n);
}

// Hello -> Welcome (or a refusal that says why): an observer gets the control segment
// read-only; a worker gets a slot, its own segment with its rings, and the pools' fds.
void Sessions::on_hello(UniqueFd sock, const void* msg, size_t len) {
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
  auto ro = links_.control.open_readonly_fd();
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
std::optional<shm::PeerCred> Sessions::vet_caller(int fd, const proto::Hello& h) {
  if (links_.config.instance != h.instance) {
    refuse(fd, ErrorCode::kNotFound,
           std::string("this socket serves instance '") + links_.config.instance + "', not '" +
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
  if (!root_observer && (!allowed(links_.config.allowed_uids, cred->uid) ||
                         !allowed(links_.config.allowed_gids, cred->gid))) {
    refuse(fd, ErrorCode::kPermissionDenied,
           "uid " + std::to_string(cred->uid) + " / gid " + std::to_string(cred->gid) +
               " may not attach to instance '" + links_.config.instance +
               "' (allowed_uids/allowed_gids)");
    return std::nullopt;
  }
  return cred.value();
}

// A free slot for a worker of `uid`, within max_clients_per_uid; null once refused.
Session* Sessions::free_slot_for(int fd, uid_t uid) {
  if (links_.config.max_clients_per_uid != 0) {
    const auto mine = std::count_if(sessions_.begin(), sessions_.end(), [&](const Session& s) {
      return s.state != SlotState::kFree && s.uid == uid;
    });
    if (static_cast<uint64_t>(mine) >= links_.config.max_clients_per_uid) {
      refuse(fd, ErrorCode::kResourceExhausted,
             "uid " + std::to_string(uid) + " already holds " + std::to_string(mine) +
                 " client slots of instance '" + links_.config.instance +
                 "' (max_clients_per_uid)");
      return nullptr;
    }
  }
  auto free_it = std::find_if(sessions_.begin(), sessions_.end(),
                              [](const Session& s) { return s.state == SlotState::kFree; });
  if (free_it == sessions_.end()) {
    refuse(fd, ErrorCode::kResourceExhausted,
           "instance '" + links_.config.instance + "' has all " +
               std::to_string(links_.config.max_clients) +
               " client slots in use (raise max_clients)");
    return nullptr;
  }
  return &*free_it;
}

// Makes the worker's segment, sends the Welcome with every descriptor it needs, and starts
// its session in slot `s` (Attaching until it sends Ready).
void Sessions::attach(Session& s, UniqueFd sock, const shm::PeerCred& cred, int control_fd) {
  auto seg = create_client_segment(s.slot, s.generation + 1, links_.config.ring_bytes);
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
  w.ring_capacity = links_.config.ring_bytes;
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
  s.requests.emplace(seg->requests, links_.config.ring_bytes);
  s.responses.emplace(seg->responses, links_.config.ring_bytes);
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
bool Sessions::add_pool_fds(int fd, uint32_t pool_mask, std::vector<int>& fds,
                            std::vector<UniqueFd>& keep) {
  for (size_t i = 0; i < links_.pools.size(); ++i) {
    if ((pool_mask & (1u << i)) == 0) continue;
    auto d = links_.pools[i].storage.client_fd();
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
void Sessions::watch_session(Session& s) {
  // A new client starts from zero, not from its slot's previous owner's counters.
  links_.control.slots()[s.slot].requests.store(0, std::memory_order_relaxed);
  links_.control.slots()[s.slot].protocol_errors.store(0, std::memory_order_relaxed);
  links_.control.slots()[s.slot].rejected_handles.store(0, std::memory_order_relaxed);
  links_.control.slots()[s.slot].match_hits.store(0, std::memory_order_relaxed);
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.u64 = event_tag(kSock, s.slot);
  ::epoll_ctl(links_.epoll.get(), EPOLL_CTL_ADD, s.sock.get(), &ev);
  ev.events = EPOLLIN;
  ev.data.u64 = event_tag(kPid, s.slot);
  ::epoll_ctl(links_.epoll.get(), EPOLL_CTL_ADD, s.pidfd.get(), &ev);
  publish_slot(s);
}

uint32_t Sessions::pool_mask_for(uid_t uid, gid_t gid) const {
  auto allowed = [](const auto& list, auto v) {
    return list.empty() || std::find(list.begin(), list.end(), v) != list.end();
  };
  uint32_t mask = 0;
  for (size_t i = 0; i < links_.pools.size(); ++i) {
    const PoolConfig& pc = links_.pools[i].config;
    if (allowed(pc.allowed_uids, uid) && allowed(pc.allowed_gids, gid)) mask |= 1u << i;
  }
  return mask;
}

}  // namespace kvpool::daemon
