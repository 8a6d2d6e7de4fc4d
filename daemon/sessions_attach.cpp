// Attaching a client (docs/design.md §5): accepting a connection within the caps on those that
// have not said Hello, vetting the Hello (instance, credentials, allow-lists, slots), and
// the Welcome that hands a worker its segment, doorbell and the pools' descriptors.
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <span>

#include "daemon/client_segment.hpp"
#include "daemon/epoll_tags.hpp"
#include "daemon/kept_processes.hpp"
#include "daemon/sessions.hpp"
#include "kvpool/core/clock.hpp"
#include "kvpool/core/counter.hpp"
#include "kvpool/core/version.hpp"
#include "kvpool/shm/handshake.hpp"

namespace kvpool::daemon {

using shm::SlotState;
using shm::UniqueFd;

namespace {

// An allow-list pair admits a peer when each list is empty or names it: its uid, and its
// gid or any of its supplementary groups (a worker added with `usermod -aG kvpool` has the
// group only as a supplementary one).
bool admits(const std::vector<uid_t>& uids, const std::vector<gid_t>& gids,
            const shm::PeerCred& cred) {
  const bool uid_ok = uids.empty() || std::find(uids.begin(), uids.end(), cred.uid) != uids.end();
  const bool gid_ok = gids.empty() || std::any_of(gids.begin(), gids.end(),
                                                  [&](gid_t g) { return cred.in_group(g); });
  return uid_ok && gid_ok;
}

// " (groups 27,100)": the supplementary groups besides the gid, for a refusal's message.
std::string supplementary_groups(const shm::PeerCred& cred) {
  // Appended piecewise: g++ 12 -O3 warns (-Wrestrict, a false positive) on `"," + string`.
  std::string s;
  for (gid_t g : cred.groups) {
    if (g == cred.gid) continue;
    if (!s.empty()) s += ',';
    s += std::to_string(g);
  }
  return s.empty() ? s : std::string(" (groups ").append(s).append(")");
}

}  // namespace

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
// When the total cap is reached by users who each stay within theirs (four uids at 16 of
// 64), a newcomer of a uid with fewer waiting takes the place of the oldest waiting
// connection of the uid with the most: those users cannot lock a further one out.
bool Sessions::admit_pending(int fd, uid_t uid) {
  auto waiting = [this](uid_t u) {
    return static_cast<size_t>(std::count_if(pending_.begin(), pending_.end(),
                                             [u](const Pending& p) { return p.uid == u; }));
  };
  const size_t mine = waiting(uid);
  if (mine >= links_.config.max_pending_per_uid) {
    refuse(fd, ErrorCode::kResourceExhausted,
           "uid " + std::to_string(uid) + " already has " + std::to_string(mine) +
               " connections waiting for their hello (max_pending_per_uid)");
    return false;
  }
  if (pending_.size() < links_.config.max_pending_connections) return true;
  uid_t top = uid;
  size_t most = mine;
  for (const Pending& p : pending_) {
    if (const size_t n = waiting(p.uid); n > most) {
      most = n;
      top = p.uid;
    }
  }
  if (most <= mine + 1) {
    refuse(fd, ErrorCode::kResourceExhausted,
           "already " + std::to_string(pending_.size()) +
               " connections wait for their hello (max_pending_connections)");
    return false;
  }
  // pending_ is in accept order: the first of `top` has waited longest.
  auto oldest = std::find_if(pending_.begin(), pending_.end(),
                             [top](const Pending& p) { return p.uid == top; });
  ::epoll_ctl(links_.epoll.get(), EPOLL_CTL_DEL, oldest->sock.get(), nullptr);
  pending_.erase(oldest);  // closes it
  spdlog::warn(
      "max_pending_connections reached: dropped the oldest of uid {}'s {} connections waiting "
      "for their hello to let uid {} in",
      top, most, uid);
  return true;
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
    observe(std::move(sock), *cred, ro->get());
    return;
  }
  if (Session* s = free_slot_for(sock.get(), cred->uid))
    attach(*s, std::move(sock), *cred, ro->get());
}

// kvpoolctl, kvpool-events, the exporter: the control segment and the registry segments of
// the pools the caller may read, read-only, and nothing else. The pools' allow-lists decide
// as for a worker; root and the daemon's own uid (who can read the daemon's memory anyway)
// read every pool.
void Sessions::observe(UniqueFd sock, const shm::PeerCred& cred, int control_fd) {
  const bool sees_all = cred.uid == 0 || cred.uid == ::geteuid();
  const uint32_t pool_mask =
      sees_all ? (links_.pools.size() >= 32 ? 0xFFFFFFFFu : (1u << links_.pools.size()) - 1)
               : pool_mask_for(cred);
  std::vector<int> fds{control_fd};
  std::vector<UniqueFd> keep;  // open until the Welcome is sent
  for (uint32_t i = 0; i < links_.pools.size(); ++i) {
    if ((pool_mask & (1u << i)) == 0) continue;
    auto reg = links_.control.open_registry_fd(i);
    if (!reg) {
      refuse(sock.get(), ErrorCode::kInternal, reg.status().message());
      return;
    }
    fds.push_back(reg->get());
    keep.push_back(std::move(reg.value()));
  }
  proto::Welcome w = proto::make_welcome();
  w.num_fds = static_cast<uint32_t>(fds.size());
  w.slot = 0xFFFFFFFFu;
  w.pool_mask = pool_mask;
  (void)shm::send_message(sock.get(), std::as_bytes(std::span(&w, 1)), fds);
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
  // Root and the daemon's own uid may always observe (kvpoolctl, kvpool-exporter: the
  // segments read-only): the instance's allow-lists decide who attaches as a worker, the
  // pools' allow-lists which registries an observer reads (observe).
  const bool root_observer =
      h.type == proto::MsgType::kObserve && (cred->uid == 0 || cred->uid == ::geteuid());
  if (!root_observer && !admits(links_.config.allowed_uids, links_.config.allowed_gids, *cred)) {
    refuse(fd, ErrorCode::kPermissionDenied,
           "uid " + std::to_string(cred->uid) + " / gid " + std::to_string(cred->gid) +
               supplementary_groups(*cred) + " may not attach to instance '" +
               links_.config.instance + "' (allowed_uids/allowed_gids)");
    return std::nullopt;
  }
  return cred.value();
}

// A free slot for a worker of `uid`, within its share of the slots (max_clients_per_uid,
// or uid_share_percent of max_clients by default); null once refused.
Session* Sessions::free_slot_for(int fd, uid_t uid) {
  if (const uint32_t cap = clients_per_uid(links_.config); cap != 0) {
    const auto mine = std::count_if(sessions_.begin(), sessions_.end(), [&](const Session& s) {
      return s.state != SlotState::kFree && s.uid == uid;
    });
    if (static_cast<uint64_t>(mine) >= cap) {
      refuse(
          fd, ErrorCode::kResourceExhausted,
          "uid " + std::to_string(uid) + " already holds " + std::to_string(mine) + " of the " +
              std::to_string(links_.config.max_clients) + " client slots of instance '" +
              links_.config.instance + "' (max_clients_per_uid " + std::to_string(cap) +
              (links_.config.max_clients_per_uid == 0
                   ? ", from uid_share_percent " + std::to_string(links_.config.uid_share_percent)
                   : std::string()) +
              ")");
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
  const uint32_t pool_mask = pool_mask_for(cred);
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
  // The start time read, then the pidfd polled: while the process has not exited its pid
  // names nothing else, so what was read is its own (an exited one is reaped as a hang-up).
  s.start_ticks = process_start_ticks(s.pid).value_or(0);
  if (pollfd p{s.pidfd.get(), POLLIN, 0}; ::poll(&p, 1, 0) != 0) s.start_ticks = 0;
  s.hello_mono_ns = now_ns(CLOCK_MONOTONIC);
  s.pool_mask = pool_mask;
  s.protocol_errors = 0;
  s.rejected_handles = 0;
  watch_session(s);
}

// Then, in pool order, for each pool this client may use: its registry segment (read-only),
// and its data fd when its storage travels as one (host pools; device pools publish their
// CUDA IPC handle in the registry header): proto::welcome_carries_fd. Pools closed to it by
// their allow-lists send nothing. False once refused.
bool Sessions::add_pool_fds(int fd, uint32_t pool_mask, std::vector<int>& fds,
                            std::vector<UniqueFd>& keep) {
  static_assert(3 + 2 * kMaxPools <= shm::kMaxFdsPerMessage,
                "a Welcome to a client of every pool must fit in one message");
  for (size_t i = 0; i < links_.pools.size(); ++i) {
    if ((pool_mask & (1u << i)) == 0) continue;
    auto reg = links_.control.open_registry_fd(static_cast<uint32_t>(i));
    if (!reg) {
      refuse(fd, ErrorCode::kInternal, reg.status().message());
      return false;
    }
    fds.push_back(reg->get());
    keep.push_back(std::move(reg.value()));
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
  for (uint32_t p = 0; p < links_.control.num_pools(); ++p) {
    shm::SlotInfo& i = links_.control.slot(p, s.slot);
    i.requests.store(0, std::memory_order_relaxed);
    i.protocol_errors.store(0, std::memory_order_relaxed);
    i.rejected_handles.store(0, std::memory_order_relaxed);
    i.match_hits.store(0, std::memory_order_relaxed);
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.u64 = event_tag(kSock, s.slot);
  ::epoll_ctl(links_.epoll.get(), EPOLL_CTL_ADD, s.sock.get(), &ev);
  ev.events = EPOLLIN;
  ev.data.u64 = event_tag(kPid, s.slot);
  ::epoll_ctl(links_.epoll.get(), EPOLL_CTL_ADD, s.pidfd.get(), &ev);
  publish_slot(s);
}

uint32_t Sessions::pool_mask_for(const shm::PeerCred& cred) const {
  uint32_t mask = 0;
  for (size_t i = 0; i < links_.pools.size(); ++i) {
    const PoolConfig& pc = links_.pools[i].config;
    if (admits(pc.allowed_uids, pc.allowed_gids, cred)) mask |= 1u << i;
  }
  return mask;
}

}  // namespace kvpool::daemon
