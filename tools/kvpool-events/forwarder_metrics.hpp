// kvpool-events --metrics-listen ADDR: the forwarder's own figures on HTTP /metrics
// (published, dropped, lost, resyncs, lag), next to what kvpool-exporter serves for kvpoold.
#pragma once

#include <string>

#include "tools/kvpool-events/forwarder.hpp"

namespace kvpool::events {

// The kvpool_events_* exposition of `f` (Prometheus text format 0.0.4).
std::string forwarder_metrics_text(const Forwarder& f, const ForwarderOptions& o,
                                   int64_t worker_id);

}  // namespace kvpool::events
