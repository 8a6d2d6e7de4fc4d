#include "tools/kvpool-events/forwarder_metrics.hpp"

#include "metrics.hpp"

namespace kvpool::events {

std::string forwarder_metrics_text(const Forwarder& f, const ForwarderOptions& o,
                                   int64_t worker_id) {
  const ForwarderGauges& g = f.gauges();
  const auto r = std::memory_order_relaxed;
  using metrics::Family;
  auto one = [](std::string name, std::string type, std::string help, uint64_t v) {
    return Family{std::move(name), std::move(type), std::move(help), {{"", {}, v}}};
  };
  std::vector<Family> fams;
  fams.push_back(
      Family{"kvpool_events_info",
             "gauge",
             "Constant 1; labels name the kvpoold instance and the router's worker id.",
             {{"",
               {{"kvpool_instance", o.instance}, {"worker_id", std::to_string(worker_id)}},
               uint64_t{1}}}});
  // The dashboard's job and instance pickers list label_values(kvpool_up, ...): without it
  // a forwarder's scrape job never shows up there, and its panels stay empty.
  fams.push_back(Family{"kvpool_up",
                        "gauge",
                        "1 while the forwarder is attached to the daemon's event ring, 0 while "
                        "no daemon answers.",
                        {{"", {{"kvpool_instance", o.instance}}, g.attached.load(r)}}});
  fams.push_back(one("kvpool_events_published_total", "counter",
                     "Ring events turned into messages (NATS) or batches (ZMQ).",
                     g.events.load(r)));
  fams.push_back(one("kvpool_events_messages_total", "counter",
                     "Messages handed to NATS, or batches to ZMQ.", g.messages.load(r)));
  fams.push_back(one("kvpool_events_dropped_messages_total", "counter",
                     "Messages the transport refused; routers missed them until the next resync.",
                     g.publish_errors.load(r)));
  fams.push_back(one("kvpool_events_lost_total", "counter",
                     "Ring events overwritten before the forwarder read them (it fell a lap "
                     "behind; a resync follows).",
                     g.lost_events.load(r)));
  fams.push_back(one("kvpool_events_token_ids_lost_total", "counter",
                     "Stored events sent with empty token_ids although the client sent them "
                     "(their token ids were overwritten before the forwarder read them).",
                     g.tokens_lost.load(r)));
  fams.push_back(one("kvpool_events_keys_lost_total", "counter",
                     "Stored events of keyed (BatchStore) blocks whose key was overwritten before "
                     "the forwarder read it: sent by index hash (--vllm-block-hashes key).",
                     g.keys_lost.load(r)));
  fams.push_back(one("kvpool_events_resyncs_total", "counter",
                     "Resyncs: cleared + the whole registry (start, gaps, router requests).",
                     g.resyncs.load(r)));
  fams.push_back(one("kvpool_events_lag_events", "gauge",
                     "Events kvpoold has published that the forwarder has not read yet.",
                     g.lag.load(r)));
  fams.push_back(one("kvpool_events_disk_blocks", "gauge",
                     "Blocks on the daemon's disk tiers as their events said (what a resync "
                     "announces with storage_tier disk / medium DISK).",
                     g.disk_blocks.load(r)));
  fams.push_back(one("kvpool_events_disk_view_partial", "gauge",
                     "1 once ring records were overwritten before their disk-tier part was "
                     "read: the disk blocks announced are then a subset of what is on disk.",
                     g.disk_view_partial.load(r)));
  fams.push_back(one("kvpool_events_daemon_attached", "gauge",
                     "1 while attached to kvpoold's event ring.", g.attached.load(r)));
  fams.push_back(one("kvpool_events_nats_connected", "gauge",
                     "1 while the output can deliver (connected to NATS; always 1 for ZMQ).",
                     g.nats_connected.load(r)));
  fams.push_back(metrics::build_info());
  return metrics::to_text(fams);
}

}  // namespace kvpool::events
