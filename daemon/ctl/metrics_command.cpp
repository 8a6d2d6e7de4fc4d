// kvpoolctl metrics [--instance NAME] [--runtime-dir DIR] [--json]
// Prometheus text exposition format (version 0.0.4), every name prefixed kvpool_, per-pool
// figures labelled pool="<name>". Meant for node_exporter's textfile collector or a
// scrape wrapper; --json prints the same families as JSON.
#include <time.h>

#include <charconv>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "commands.hpp"
#include "control_view.hpp"

namespace kvpool {
namespace {

using Labels = std::vector<std::pair<std::string, std::string>>;
using Value = std::variant<uint64_t, double>;

struct Sample {
  std::string suffix;  // "_bucket", "_sum", "_count" for histograms, else ""
  Labels labels;
  Value value;
};

struct Family {
  std::string name;
  std::string type;  // gauge | counter | histogram
  std::string help;
  std::vector<Sample> samples;
};

std::string format_double(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

std::string format_value(const Value& v) {
  if (const auto* u = std::get_if<uint64_t>(&v)) return std::to_string(*u);
  return format_double(std::get<double>(v));
}

std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string escape_help(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

uint64_t clock_ns(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

std::vector<Family> collect(const ctl::ControlView& v) {
  auto rl = [](const auto& a) -> uint64_t { return a.load(std::memory_order_relaxed); };
  const shm::ControlHeader& h = *v.header;
  std::vector<Family> f;
  auto family = [&](std::string name, std::string type, std::string help) -> Family& {
    f.push_back(Family{"kvpool_" + std::move(name), std::move(type), std::move(help), {}});
    return f.back();
  };

  // ---- daemon --------------------------------------------------------------------------
  family("daemon_info", "gauge", "Constant 1; labels name the daemon instance and shm layout.")
      .samples.push_back({"",
                          {{"kvpool_instance", h.instance},
                           {"pid", std::to_string(h.daemon_pid)},
                           {"layout_version",
                            std::to_string(h.layout_major) + "." + std::to_string(h.layout_minor)}},
                          uint64_t{1}});
  family("daemon_start_time_seconds", "gauge", "Unix time the daemon started.")
      .samples.push_back({"", {}, static_cast<double>(h.start_time_ns) / 1e9});
  {
    uint64_t hb = rl(h.heartbeat_ns), now = clock_ns(CLOCK_MONOTONIC);
    family("engine_heartbeat_age_seconds", "gauge",
           "Seconds since the progress engine last did its periodic work (about every 50 ms "
           "when healthy).")
        .samples.push_back(
            {"", {}, hb != 0 && now > hb ? static_cast<double>(now - hb) / 1e9 : 0.0});
  }
  uint64_t by_state[4] = {0, 0, 0, 0};
  for (uint32_t i = 0; i < h.max_clients; ++i) {
    uint32_t s = v.slots[i].state.load(std::memory_order_relaxed);
    if (s < 4) ++by_state[s];
  }
  family("clients_attached", "gauge", "Clients attached now (any state but free).")
      .samples.push_back({"", {}, by_state[1] + by_state[2] + by_state[3]});
  {
    Family& c = family("clients", "gauge", "Client slots by state.");
    c.samples.push_back({"", {{"state", "attaching"}}, by_state[1]});
    c.samples.push_back({"", {{"state", "attached"}}, by_state[2]});
    c.samples.push_back({"", {{"state", "suspect"}}, by_state[3]});
  }
  family("client_slots", "gauge", "Client slots (max_clients).")
      .samples.push_back({"", {}, uint64_t{h.max_clients}});
  auto counter = [&](const char* name, const char* help, const std::atomic<uint64_t>& a) {
    family(name, "counter", help).samples.push_back({"", {}, rl(a)});
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

  if (const shm::LatencyHistogram* lat = ctl::request_latency(v)) {
    Family& hist = family("request_duration_seconds", "histogram",
                          "Progress-engine time per request record, from taking it off the "
                          "ring to publishing its answer.");
    uint64_t cumulative = 0;
    for (size_t i = 0; i <= shm::kLatencyBounds; ++i) {
      cumulative += rl(lat->buckets[i]);
      std::string le = i < shm::kLatencyBounds
                           ? format_double(static_cast<double>(shm::kLatencyBoundsNs[i]) / 1e9)
                           : "+Inf";
      hist.samples.push_back({"_bucket", {{"le", le}}, cumulative});
    }
    // _count is the +Inf bucket, read once, so the two always agree.
    hist.samples.push_back({"_sum", {}, static_cast<double>(rl(lat->sum_ns)) / 1e9});
    hist.samples.push_back({"_count", {}, cumulative});
  }

  // ---- pools ---------------------------------------------------------------------------
  // Indices, not references: f grows while the families are filled.
  family("blocks", "gauge", "Blocks of a pool by state.");
  const size_t blocks = f.size() - 1;
  family("pool_blocks", "gauge", "Blocks in a pool (num_blocks).");
  const size_t size = f.size() - 1;
  family("pool_hold_records_used", "gauge",
         "(client, block) reference records in use (of max_holds).");
  const size_t holds = f.size() - 1;
  struct PoolCounter {
    const char* name;
    const char* help;
    std::atomic<uint64_t> pool::PoolStats::*field;
  };
  const PoolCounter pool_counters[] = {
      {"allocations_total", "Blocks handed out by allocate.", &pool::PoolStats::allocations},
      {"evictions_total", "Inactive registered blocks evicted to satisfy allocate.",
       &pool::PoolStats::evictions},
      {"registrations_total", "Blocks newly registered.", &pool::PoolStats::registrations},
      {"register_dedups_total", "Registrations answered by an already registered block.",
       &pool::PoolStats::register_dedups},
      {"match_queries_total", "Sequence hashes asked for by match.",
       &pool::PoolStats::match_queries},
      {"match_hits_total", "Sequence hashes match answered with a block.",
       &pool::PoolStats::match_hits},
      {"released_references_total", "Immutable block references dropped.",
       &pool::PoolStats::released_refs},
      {"rejected_handles_total", "Stale, foreign or unknown block handles refused.",
       &pool::PoolStats::rejected_handles},
  };
  std::vector<size_t> counter_family;
  for (const auto& pc : pool_counters) {
    family(pc.name, "counter", pc.help);
    counter_family.push_back(f.size() - 1);
  }
  for (const auto& p : v.pools) {
    const std::string& name = p.name();
    pool::PoolCounts c = p.counts();
    const pool::PoolStats& s = p.stats();
    auto& b = f[blocks].samples;
    b.push_back({"", {{"pool", name}, {"state", "free"}}, uint64_t{c.free}});
    b.push_back({"", {{"pool", name}, {"state", "mutable"}}, uint64_t{c.mutable_blocks}});
    b.push_back({"", {{"pool", name}, {"state", "active"}}, uint64_t{c.active}});
    b.push_back({"", {{"pool", name}, {"state", "inactive"}}, uint64_t{c.inactive}});
    f[size].samples.push_back({"", {{"pool", name}}, uint64_t{c.total}});
    f[holds].samples.push_back({"", {{"pool", name}}, rl(s.holds_used)});
    for (size_t k = 0; k < std::size(pool_counters); ++k)
      f[counter_family[k]].samples.push_back({"", {{"pool", name}}, rl(s.*pool_counters[k].field)});
  }
  return f;
}

std::string to_text(const std::vector<Family>& families) {
  std::string out;
  for (const Family& fam : families) {
    out += "# HELP " + fam.name + " " + escape_help(fam.help) + "\n";
    out += "# TYPE " + fam.name + " " + fam.type + "\n";
    for (const Sample& s : fam.samples) {
      out += fam.name + s.suffix;
      if (!s.labels.empty()) {
        out += "{";
        for (size_t i = 0; i < s.labels.size(); ++i) {
          if (i) out += ",";
          out += s.labels[i].first + "=\"" + escape_label(s.labels[i].second) + "\"";
        }
        out += "}";
      }
      out += " " + format_value(s.value) + "\n";
    }
  }
  return out;
}

nlohmann::json to_json(const std::vector<Family>& families, const ctl::ControlView& v) {
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
  return {{"instance", std::string(v.header->instance)}, {"metrics", out}};
}

void run_metrics(const ctl::ViewOptions& o) {
  ctl::ControlView v = ctl::open_control(o.instance, o.runtime_dir);
  std::vector<Family> families = collect(v);
  if (o.json) {
    std::cout << to_json(families, v).dump(2) << "\n";
  } else {
    std::cout << to_text(families);
  }
}

}  // namespace

void add_metrics_command(CLI::App& app) {
  auto opts = std::make_shared<ctl::ViewOptions>();
  auto* cmd = app.add_subcommand(
      "metrics", "Prometheus text exposition of pool, client and request metrics (kvpool_*)");
  ctl::add_view_options(cmd, *opts);
  cmd->callback([opts] { run_metrics(*opts); });
}

}  // namespace kvpool
