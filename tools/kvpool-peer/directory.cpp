#include "directory.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "service_state.hpp"
#include "tools/kvpool-events/nats_link.hpp"
#include "tools/kvpool-events/router_event.hpp"

namespace kvpool::peer {

std::string peers_subject(std::string_view ns, std::string_view component) {
  return "namespace." + std::string(ns) + ".component." + std::string(component) + ".kvpool-peers";
}

Directory::Directory(uint64_t capacity, uint64_t peer_timeout_ms, int64_t self_worker_id)
    : capacity_(capacity), timeout_ns_(peer_timeout_ms * 1'000'000ull), self_(self_worker_id) {}

void Directory::on_announce(std::string_view text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("worker_id") || !j.contains("address") ||
      !j.contains("epoch"))
    return;
  try {
    const int64_t w = j.at("worker_id").get<int64_t>();
    if (w == self_) return;
    std::lock_guard lock(mu_);
    Peer& p = peers_[w];
    const uint64_t epoch = j.at("epoch").get<uint64_t>();
    if (p.epoch != 0 && p.epoch != epoch) {
      spdlog::info("peer {} restarted (epoch {:016x} -> {:016x}): forgetting what it held", p.name,
                   p.epoch, epoch);
      drop_worker_locked(w);
    }
    p.epoch = epoch;
    p.address = j.at("address").get<std::string>();
    p.name = j.value("name", p.address);
    p.heard_ns = mono_ns();
  } catch (const nlohmann::json::exception&) {
  }
}

void Directory::on_kv_event(std::string_view text) {
  auto ev = events::parse_router_event(text);
  if (!ev || ev->worker_id == self_) return;
  std::lock_guard lock(mu_);
  ++events_seen_;
  const int64_t w = ev->worker_id;
  switch (ev->kind) {
    case events::RouterEvent::Kind::kStored:
      for (const auto& b : ev->blocks) {
        auto& ws = index_[b.block_hash];
        if (std::find(ws.begin(), ws.end(), w) != ws.end()) continue;
        ws.push_back(w);
        order_.emplace_back(b.block_hash, w);
      }
      while (order_.size() > capacity_) {
        auto [h, ow] = order_.front();
        order_.pop_front();
        if (auto it = index_.find(h); it != index_.end()) {
          std::erase(it->second, ow);
          if (it->second.empty()) index_.erase(it);
          ++dropped_entries_;
        }
      }
      break;
    case events::RouterEvent::Kind::kRemoved:
      for (uint64_t h : ev->block_hashes)
        if (auto it = index_.find(h); it != index_.end()) {
          std::erase(it->second, w);
          if (it->second.empty()) index_.erase(it);
        }
      break;
    case events::RouterEvent::Kind::kCleared:
      drop_worker_locked(w);
      break;
  }
}

// O(index): only on a restart, a Cleared event or a peer gone silent.
void Directory::drop_worker_locked(int64_t worker) {
  for (auto it = index_.begin(); it != index_.end();) {
    std::erase(it->second, worker);
    it = it->second.empty() ? index_.erase(it) : std::next(it);
  }
}

std::optional<HolderInfo> Directory::holder_of(uint64_t hash, const std::string& self_name) {
  std::lock_guard lock(mu_);
  auto it = index_.find(hash);
  if (it == index_.end()) return std::nullopt;
  const uint64_t now = mono_ns();
  const Peer* best = nullptr;
  for (int64_t w : it->second) {
    auto p = peers_.find(w);
    if (p == peers_.end() || p->second.address.empty() || p->second.name == self_name ||
        now - p->second.heard_ns > timeout_ns_)
      continue;
    if (best == nullptr || p->second.heard_ns > best->heard_ns) best = &p->second;
  }
  if (best == nullptr) return std::nullopt;
  return HolderInfo{best->address, best->name, best->epoch};
}

void Directory::forget_epoch(const std::string& address, uint64_t epoch) {
  std::lock_guard lock(mu_);
  for (auto& [w, p] : peers_)
    if (p.address == address && p.epoch == epoch) drop_worker_locked(w);
}

void Directory::expire() {
  std::lock_guard lock(mu_);
  const uint64_t now = mono_ns();
  for (auto it = peers_.begin(); it != peers_.end();) {
    if (now - it->second.heard_ns > timeout_ns_) {
      spdlog::info("peer {} not heard from: dropped", it->second.name);
      drop_worker_locked(it->first);
      it = peers_.erase(it);
    } else {
      ++it;
    }
  }
}

size_t Directory::indexed() const {
  std::lock_guard lock(mu_);
  return index_.size();
}

nlohmann::json Directory::to_json() const {
  std::lock_guard lock(mu_);
  nlohmann::json peers = nlohmann::json::array();
  const uint64_t now = mono_ns();
  for (const auto& [w, p] : peers_)
    peers.push_back({{"worker_id", w},
                     {"name", p.name},
                     {"address", p.address},
                     {"epoch", p.epoch},
                     {"heard_ms_ago", (now - p.heard_ns) / 1'000'000}});
  return {{"peers", peers},
          {"indexed_hashes", index_.size()},
          {"capacity", capacity_},
          {"dropped_entries", dropped_entries_},
          {"events_seen", events_seen_}};
}

// ---- Discovery ----------------------------------------------------------------------------

Result<std::unique_ptr<Discovery>> Discovery::start(const PeerOptions& o, Directory& directory,
                                                    uint64_t epoch,
                                                    std::map<std::string, uint64_t> pools) {
  std::unique_ptr<Discovery> d(new Discovery());
  events::NatsOptions no;
  no.url = o.nats_url;
  no.name = "kvpool-peer " + o.name;
  auto link = events::NatsLink::connect(no);
  if (!link) return link.status();
  d->link_ = std::move(*link);
  d->directory_ = &directory;
  d->period_ms_ = o.announce_ms;
  d->announce_subject_ = peers_subject(o.nats_namespace, o.nats_component);
  d->fetched_subject_ = d->announce_subject_ + ".fetched";
  nlohmann::json a = {{"worker_id", o.worker_id},
                      {"name", o.name},
                      {"address", o.advertise.empty() ? o.listen : o.advertise},
                      {"epoch", epoch},
                      {"pools", pools}};
  d->announcement_ = a.dump();
  Directory* dir = &directory;
  KVPOOL_RETURN_IF_ERROR(d->link_->subscribe(d->announce_subject_,
                                             [dir](std::string_view m) { dir->on_announce(m); }));
  for (auto topic : {events::kDefaultTopic, events::kLegacyTopic})
    KVPOOL_RETURN_IF_ERROR(
        d->link_->subscribe(events::kv_events_subject(o.nats_namespace, o.nats_component, topic),
                            [dir](std::string_view m) { dir->on_kv_event(m); }));
  // The subscriptions are in force at the server before kvpool-peer says it is ready: events
  // published after that (a peer's Stored) reach this directory.
  KVPOOL_RETURN_IF_ERROR(d->link_->flush(std::chrono::milliseconds(2000)));
  d->thread_ = std::thread([p = d.get()] { p->announce_loop(); });
  return d;
}

Discovery::~Discovery() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Discovery::publish_fetched(const std::string& json) {
  (void)link_->publish(fetched_subject_, json);
}

void Discovery::announce_loop() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    if (!announcement_.empty() && !announce_subject_.empty())
      (void)link_->publish(announce_subject_, announcement_);
    directory_->expire();
    cv_.wait_for(lock, std::chrono::milliseconds(period_ms_), [&] { return stop_; });
  }
}

}  // namespace kvpool::peer
