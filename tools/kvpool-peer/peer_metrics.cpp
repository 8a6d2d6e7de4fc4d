#include "peer_metrics.hpp"

namespace kvpool::peer {

const char* failure_name(FetchFailure f) {
  switch (f) {
    case FetchFailure::kNoHolder:
      return "no_holder";
    case FetchFailure::kConnect:
      return "connect";
    case FetchFailure::kRefused:
      return "refused";
    case FetchFailure::kLayout:
      return "layout";
    case FetchFailure::kEpoch:
      return "epoch";
    case FetchFailure::kTimeout:
      return "timeout";
    case FetchFailure::kTransport:
      return "transport";
    case FetchFailure::kChecksum:
      return "checksum";
    case FetchFailure::kLocal:
      return "local";
    case FetchFailure::kCount:
      break;
  }
  return "?";
}

nlohmann::json Metrics::to_json() const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, p] : peers_) {
    nlohmann::json f = nlohmann::json::object();
    for (int i = 0; i < static_cast<int>(FetchFailure::kCount); ++i)
      f[failure_name(static_cast<FetchFailure>(i))] = p.failures[i];
    out[name] = {{"fetches", p.fetches},
                 {"blocks_fetched", p.blocks_fetched},
                 {"bytes_fetched", p.bytes_fetched},
                 {"failures", f},
                 {"latency_ns_sum", p.latency_ns_sum},
                 {"latency_count", p.latency_count},
                 {"latency_ns_max", p.latency_ns_max},
                 {"serves", p.serves},
                 {"blocks_served", p.blocks_served},
                 {"bytes_served", p.bytes_served},
                 {"serve_timeouts", p.serve_timeouts},
                 {"auth_failures", p.auth_failures}};
  }
  return out;
}

}  // namespace kvpool::peer
