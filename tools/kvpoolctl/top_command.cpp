// kvpoolctl top [--instance NAME] [--runtime-dir DIR] [--interval S] [--iterations N] [--json]
// A live view in the spirit of `redis-cli --stat`: every interval, the rates since the last
// refresh (requests/s, match hit rate, allocations and evictions/s), blocks by state per
// pool, clients, and engine latency (p50/p99 of the interval) and the last reclaim. On a
// terminal it redraws in place and `q` quits; piped, it prints one block per interval;
// --json prints one JSON object per interval (JSON Lines).
#include <poll.h>
#include <signal.h>
#include <termios.h>
#include <unistd.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "control_view.hpp"
#include "kvpool/core/clock.hpp"
#include "kvpool/service/signals.hpp"

namespace kvpool {
namespace {

struct TopOptions : ctl::ViewOptions {
  double interval = 1.0;
  uint64_t iterations = 0;  // 0: until q, Ctrl-C or the daemon stops
};

volatile sig_atomic_t g_stop = 0;
void on_stop(int) { g_stop = 1; }

// Non-canonical, no echo, for the life of the view: `q` arrives without Enter.
class RawTerminal {
 public:
  RawTerminal() {
    if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &saved_) != 0) return;
    termios raw = saved_;
    raw.c_lflag &= static_cast<tcflag_t>(~(ICANON | ECHO));
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    active_ = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
  }
  ~RawTerminal() {
    if (active_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }
  RawTerminal(const RawTerminal&) = delete;
  RawTerminal& operator=(const RawTerminal&) = delete;
  bool active() const { return active_; }

 private:
  termios saved_{};
  bool active_ = false;
};

struct PoolSample {
  uint64_t queries, hits, allocations, evictions;
};

struct Sample {
  double t = 0;  // CLOCK_MONOTONIC seconds
  uint64_t requests = 0, reclaimed = 0;
  uint64_t buckets[shm::kLatencyBounds + 1] = {};
  std::vector<PoolSample> pools;
};

Sample take(const ctl::ControlView& v) {
  auto rl = [](const auto& a) -> uint64_t { return a.load(std::memory_order_relaxed); };
  Sample s;
  s.t = static_cast<double>(now_ns(CLOCK_MONOTONIC)) / 1e9;
  s.requests = rl(v.header->stats.requests);
  s.reclaimed = rl(v.header->stats.reclaimed_clients);
  if (const shm::LatencyHistogram* lat = ctl::request_latency(v))
    for (size_t i = 0; i <= shm::kLatencyBounds; ++i) s.buckets[i] = rl(lat->buckets[i]);
  for (const auto& p : v.pools) {
    const auto& st = p.stats();
    s.pools.push_back(
        {rl(st.match_queries), rl(st.match_hits), rl(st.allocations), rl(st.evictions)});
  }
  return s;
}

// The bound of the histogram bucket holding quantile q of the interval's records.
std::string quantile(const Sample& a, const Sample& b, double q) {
  uint64_t d[shm::kLatencyBounds + 1], total = 0;
  for (size_t i = 0; i <= shm::kLatencyBounds; ++i) total += d[i] = b.buckets[i] - a.buckets[i];
  if (total == 0) return "-";
  const auto want = static_cast<uint64_t>(std::ceil(q * static_cast<double>(total)));
  uint64_t seen = 0;
  for (size_t i = 0; i <= shm::kLatencyBounds; ++i) {
    seen += d[i];
    if (seen >= want) {
      if (i == shm::kLatencyBounds) return ">10ms";
      const uint64_t ns = shm::kLatencyBoundsNs[i];
      char buf[32];
      if (ns < 1000) {
        std::snprintf(buf, sizeof(buf), "<=%" PRIu64 "ns", ns);
      } else if (ns < 1'000'000) {
        std::snprintf(buf, sizeof(buf), "<=%gus", static_cast<double>(ns) / 1e3);
      } else {
        std::snprintf(buf, sizeof(buf), "<=%gms", static_cast<double>(ns) / 1e6);
      }
      return buf;
    }
  }
  return "-";
}

// One interval's figures: what both the text frame and the --json line show.
struct PoolRow {
  std::string name;
  pool::PoolCounts counts;
  std::optional<double> match_per_s, hit_percent, alloc_per_s, evict_per_s;
};
struct Frame {
  std::string instance, version;
  long long pid = 0;
  uint32_t attached = 0, suspect = 0, max_clients = 0;
  std::optional<double> requests_per_s;
  std::string p50 = "-", p99 = "-", last_reclaim = "-";
  uint64_t reclaimed = 0;
  std::vector<PoolRow> pools;
};

Frame measure(const ctl::ControlView& v, const Sample& a, const Sample& b, bool first) {
  auto rl = [](const auto& x) -> uint64_t { return x.load(std::memory_order_relaxed); };
  const shm::ControlHeader& h = *v.header;
  const double dt = b.t - a.t > 0 ? b.t - a.t : 1;
  auto rate = [&](uint64_t x, uint64_t y) -> std::optional<double> {
    if (first) return std::nullopt;
    return static_cast<double>(y - x) / dt;
  };
  Frame f;
  f.instance = h.instance;
  f.version.assign(h.daemon_version, strnlen(h.daemon_version, sizeof(h.daemon_version)));
  f.pid = static_cast<long long>(h.daemon_pid);
  f.max_clients = h.max_clients;
  for (uint32_t i = 0; i < h.max_clients; ++i) {
    uint32_t st = v.slot(i).state.load(std::memory_order_relaxed);
    f.attached += st != static_cast<uint32_t>(shm::SlotState::kFree);
    f.suspect += st == static_cast<uint32_t>(shm::SlotState::kSuspect);
  }
  uint64_t noticed = rl(h.stats.last_reclaim_noticed_ns), done = rl(h.stats.last_reclaim_done_ns);
  if (noticed != 0 && done >= noticed) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1fus", static_cast<double>(done - noticed) / 1e3);
    f.last_reclaim = buf;
  }
  f.requests_per_s = rate(a.requests, b.requests);
  if (!first) {
    f.p50 = quantile(a, b, 0.5);
    f.p99 = quantile(a, b, 0.99);
  }
  f.reclaimed = b.reclaimed;
  for (size_t i = 0; i < v.pools.size(); ++i) {
    const PoolSample& pa = a.pools[i];
    const PoolSample& pb = b.pools[i];
    PoolRow r{v.pools[i].name(),
              v.pools[i].counts(),
              rate(pa.queries, pb.queries),
              {},
              rate(pa.allocations, pb.allocations),
              rate(pa.evictions, pb.evictions)};
    if (!first && pb.queries > pa.queries)
      r.hit_percent = 100.0 * static_cast<double>(pb.hits - pa.hits) /
                      static_cast<double>(pb.queries - pa.queries);
    f.pools.push_back(std::move(r));
  }
  return f;
}

std::string fixed(const std::optional<double>& v, const char* format) {
  if (!v) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), format, *v);
  return buf;
}

std::string render_text(const Frame& f) {
  char line[256];
  std::string out;
  std::snprintf(line, sizeof(line), "kvpoold '%s' pid %lld  %s  clients %u/%u (suspect %u)\n",
                f.instance.c_str(), f.pid, f.version.c_str(), f.attached, f.max_clients, f.suspect);
  out += line;
  std::snprintf(line, sizeof(line),
                "requests/s %s  engine p50 %s p99 %s  reclaimed %" PRIu64 " (last %s)\n",
                fixed(f.requests_per_s, "%.0f").c_str(), f.p50.c_str(), f.p99.c_str(), f.reclaimed,
                f.last_reclaim.c_str());
  out += line;
  std::vector<std::vector<std::string>> rows{
      {"pool", "free", "mutable", "active", "inactive", "match/s", "hit%", "alloc/s", "evict/s"}};
  for (const PoolRow& r : f.pools)
    rows.push_back({r.name, std::to_string(r.counts.free), std::to_string(r.counts.mutable_blocks),
                    std::to_string(r.counts.active), std::to_string(r.counts.inactive),
                    fixed(r.match_per_s, "%.0f"), fixed(r.hit_percent, "%.1f"),
                    fixed(r.alloc_per_s, "%.0f"), fixed(r.evict_per_s, "%.0f")});
  out += ctl::format_table(rows);
  return out;
}

// --json: one object per interval, one line each (JSON Lines); rates are null on the first.
std::string render_json(const Frame& f) {
  auto opt = [](const std::optional<double>& v) {
    return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
  };
  nlohmann::json pools = nlohmann::json::array();
  for (const PoolRow& r : f.pools)
    pools.push_back({{"name", r.name},
                     {"free", r.counts.free},
                     {"mutable", r.counts.mutable_blocks},
                     {"active", r.counts.active},
                     {"inactive", r.counts.inactive},
                     {"match_per_s", opt(r.match_per_s)},
                     {"hit_percent", opt(r.hit_percent)},
                     {"alloc_per_s", opt(r.alloc_per_s)},
                     {"evict_per_s", opt(r.evict_per_s)}});
  nlohmann::json j = {
      {"instance", f.instance},
      {"pid", f.pid},
      {"version", f.version},
      {"clients", {{"attached", f.attached}, {"suspect", f.suspect}, {"max", f.max_clients}}},
      {"requests_per_s", opt(f.requests_per_s)},
      {"engine_p50", f.p50},
      {"engine_p99", f.p99},
      {"reclaimed", f.reclaimed},
      {"last_reclaim", f.last_reclaim},
      {"pools", pools}};
  return j.dump() + "\n";
}

// On a terminal every line ends with "erase to end of line": a line shorter than the one
// drawn there before leaves nothing of it behind.
std::string erase_line_ends(const std::string& frame) {
  std::string out;
  out.reserve(frame.size() + 64);
  for (char c : frame) {
    if (c == '\n') out += "\x1b[K";
    out += c;
  }
  return out;
}

void run_top(const TopOptions& o) {
  if (!(o.interval > 0)) throw CommandError("--interval must be above 0 seconds");
  ctl::ControlView v = ctl::open_control(o.instance, o.runtime_dir);
  const bool tty = isatty(STDOUT_FILENO) != 0;
  // --json is for programs: no raw terminal, no q (stop with --iterations or a signal).
  std::optional<RawTerminal> raw_terminal;
  if (!o.json) raw_terminal.emplace();
  const RawTerminal* rawp = raw_terminal ? &*raw_terminal : nullptr;
  service::on_stop_signals(on_stop);  // no SA_RESTART: poll() returns at once

  Sample prev = take(v);
  bool first = true;
  for (uint64_t n = 0; !g_stop; ++n) {
    Sample now = first ? prev : take(v);
    const Frame f = measure(v, prev, now, first);
    std::string frame;
    if (o.json) {
      frame = render_json(f);  // JSON Lines, never terminal escapes
    } else if (tty) {
      // Home, draw (each line erased to its end), clear what a longer frame left below.
      frame = "\x1b[H" +
              erase_line_ends(render_text(f) + ((rawp && rawp->active()) ? "(q quits)\n" : "")) +
              "\x1b[J";
    } else {
      frame = (n > 0 ? "\n" : "") + render_text(f);
    }
    if (tty && first && !o.json) std::fputs("\x1b[2J", stdout);
    std::fputs(frame.c_str(), stdout);
    std::fflush(stdout);
    if (o.iterations != 0 && n + 1 >= o.iterations) break;
    if (v.header->state.load(std::memory_order_acquire) !=
        static_cast<uint32_t>(shm::DaemonState::kReady))
      throw CommandError("kvpoold of instance '" + o.instance + "' stopped");
    prev = now;
    first = false;
    pollfd p{STDIN_FILENO, POLLIN, 0};
    int r = poll(&p, (rawp && rawp->active()) ? 1 : 0, static_cast<int>(o.interval * 1000));
    if (r > 0 && (p.revents & POLLIN)) {
      char c = 0;
      if (read(STDIN_FILENO, &c, 1) == 1 && (c == 'q' || c == 'Q')) break;
    }
  }
}

}  // namespace

void add_top_command(CLI::App& app) {
  auto o = std::make_shared<TopOptions>();
  auto* cmd = app.add_subcommand(
      "top", "live view: requests/s, hit rate, blocks by state, clients, latency (q quits)");
  ctl::add_view_options(cmd, *o);
  cmd->add_option("-i,--interval", o->interval, "seconds between refreshes")->capture_default_str();
  cmd->add_option("-n,--iterations", o->iterations, "refreshes before exiting (0: until q)")
      ->capture_default_str();
  cmd->callback([o] { run_top(*o); });
}

}  // namespace kvpool
