// A session's life after the Welcome: Ready, hang-ups and process exits judged from the
// pidfd and the lease (daemon/liveness.hpp), and the end of a session, which gives back
// everything the client held and frees its slot for the next one.
#include "daemon/sessions.hpp"

#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>

#include "daemon/epoll_tags.hpp"
#include "daemon/liveness.hpp"
#include "kvpool/core/clock.hpp"
#include "kvpool/core/counter.hpp"
#include "kvpool/shm/handshake.hpp"

namespace kvpool::daemon {

using shm::SlotState;

Sessions::Sessions(SessionLinks links) : links_(links) {
  sessions_.resize(links_.config.max_clients);
  for (uint32_t i = 0; i < links_.config.max_clients; ++i) sessions_[i].slot = i;
}

uint32_t Sessions::in_use() const {
  return static_cast<uint32_t>(
      std::count_if(sessions_.begin(), sessions_.end(),
                    [](const Session& s) { return s.state != SlotState::kFree; }));
}

void Sessions::on_process_exit(uint32_t slot) {
  if (slot < sessions_.size() && sessions_[slot].state != SlotState::kFree)
    check_liveness(sessions_[slot], "process exited");
}

void Sessions::clear_doorbell(uint32_t slot) {
  if (slot < sessions_.size() && sessions_[slot].doorbell) {
    uint64_t v;
    ssize_t r = ::read(sessions_[slot].doorbell.get(), &v, sizeof(v));
    (void)r;  // only clears the eventfd; the rings are drained by the engine's loop
  }
}

void Sessions::on_session_socket(uint32_t slot, uint32_t events) {
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

void Sessions::on_ready(Session& s) {
  if (std::find(live_.begin(), live_.end(), s.slot) == live_.end()) live_.push_back(s.slot);
  s.ready = true;
  s.state = SlotState::kAttached;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = event_tag(kBell, s.slot);
  ::epoll_ctl(links_.epoll.get(), EPOLL_CTL_ADD, s.doorbell.get(), &ev);
  bump(links_.control.header().stats.clients_attached, 1);
  publish_slot(s);
  spdlog::info("client attached: slot {} gen {} pid {} uid {}", s.slot, s.generation, s.pid, s.uid);
}

// Decides whether a client that hung up (or whose process exited) is gone, from the pidfd
// and one atomic load of its lease word (daemon/liveness.hpp); never a pthread call on the
// client's memory. A live client keeps its blocks: it is flagged suspect and re-checked.
void Sessions::check_liveness(Session& s, const char* why) {
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
        if (s.sock) ::epoll_ctl(links_.epoll.get(), EPOLL_CTL_DEL, s.sock.get(), nullptr);
        publish_slot(s);
      }
      return;
  }
}

void Sessions::end_session(Session& s, bool died, const std::string& why) {
  uint32_t returned = 0;
  if (s.ready)
    for (auto& p : links_.pools) returned += p.core.release_owner(s.slot);
  if (died) {
    links_.control.header().stats.last_reclaim_noticed_ns.store(liveness_check_ns_,
                                                                std::memory_order_relaxed);
    links_.control.header().stats.last_reclaim_done_ns.store(now_ns(CLOCK_MONOTONIC),
                                                             std::memory_order_relaxed);
    bump(links_.control.header().stats.reclaimed_blocks, returned);
    // Release: the times above are visible to whoever sees the counter move.
    links_.control.header().stats.reclaimed_clients.store(
        links_.control.header().stats.reclaimed_clients.load(std::memory_order_relaxed) + 1,
        std::memory_order_release);
    spdlog::info("client reclaimed: slot {} pid {} uid {} ({}), {} blocks returned", s.slot, s.pid,
                 s.uid, why, returned);
  } else {
    if (s.ready) bump(links_.control.header().stats.clients_detached, 1);
    spdlog::info("client detached: slot {} pid {} uid {} ({}), {} blocks returned", s.slot, s.pid,
                 s.uid, why, returned);
  }
  if (s.sock) ::epoll_ctl(links_.epoll.get(), EPOLL_CTL_DEL, s.sock.get(), nullptr);
  if (s.pidfd) ::epoll_ctl(links_.epoll.get(), EPOLL_CTL_DEL, s.pidfd.get(), nullptr);
  if (s.doorbell) ::epoll_ctl(links_.epoll.get(), EPOLL_CTL_DEL, s.doorbell.get(), nullptr);
  uint32_t slot = s.slot, gen = s.generation;
  if (auto it = std::find(live_.begin(), live_.end(), slot); it != live_.end()) {
    *it = live_.back();  // order does not matter: the engine's pass rotates its start
    live_.pop_back();
  }
  s = Session{};
  s.slot = slot;
  s.generation = gen;  // the next attach bumps it
  publish_slot(s);
}

void Sessions::disconnect(Session& s, const std::string& why) {
  spdlog::warn("disconnecting client slot {} pid {}: {}", s.slot, s.pid, why);
  bump(links_.control.header().stats.disconnects, 1);
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

void Sessions::expire(uint64_t t) {
  const uint64_t attach_ns = uint64_t{links_.config.attach_timeout_ms} * 1'000'000;
  expire_pending(t);
  // Clients welcomed that never said Ready: each holds a slot and a segment.
  for (auto& s : sessions_)
    if (s.state == SlotState::kAttaching && t - s.hello_mono_ns > attach_ns)
      end_session(s, false,
                  "no Ready within attach_timeout_ms (" +
                      std::to_string(links_.config.attach_timeout_ms) + " ms)");
  // EMFILE back-off over: listen again.
  if (accept_paused_until_ns_ != 0 && t >= accept_paused_until_ns_) {
    accept_paused_until_ns_ = 0;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = event_tag(kListen, 0);
    ::epoll_ctl(links_.epoll.get(), EPOLL_CTL_ADD, links_.listen.get(), &ev);
  }
}

// Connections that never said Hello.
void Sessions::expire_pending(uint64_t t) {
  const uint64_t attach_ns = uint64_t{links_.config.attach_timeout_ms} * 1'000'000;
  for (size_t i = 0; i < pending_.size();) {
    if (t - pending_[i].accepted_ns > attach_ns) {
      spdlog::warn("dropping a connection of uid {} that sent no hello within {} ms",
                   pending_[i].uid, links_.config.attach_timeout_ms);
      pending_.erase(pending_.begin() + static_cast<long>(i));
    } else {
      ++i;
    }
  }
}

// The client as the clients of each pool it may use see it (the slot table of that pool's
// registry segment); in the other pools' tables the slot stays free and zero, so nothing
// of it reaches a caller who shares no pool with it. State last, with release: a reader
// that loads it with acquire reads this client's fields.
void Sessions::publish_slot(const Session& s) {
  for (uint32_t p = 0; p < links_.control.num_pools(); ++p) {
    shm::SlotInfo& i = links_.control.slot(p, s.slot);
    const bool member = s.state != SlotState::kFree && (s.pool_mask & (1u << p)) != 0;
    i.pid.store(member ? s.pid : 0, std::memory_order_relaxed);
    i.uid.store(member ? s.uid : 0, std::memory_order_relaxed);
    i.attach_time_ns.store(member ? s.attach_ns : 0, std::memory_order_relaxed);
    i.start_ticks.store(member ? s.start_ticks : 0, std::memory_order_relaxed);
    i.generation.store(member ? s.generation : 0, std::memory_order_relaxed);
    i.state.store(static_cast<uint32_t>(member ? s.state : SlotState::kFree),
                  std::memory_order_release);
  }
}

void Sessions::bump_slot(const Session& s, std::atomic<uint64_t> shm::SlotInfo::*counter,
                         uint64_t n) {
  for (uint32_t p = 0; p < links_.control.num_pools(); ++p)
    if ((s.pool_mask & (1u << p)) != 0) bump(links_.control.slot(p, s.slot).*counter, n);
}

}  // namespace kvpool::daemon
