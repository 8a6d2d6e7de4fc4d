#include "tools/kvpool-events/forwarder.hpp"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <thread>

namespace kvpool::events {
namespace {

using Clock = std::chrono::steady_clock;

// Records handled between checks of the daemon, NATS and resync requests.
constexpr uint32_t kRecordsPerRound = 4096;
constexpr auto kDaemonCheckInterval = std::chrono::milliseconds(200);
constexpr auto kAttachRetryMax = std::chrono::milliseconds(2000);

}  // namespace

Forwarder::Forwarder(ForwarderOptions options, std::unique_ptr<EventOutput> output)
    : options_(std::move(options)), output_(std::move(output)) {}

Forwarder::~Forwarder() = default;

Forwarder::Drain Forwarder::drain_ring(uint32_t max, uint32_t* read) {
  shm::PoolEventRings& ring = daemon_->ring();
  shm::EventRecord rec;
  while (*read < max) {
    auto o = ring.next(&rec);
    if (o == shm::PoolEventRings::Outcome::kEvent) {
      // Token ids (a client's send_tokens) or none: read_tokens never gives another
      // record's, and a reader too far behind gets none (counted).
      if (rec.has_tokens() && !ring.read_tokens(rec, &tokens_)) ++stats_.tokens_lost;
      // The same for a keyed block's key (BatchStore).
      if (rec.has_key() && !ring.read_key(rec, &key_)) ++stats_.keys_lost;
      fold_disk_record(rec, &disk_);
      output_->add(
          rec, rec.has_tokens() ? std::span<const uint32_t>(tokens_) : std::span<const uint32_t>(),
          rec.has_key() ? std::span<const std::byte>(key_) : std::span<const std::byte>());
      ++*read;
    } else if (o == shm::PoolEventRings::Outcome::kLapped) {
      ++stats_.laps;
      stats_.lost_events += ring.lost();
      spdlog::warn("fell a lap behind the event ring ({} event(s) lost); resyncing", ring.lost());
      disk_history_lost(ring.lost(), "a lap of the event ring");
      need_resync_ = true;
      return Drain::kLapped;
    } else {
      return Drain::kEmpty;
    }
  }
  return Drain::kMore;
}

void Forwarder::on_daemon_gone() {
  gone_epoch_ = 0;
  if (need_resync_ || !output_->connected() || !output_->in_sync()) return;
  // Its ring outlives it (our mapping): publish the rest, all of it.
  uint32_t n = 0;
  Drain d = Drain::kMore;
  while (d == Drain::kMore) d = drain_ring(kRecordsPerRound, &n);
  output_->flush();
  if (d != Drain::kEmpty || !output_->in_sync()) return;
  gone_epoch_ = daemon_->daemon_epoch();
  gone_pools_ = daemon_->num_pools();
}

bool Forwarder::continues() const {
  if (gone_epoch_ == 0 || !output_->connected() || output_->epoch() != synced_epoch_) return false;
  const shm::RestartInfo& r = daemon_->restart();
  return r.previous_epoch == gone_epoch_ && daemon_->num_pools() == gone_pools_ &&
         r.adopted_pools == gone_pools_ && r.adoption_dropped_blocks == 0;
}

void Forwarder::fold_disk_gap(const std::vector<uint64_t>& until) {
  const uint64_t lost = daemon_->fold_disk_records(daemon_->ring().positions(), until, &disk_);
  disk_history_lost(lost, "records skipped");
}

void Forwarder::disk_history_lost(uint64_t lost, const char* where) {
  if (lost == 0 || !any_disk_) return;
  if (disk_exact_)
    spdlog::warn(
        "{}: {} ring record(s) lost before their disk-tier part was read: routers will be "
        "told the disk blocks written since, each still on disk, not all older ones "
        "(a larger event_ring_slots keeps more)",
        where, lost);
  disk_exact_ = false;
}

void Forwarder::resync(const char* why) {
  auto snap = daemon_->snapshot();
  if (!snap) {
    spdlog::warn("resync ({}): no registry snapshot: {}", why, snap.status().to_string());
    return;  // need_resync_ stays set: tried again next round
  }
  if (!snap->consistent) ++stats_.torn_snapshots;
  // The disk tiers as of the snapshot's ring position: the view so far, plus the records
  // between the reader and that position (the seek below skips them).
  fold_disk_gap(snap->resume_ids);
  for (const auto& pool : disk_)
    for (const auto& [seq, b] : pool) snap->blocks.push_back(b);
  output_->resync(snap->blocks);
  daemon_->ring().seek(snap->resume_ids);
  ++stats_.resyncs;
  need_resync_ = !output_->in_sync();
  spdlog::info(
      "resync ({}): cleared + {} registered block(s) as {}, replaying the rings from events "
      "{}{}",
      why, snap->blocks.size(), need_resync_ ? "a failed publish" : "stored events",
      fmt::join(snap->resume_ids, "/"),
      snap->consistent ? "" : " (busy daemon: best-effort snapshot)");
}

void Forwarder::idle(uint32_t& idle_rounds) {
  ++idle_rounds;
  if (idle_rounds < 64) {
    std::this_thread::yield();
    return;
  }
  // 50 us doubling up to max_idle_sleep: quick after a burst, cheap when nothing happens.
  const auto step =
      std::chrono::microseconds(50) * (1u << std::min<uint32_t>((idle_rounds - 64) / 16, 8));
  std::this_thread::sleep_for(std::min(step, options_.max_idle_sleep));
}

void Forwarder::update_gauges() {
  const auto r = std::memory_order_relaxed;
  const EventOutput::Counters c = output_->counters();
  gauges_.events.store(c.records, r);
  gauges_.messages.store(c.messages, r);
  gauges_.publish_errors.store(c.send_errors, r);
  gauges_.lost_events.store(stats_.lost_events, r);
  gauges_.tokens_lost.store(stats_.tokens_lost, r);
  gauges_.keys_lost.store(stats_.keys_lost, r);
  gauges_.resyncs.store(stats_.resyncs, r);
  gauges_.attached.store(daemon_ ? 1 : 0, r);
  gauges_.nats_connected.store(output_->connected() ? 1 : 0, r);
  uint64_t lag = 0;
  if (daemon_) lag = daemon_->ring().lag();
  gauges_.lag.store(lag, r);
  uint64_t on_disk = 0;
  for (const auto& pool : disk_) on_disk += pool.size();
  gauges_.disk_blocks.store(on_disk, r);
  gauges_.disk_view_partial.store(disk_exact_ ? 0 : 1, r);
}

void Forwarder::log_stats() {
  spdlog::info(
      "{}; laps {} (lost {}), resyncs {} (best-effort {}), token ids lost {}, keys lost {}",
      output_->stats_line(), stats_.laps, stats_.lost_events, stats_.resyncs, stats_.torn_snapshots,
      stats_.tokens_lost, stats_.keys_lost);
}

// One attach attempt; on failure, backs off (attach_wait doubles up to kAttachRetryMax).
bool Forwarder::try_attach(std::chrono::milliseconds& attach_wait) {
  auto a = DaemonAttachment::attach(options_.instance, options_.runtime_dir);
  if (!a) {
    if (attach_wait == std::chrono::milliseconds(50) || attach_wait >= kAttachRetryMax)
      spdlog::warn("waiting for kvpoold instance '{}': {}", options_.instance,
                   a.status().message());
    std::this_thread::sleep_for(attach_wait);  // back-off between attach attempts
    attach_wait = std::min(attach_wait * 2, kAttachRetryMax);
    return false;
  }
  daemon_ = std::move(a.value());
  attach_wait = std::chrono::milliseconds(50);
  on_attached();
  return true;
}

void Forwarder::on_attached() {
  const std::vector<PoolMeta> metas = daemon_->pool_metas();
  output_->set_pools(metas);
  // A new daemon's ring starts with its whole disk index (docs/disk-tier.md "Events").
  disk_.clear();
  disk_exact_ = true;
  any_disk_ = std::any_of(metas.begin(), metas.end(), [](const PoolMeta& m) { return m.disk; });
  ++stats_.attaches;
  spdlog::info("attached to kvpoold pid {} epoch {:016x} ({} pool(s), event ring of {} slots)",
               daemon_->daemon_pid(), daemon_->daemon_epoch(), daemon_->num_pools(),
               daemon_->ring().capacity());
  // A daemon of another epoch has its own registry and its own ring: routers get cleared +
  // every registered block before any of its events, unless it took over the previous one's
  // registry whole (then they have it already).
  if (continues()) {
    need_resync_ = false;
    daemon_->ring().seek_to_start();  // every event of the new daemon (a lap: resync)
    spdlog::info(
        "kvpoold epoch {:016x} adopted every pool of epoch {:016x} and dropped no block: "
        "the routers' view holds, no resync",
        daemon_->daemon_epoch(), gone_epoch_);
  } else {
    need_resync_ = true;
  }
  gone_epoch_ = 0;
}

Status Forwarder::run() {
  KVPOOL_RETURN_IF_ERROR(output_->open());
  spdlog::info("kvpool-events: instance '{}' -> {}", options_.instance, output_->describe());

  auto attach_wait = std::chrono::milliseconds(50);
  auto last_check = Clock::now();
  auto last_stats = Clock::now();
  uint32_t idle_rounds = 0;
  bool warned_nats = false;
  while (!stop_.load(std::memory_order_relaxed)) {
    update_gauges();
    const auto now = Clock::now();
    if (now - last_stats > std::chrono::seconds(60)) {
      last_stats = now;
      log_stats();
    }
    // 1. A daemon to read from.
    if (!daemon_ && !try_attach(attach_wait)) continue;
    if (now - last_check > kDaemonCheckInterval) {
      last_check = now;
      if (!daemon_->daemon_alive()) {
        spdlog::warn("kvpoold pid {} stopped; waiting for the next one", daemon_->daemon_pid());
        on_daemon_gone();
        daemon_.reset();
        continue;
      }
    }
    // 2. The transport. While it is down nothing can be told; what happens meanwhile comes
    // with the resync once it is back.
    output_->serve();
    if (!output_->connected()) {
      if (!warned_nats)
        spdlog::warn("{} is not connected; will resync when it is", output_->describe());
      warned_nats = true;
      need_resync_ = true;
      fold_disk_gap(daemon_->ring().published());  // what is skipped still says what is on disk
      daemon_->ring().seek_to_end();
      idle(idle_rounds);
      continue;
    }
    warned_nats = false;
    const uint64_t epoch = output_->epoch();
    if (epoch != synced_epoch_) {
      need_resync_ = true;
      synced_epoch_ = epoch;
    }
    if (output_->take_resync_request()) {
      resync("a router asked");
      continue;
    }
    if (need_resync_ || !output_->in_sync()) {
      resync(stats_.resyncs == 0 ? "start" : "after a gap");
      continue;
    }
    // 3. The ring.
    uint32_t n = 0;
    const Drain d = drain_ring(kRecordsPerRound, &n);
    const bool drained = d == Drain::kEmpty;
    if (drained) output_->flush();
    if (n == 0 && drained) {
      idle(idle_rounds);
    } else {
      idle_rounds = 0;
    }
  }
  output_->close();
  log_stats();
  return Status::ok();
}

}  // namespace kvpool::events
