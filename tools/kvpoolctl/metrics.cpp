#include "metrics.hpp"

#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <sstream>

#include "kvpool/core/clock.hpp"
#include "kvpool/core/layout.hpp"
#include "kvpool/core/version.hpp"
#include "kvpool/shm/cpu_share.hpp"

namespace kvpool::metrics {
namespace {

double as_double(const Value& v) {
  if (const auto* u = std::get_if<uint64_t>(&v)) return static_cast<double>(*u);
  return std::get<double>(v);
}

// Our histogram family as prometheus-cpp's: one histogram per label set other than `le`
// (_bucket{le}, _sum, _count each carry that set), in the order the samples first name it;
// the serializer writes the +Inf bucket from the count itself.
std::vector<prometheus::ClientMetric> to_histograms(const Family& fam) {
  std::vector<Labels> keys;
  std::vector<prometheus::ClientMetric> out;
  for (const Sample& smp : fam.samples) {
    Labels key;
    std::string le;
    for (const auto& [k, val] : smp.labels) {
      if (k == "le") {
        le = val;
      } else {
        key.emplace_back(k, val);
      }
    }
    size_t i = 0;
    while (i < keys.size() && keys[i] != key) ++i;
    if (i == keys.size()) {
      keys.push_back(key);
      out.emplace_back();
      for (const auto& [k, val] : key) out.back().label.push_back({k, val});
    }
    prometheus::ClientMetric& m = out[i];
    if (smp.suffix == "_sum") {
      m.histogram.sample_sum = as_double(smp.value);
    } else if (smp.suffix == "_count") {
      m.histogram.sample_count = static_cast<uint64_t>(as_double(smp.value));
    } else if (smp.suffix == "_bucket" && le != "+Inf") {
      m.histogram.bucket.push_back(
          {static_cast<uint64_t>(as_double(smp.value)), std::strtod(le.c_str(), nullptr)});
    }
  }
  return out;
}

double ratio(uint64_t part, uint64_t whole) {
  return whole == 0 ? 0.0 : static_cast<double>(part) / static_cast<double>(whole);
}

// ---- disk tiers (layout 4.1; pools without one have no samples) ----------------------
void collect_disk(const ctl::ControlView& v, std::vector<Family>& f) {
  auto rl = [](const std::atomic<uint64_t>& a) -> uint64_t {
    return a.load(std::memory_order_relaxed);
  };
  auto index_of = [&](const char* name, const char* type, const char* help) {
    f.push_back(Family{std::string("kvpool_disk_") + name, type, help, {}});
    return f.size() - 1;
  };
  const size_t info = index_of("info", "gauge",
                               "Constant 1 per pool with a disk tier; labels give its slot file, "
                               "whether it runs O_DIRECT and its I/O engine.");
  const size_t slots = index_of("slots", "gauge", "Slots (blocks) of a pool's disk tier.");
  const size_t used = index_of("slots_used", "gauge", "Slots holding a published block.");
  const size_t slot_bytes =
      index_of("slot_bytes", "gauge", "Bytes of one slot: a 4 KiB header and the block.");
  struct DiskCounter {
    const char* name;
    const char* help;
    std::atomic<uint64_t> shm::DiskTierInfo::*field;
  };
  const DiskCounter counters[] = {
      {"written_bytes_total", "Block bytes written to disk and durable (write-behind).",
       &shm::DiskTierInfo::bytes_written},
      {"read_bytes_total", "Block bytes read back (onboard), verified and registered.",
       &shm::DiskTierInfo::bytes_read},
      {"written_blocks_total", "Blocks written to disk.", &shm::DiskTierInfo::blocks_written},
      {"onboarded_blocks_total", "Blocks read back from disk into host memory.",
       &shm::DiskTierInfo::blocks_onboarded},
      {"write_queue_drops_total",
       "Registered blocks not written because the write queue was full (never waited for).",
       &shm::DiskTierInfo::write_queue_drops},
      {"write_skipped_total",
       "Queued blocks not written: gone from host memory, or no slot free, before their turn.",
       &shm::DiskTierInfo::write_skipped},
      {"evictions_total", "Disk slots reused for newer blocks (LRU).",
       &shm::DiskTierInfo::evictions},
      {"checksum_failures_total",
       "Blocks read from disk whose bytes did not match their checksum: served as misses, "
       "slot dropped.",
       &shm::DiskTierInfo::checksum_failures},
      {"io_errors_total", "Disk reads or writes the OS failed or cut short.",
       &shm::DiskTierInfo::io_errors},
  };
  std::vector<size_t> cf;
  for (const auto& c : counters) cf.push_back(index_of(c.name, "counter", c.help));
  const size_t lat = index_of("onboard_duration_seconds", "histogram",
                              "Onboard time, from the first disk read submitted to the blocks "
                              "registered in host memory.");
  for (size_t k = 0; k < v.pools.size(); ++k) {
    const shm::DiskTierInfo* d = ctl::disk_info(v, k);
    if (d == nullptr) continue;
    const std::string& name = v.pools[k].name();
    Labels l{{"pool", name}};
    f[info].samples.push_back(
        {"",
         {{"pool", name},
          {"path", std::string(d->path, strnlen(d->path, sizeof(d->path)))},
          {"direct_io", d->direct_io != 0 ? "on" : "off"},
          {"io_engine", std::string(d->io_engine, strnlen(d->io_engine, sizeof(d->io_engine)))}},
         uint64_t{1}});
    f[slots].samples.push_back({"", l, d->slots_total});
    f[used].samples.push_back({"", l, rl(d->slots_used)});
    f[slot_bytes].samples.push_back({"", l, d->slot_bytes});
    for (size_t c = 0; c < std::size(counters); ++c)
      f[cf[c]].samples.push_back({"", l, rl(d->*counters[c].field)});
    uint64_t cumulative = 0;
    for (size_t i = 0; i <= shm::kOnboardBounds; ++i) {
      cumulative += rl(d->onboard_latency.buckets[i]);
      std::string le = i < shm::kOnboardBounds
                           ? format_double(static_cast<double>(shm::kOnboardBoundsNs[i]) / 1e9)
                           : "+Inf";
      f[lat].samples.push_back({"_bucket", {{"pool", name}, {"le", le}}, cumulative});
    }
    f[lat].samples.push_back({"_sum", l, static_cast<double>(rl(d->onboard_latency.sum_ns)) / 1e9});
    f[lat].samples.push_back({"_count", l, cumulative});
  }
}

template <typename A>
uint64_t relaxed(const A& a) {
  return a.load(std::memory_order_relaxed);
}

Family& add_family(std::vector<Family>& f, std::string name, std::string type, std::string help) {
  f.push_back(Family{"kvpool_" + std::move(name), std::move(type), std::move(help), {}});
  return f.back();
}

// Indices, not references: f grows while the families are filled.
size_t add_family_index(std::vector<Family>& f, std::string name, std::string type,
                        std::string help) {
  add_family(f, std::move(name), std::move(type), std::move(help));
  return f.size() - 1;
}

// ---- daemon: who it is, and whether its engine runs ----------------------------------
void collect_daemon(const shm::ControlHeader& h, std::vector<Family>& f) {
  // daemon_version is written once before the daemon turns ready; empty from older daemons.
  std::string daemon_version(h.daemon_version, strnlen(h.daemon_version, sizeof(h.daemon_version)));
  add_family(f, "daemon_info", "gauge",
             "Constant 1; labels name the daemon instance, its pid, shm layout and version.")
      .samples.push_back({"",
                          {{"kvpool_instance", h.instance},
                           {"pid", std::to_string(h.daemon_pid)},
                           {"layout_version",
                            std::to_string(h.layout_major) + "." + std::to_string(h.layout_minor)},
                           {"version", daemon_version.empty() ? "unknown" : daemon_version}},
                          uint64_t{1}});
  add_family(f, "daemon_start_time_seconds", "gauge", "Unix time the daemon started.")
      .samples.push_back({"", {}, static_cast<double>(h.start_time_ns) / 1e9});
  {
    uint64_t hb = relaxed(h.heartbeat_ns), now = now_ns(CLOCK_MONOTONIC);
    add_family(f, "engine_heartbeat_age_seconds", "gauge",
               "Seconds since the progress engine last did its periodic work (about every 50 ms "
               "when healthy).")
        .samples.push_back(
            {"", {}, hb != 0 && now > hb ? static_cast<double>(now - hb) / 1e9 : 0.0});
  }
}

// Client slots by state (shm::SlotState).
void collect_slots(const ctl::ControlView& v, std::vector<Family>& f) {
  const shm::ControlHeader& h = *v.header;
  uint64_t by_state[4] = {0, 0, 0, 0};
  for (uint32_t i = 0; i < h.max_clients; ++i) {
    uint32_t s = v.slot(i).state.load(std::memory_order_relaxed);
    if (s < 4) ++by_state[s];
  }
  add_family(f, "clients_attached", "gauge", "Clients attached now (any state but free).")
      .samples.push_back({"", {}, by_state[1] + by_state[2] + by_state[3]});
  {
    Family& c = add_family(f, "clients", "gauge", "Client slots by state.");
    c.samples.push_back({"", {{"state", "attaching"}}, by_state[1]});
    c.samples.push_back({"", {{"state", "attached"}}, by_state[2]});
    c.samples.push_back({"", {{"state", "suspect"}}, by_state[3]});
  }
  add_family(f, "client_slots", "gauge", "Client slots (max_clients).")
      .samples.push_back({"", {}, uint64_t{h.max_clients}});
  // What callers' wait policy reads (shm/cpu_share.hpp): 0 from a daemon too old to say.
  add_family(f, "engine_cpus", "gauge",
             "CPUs the progress engine may run on (its affinity mask); 0: not published.")
      .samples.push_back({"", {}, relaxed(h.stats.engine_cpus)});
  add_family(f, "clients_busy", "gauge",
             "Clients in a call now (a request taken within the last 200 us); callers poll for "
             "their answer only while these and kvpoold fit engine_cpus.")
      .samples.push_back({"", {}, relaxed(h.stats.clients_busy)});
  add_family(f, "clients_awake", "gauge",
             "Of the clients in a call, those not asleep on their doorbell (each wants a core); "
             "callers poll only while these and kvpoold fit engine_cpus.")
      .samples.push_back(
          {"",
           {},
           shm::clients_competing(relaxed(h.stats.clients_busy), relaxed(h.stats.clients_awake))});
}

void collect_daemon_counters(const shm::ControlHeader& h, std::vector<Family>& f) {
  auto counter = [&](const char* name, const char* help, const std::atomic<uint64_t>& a) {
    add_family(f, name, "counter", help).samples.push_back({"", {}, relaxed(a)});
  };
  counter("attaches_total", "Client attaches completed.", h.stats.clients_attached);
  counter("detaches_total", "Clean client detaches.", h.stats.clients_detached);
  counter("reclaimed_clients_total", "Clients that died and were reclaimed by the daemon.",
          h.stats.reclaimed_clients);
  counter("reclaimed_blocks_total", "Blocks returned to the pools by those reclaims.",
          h.stats.reclaimed_blocks);
  counter("requests_total", "Request records processed by the progress engine.", h.stats.requests);
  counter("protocol_errors_total", "Malformed request records answered with an error.",
          h.stats.protocol_errors);
  counter("disconnects_total", "Clients cut off for corrupting their rings.", h.stats.disconnects);
  counter("refused_attaches_total", "Attaches refused (version, uid/gid, capacity).",
          h.stats.refused_attaches);
  counter("engine_sleeps_total", "Times the progress engine parked for lack of work.",
          h.stats.engine_sleeps);
  {  // every layout-2 daemon has the reclaim times
    // The family always, its sample once a reclaim happened (no figure beats a made-up 0).
    Family& last = add_family(f, "last_reclaim_duration_seconds", "gauge",
                              "Engine time of the last reclaim, from taking up the dead client's "
                              "hang-up to its blocks being back.");
    uint64_t noticed = relaxed(h.stats.last_reclaim_noticed_ns),
             done = relaxed(h.stats.last_reclaim_done_ns);
    if (noticed != 0 && done >= noticed)
      last.samples.push_back({"", {}, static_cast<double>(done - noticed) / 1e9});
  }
}

void collect_request_latency(const ctl::ControlView& v, std::vector<Family>& f) {
  if (const shm::LatencyHistogram* lat = ctl::request_latency(v)) {
    Family& hist = add_family(f, "request_duration_seconds", "histogram",
                              "Progress-engine time per request record, from taking it off the "
                              "ring to publishing its answer.");
    uint64_t cumulative = 0;
    for (size_t i = 0; i <= shm::kLatencyBounds; ++i) {
      cumulative += relaxed(lat->buckets[i]);
      std::string le = i < shm::kLatencyBounds
                           ? format_double(static_cast<double>(shm::kLatencyBoundsNs[i]) / 1e9)
                           : "+Inf";
      hist.samples.push_back({"_bucket", {{"le", le}}, cumulative});
    }
    // _count is the +Inf bucket, read once, so the two always agree.
    hist.samples.push_back({"_sum", {}, static_cast<double>(relaxed(lat->sum_ns)) / 1e9});
    hist.samples.push_back({"_count", {}, cumulative});
  }
}

// ---- pools: one sample per pool in each family ----------------------------------------
// The pools' families, in the order they are written: each member is its family's index in
// f (indices, not references: f grows while the families are filled).
struct PoolFamilies {
  size_t blocks, size, bytes, block_bytes, usage, occupancy, holds, q_tokens, h_tokens;
  std::vector<size_t> counters;  // one per kPoolCounters entry
  size_t adopted, adoption_dropped;
};

struct PoolCounter {
  const char* name;
  const char* help;
  std::atomic<uint64_t> pool::PoolStats::*field;
};
constexpr PoolCounter kPoolCounters[] = {
    {"allocations_total", "Blocks handed out by allocate.", &pool::PoolStats::allocations},
    {"evictions_total", "Inactive registered blocks evicted to satisfy allocate.",
     &pool::PoolStats::evictions},
    {"registrations_total", "Blocks newly registered.", &pool::PoolStats::registrations},
    {"register_dedups_total", "Registrations answered by an already registered block.",
     &pool::PoolStats::register_dedups},
    {"match_queries_total", "Sequence hashes (blocks) asked for by match.",
     &pool::PoolStats::match_queries},
    {"match_hits_total", "Sequence hashes (blocks) match answered with a block.",
     &pool::PoolStats::match_hits},
    {"released_references_total", "Immutable block references dropped.",
     &pool::PoolStats::released_refs},
    {"rejected_handles_total", "Stale, foreign or unknown block handles refused.",
     &pool::PoolStats::rejected_handles},
    {"checksum_verified_total",
     "Checksummed blocks kvpoold hashed (verify requests and kvpoolctl scrub).",
     &pool::PoolStats::checksum_verified},
    {"checksum_mismatches_total",
     "Blocks whose bytes no longer matched their checksum: evicted, never served again.",
     &pool::PoolStats::checksum_mismatches},
};

PoolFamilies add_pool_families(std::vector<Family>& f) {
  PoolFamilies p;
  p.blocks = add_family_index(f, "blocks", "gauge", "Blocks of a pool by state.");
  p.size = add_family_index(f, "pool_blocks", "gauge", "Blocks in a pool (num_blocks).");
  p.bytes = add_family_index(f, "pool_bytes", "gauge",
                             "Bytes of KV data a pool holds (num_blocks x block bytes), in "
                             "host shared memory or GPU memory (storage label).");
  p.block_bytes = add_family_index(f, "pool_block_bytes", "gauge", "Bytes of one block of a pool.");
  p.usage = add_family_index(
      f, "pool_usage_ratio", "gauge",
      "Fraction of a pool's blocks in use by some client: (active + mutable) / total.");
  p.occupancy = add_family_index(
      f, "pool_occupancy_ratio", "gauge",
      "Fraction of a pool's blocks holding data: (active + mutable + inactive) / total; the "
      "rest are free.");
  p.holds = add_family_index(f, "pool_hold_records_used", "gauge",
                             "(client, block) reference records in use (of max_holds).");
  p.q_tokens = add_family_index(
      f, "prefix_cache_queries_tokens_total", "counter",
      "Tokens asked for by match (hashes x page_size); vLLM's prefix_cache_queries.");
  p.h_tokens = add_family_index(
      f, "prefix_cache_hits_tokens_total", "counter",
      "Tokens match answered from the cache (hit hashes x page_size); vLLM's prefix_cache_hits.");
  for (const auto& pc : kPoolCounters)
    p.counters.push_back(add_family_index(f, pc.name, "counter", pc.help));
  // Layout 3.1: what this daemon took over from its predecessor (0 from a fresh start).
  p.adopted = add_family_index(f, "adopted_blocks_total", "counter",
                               "Registered blocks this daemon adopted from the previous "
                               "one at start (kvpoold --supervise or systemd's fd store).");
  p.adoption_dropped = add_family_index(
      f, "adoption_dropped_blocks_total", "counter",
      "Blocks adoption dropped at start because their registration could not be proven.");
  return p;
}

void add_pool_samples(const ctl::ControlView& v, size_t i, const PoolFamilies& pf,
                      std::vector<Family>& f) {
  const auto& p = v.pools[i];
  const shm::PoolInfo& info = *v.pool_infos[i];
  const std::string& name = p.name();
  const Labels l{{"pool", name}};
  pool::PoolCounts c = p.counts();
  const pool::PoolStats& s = p.stats();
  auto& b = f[pf.blocks].samples;
  b.push_back({"", {{"pool", name}, {"state", "free"}}, uint64_t{c.free}});
  b.push_back({"", {{"pool", name}, {"state", "mutable"}}, uint64_t{c.mutable_blocks}});
  b.push_back({"", {{"pool", name}, {"state", "active"}}, uint64_t{c.active}});
  b.push_back({"", {{"pool", name}, {"state", "inactive"}}, uint64_t{c.inactive}});
  f[pf.size].samples.push_back({"", l, uint64_t{c.total}});
  f[pf.bytes].samples.push_back(
      {"", {{"pool", name}, {"storage", ctl::storage_name(info.storage)}}, info.data_bytes});
  auto layout = Layout::create(info.layout);
  f[pf.block_bytes].samples.push_back(
      {"", l, layout ? uint64_t{layout->block_bytes()} : uint64_t{0}});
  f[pf.usage].samples.push_back({"", l, ratio(uint64_t{c.active} + c.mutable_blocks, c.total)});
  f[pf.occupancy].samples.push_back(
      {"", l, ratio(uint64_t{c.active} + c.mutable_blocks + c.inactive, c.total)});
  f[pf.holds].samples.push_back({"", l, relaxed(s.holds_used)});
  const uint64_t page = info.layout.page_size;
  f[pf.q_tokens].samples.push_back({"", l, relaxed(s.match_queries) * page});
  f[pf.h_tokens].samples.push_back({"", l, relaxed(s.match_hits) * page});
  for (size_t k = 0; k < std::size(kPoolCounters); ++k)
    f[pf.counters[k]].samples.push_back({"", l, relaxed(s.*kPoolCounters[k].field)});
  f[pf.adopted].samples.push_back({"", l, info.adopted_blocks});
  f[pf.adoption_dropped].samples.push_back({"", l, info.adoption_dropped_blocks});
}

void collect_pools(const ctl::ControlView& v, std::vector<Family>& f) {
  const PoolFamilies pf = add_pool_families(f);
  for (size_t i = 0; i < v.pools.size(); ++i) add_pool_samples(v, i, pf, f);
}

// ---- clients -------------------------------------------------------------------------
void collect_clients(const ctl::ControlView& v, std::vector<Family>& f) {
  const shm::ControlHeader& h = *v.header;
  // Per attached client, labelled by slot and pid (a slot is reused; its pid says by whom).
  const size_t c_requests =
      add_family_index(f, "client_requests_total", "counter",
                       "Request records the progress engine took from a client.");
  const size_t c_errors = add_family_index(f, "client_protocol_errors_total", "counter",
                                           "Malformed request records of a client.");
  const size_t c_hits =
      add_family_index(f, "client_match_hits_total", "counter",
                       "Blocks a client's matches found in the registry (its hits).");
  const size_t c_rejected =
      add_family_index(f, "client_rejected_handles_total", "counter",
                       "Release handles of a client the daemon refused (stale, foreign, unknown).");
  const size_t c_blocks = add_family_index(
      f, "client_blocks_held", "gauge",
      "Blocks a client holds now, all pools: its mutable blocks (kind=mutable) and the "
      "distinct registered blocks it references (kind=registered).");
  const size_t c_refs = add_family_index(f, "client_references_held", "gauge",
                                         "References a client holds to registered blocks (a block "
                                         "matched twice counts twice).");
  for (uint32_t slot = 0; slot < h.max_clients; ++slot) {
    const shm::SlotInfo& si = v.slot(slot);
    if (si.state.load(std::memory_order_acquire) == static_cast<uint32_t>(shm::SlotState::kFree))
      continue;
    Labels l{{"slot", std::to_string(slot)},
             {"pid", std::to_string(si.pid.load(std::memory_order_relaxed))}};
    uint64_t mut = 0, held = 0, refs = 0;
    for (const auto& p : v.pools) {
      ctl::SlotHoldings hh = ctl::slot_holdings(p, slot);
      mut += hh.mutable_blocks;
      held += hh.held_blocks;
      refs += hh.held_refs;
    }
    f[c_requests].samples.push_back({"", l, relaxed(si.requests)});
    f[c_errors].samples.push_back({"", l, relaxed(si.protocol_errors)});
    f[c_hits].samples.push_back({"", l, relaxed(si.match_hits)});
    f[c_rejected].samples.push_back({"", l, relaxed(si.rejected_handles)});
    Labels lm = l, lr = l;
    lm.emplace_back("kind", "mutable");
    lr.emplace_back("kind", "registered");
    f[c_blocks].samples.push_back({"", lm, mut});
    f[c_blocks].samples.push_back({"", lr, held});
    f[c_refs].samples.push_back({"", l, refs});
  }
}

}  // namespace

std::string format_double(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

Family build_info() {
  return Family{"kvpool_build_info",
                "gauge",
                "Constant 1; labels give the version and git commit of the kvpool program "
                "serving these metrics.",
                {{"", {{"version", version()}, {"git_commit", git_commit()}}, uint64_t{1}}}};
}

std::vector<Family> collect(const ctl::ControlView& v) {
  std::vector<Family> f;
  collect_daemon(*v.header, f);
  collect_slots(v, f);
  collect_daemon_counters(*v.header, f);
  collect_request_latency(v, f);
  collect_pools(v, f);
  collect_disk(v, f);
  collect_clients(v, f);
  return f;
}

// The text itself is prometheus-cpp's (TextSerializer: escaping, number format, histogram
// layout); the families stay ours, so the JSON form and the text never disagree.
std::string to_text(const std::vector<Family>& families) {
  std::vector<prometheus::MetricFamily> out;
  out.reserve(families.size());
  for (const Family& fam : families) {
    prometheus::MetricFamily pf;
    pf.name = fam.name;
    pf.help = fam.help;
    pf.type = fam.type == "counter"     ? prometheus::MetricType::Counter
              : fam.type == "gauge"     ? prometheus::MetricType::Gauge
              : fam.type == "histogram" ? prometheus::MetricType::Histogram
                                        : prometheus::MetricType::Untyped;
    if (pf.type == prometheus::MetricType::Histogram) {
      pf.metric = to_histograms(fam);
    } else {
      for (const Sample& smp : fam.samples) {
        prometheus::ClientMetric m;
        for (const auto& [k, val] : smp.labels) m.label.push_back({k, val});
        const double d = as_double(smp.value);
        m.counter.value = d;
        m.gauge.value = d;
        m.untyped.value = d;
        pf.metric.push_back(std::move(m));
      }
    }
    out.push_back(std::move(pf));
  }
  std::ostringstream text;
  prometheus::TextSerializer().Serialize(text, out);
  return text.str();
}

nlohmann::json to_json(const std::vector<Family>& families) {
  nlohmann::json out = nlohmann::json::array();
  for (const Family& fam : families) {
    nlohmann::json samples = nlohmann::json::array();
    for (const Sample& s : fam.samples) {
      nlohmann::json labels = nlohmann::json::object();
      for (const auto& [k, val] : s.labels) labels[k] = val;
      nlohmann::json value;
      if (const auto* u = std::get_if<uint64_t>(&s.value)) {
        value = *u;
      } else {
        value = std::get<double>(s.value);
      }
      samples.push_back({{"name", fam.name + s.suffix}, {"labels", labels}, {"value", value}});
    }
    out.push_back(
        {{"name", fam.name}, {"type", fam.type}, {"help", fam.help}, {"samples", samples}});
  }
  return out;
}

}  // namespace kvpool::metrics
