#include "daemon/events/forwarder.hpp"

#include <spdlog/spdlog.h>

#include <thread>

namespace kvpool::events {
namespace {

using Clock = std::chrono::steady_clock;

// Records handled between checks of the daemon, NATS and resync requests.
constexpr uint32_t kRecordsPerRound = 4096;
constexpr auto kDaemonCheckInterval = std::chrono::milliseconds(200);
constexpr auto kAttachRetryMax = std::chrono::milliseconds(2000);

}  // namespace

Forwarder::Forwarder(ForwarderOptions options)
    : options_(std::move(options)),
      subject_(kv_events_subject(options_.ns, options_.component)),
      builder_(options_.worker_id, [this](std::string_view json) { return publish(json); }) {}

Forwarder::~Forwarder() = default;

bool Forwarder::publish(std::string_view json) {
  if (!nats_->connected()) return false;
  if (Status s = nats_->publish(subject_, json); !s.is_ok()) {
    if (stats_.publish_errors++ % 1000 == 0) spdlog::warn("{}", s.message());
    return false;
  }
  return true;
}

void Forwarder::resync(const char* why) {
  auto snap = daemon_->snapshot();
  if (!snap) {
    spdlog::warn("resync ({}): no registry snapshot: {}", why, snap.status().to_string());
    return;  // need_resync_ stays set: tried again next round
  }
  if (!snap->consistent) ++stats_.torn_snapshots;
  builder_.resync(snap->blocks);
  daemon_->ring().seek(snap->resume_id);
  ++stats_.resyncs;
  need_resync_ = !builder_.in_sync();
  spdlog::info(
      "resync ({}): cleared + {} registered block(s) as {}, replaying the ring from event {}{}",
      why, snap->blocks.size(), need_resync_ ? "a failed publish" : "stored events",
      snap->resume_id, snap->consistent ? "" : " (busy daemon: best-effort snapshot)");
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
  const BuilderStats& b = builder_.stats();
  gauges_.events.store(b.records, r);
  gauges_.messages.store(b.messages, r);
  gauges_.publish_errors.store(stats_.publish_errors, r);
  gauges_.lost_events.store(stats_.lost_events, r);
  gauges_.resyncs.store(stats_.resyncs, r);
  gauges_.attached.store(daemon_ ? 1 : 0, r);
  gauges_.nats_connected.store(nats_ && nats_->connected() ? 1 : 0, r);
  uint64_t lag = 0;
  if (daemon_) {
    const shm::EventRingReader& ring = daemon_->ring();
    const uint64_t pos = ring.position() == 0 ? 1 : ring.position();  // ids start at 1
    lag = ring.published() > pos ? ring.published() - pos : 0;
  }
  gauges_.lag.store(lag, r);
}

void Forwarder::log_stats() {
  const BuilderStats& b = builder_.stats();
  spdlog::info(
      "events {} -> messages {} (stored blocks {}, removed {}, cleared {}); laps {} (lost {}), "
      "resyncs {} (best-effort {}), publish errors {}, NATS disconnects {}",
      b.records, b.messages, b.stored_blocks, b.removed_blocks, b.cleared, stats_.laps,
      stats_.lost_events, stats_.resyncs, stats_.torn_snapshots, stats_.publish_errors,
      nats_ ? nats_->disconnects() : 0);
}

Status Forwarder::run() {
  auto link = NatsLink::connect(options_.nats);
  if (!link) return link.status();
  nats_ = std::move(link.value());
  const std::string resync_subj = resync_subject(options_.ns, options_.component);
  KVPOOL_RETURN_IF_ERROR(nats_->subscribe(resync_subj, [this](std::string_view data) {
    auto who = parse_resync_request(data);
    if (!who) {
      spdlog::warn("ignoring a resync request: {}", who.status().message());
      return;
    }
    if (!who->has_value() || **who == options_.worker_id)
      resync_requested_.store(true, std::memory_order_release);
  }));
  spdlog::info("kvpool-events: instance '{}' -> {} on {} as worker {} (resync requests on {})",
               options_.instance, options_.nats.url, subject_, options_.worker_id, resync_subj);

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
    if (!daemon_) {
      auto a = DaemonAttachment::attach(options_.instance, options_.runtime_dir);
      if (!a) {
        if (attach_wait == std::chrono::milliseconds(50) || attach_wait >= kAttachRetryMax)
          spdlog::warn("waiting for kvpoold instance '{}': {}", options_.instance,
                       a.status().message());
        std::this_thread::sleep_for(attach_wait);  // back-off between attach attempts
        attach_wait = std::min(attach_wait * 2, kAttachRetryMax);
        continue;
      }
      daemon_ = std::move(a.value());
      attach_wait = std::chrono::milliseconds(50);
      ++stats_.attaches;
      need_resync_ = true;
      spdlog::info("attached to kvpoold pid {} ({} pool(s), event ring of {} slots)",
                   daemon_->daemon_pid(), daemon_->num_pools(), daemon_->ring().capacity());
    }
    if (now - last_check > kDaemonCheckInterval) {
      last_check = now;
      if (!daemon_->daemon_alive()) {
        spdlog::warn("kvpoold pid {} stopped; waiting for the next one", daemon_->daemon_pid());
        daemon_.reset();
        continue;
      }
    }
    // 2. NATS. While it is down nothing can be told; what happens meanwhile comes with the
    // resync once it is back.
    if (!nats_->connected()) {
      if (!warned_nats)
        spdlog::warn("NATS {} is not connected; will resync when it is", options_.nats.url);
      warned_nats = true;
      need_resync_ = true;
      daemon_->ring().seek_to_end();
      idle(idle_rounds);
      continue;
    }
    warned_nats = false;
    const uint64_t epoch = nats_->epoch();
    if (epoch != synced_epoch_) {
      need_resync_ = true;
      synced_epoch_ = epoch;
    }
    if (resync_requested_.exchange(false, std::memory_order_acq_rel)) {
      resync("a router asked");
      continue;
    }
    if (need_resync_ || !builder_.in_sync()) {
      resync(stats_.resyncs == 0 ? "start" : "after a gap");
      continue;
    }
    // 3. The ring.
    shm::EventRingReader& ring = daemon_->ring();
    shm::EventRecord rec;
    uint32_t n = 0;
    bool drained = false;
    while (n < kRecordsPerRound) {
      auto o = ring.next(&rec);
      if (o == shm::EventRingReader::Outcome::kEvent) {
        builder_.add(rec);
        ++n;
      } else if (o == shm::EventRingReader::Outcome::kLapped) {
        ++stats_.laps;
        stats_.lost_events += ring.lost();
        spdlog::warn("fell a lap behind the event ring ({} event(s) lost); resyncing", ring.lost());
        need_resync_ = true;
        break;
      } else {
        drained = true;
        break;
      }
    }
    if (drained) builder_.flush();
    if (n == 0 && drained) {
      idle(idle_rounds);
    } else {
      idle_rounds = 0;
    }
  }
  builder_.flush();
  if (nats_->connected()) (void)nats_->flush(std::chrono::milliseconds(2000));
  log_stats();
  return Status::ok();
}

}  // namespace kvpool::events
