// vLLM's ZmqEventPublisher, in C++ on libzmq's C API: a PUB socket that sends each batch as
// three frames (topic, 8-byte big-endian sequence number, payload), sequence numbers from 0
// up by one per batch, and an optional ROUTER socket that replays from a sequence number.
//
// Replay protocol (what vLLM's subscribers speak, with a DEALER socket: a REQ socket takes
// one reply per request and drops the rest of the answer): the request is an empty
// delimiter and the 8-byte big-endian start sequence; the answer is one message
// (seq, payload) per buffered batch with seq >= start, in order, then (-1 as 8-byte
// big-endian signed, empty payload) as the end marker. The buffer keeps the last
// `replay_buffer` batches (vLLM's buffer_steps); older ones are gone, and a subscriber that
// needs them must take the stream's next AllBlocksCleared (kvpool-events sends one after
// every gap of its own) or ask for a resync some other way.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>

#include "kvpool/core/status.hpp"

namespace kvpool::events {

struct ZmqOptions {
  std::string endpoint = "tcp://127.0.0.1:5557";  // PUB: bound (tcp:// or ipc://)
  std::string replay_endpoint;                    // ROUTER, bound; "" for none
  std::string topic;                              // vLLM's default: "" (every subscriber)
  size_t replay_buffer = 10000;                   // batches kept for replay
  int send_hwm = 100000;                          // PUB high-water mark (messages)
};

class ZmqPublisher {
 public:
  // Binds both sockets; kInvalidArgument naming the endpoint when one cannot be bound.
  static Result<std::unique_ptr<ZmqPublisher>> bind(const ZmqOptions& options);
  ~ZmqPublisher();
  ZmqPublisher(const ZmqPublisher&) = delete;
  ZmqPublisher& operator=(const ZmqPublisher&) = delete;

  // Sends one batch under the next sequence number and keeps it for replay. False when
  // libzmq refused it (the PUB socket drops for slow subscribers itself, without error).
  bool publish(std::string_view payload);
  // Answers the replay requests waiting on the ROUTER socket, if any. Never blocks.
  void serve_replay();

  uint64_t next_sequence() const { return next_seq_; }
  uint64_t replays_served() const { return replays_; }
  // The endpoint actually bound (tcp://...:0 resolves to a port).
  const std::string& endpoint() const { return bound_endpoint_; }
  const std::string& replay_endpoint() const { return bound_replay_; }

 private:
  ZmqPublisher() = default;

  ZmqOptions options_;
  void* ctx_ = nullptr;
  void* pub_ = nullptr;
  void* router_ = nullptr;
  std::string bound_endpoint_;
  std::string bound_replay_;
  uint64_t next_seq_ = 0;
  uint64_t replays_ = 0;
  struct Buffered {
    uint64_t seq;
    std::string payload;
  };
  std::deque<Buffered> buffer_;
};

}  // namespace kvpool::events
