// Test support: a client of kvpoold that speaks the raw protocol, built only on the shared
// core (shm/handshake.hpp, ring.hpp, control_segment.hpp), never on libkvpool's private
// transport. It connects and says Hello, maps the control segment, its own segment and
// the host pools' bytes, holds its lease on a thread of its own that also watches the socket
// (as libkvpool does, so the daemon judges it like any client), and puts records on its request
// ring as they are given: hostile-client tests, the attacker program and the transport benchmark
// use it.
//
// One caller at a time: no locks. It keeps no releases and no abandoned answers; an answer
// read while waiting for another is kept until asked for.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kvpool/core/layout.hpp"
#include "kvpool/core/status.hpp"
#include "kvpool/pool/pool_core.hpp"
#include "kvpool/shm/control_segment.hpp"
#include "kvpool/shm/futex.hpp"
#include "kvpool/shm/protocol.hpp"
#include "kvpool/shm/ring.hpp"
#include "kvpool/shm/segment.hpp"
#include "kvpool/shm/segment_layout.hpp"
#include "kvpool/shm/unique_fd.hpp"

namespace kvpool::testsupport {

// One decoded answer record.
struct RawResponse {
  ErrorCode code = ErrorCode::kOk;
  std::string message;
  std::vector<pool::BlockRef> refs;
  Status status() const { return code == ErrorCode::kOk ? Status() : Status(code, message); }
};

// One pool as the Welcome described it. Host pools open to this client are mapped
// read-write (`data`); device pools and pools closed by their allow-lists are not mapped.
struct RawPool {
  std::string name;
  shm::PoolInfo info;
  Layout layout;
  shm::Segment data;
  bool usable = true;
};

struct RawOptions {
  std::string runtime_dir;  // "" -> the default runtime dir of the instance
  std::chrono::milliseconds connect_timeout{5000};
  uint32_t poll_us = 50;  // how long a wait polls for an answer before it sleeps
  // The layout version the Hello claims (tests of version refusal).
  uint16_t layout_major = shm::kLayoutMajor;
};

class RawConnection {
 public:
  // kvpoold's Refusal comes back as a Status with the daemon's code and message.
  static Result<std::unique_ptr<RawConnection>> open(const std::string& instance,
                                                     const RawOptions& options);
  ~RawConnection();  // gives the lease back (a clean detach) and closes the socket

  uint32_t slot() const { return slot_; }
  uint32_t generation() const { return generation_; }
  const std::vector<RawPool>& pools() const { return pools_; }
  const shm::ControlHeader& control() const { return control_.header(); }
  // The daemon's start epoch (ControlHeader::restart): what a reattach names it by.
  uint64_t epoch() const { return control().restart.epoch; }
  shm::ClientHeader* client_header() { return client_.as<shm::ClientHeader>(); }
  int socket_fd() const { return sock_.get(); }
  // The daemon died, stopped, or cut us off (then with the reason it gave).
  bool gone() const;

  // A request (RequestHeader + items), waiting for room while the daemon lives; returns
  // its correlation id.
  Result<uint64_t> send(proto::Opcode op, uint32_t pool, uint32_t count, const void* items,
                        size_t item_bytes);
  // The answer to `correlation_id`: kDisconnected with the daemon's reason once it cut us
  // off, kDaemonGone once it is gone.
  Result<RawResponse> wait(uint64_t correlation_id);
  Result<RawResponse> call(proto::Opcode op, uint32_t pool, uint32_t count, const void* items,
                           size_t item_bytes);
  // A record of any type and bytes, as is; kResourceExhausted when the ring is full.
  Status send_raw(uint32_t type, const void* bytes, uint32_t len);

 private:
  RawConnection() = default;
  Status handshake(const std::string& instance, const RawOptions& options);
  Status map_pools(const proto::Welcome& w, std::vector<shm::UniqueFd>& fds);
  Status hold_lease();
  void watch_socket();
  Result<void*> claim(uint32_t type, uint32_t len);
  void publish();
  Result<std::optional<std::pair<uint64_t, RawResponse>>> read_answer();
  Status gone_status(const std::string& when) const;

  shm::UniqueFd sock_;
  shm::UniqueFd bell_;  // eventfd: wakes a parked daemon
  shm::ControlReader control_;
  shm::Segment client_;
  std::vector<RawPool> pools_;
  uint32_t slot_ = 0;
  uint32_t generation_ = 0;
  shm::PollPolicy poll_;
  std::optional<shm::RingProducer> requests_;
  std::optional<shm::RingConsumer> responses_;
  uint64_t next_correlation_ = 1;
  std::map<uint64_t, RawResponse> early_;  // answers read while waiting for another
  // The lease thread holds the lease (a robust mutex belongs to the thread that locks it,
  // which must live as long as the attachment: shm/lease_mutex.hpp) and watches the socket.
  std::optional<std::string> disconnect_reason_;  // written before gone_ is set
  std::atomic<bool> gone_{false};
  shm::UniqueFd stop_fd_;  // eventfd: ends the lease thread
  std::thread lease_thread_;
};

}  // namespace kvpool::testsupport
