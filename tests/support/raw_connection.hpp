// Test support: a client of kvpoold that speaks the raw protocol, a thin shell over the
// client channel (shm/client_channel.hpp: the same wire, wait loop, lease thread and gone
// watch as libkvpool) with no policy of libkvpool's: no release batching, no abandoned
// answers, no reattach. It maps the host pools open to it read-write and puts records on
// its request ring as they are given: hostile-client tests, the attacker program and the
// transport benchmark use it.
//
// One caller at a time: no locks. An answer read while waiting for another is kept until
// asked for.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kvpool/core/layout.hpp"
#include "kvpool/core/status.hpp"
#include "kvpool/shm/client_channel.hpp"
#include "kvpool/shm/protocol.hpp"
#include "kvpool/shm/segment.hpp"
#include "kvpool/shm/segment_layout.hpp"

namespace kvpool::testsupport {

// One decoded answer record.
using RawResponse = shm::Answer;

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
  ~RawConnection() = default;  // the channel gives the lease back and closes the socket

  uint32_t slot() const { return channel_->slot(); }
  uint32_t generation() const { return channel_->generation(); }
  const std::vector<RawPool>& pools() const { return pools_; }
  const shm::ControlHeader& control() const { return channel_->control(); }
  // The daemon's start epoch (ControlHeader::restart): what a reattach names it by.
  uint64_t epoch() const { return control().restart.epoch; }
  shm::ClientHeader* client_header() { return channel_->client_header(); }
  int socket_fd() const { return channel_->socket_fd(); }
  // The daemon died, stopped, or cut us off (then with the reason it gave).
  bool gone() const { return channel_->gone(); }

  // send, then wait for its answer.
  Result<RawResponse> call(proto::Opcode op, uint32_t pool, uint32_t count, const void* items,
                           size_t item_bytes) {
    auto corr = send(op, pool, count, items, item_bytes);
    return corr ? wait(*corr) : Result<RawResponse>(corr.status());
  }
  // A request (RequestHeader + items), waiting for room while the daemon lives; returns its
  // correlation id. Its answer: wait(), which says kDisconnected with the daemon's reason
  // once it cut us off, kDaemonGone once it is gone.
  Result<uint64_t> send(proto::Opcode op, uint32_t pool, uint32_t count, const void* items,
                        size_t item_bytes);
  Result<RawResponse> wait(uint64_t correlation_id);
  // A record of any type and bytes, as is; kResourceExhausted when the ring is full.
  Status send_raw(uint32_t type, const void* bytes, uint32_t len);

 private:
  RawConnection() = default;
  Status map_pools(const proto::Welcome& w, std::vector<shm::UniqueFd>& fds);
  void keep_answers();

  std::unique_ptr<shm::ClientChannel> channel_;
  std::vector<RawPool> pools_;
  std::map<uint64_t, RawResponse> early_;  // answers read while waiting for another
};

}  // namespace kvpool::testsupport
