// Figures per peer (kvpoolctl peers, kvpool-peer --status): what this host fetched from
// each peer and served to it, failures by cause, and fetch latency.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace kvpool::peer {

// Why a fetch gave the worker fewer blocks than the peer was asked for.
enum class FetchFailure {
  kNoHolder,   // no peer known to hold the first hash
  kConnect,    // could not reach or authenticate the peer
  kRefused,    // the holder said no (not exported, busy, auth)
  kLayout,     // the holder's pool has another layout or hash scheme
  kEpoch,      // the holder restarted since (new epoch)
  kTimeout,    // the deadline passed first
  kTransport,  // the link or the holder failed mid-transfer
  kChecksum,   // bytes arrived but did not match the holder's checksum
  kLocal,      // no room in the local pool, or the local kvpoold refused
  kCount,
};
const char* failure_name(FetchFailure f);

struct PeerFigures {
  uint64_t fetches = 0;         // fetches asked of this peer
  uint64_t blocks_fetched = 0;  // blocks that arrived intact and were registered here
  uint64_t bytes_fetched = 0;
  uint64_t failures[static_cast<int>(FetchFailure::kCount)] = {};
  uint64_t latency_ns_sum = 0;  // of fetches that brought at least one block
  uint64_t latency_count = 0;
  uint64_t latency_ns_max = 0;
  uint64_t serves = 0;  // transfers served to this peer
  uint64_t blocks_served = 0;
  uint64_t bytes_served = 0;
  uint64_t serve_timeouts = 0;  // served transfers cut off at their deadline
  uint64_t auth_failures = 0;   // handshakes with this peer that failed
};

class Metrics {
 public:
  PeerFigures& of(const std::string& peer) { return peers_[peer]; }
  void failed(const std::string& peer, FetchFailure f) { ++of(peer).failures[static_cast<int>(f)]; }
  nlohmann::json to_json() const;

 private:
  std::map<std::string, PeerFigures> peers_;
};

}  // namespace kvpool::peer
