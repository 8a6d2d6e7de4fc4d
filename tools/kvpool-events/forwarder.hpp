// kvpool-events: tails one kvpoold's event ring and publishes it through one EventOutput
// (event_output.hpp): Dynamo's router JSON on NATS, or vLLM's KVEventBatch on ZMQ. A
// separate process, so kvpoold has no network dependency.
//
// It resynchronises the consumers (a clear, then the whole registry from a snapshot of the
// pool arenas and the disk tiers' blocks it keeps from the ring's disk records, then the
// ring from the snapshot's position on) whenever their view of this
// cache may be wrong: at start, when it fell a lap behind the ring, when the transport was
// down (what was sent in between is lost), when kvpoold restarted, when a pool was cleared
// and the format cannot say so alone, and when a consumer asks.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "tools/kvpool-events/daemon_attachment.hpp"
#include "tools/kvpool-events/event_output.hpp"

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
  uint64_t tokens_lost = 0;     // Stored records whose token ids were overwritten before read
  uint64_t keys_lost = 0;       // Stored records whose key was overwritten before read
  uint64_t attaches = 0;
};

// What /metrics of kvpool-events (--metrics-listen) reads from another thread: copies of the
// counters above, stored by the forwarder's loop once per round (relaxed: each is a figure
// of its own, none guards another).
struct ForwarderGauges {
  std::atomic<uint64_t> events{0};          // ring records turned into messages
  std::atomic<uint64_t> messages{0};        // messages (NATS) or batches (ZMQ) handed over
  std::atomic<uint64_t> publish_errors{0};  // messages the transport refused (dropped)
  std::atomic<uint64_t> lost_events{0};     // records the ring overwrote before we read them
  std::atomic<uint64_t> tokens_lost{0};     // Stored records sent without their token ids
  std::atomic<uint64_t> keys_lost{0};       // Stored records sent without their opaque key
  std::atomic<uint64_t> resyncs{0};
  std::atomic<uint64_t> lag{0};          // records published by kvpoold and not yet read by us
  std::atomic<uint64_t> disk_blocks{0};  // disk-tier blocks a resync would announce
  std::atomic<uint32_t> disk_view_partial{0};  // 1: disk records were lost unread (a subset)
  std::atomic<uint32_t> attached{0};
  std::atomic<uint32_t> nats_connected{0};  // the output can deliver (NATS up; always for ZMQ)
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
  // Safe from any thread.
  const ForwarderGauges& gauges() const { return gauges_; }

 private:
  void resync(const char* why);
  // Reads up to `max` records of the ring into the output. kLapped: a resync is due.
  enum class Drain { kMore, kEmpty, kLapped };
  Drain drain_ring(uint32_t max, uint32_t* read);
  // The daemon we read from is gone: what it published before dying goes out first, and
  // whether the routers' view was then exactly its registry is remembered (continues()).
  void on_daemon_gone();
  bool try_attach(std::chrono::milliseconds& attach_wait);
  void on_attached();  // a new daemon: pools, disk view, resync or not
  // Whether the daemon just attached took over the one that died with nothing changed: it
  // adopted every pool of it and dropped no block, and the routers had all of the old
  // one's events. Then its registry is what they have, and no resync is needed.
  bool continues() const;
  void idle(uint32_t& idle_rounds);
  // Moves the disk view on from where the ring reader stands to `until` (records it is about
  // to skip): see disk_ below.
  void fold_disk_gap(const std::vector<uint64_t>& until);
  void disk_history_lost(uint64_t lost, const char* where);
  void log_stats();
  void update_gauges();

  ForwarderOptions options_;
  ForwarderStats stats_;
  ForwarderGauges gauges_;
  std::unique_ptr<DaemonAttachment> daemon_;
  std::atomic<bool> stop_{false};
  bool need_resync_ = true;
  uint64_t synced_epoch_ = 0;
  uint64_t gone_epoch_ = 0;  // the daemon that died, when the routers had all its events
  uint32_t gone_pools_ = 0;
  std::vector<uint32_t> tokens_;  // the token ids of the record being forwarded (reused)
  std::vector<std::byte> key_;    // its key (reused)
  // The disk tiers' blocks: every disk record of the attached daemon from its first one up
  // to the ring reader's position, folded (read, or skipped by a resync or an outage and
  // folded then). A resync re-announces them: the daemon's disk index is not in shared
  // memory. Not exact once records were lost before they were folded (a lap): then a subset.
  DiskView disk_;
  bool disk_exact_ = true;
  bool any_disk_ = false;                // the attached daemon has a pool with a disk tier
  std::unique_ptr<EventOutput> output_;  // last: destroyed first, before what it may call
};

}  // namespace kvpool::events
