// Who is attached to kvpoold, and whether they are still there (docs/design.md §5): accepting
// connections, the Hello / Welcome / Ready handshake (sessions_attach.cpp), watching each
// client's socket and pidfd, deciding from the lease whether a client that hung up is gone,
// and giving back what a gone client held (sessions.cpp). Touched only by the engine thread.
//
// The engine owns the run loop and the requests; it hands this module the few things a
// session needs (SessionLinks) and calls it from its epoll dispatch and its periodic work.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "daemon/config.hpp"
#include "daemon/served_pool.hpp"
#include "daemon/session.hpp"
#include "kvpool/core/status.hpp"
#include "kvpool/shm/control_segment.hpp"
#include "kvpool/shm/protocol.hpp"
#include "kvpool/shm/unique_fd.hpp"
#include "kvpool/shm/unix_socket.hpp"

namespace kvpool::daemon {

// What sessions use of the engine. References to the engine's members: the descriptors
// are made after the sessions (Engine::listen_and_watch), so they are read when used.
struct SessionLinks {
  const Config& config;
  shm::ControlWriter& control;     // slot tables, stats, the read-only fds a Welcome carries
  std::vector<ServedPool>& pools;  // allow-lists, data fds, and what a gone client held
  const shm::UniqueFd& epoll;      // the engine's epoll set (daemon/epoll_tags.hpp)
  const shm::UniqueFd& listen;     // the listening socket
};

class Sessions {
 public:
  explicit Sessions(SessionLinks links);

  // One per client slot (config.max_clients), indexed by slot.
  Session& operator[](uint32_t slot) { return sessions_[slot]; }
  Session& at(uint32_t slot) { return sessions_.at(slot); }
  size_t size() const { return sessions_.size(); }
  auto begin() { return sessions_.begin(); }
  auto end() { return sessions_.end(); }
  auto begin() const { return sessions_.begin(); }
  auto end() const { return sessions_.end(); }
  uint32_t in_use() const;  // slots not free
  // The slots whose clients said Ready, in no order: what the engine's pass and the per-uid
  // share check of each request look at. Looking at every slot (max_clients, 64 by default,
  // up to 4096) touched a cold Session per slot after each park, and per request. A slot
  // leaves when its session ends; users still check each one's state (a suspect stays
  // listed until it ends, and shutdown resets sessions without ending them).
  const std::vector<uint32_t>& live() const { return live_; }

  // ---- epoll events (the engine's handle_events) ----
  void accept_clients();                                   // kListen
  void on_pending_readable(int fd);                        // kPending: its Hello
  void on_session_socket(uint32_t slot, uint32_t events);  // kSock
  void on_process_exit(uint32_t slot);                     // kPid
  void clear_doorbell(uint32_t slot);                      // kBell

  // Decides whether a client that hung up (or whose process exited) is gone; a live one
  // keeps its blocks and becomes a suspect, which the engine re-checks periodically.
  void check_liveness(Session& s, const char* why);
  // Cuts a broken or hostile client off, telling it why; its blocks come back now.
  void disconnect(Session& s, const std::string& why);
  // Periodic (the engine's 50 ms tick, at monotonic time `t`, after it re-checked the
  // suspects): connections that never said Hello and clients that never said Ready are
  // dropped, and listening resumes after an EMFILE pause.
  void expire(uint64_t t);
  // Adds `n` to one of the client's SlotInfo counters, in every pool's slot table it shows in.
  void bump_slot(const Session& s, std::atomic<uint64_t> shm::SlotInfo::*counter, uint64_t n);
  // At stop: connections that never said Hello are closed.
  void drop_pending() { pending_.clear(); }

 private:
  struct Pending {  // a connection that has not said Hello yet
    shm::UniqueFd sock;
    uint64_t accepted_ns;
    uid_t uid;
  };

  // ---- attach (sessions_attach.cpp) ----
  bool admit_pending(int fd, uid_t uid);  // caps on not-yet-attached connections
  void pause_accepting(const std::string& why);
  void refuse(int fd, ErrorCode code, const std::string& message);
  void on_hello(shm::UniqueFd sock, const void* msg, size_t len);
  std::optional<shm::PeerCred> vet_caller(int fd, const proto::Hello& h);
  Session* free_slot_for(int fd, uid_t uid);
  void attach(Session& s, shm::UniqueFd sock, const shm::PeerCred& cred, int control_fd);
  void observe(shm::UniqueFd sock, const shm::PeerCred& cred, int control_fd);
  bool add_pool_fds(int fd, uint32_t pool_mask, std::vector<int>& fds,
                    std::vector<shm::UniqueFd>& keep);
  // The pools whose allow-lists admit this peer (uid, gid and supplementary groups).
  uint32_t pool_mask_for(const shm::PeerCred& cred) const;
  void watch_session(Session& s);

  // ---- liveness and reclaim (sessions.cpp) ----
  void on_ready(Session& s);
  void end_session(Session& s, bool died, const std::string& why);
  void expire_pending(uint64_t t);
  void publish_slot(const Session& s);

  SessionLinks links_;
  std::vector<Session> sessions_;
  std::vector<uint32_t> live_;  // live(): at most one entry per slot
  std::vector<Pending> pending_;
  uint64_t liveness_check_ns_ = 0;       // when check_liveness took up the current hang-up
  uint64_t accept_paused_until_ns_ = 0;  // EMFILE: the listen fd is out of epoll until then
  uint64_t accept_log_ns_ = 0;           // rate limit of accept warnings
  uint64_t accept_log_suppressed_ = 0;
};

}  // namespace kvpool::daemon
