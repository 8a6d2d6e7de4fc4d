// Who holds what, learnt from the event plane kvpool already runs (NATS): each kvpool-peer
// announces {worker_id, name, address, epoch, pools' fingerprints} on
// namespace.{ns}.component.{component}.kvpool-peers, and every host's kvpool-events
// publishes its Stored/Removed/Cleared events (worker_id = that host's). The directory keeps
// a bounded index sequence hash -> the workers that stored it, and forgets a peer (and all
// it held) when it is not heard from for peer_timeout or announces a new epoch.
//
// Thread-safe: libnats threads feed it, the service's thread asks it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvpool/core/status.hpp"
#include "options.hpp"

namespace kvpool::events {
class NatsLink;
}

namespace kvpool::peer {

struct HolderInfo {
  std::string address;
  std::string name;
  uint64_t epoch = 0;
};

class Directory {
 public:
  Directory(uint64_t capacity, uint64_t peer_timeout_ms, int64_t self_worker_id);

  void on_announce(std::string_view json);
  void on_kv_event(std::string_view json);
  // A live peer (not this host) whose events say it holds `hash`; the most recently heard.
  std::optional<HolderInfo> holder_of(uint64_t hash, const std::string& self_name);
  // The peer at `address` restarted: what its epoch `epoch` held is gone.
  void forget_epoch(const std::string& address, uint64_t epoch);
  // Drops peers not heard from for peer_timeout (and what they held).
  void expire();
  nlohmann::json to_json() const;
  size_t indexed() const;

 private:
  struct Peer {
    std::string name;
    std::string address;
    uint64_t epoch = 0;
    uint64_t heard_ns = 0;
  };
  void drop_worker_locked(int64_t worker);

  const uint64_t capacity_;
  const uint64_t timeout_ns_;
  const int64_t self_;
  mutable std::mutex mu_;
  std::map<int64_t, Peer> peers_;                             // by worker_id
  std::unordered_map<uint64_t, std::vector<int64_t>> index_;  // sequence hash -> workers
  std::deque<std::pair<uint64_t, int64_t>> order_;            // oldest entries go first
  uint64_t dropped_entries_ = 0;
  uint64_t events_seen_ = 0;
};

// The NATS side: subscribes the directory to both subjects and announces this host.
class Discovery {
 public:
  static Result<std::unique_ptr<Discovery>> start(const PeerOptions& o, Directory& directory,
                                                  uint64_t epoch,
                                                  std::map<std::string, uint64_t> pools);
  ~Discovery();
  // An event for blocks that arrived from a peer, on <peers subject>.fetched.
  void publish_fetched(const std::string& json);

 private:
  Discovery() = default;
  void announce_loop();
  std::unique_ptr<events::NatsLink> link_;
  std::string announce_subject_;
  std::string fetched_subject_;
  std::string announcement_;
  Directory* directory_ = nullptr;
  uint32_t period_ms_ = 1000;
  std::mutex mu_;
  bool stop_ = false;
  std::condition_variable cv_;
  std::thread thread_;
};

std::string peers_subject(std::string_view ns, std::string_view component);

}  // namespace kvpool::peer
