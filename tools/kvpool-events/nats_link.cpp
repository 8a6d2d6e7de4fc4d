#include "tools/kvpool-events/nats_link.hpp"

#include <nats/nats.h>

#include <algorithm>

namespace kvpool::events {
namespace {

Status nats_error(const std::string& what, natsStatus s) {
  return Status(ErrorCode::kIoError, what + ": " + natsStatus_GetText(s));
}

}  // namespace

struct NatsLink::Subscription {
  Handler handler;
  natsSubscription* sub = nullptr;
  static void on_message(natsConnection*, natsSubscription*, natsMsg* msg, void* self) {
    auto* s = static_cast<Subscription*>(self);
    s->handler(
        std::string_view(natsMsg_GetData(msg), static_cast<size_t>(natsMsg_GetDataLength(msg))));
    natsMsg_Destroy(msg);
  }
};

Result<std::unique_ptr<NatsLink>> NatsLink::connect(const NatsOptions& options) {
  std::unique_ptr<NatsLink> link(new NatsLink());
  link->options_ = options;
  natsOptions* o = nullptr;
  natsStatus s = natsOptions_Create(&o);
  if (s != NATS_OK) return nats_error("natsOptions_Create", s);
  link->opts_ = o;
  auto set = [&](natsStatus st, const char* what) -> Status {
    return st == NATS_OK ? Status::ok() : nats_error(what, st);
  };
  KVPOOL_RETURN_IF_ERROR(set(natsOptions_SetURL(o, options.url.c_str()), "NATS URL"));
  KVPOOL_RETURN_IF_ERROR(set(natsOptions_SetName(o, options.name.c_str()), "NATS name"));
  KVPOOL_RETURN_IF_ERROR(set(natsOptions_SetAllowReconnect(o, true), "allow reconnect"));
  KVPOOL_RETURN_IF_ERROR(set(natsOptions_SetMaxReconnect(o, -1), "max reconnect"));
  KVPOOL_RETURN_IF_ERROR(
      set(natsOptions_SetCustomReconnectDelay(o, &NatsLink::reconnect_delay, link.get()),
          "reconnect delay"));
  KVPOOL_RETURN_IF_ERROR(
      set(natsOptions_SetPingInterval(o, options.ping_interval.count()), "ping interval"));
  KVPOOL_RETURN_IF_ERROR(set(natsOptions_SetMaxPingsOut(o, 2), "max pings out"));
  KVPOOL_RETURN_IF_ERROR(set(
      natsOptions_SetDisconnectedCB(o, &NatsLink::on_disconnected, link.get()), "disconnected cb"));
  KVPOOL_RETURN_IF_ERROR(
      set(natsOptions_SetReconnectedCB(o, &NatsLink::on_connected, link.get()), "reconnected cb"));
  // Not there yet: keep trying in the background; on_connected says when it worked.
  KVPOOL_RETURN_IF_ERROR(set(
      natsOptions_SetRetryOnFailedConnect(o, true, &NatsLink::on_connected, link.get()), "retry"));
  s = natsConnection_Connect(&link->nc_, o);
  if (s == NATS_OK) {
    on_connected(link->nc_, link.get());
  } else if (s != NATS_NOT_YET_CONNECTED) {
    return nats_error("NATS connect to " + options.url, s);
  }
  return link;
}

NatsLink::~NatsLink() {
  if (nc_ != nullptr) {
    (void)natsConnection_FlushTimeout(nc_, 1000);
    natsConnection_Close(nc_);
  }
  for (auto& sub : subs_) natsSubscription_Destroy(sub->sub);
  if (nc_ != nullptr) natsConnection_Destroy(nc_);
  if (opts_ != nullptr) natsOptions_Destroy(opts_);
}

void NatsLink::on_connected(natsConnection*, void* self) {
  auto* link = static_cast<NatsLink*>(self);
  link->connected_.store(true, std::memory_order_release);
  link->epoch_.fetch_add(1, std::memory_order_acq_rel);
}

void NatsLink::on_disconnected(natsConnection*, void* self) {
  auto* link = static_cast<NatsLink*>(self);
  link->connected_.store(false, std::memory_order_release);
  link->disconnects_.fetch_add(1, std::memory_order_relaxed);
}

int64_t NatsLink::reconnect_delay(natsConnection*, int attempts, void* self) {
  auto* link = static_cast<NatsLink*>(self);
  const int64_t lo = link->options_.reconnect_min.count();
  const int64_t hi = std::max(lo, static_cast<int64_t>(link->options_.reconnect_max.count()));
  const int shift = std::clamp(attempts - 1, 0, 20);
  const int64_t base = std::min(hi, lo << shift);
  // Up to 25% jitter so the workers of a cluster do not reconnect in lock step.
  uint64_t x = link->jitter_state_.fetch_add(0x9E3779B97F4A7C15ull, std::memory_order_relaxed);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return base + static_cast<int64_t>(x % static_cast<uint64_t>(base / 4 + 1));
}

Status NatsLink::publish(const std::string& subject, std::string_view data) {
  natsStatus s =
      natsConnection_Publish(nc_, subject.c_str(), data.data(), static_cast<int>(data.size()));
  if (s != NATS_OK) return nats_error("NATS publish on " + subject, s);
  return Status::ok();
}

Status NatsLink::flush(std::chrono::milliseconds timeout) {
  natsStatus s = natsConnection_FlushTimeout(nc_, timeout.count());
  if (s != NATS_OK) return nats_error("NATS flush", s);
  return Status::ok();
}

Status NatsLink::subscribe(const std::string& subject, Handler handler) {
  auto sub = std::make_unique<Subscription>();
  sub->handler = std::move(handler);
  natsStatus s = natsConnection_Subscribe(&sub->sub, nc_, subject.c_str(),
                                          &Subscription::on_message, sub.get());
  if (s != NATS_OK) return nats_error("NATS subscribe to " + subject, s);
  // A router may receive bursts (a resync of many workers): no message limit, 1 GiB bytes.
  (void)natsSubscription_SetPendingLimits(sub->sub, -1, 1 << 30);
  subs_.push_back(std::move(sub));
  return Status::ok();
}

}  // namespace kvpool::events
