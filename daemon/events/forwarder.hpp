// kvpool-events: tails one kvpoold's event ring and publishes it through one EventOutput
// (event_output.hpp): Dynamo's router JSON on NATS, or vLLM's KVEventBatch on ZMQ. A
// separate process, so kvpoold has no network dependency.
//
// It resynchronises the consumers (a clear, then the whole registry from a snapshot of the
// pool arenas, then the ring from the snapshot's position on) whenever their view of this
// cache may be wrong: at start, when it fell a lap behind the ring, when the transport was
// down (what was sent in between is lost), when kvpoold restarted, when a pool was cleared
// and the format cannot say so alone, and when a consumer asks.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "daemon/events/daemon_attachment.hpp"
#include "daemon/events/event_output.hpp"

namespace kvpool::events {

struct ForwarderOptions {
  std::string instance = "default";
  std::string runtime_dir;  // "" -> default_runtime_dir()
  // How long an idle forwarder sleeps between polls of the ring at most.
  std::chrono::microseconds max_idle_sleep{1000};
};

struct ForwarderStats {
  uint64_t laps = 0;         // times the ring lapped us
  uint64_t lost_events = 0;  // records overwritten before we read them
  uint64_t resyncs = 0;
  uint64_t torn_snapshots = 0;  // resyncs that had to use a best-effort snapshot
  uint64_t attaches = 0;
};

class Forwarder {
 public:
  Forwarder(ForwarderOptions options, std::unique_ptr<EventOutput> output);
  ~Forwarder();
  // Runs until stop(). Errors that a retry can fix (no daemon yet, NATS down) are retried
  // with back-off; only bad options (an endpoint that cannot be bound) return an error.
  Status run();
  // Async-signal-safe.
  void stop() { stop_.store(true, std::memory_order_relaxed); }

  const ForwarderStats& stats() const { return stats_; }

 private:
  void resync(const char* why);
  void idle(uint32_t& idle_rounds);
  void log_stats();

  ForwarderOptions options_;
  ForwarderStats stats_;
  std::unique_ptr<DaemonAttachment> daemon_;
  std::atomic<bool> stop_{false};
  bool need_resync_ = true;
  uint64_t synced_epoch_ = 0;
  std::unique_ptr<EventOutput> output_;  // last: destroyed first, before what it may call
};

}  // namespace kvpool::events
