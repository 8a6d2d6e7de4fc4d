// kvpool-replay: replays a Mooncake-format request trace through kvpoold with N worker
// processes and says how much of the achievable prefix reuse kvpool delivered, against the
// trace's infinite-cache ceiling and an exact in-process simulation of the same pool, and
// whether every reused block held exactly the right bytes. See docs/replay.md.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cold_restart.hpp"
#include "coordinator.hpp"
#include "ctl.hpp"
#include "final_checks.hpp"
#include "private_daemon.hpp"
#include "simulate.hpp"
#include "tier_sim.hpp"
#include "trace.hpp"
#include "two_hosts.hpp"
#include "worker.hpp"

using namespace kvpool;
using namespace kvpool::replay;

namespace {

const char* kUsage = R"(usage: kvpool-replay [options]
  --trace FILE          Mooncake trace, .jsonl or .jsonl.gz (default: the bundled conversation trace)
  --from N              first request (index in the trace, default 0)
  --limit N             at most N requests (default: all)
  --span-s S            only requests within S seconds of trace time after the first
  --speed X             time compression: the trace's clock runs X times faster (default 1)
  --token-ms MS         decode time per output token, trace time (default 10): a request
                        holds its blocks for output_length x MS / X real milliseconds
  --workers N           worker processes (default 4)
  --route rr|first      round robin (default) or by the first block id
  --hosts DIR,DIR...    several hosts (docs/peers.md, "Two hosts"): the runtime dir of each
                        host's kvpoold (all with --instance and --pool); each request goes to
                        a random host (--seed), worker w serves host w % hosts. Hit rate
                        beside the hosts as separate caches and as one shared cache (simulated)
  --peer-holders A,B... with --hosts: each host's kvpool-peer address (same order); workers
                        match with peer fetch, naming the next host's kvpool-peer as holder
  --peer-deadline-ms MS the peer fetch deadline (default 1000)
  --kill-interval S     SIGKILL a random worker every ~S real seconds and replace it
  --max-kills N         stop killing after N kills
  --seed N              for the killer (default 1)
  --instance NAME       kvpoold instance to use (default "default") ...
  --runtime-dir DIR     ... and its runtime dir
  --pool NAME           pool to use (default: the daemon's first pool)
  --kvpoold PATH        start a private kvpoold instead, with one pool of:
  --blocks N | --capacity-pct P   N blocks, or P% of the slice's distinct blocks
  --disk-blocks N | --disk-pct P   a disk tier below the private pool (and the
                        simulation's second tier): N slots, or P% of the slice's distinct
                        blocks; its file lives in a temp dir under /var/tmp (docs/disk-tier.md)
  --page-size T         tokens per block of the private pool (default 16; trace blocks are
                        512 tokens, each trace block becomes one pool block of T tokens)
  --shallow-levels L    block priorities: the first L blocks of each prompt get L..1, leaves
                        are evicted first (default 0: Dynamo's default, all priority 0)
  --cold-restart-at F   with --kvpoold and a disk tier: replay the first fraction F of the
                        slice, kill -9 kvpoold once it is quiet, start it again cold (empty
                        host pool, disk index rebuilt from the file), replay the rest; hit
                        rates per phase and tier against the two-tier model of the same run
  --kvpoolctl PATH      kvpoolctl used for the final checks
  --max-sim-gap P       fail when kvpool's hit rate is more than P points from the simulation's
  --inject-corrupt-id ID  test hook: whoever fills trace block ID writes one wrong byte
  --json FILE           write the figures (and latency samples) as JSON
  --simulate-only PCTS  no daemon: ceiling and simulated hit rate at these capacities
                        (comma-separated % of distinct blocks, e.g. 2,5,10,20,40)
  --simulate-only with --disk-blocks/--disk-pct: the two-tier model (host LRU + disk LRU,
                        tier_sim.hpp): host, disk and total hit rates
  --policy lru|s3fifo   with --simulate-only: a model of the pool with this eviction policy
                        instead of the pool core (lru is Dynamo's order; see tier_sim.hpp)
)";

double pct(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  return sorted[std::min(sorted.size() - 1, static_cast<size_t>(p * double(sorted.size())))];
}

// At most n samples, evenly spread over the sorted vector (enough for a CDF plot).
std::vector<double> thin(const std::vector<double>& sorted, size_t n) {
  if (sorted.size() <= n) return sorted;
  std::vector<double> out;
  for (size_t i = 0; i < n; ++i) out.push_back(sorted[i * sorted.size() / n]);
  return out;
}

std::string self_path() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

struct Options {
  std::string trace = KVPOOL_REPLAY_TRACE;
  size_t from = 0, limit = 0;
  double span_s = 0;
  RunOptions run;
  std::string kvpoold, kvpoolctl = KVPOOL_REPLAY_KVPOOLCTL, json;
  uint32_t blocks = 0, page_size = 16;
  double capacity_pct = 0;
  uint64_t disk_blocks = 0;  // a disk tier below the pool (private daemon and simulation)
  double disk_pct = 0;
  double max_sim_gap = -1;     // points; < 0: not checked
  double cold_restart_at = 0;  // > 0: fraction of the slice replayed before a cold restart
  std::vector<double> simulate_pcts;
  std::string policy;  // --policy: simulate with tier_sim's model instead of PoolCore
};

// --simulate-only with a disk tier: the two-tier model at each host capacity.
template <typename WriteJson>
int simulate_two_tiers(const std::vector<TraceRequest>& reqs, const TraceFigures& tf,
                       const std::vector<double>& pcts, double token_ms, uint64_t disk_blocks,
                       nlohmann::json& out, const WriteJson& write_json) {
  out["simulation"] = nlohmann::json::array();
  out["disk_blocks"] = disk_blocks;
  std::printf(
      "disk tier: %llu slots (%.1f%% of distinct); two-tier model, host LRU + disk LRU "
      "(ceiling %.1f%%)\n",
      static_cast<unsigned long long>(disk_blocks),
      100.0 * double(disk_blocks) / double(tf.distinct_blocks), 100 * tf.ceiling());
  std::printf("host capacity (%% of distinct)  blocks  host hit  disk hit  total  uncached\n");
  for (double p : pcts) {
    uint32_t cap = static_cast<uint32_t>(std::max(1.0, double(tf.distinct_blocks) * p / 100));
    auto sim = simulate_tiers(reqs, SimOptions{cap, token_ms, 0}, disk_blocks);
    if (!sim) {
      std::fprintf(stderr, "kvpool-replay: simulation: %s\n", sim.status().to_string().c_str());
      return 1;
    }
    std::printf("%29.1f%%  %6u  %7.1f%%  %7.1f%%  %4.1f%%  %8llu\n", p, cap,
                100 * sim->host_hit_rate(), 100 * sim->disk_hit_rate(), 100 * sim->hit_rate(),
                static_cast<unsigned long long>(sim->uncached_requests));
    out["simulation"].push_back({{"capacity_pct", p},
                                 {"blocks", cap},
                                 {"host_hit_rate", sim->host_hit_rate()},
                                 {"disk_hit_rate", sim->disk_hit_rate()},
                                 {"hit_rate", sim->hit_rate()},
                                 {"uncached_requests", sim->uncached_requests}});
  }
  write_json();
  return 0;
}

int usage_error(const std::string& why) {
  std::fprintf(stderr, "kvpool-replay: %s\n%s", why.c_str(), kUsage);
  return 2;
}

int fail(const char* what, const Status& st) {
  std::fprintf(stderr, "kvpool-replay: %s%s\n", what, st.to_string().c_str());
  return 1;
}

// The arguments of a worker process (coordinator.cpp spawns it with these).
WorkerOptions parse_worker_args(int argc, char** argv) {
  WorkerOptions w;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--instance")
      w.instance = v;
    else if (k == "--runtime-dir")
      w.runtime_dir = v;
    else if (k == "--pool")
      w.pool = v;
    else if (k == "--assign")
      w.assign_file = v;
    else if (k == "--start-ns")
      w.start_ns = std::stoll(v);
    else if (k == "--speed")
      w.speed = std::stod(v);
    else if (k == "--token-ms")
      w.token_ms = std::stod(v);
    else if (k == "--shallow-levels")
      w.shallow_levels = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--corrupt-id")
      w.corrupt_id = std::stoll(v);
    else if (k == "--onboard")
      w.onboard = v == "1";
    else if (k == "--peer-holder")
      w.peer_holder = v;
    else if (k == "--peer-deadline-ms")
      w.peer_deadline_ms = static_cast<uint32_t>(std::stoul(v));
  }
  return w;
}

std::vector<std::string> split_commas(const std::string& v) {
  std::vector<std::string> out;
  for (size_t p = 0; p <= v.size();) {
    size_t c = v.find(',', p);
    if (c == std::string::npos) c = v.size();
    if (c > p) out.push_back(v.substr(p, c - p));
    p = c + 1;
  }
  return out;
}

// The options of the replay itself (RunOptions). False: not one of them. Throws on a bad
// number; returns an error for a bad word.
Result<bool> apply_run_option(RunOptions& r, const std::string& k, const std::string& v) {
  if (k == "--speed")
    r.speed = std::stod(v);
  else if (k == "--token-ms")
    r.token_ms = std::stod(v);
  else if (k == "--workers")
    r.workers = std::stoi(v);
  else if (k == "--route") {
    if (v != "rr" && v != "first")
      return Status(ErrorCode::kInvalidArgument, "--route is rr or first, not " + v);
    r.route_by_first_block = v == "first";
  } else if (k == "--kill-interval")
    r.kill_interval_s = std::stod(v);
  else if (k == "--max-kills")
    r.max_kills = std::stoi(v);
  else if (k == "--hosts")
    r.host_dirs = split_commas(v);
  else if (k == "--peer-holders")
    r.peer_holders = split_commas(v);
  else if (k == "--peer-deadline-ms")
    r.peer_deadline_ms = static_cast<uint32_t>(std::stoul(v));
  else if (k == "--seed")
    r.seed = std::stoull(v);
  else if (k == "--instance")
    r.instance = v;
  else if (k == "--runtime-dir")
    r.runtime_dir = v;
  else if (k == "--pool")
    r.pool = v;
  else if (k == "--shallow-levels")
    r.shallow_levels = static_cast<uint32_t>(std::stoul(v));
  else if (k == "--inject-corrupt-id")
    r.corrupt_id = std::stoll(v);
  else
    return false;
  return true;
}

// The trace slice, the private daemon, the simulation and the output. False: unknown.
bool apply_option(Options& o, const std::string& k, const std::string& v) {
  if (k == "--trace")
    o.trace = v;
  else if (k == "--from")
    o.from = std::stoul(v);
  else if (k == "--limit")
    o.limit = std::stoul(v);
  else if (k == "--span-s")
    o.span_s = std::stod(v);
  else if (k == "--kvpoold")
    o.kvpoold = v;
  else if (k == "--blocks")
    o.blocks = static_cast<uint32_t>(std::stoul(v));
  else if (k == "--capacity-pct")
    o.capacity_pct = std::stod(v);
  else if (k == "--disk-blocks")
    o.disk_blocks = std::stoull(v);
  else if (k == "--disk-pct")
    o.disk_pct = std::stod(v);
  else if (k == "--page-size")
    o.page_size = static_cast<uint32_t>(std::stoul(v));
  else if (k == "--kvpoolctl")
    o.kvpoolctl = v;
  else if (k == "--json")
    o.json = v;
  else if (k == "--policy")
    o.policy = v;
  else if (k == "--max-sim-gap")
    o.max_sim_gap = std::stod(v);
  else if (k == "--cold-restart-at")
    o.cold_restart_at = std::stod(v);
  else if (k == "--simulate-only") {
    for (size_t p = 0; p < v.size();) {
      size_t c = v.find(',', p);
      o.simulate_pcts.push_back(std::stod(v.substr(p, c - p)));
      p = c == std::string::npos ? v.size() : c + 1;
    }
  } else
    return false;
  return true;
}

// Fills `o`; returns -1 to go on, or the exit code (0 after --help, 2 on a usage error).
int parse_options(int argc, char** argv, Options& o) {
  o.run.instance = "default";
  try {
    for (int i = 1; i < argc; ++i) {
      std::string k = argv[i];
      if (k == "-h" || k == "--help") {
        std::fputs(kUsage, stdout);
        return 0;
      }
      if (i + 1 >= argc) return usage_error(k + " needs a value");
      std::string v = argv[++i];
      auto run = apply_run_option(o.run, k, v);
      if (!run) return usage_error(run.status().message());
      if (!*run && !apply_option(o, k, v)) return usage_error("unknown option " + k);
    }
  } catch (const std::exception&) {
    return usage_error("a number was expected");
  }
  if (o.run.speed <= 0 || o.run.workers < 1 || o.run.token_ms < 0)
    return usage_error("--speed must be > 0, --workers >= 1, --token-ms >= 0");
  return -1;
}

void print_trace(const Options& o, const std::vector<TraceRequest>& reqs, const TraceFigures& tf) {
  std::printf("trace:            %s, requests %u..%u (%llu), %.1f s of trace time\n",
              o.trace.c_str(), reqs.front().index, reqs.back().index,
              static_cast<unsigned long long>(tf.requests), tf.span_s);
  std::printf(
      "blocks:           %llu prompt blocks, %llu distinct; infinite-cache ceiling %.1f%%\n",
      static_cast<unsigned long long>(tf.prompt_blocks),
      static_cast<unsigned long long>(tf.distinct_blocks), 100 * tf.ceiling());
}

// --simulate-only without a disk tier: the pool core (or --policy's model) at each capacity.
template <typename WriteJson>
int simulate_one_tier(const std::vector<TraceRequest>& reqs, const TraceFigures& tf,
                      const Options& o, nlohmann::json& out, const WriteJson& write_json) {
  out["simulation"] = nlohmann::json::array();
  std::printf(
      "capacity (%% of distinct)  blocks    simulated hit rate  uncached requests  (ceiling "
      "%.1f%%)\n",
      100 * tf.ceiling());
  for (double p : o.simulate_pcts) {
    uint32_t cap = static_cast<uint32_t>(std::max(1.0, double(tf.distinct_blocks) * p / 100));
    const SimOptions so{cap, o.run.token_ms, o.run.shallow_levels};
    auto sim = o.policy.empty() ? simulate(reqs, so) : simulate_policy(reqs, so, o.policy);
    if (!sim) return fail("simulation: ", sim.status());
    std::printf("%24.1f%%  %7u  %17.1f%%  %17llu\n", p, cap, 100 * sim->hit_rate(),
                static_cast<unsigned long long>(sim->uncached_requests));
    out["simulation"].push_back({{"capacity_pct", p},
                                 {"blocks", cap},
                                 {"hit_rate", sim->hit_rate()},
                                 {"uncached_requests", sim->uncached_requests}});
  }
  write_json();
  return 0;
}

// With --kvpoold: starts it with one pool sized by --blocks or --capacity-pct and points
// the run at it. Returns the exit code on failure.
int start_private_daemon(Options& o, const TraceFigures& tf,
                         std::unique_ptr<PrivateDaemon>& daemon) {
  uint32_t blocks = o.blocks;
  if (o.capacity_pct > 0)
    blocks =
        static_cast<uint32_t>(std::max(1.0, double(tf.distinct_blocks) * o.capacity_pct / 100));
  if (blocks == 0) return usage_error("--kvpoold needs --blocks N or --capacity-pct P");
  auto d = PrivateDaemon::start(
      DaemonSpec{o.kvpoold, blocks, o.page_size, o.disk_blocks > 0 ? 128u : 64u, o.disk_blocks});
  if (!d) return fail("", d.status());
  daemon = std::move(*d);
  o.run.instance = daemon->instance();
  o.run.runtime_dir = daemon->runtime_dir();
  o.run.pool = PrivateDaemon::kPool;
  return 0;
}

void print_run(const Options& o, const TraceFigures& tf, uint32_t capacity) {
  std::printf(
      "pool:             '%s' of kvpoold '%s': %u blocks = %.1f%% of the slice's distinct blocks\n",
      o.run.pool.c_str(), o.run.instance.c_str(), capacity,
      100.0 * capacity / double(tf.distinct_blocks));
  char kill_buf[64] = "never";
  if (o.run.kill_interval_s > 0)
    std::snprintf(
        kill_buf, sizeof(kill_buf), "~%g s%s", o.run.kill_interval_s,
        o.run.max_kills >= 0 ? (" (at most " + std::to_string(o.run.max_kills) + ")").c_str() : "");
  const std::string kill_every = kill_buf;
  std::printf(
      "replay:           %d workers, routing %s, speed x%g (%.1f s), decode %g ms/token of "
      "trace time, kill every %s\n",
      o.run.workers, o.run.route_by_first_block ? "by first block" : "round robin", o.run.speed,
      tf.span_s / o.run.speed, o.run.token_ms, kill_every.c_str());
  std::fflush(stdout);
}

// What kvpool's figures are held against: the pool core's simulation, and with a disk tier
// the two-tier model (kvpool's host-only figure is still checked against simulate(), the
// pool core itself, when there is no disk).
struct Yardstick {
  double sim_hit = 0;
  std::optional<TierSimResult> tiers;
};

Result<Yardstick> simulate_yardstick(const std::vector<TraceRequest>& reqs, const Options& o,
                                     uint32_t capacity, uint64_t disk_slots) {
  const SimOptions so{capacity, o.run.token_ms, o.run.shallow_levels};
  auto sim = simulate(reqs, so);
  if (!sim) return sim.status();
  Yardstick y;
  y.sim_hit = sim->hit_rate();
  if (disk_slots > 0) {
    auto t = simulate_tiers(reqs, so, disk_slots);
    if (!t) return t.status();
    y.tiers = *t;
    y.sim_hit = t->hit_rate();
  }
  return y;
}

// The replay proper, in a scratch directory the workers share.
Result<RunResult> replay_in_scratch(const std::vector<TraceRequest>& reqs, Options& o) {
  o.run.self = self_path();
  auto r = run_replay_in_scratch(reqs, o.run);
  if (r) r->onboarded = o.run.onboard;
  return r;
}

void print_disk_tier(const CtlStatus& after, const TierSimResult& tiers) {
  std::printf(
      "disk tier after:  %llu of %llu slots used, %llu blocks written, %llu onboarded, %llu "
      "write-queue drops, %llu writes skipped, %llu evictions; the model wrote %llu, evicted "
      "%llu\n",
      static_cast<unsigned long long>(after.disk_slots_used),
      static_cast<unsigned long long>(after.disk_slots),
      static_cast<unsigned long long>(after.disk_blocks_written),
      static_cast<unsigned long long>(after.disk_blocks_onboarded),
      static_cast<unsigned long long>(after.disk_write_queue_drops),
      static_cast<unsigned long long>(after.disk_write_skipped),
      static_cast<unsigned long long>(after.disk_evictions),
      static_cast<unsigned long long>(tiers.disk_writes),
      static_cast<unsigned long long>(tiers.disk_evictions));
}

void print_hit_rates(const RunResult& r, const Yardstick& y, const TraceFigures& tf,
                     const std::optional<CtlStatus>& after, double hit) {
  if (!y.tiers) {
    std::printf(
        "hit rate:         kvpool %.1f%%   simulation %.1f%%   ceiling %.1f%%   (of %llu prompt "
        "blocks)\n",
        100 * hit, 100 * y.sim_hit, 100 * tf.ceiling(),
        static_cast<unsigned long long>(r.prompt_blocks));
    return;
  }
  const double disk_hit =
      r.prompt_blocks ? double(r.disk_matched_blocks) / double(r.prompt_blocks) : 0;
  std::printf(
      "hit rate:         kvpool host %.1f%% + disk %.1f%% = %.1f%%   simulation host %.1f%% + "
      "disk %.1f%% = %.1f%%   ceiling %.1f%%   (of %llu prompt blocks)\n",
      100 * (hit - disk_hit), 100 * disk_hit, 100 * hit, 100 * y.tiers->host_hit_rate(),
      100 * y.tiers->disk_hit_rate(), 100 * y.sim_hit, 100 * tf.ceiling(),
      static_cast<unsigned long long>(r.prompt_blocks));
  if (!r.onboarded)
    std::printf(
        "                  (workers matched host memory only: onboard from disk is not "
        "wired into this build's workers)\n");
  if (after) print_disk_tier(*after, *y.tiers);
}

void print_costs(const RunResult& r, uint64_t swept) {
  std::printf(
      "prefill saved:    %llu blocks (%llu tokens at 512 tokens per trace block) not recomputed\n",
      static_cast<unsigned long long>(r.matched_blocks),
      static_cast<unsigned long long>(r.matched_blocks * 512));
  auto lat = [&](const char* name, const std::vector<double>& v) {
    std::printf("latency %-9s p50 %8.1f us   p99 %8.1f us   (%zu calls)\n", name, pct(v, 0.5),
                pct(v, 0.99), v.size());
  };
  lat("match", r.match_us);
  lat("allocate", r.allocate_us);
  lat("register", r.register_us);
  lat("release", r.release_us);
  std::printf(
      "throughput:       %.0f requests/s, %.0f blocks/s over %.1f s (started late by p99 %.1f "
      "ms)\n",
      r.requests / std::max(r.wall_s, 1e-9), r.prompt_blocks / std::max(r.wall_s, 1e-9), r.wall_s,
      r.late_p99_ms);
  std::printf(
      "bytes verified:   %.1f MiB in %llu matched blocks, %llu wrong; final sweep %llu cached "
      "blocks\n",
      double(r.verified_bytes) / (1 << 20), static_cast<unsigned long long>(r.verified_blocks),
      static_cast<unsigned long long>(r.corrupt_blocks), static_cast<unsigned long long>(swept));
}

// The pool as an operator sees it after the run: everything back, killed workers reclaimed.
void check_final_pool(const Options& o, const CtlStatus& before, const CtlStatus& after,
                      RunResult& r) {
  std::printf("reclaimed:        %llu client(s), %llu block(s) returned by the daemon\n",
              static_cast<unsigned long long>(after.reclaimed_clients - before.reclaimed_clients),
              static_cast<unsigned long long>(after.reclaimed_blocks - before.reclaimed_blocks));
  std::printf(
      "final pool:       total %u = free %u + inactive %u + active %u + mutable %u; clients %u\n",
      after.total, after.free, after.inactive, after.active, after.mutable_blocks, after.clients);
  if (after.active || after.mutable_blocks)
    r.violations.push_back(std::to_string(after.active) + " active and " +
                           std::to_string(after.mutable_blocks) + " mutable blocks left");
  if (after.free + after.inactive != after.total)
    r.violations.push_back("free + inactive != total");
  if (o.run.kill_interval_s > 0 && r.kills > 0 &&
      after.reclaimed_clients <= before.reclaimed_clients)
    r.violations.push_back("workers were killed but kvpoold reclaimed no client");
}

void print_verdict(const RunResult& r) {
  // The first few say what went wrong; a corrupt shared block repeats for every reader.
  for (size_t i = 0; i < r.violations.size() && i < 20; ++i)
    std::printf("VIOLATION: %s\n", r.violations[i].c_str());
  if (r.violations.size() > 20)
    std::printf("VIOLATION: ... and %zu more\n", r.violations.size() - 20);
  std::printf("verdict:          %s\n", r.violations.empty() ? "PASS" : "FAIL");
}

void record_figures(const Options& o, const RunResult& r, const Yardstick& y, uint32_t capacity,
                    uint64_t disk_slots, double hit, nlohmann::json& out) {
  out["capacity_blocks"] = capacity;
  out["workers"] = o.run.workers;
  out["speed"] = o.run.speed;
  out["served"] = r.requests;
  out["hit_rate"] = hit;
  out["simulated_hit_rate"] = y.sim_hit;
  if (y.tiers) {
    out["disk_slots"] = disk_slots;
    out["disk_hit_rate"] =
        r.prompt_blocks ? double(r.disk_matched_blocks) / double(r.prompt_blocks) : 0;
    out["simulated_host_hit_rate"] = y.tiers->host_hit_rate();
    out["simulated_disk_hit_rate"] = y.tiers->disk_hit_rate();
  }
  out["matched_blocks"] = r.matched_blocks;
  out["uncached_requests"] = r.uncached_requests;
  out["kills"] = r.kills;
  out["wall_s"] = r.wall_s;
  out["verified_bytes"] = r.verified_bytes;
  out["wrong_blocks"] = r.corrupt_blocks;
  out["latency_us"] = {{"match", thin(r.match_us, 4000)},
                       {"allocate", thin(r.allocate_us, 4000)},
                       {"register", thin(r.register_us, 4000)},
                       {"release", thin(r.release_us, 4000)}};
  out["pass"] = r.violations.empty();
}

// Replays through kvpoold, checks the pool after, and reports against the yardstick.
template <typename WriteJson>
int replay_and_report(const std::vector<TraceRequest>& reqs, const TraceFigures& tf, Options& o,
                      const CtlTarget& ctl, const CtlStatus& before, nlohmann::json& out,
                      const WriteJson& write_json) {
  const uint32_t capacity = before.total;
  const uint64_t disk_slots = before.disk_slots;
  auto y = simulate_yardstick(reqs, o, capacity, disk_slots);
  if (!y) return fail("simulation: ", y.status());
  if (y->tiers) {
    o.run.onboard = true;  // the workers continue their prefixes from disk
    std::printf("disk tier:        %llu slots = %.1f%% of the slice's distinct blocks (%s)\n",
                static_cast<unsigned long long>(disk_slots),
                100.0 * double(disk_slots) / double(tf.distinct_blocks), before.disk_path.c_str());
  }
  auto run = replay_in_scratch(reqs, o);
  if (!run) return usage_error(run.status().message());
  RunResult& r = *run;
  // Final state, as an operator sees it; then every cached block byte for byte.
  std::optional<CtlStatus> after;
  if (auto s = settle(ctl, o.run.pool))
    after = *s;
  else
    r.violations.push_back("kvpoolctl status: " + s.status().to_string());
  if (Status st = ctl_check(ctl); !st.is_ok()) r.violations.push_back(st.message());
  uint64_t swept = sweep(reqs, o.run, r.violations);
  if (auto last = settle(ctl, o.run.pool)) after = *last;

  for (auto* v : {&r.match_us, &r.allocate_us, &r.register_us, &r.release_us})
    std::sort(v->begin(), v->end());
  const double hit = r.prompt_blocks ? double(r.matched_blocks) / double(r.prompt_blocks) : 0;
  std::printf(
      "requests:         %llu served (%llu uncached: the pool's blocks were all held), "
      "%llu workers killed and replaced\n",
      static_cast<unsigned long long>(r.requests),
      static_cast<unsigned long long>(r.uncached_requests),
      static_cast<unsigned long long>(r.kills));
  // Disk hits: the blocks kvpoold onboarded for the workers' matches (each one onboarded is
  // handed to the match that asked for it), from its own counters.
  if (y->tiers && after)
    r.disk_matched_blocks = after->disk_blocks_onboarded - before.disk_blocks_onboarded;
  print_hit_rates(r, *y, tf, after, hit);
  print_costs(r, swept);
  if (after) check_final_pool(o, before, *after, r);
  if (o.max_sim_gap >= 0 && std::abs(100 * (hit - y->sim_hit)) > o.max_sim_gap)
    r.violations.push_back("hit rate " + std::to_string(100 * hit) + "% is more than " +
                           std::to_string(o.max_sim_gap) + " points from the simulation's " +
                           std::to_string(100 * y->sim_hit) + "%");
  print_verdict(r);
  record_figures(o, r, *y, capacity, disk_slots, hit, out);
  write_json();
  return r.violations.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--worker") == 0)
    return run_worker(parse_worker_args(argc, argv));
  Options o;
  if (int rc = parse_options(argc, argv, o); rc >= 0) return rc;

  auto all = load_trace(o.trace);
  if (!all) {
    std::fprintf(stderr, "kvpool-replay: %s\n", all.status().to_string().c_str());
    return 2;
  }
  auto reqs = slice(*all, o.from, o.limit, o.span_s);
  if (reqs.empty()) return usage_error("the slice is empty (--from past the end?)");
  const TraceFigures tf = trace_figures(reqs);
  print_trace(o, reqs, tf);
  nlohmann::json out = {{"trace", o.trace},
                        {"from", o.from},
                        {"requests", tf.requests},
                        {"prompt_blocks", tf.prompt_blocks},
                        {"distinct_blocks", tf.distinct_blocks},
                        {"ceiling", tf.ceiling()},
                        {"span_s", tf.span_s},
                        {"token_ms", o.run.token_ms}};
  if (o.disk_pct > 0)
    o.disk_blocks =
        static_cast<uint64_t>(std::max(1.0, double(tf.distinct_blocks) * o.disk_pct / 100));
  auto write_json = [&] {
    if (o.json.empty()) return;
    std::ofstream(o.json) << out.dump(1) << "\n";
  };
  if (!o.simulate_pcts.empty() && o.disk_blocks > 0)
    return simulate_two_tiers(reqs, tf, o.simulate_pcts, o.run.token_ms, o.disk_blocks, out,
                              write_json);
  if (!o.simulate_pcts.empty()) return simulate_one_tier(reqs, tf, o, out, write_json);

  if (!o.run.host_dirs.empty()) {
    if (!o.kvpoold.empty() || o.cold_restart_at > 0 || o.run.kill_interval_s > 0 ||
        o.run.workers < static_cast<int>(o.run.host_dirs.size()) ||
        (!o.run.peer_holders.empty() && o.run.peer_holders.size() != o.run.host_dirs.size()))
      return usage_error(
          "--hosts: running kvpoolds (no --kvpoold, --cold-restart-at or --kill-interval), at "
          "least one worker per host, and one --peer-holders address per host or none");
    o.run.self = self_path();
    const int rc = replay_on_hosts(reqs, tf, o.run, HostsPlan{o.kvpoolctl, o.max_sim_gap}, out);
    write_json();
    return rc;
  }
  if (!o.run.peer_holders.empty()) return usage_error("--peer-holders needs --hosts");

  // The daemon: our own, or the one running.
  std::unique_ptr<PrivateDaemon> daemon;
  if (!o.kvpoold.empty())
    if (int rc = start_private_daemon(o, tf, daemon); rc != 0) return rc;
  const CtlTarget ctl{o.kvpoolctl, o.run.instance, o.run.runtime_dir};
  if (o.run.pool.empty()) {
    auto p = ctl_first_pool(ctl);
    if (!p) return fail("", p.status());
    o.run.pool = *p;
  }
  auto before = ctl_status(ctl, o.run.pool);
  if (!before) return fail("", before.status());
  print_run(o, tf, before->total);

  if (o.cold_restart_at > 0) {
    const auto cut = static_cast<size_t>(std::llround(o.cold_restart_at * double(reqs.size())));
    if (!daemon || before->disk_slots == 0 || o.cold_restart_at >= 1 || cut == 0 ||
        cut >= reqs.size() || o.run.shallow_levels != 0 || o.run.kill_interval_s > 0)
      return usage_error(
          "--cold-restart-at F needs --kvpoold with a disk tier, 0 < F < 1 leaving requests on "
          "both sides, and no --shallow-levels or --kill-interval");
    o.run.self = self_path();
    const int rc = replay_with_cold_restart(
        reqs, ColdRestartPlan{cut, before->total, before->disk_slots, o.max_sim_gap}, o.run, ctl,
        *daemon, out);
    write_json();
    return rc;
  }
  return replay_and_report(reqs, tf, o, ctl, *before, out, write_json);
}
