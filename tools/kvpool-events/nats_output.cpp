#include "tools/kvpool-events/nats_output.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace kvpool::events {

NatsOutput::NatsOutput(NatsOutputOptions options)
    : options_(std::move(options)),
      subject_(kv_events_subject(options_.ns, options_.component, options_.topic)),
      builder_(options_.identity.worker_id,
               [this](std::string_view json) { return publish(json); }) {
  if (!options_.legacy_envelope) builder_.set_identity(options_.identity);
}

NatsOutput::~NatsOutput() = default;

bool NatsOutput::publish(std::string_view json) {
  if (!nats_->connected()) return false;
  if (Status s = nats_->publish(subject_, json); !s.is_ok()) {
    if (publish_errors_++ % 1000 == 0) spdlog::warn("{}", s.message());
    return false;
  }
  return true;
}

Status NatsOutput::open() {
  auto link = NatsLink::connect(options_.nats);
  if (!link) return link.status();
  nats_ = std::move(link.value());
  const std::string resync_subj = resync_subject(options_.ns, options_.component, options_.topic);
  const int64_t me = options_.identity.worker_id;
  return nats_->subscribe(resync_subj, [this, me](std::string_view data) {
    auto who = parse_resync_request(data);
    if (!who) {
      spdlog::warn("ignoring a resync request: {}", who.status().message());
      return;
    }
    if (!who->has_value() || **who == me) resync_requested_.store(true, std::memory_order_release);
  });
}

std::string NatsOutput::describe() const {
  const RouterIdentity& id = options_.identity;
  return fmt::format(
      "Dynamo router JSON -> {} on {} as worker {} (dp_rank {}, {}{}; resync requests on "
      "{}.resync)",
      options_.nats.url, subject_, id.worker_id, id.dp_rank,
      options_.legacy_envelope ? "legacy 0.2.1 envelope"
      : id.cache_owner         ? "host pools as cache_owner " + id.state_source.dump()
                               : "host pools as the worker's own",
      "", subject_);
}

void NatsOutput::close() {
  builder_.flush();
  if (nats_ && nats_->connected()) (void)nats_->flush(std::chrono::milliseconds(2000));
}

EventOutput::Counters NatsOutput::counters() const {
  const auto& b = builder_.stats();
  return Counters{b.records, b.messages, publish_errors_};
}

std::string NatsOutput::stats_line() const {
  const BuilderStats& b = builder_.stats();
  return fmt::format(
      "events {} -> messages {} (stored blocks {}, removed {}, cleared {}); publish errors {}, "
      "NATS disconnects {}",
      b.records, b.messages, b.stored_blocks, b.removed_blocks, b.cleared, publish_errors_,
      nats_ ? nats_->disconnects() : 0);
}

}  // namespace kvpool::events
