// One NATS connection (libnats, the C client) as the forwarder and the router demo use it:
// connects in the background and keeps reconnecting forever with exponential back-off
// (with jitter), re-subscribes after a reconnect, and tells its owner when the connection
// came (back) up through epoch(), so the owner knows when what it sent may have been lost.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvpool/core/status.hpp"

// libnats types, kept out of users' includes.
struct __natsConnection;
struct __natsOptions;
struct __natsSubscription;

namespace kvpool::events {

struct NatsOptions {
  std::string url = "nats://127.0.0.1:4222";
  std::string name = "kvpool";  // shown by the server (connz)
  std::chrono::milliseconds reconnect_min{50};
  std::chrono::milliseconds reconnect_max{2000};
  std::chrono::milliseconds ping_interval{2000};
};

class NatsLink {
 public:
  using Handler = std::function<void(std::string_view data)>;

  // Returns at once, connected or not: the connection is (re)made in the background.
  // Fails only for a bad URL or option.
  static Result<std::unique_ptr<NatsLink>> connect(const NatsOptions& options);
  ~NatsLink();
  NatsLink(const NatsLink&) = delete;
  NatsLink& operator=(const NatsLink&) = delete;

  bool connected() const { return connected_.load(std::memory_order_acquire); }
  // Bumps on every (re)connect. A message sent under one epoch may be lost when the next
  // begins; a subscriber may also have missed messages while the link was down.
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  uint64_t disconnects() const { return disconnects_.load(std::memory_order_relaxed); }

  Status publish(const std::string& subject, std::string_view data);
  // Sends what is buffered and waits for the server's answer (a round trip).
  Status flush(std::chrono::milliseconds timeout);
  // `handler` runs on a libnats thread, one message at a time per subscription. Kept across
  // reconnects.
  Status subscribe(const std::string& subject, Handler handler);

 private:
  NatsLink() = default;
  static void on_connected(__natsConnection* nc, void* self);
  static void on_disconnected(__natsConnection* nc, void* self);
  static int64_t reconnect_delay(__natsConnection* nc, int attempts, void* self);

  struct Subscription;
  __natsOptions* opts_ = nullptr;
  __natsConnection* nc_ = nullptr;
  std::vector<std::unique_ptr<Subscription>> subs_;
  NatsOptions options_;
  std::atomic<bool> connected_{false};
  std::atomic<uint64_t> epoch_{0};
  std::atomic<uint64_t> disconnects_{0};
  std::atomic<uint64_t> jitter_state_{0x9E3779B97F4A7C15ull};
};

}  // namespace kvpool::events
