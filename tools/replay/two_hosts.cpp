#include "two_hosts.hpp"

#include <cmath>
#include <cstdio>
#include <string>

#include "ctl.hpp"
#include "final_checks.hpp"
#include "routing.hpp"
#include "simulate.hpp"

namespace kvpool::replay {
namespace {

int fail(const Status& st) {
  std::fprintf(stderr, "kvpool-replay: %s\n", st.to_string().c_str());
  return 1;
}

struct Host {
  CtlTarget ctl;
  CtlStatus before;
};

struct SimFigures {
  double separate = 0;  // each host its own cache, over the requests routed to it
  double shared = 0;    // one cache of every host's blocks, over every request
};

Result<SimFigures> simulate_hosts(const std::vector<TraceRequest>& reqs,
                                  const std::vector<Host>& hosts, const RunOptions& run) {
  SimFigures f;
  uint64_t prompt = 0, matched = 0;
  uint32_t all_blocks = 0;
  for (size_t h = 0; h < hosts.size(); ++h) {
    std::vector<TraceRequest> mine;
    for (const TraceRequest& r : reqs)
      if (random_host(r.index, static_cast<uint32_t>(hosts.size()), run.seed) == h)
        mine.push_back(r);
    all_blocks += hosts[h].before.total;
    if (mine.empty()) continue;
    auto sim = simulate(mine, SimOptions{hosts[h].before.total, run.token_ms, run.shallow_levels});
    if (!sim) return sim.status();
    prompt += sim->prompt_blocks;
    matched += sim->matched_blocks;
  }
  f.separate = prompt ? double(matched) / double(prompt) : 0;
  auto shared = simulate(reqs, SimOptions{all_blocks, run.token_ms, run.shallow_levels});
  if (!shared) return shared.status();
  f.shared = shared->hit_rate();
  return f;
}

// After the run, each host as an operator sees it: every worker gone and its blocks back,
// the invariants holding, every cached block of the slice holding its bytes.
void check_host(const std::vector<TraceRequest>& reqs, const RunOptions& run, const Host& host,
                RunResult& r) {
  const std::string where = "host " + host.ctl.runtime_dir + ": ";
  // A kvpool-peer beside kvpoold stays attached (it is a client of kvpoold).
  const uint32_t resident = ctl_peers(host.ctl) ? 1 : 0;
  auto after = settle(host.ctl, run.pool, resident);
  if (!after) {
    r.violations.push_back(where + "kvpoolctl status: " + after.status().to_string());
    return;
  }
  if (Status st = ctl_check(host.ctl); !st.is_ok()) r.violations.push_back(where + st.message());
  RunOptions one = run;
  one.runtime_dir = host.ctl.runtime_dir;
  std::vector<std::string> bad;
  const uint64_t swept = sweep(reqs, one, bad);
  for (auto& b : bad) r.violations.push_back(where + b);
  if (auto last = settle(host.ctl, run.pool, resident)) after = *last;
  std::printf(
      "final pool:       %s: total %u = free %u + inactive %u + active %u + mutable %u; "
      "%llu cached blocks swept\n",
      host.ctl.runtime_dir.c_str(), after->total, after->free, after->inactive, after->active,
      after->mutable_blocks, static_cast<unsigned long long>(swept));
  if (after->active || after->mutable_blocks)
    r.violations.push_back(where + std::to_string(after->active) + " active and " +
                           std::to_string(after->mutable_blocks) + " mutable blocks left");
  if (after->free + after->inactive != after->total)
    r.violations.push_back(where + "free + inactive != total");
}

// Each host's kvpoolctl target and its pool before the run (the first host's first pool
// when --pool is not given).
Result<std::vector<Host>> open_hosts(RunOptions& run, const HostsPlan& plan) {
  std::vector<Host> hosts;
  for (const std::string& dir : run.host_dirs) {
    Host h{CtlTarget{plan.kvpoolctl, run.instance, dir}, {}};
    if (run.pool.empty()) {
      auto p = ctl_first_pool(h.ctl);
      if (!p) return p.status();
      run.pool = *p;
    }
    auto before = ctl_status(h.ctl, run.pool);
    if (!before) return before.status();
    h.before = *before;
    hosts.push_back(std::move(h));
  }
  return hosts;
}

}  // namespace

int replay_on_hosts(const std::vector<TraceRequest>& reqs, const TraceFigures& tf, RunOptions run,
                    const HostsPlan& plan, nlohmann::json& out) {
  auto opened = open_hosts(run, plan);
  if (!opened) return fail(opened.status());
  std::vector<Host>& hosts = *opened;
  auto sim = simulate_hosts(reqs, hosts, run);
  if (!sim) return fail(sim.status());
  const bool peers = !run.peer_holders.empty();
  std::printf("hosts:            %zu, each request to a random host (seed %llu), pool '%s' of",
              hosts.size(), static_cast<unsigned long long>(run.seed), run.pool.c_str());
  for (const Host& h : hosts) std::printf(" %u", h.before.total);
  std::printf(
      " blocks; peer fetch %s\n",
      peers ? ("on (deadline " + std::to_string(run.peer_deadline_ms) + " ms)").c_str() : "off");
  std::printf("replay:           %d workers (worker w on host w %% %zu), speed x%g (%.1f s)\n",
              run.workers, hosts.size(), run.speed, tf.span_s / run.speed);
  std::fflush(stdout);

  auto ran = run_replay_in_scratch(reqs, run);
  if (!ran) return fail(ran.status());
  RunResult& r = *ran;
  uint64_t fetched = 0, fetches = 0, fetch_failures = 0;
  for (const Host& h : hosts) {
    check_host(reqs, run, h, r);
    if (!peers) continue;
    auto p = ctl_peers(h.ctl);
    if (!p) {
      r.violations.push_back("host " + h.ctl.runtime_dir + ": " + p.status().to_string());
      continue;
    }
    fetched += p->blocks_fetched;
    fetches += p->fetches;
    fetch_failures += p->failures;
  }
  const double hit = r.prompt_blocks ? double(r.matched_blocks) / double(r.prompt_blocks) : 0;
  const double from_peers = r.prompt_blocks ? double(fetched) / double(r.prompt_blocks) : 0;
  std::printf(
      "requests:         %llu served (%llu uncached), %llu bytes verified in %llu matched "
      "blocks, %llu wrong\n",
      static_cast<unsigned long long>(r.requests),
      static_cast<unsigned long long>(r.uncached_requests),
      static_cast<unsigned long long>(r.verified_bytes),
      static_cast<unsigned long long>(r.verified_blocks),
      static_cast<unsigned long long>(r.corrupt_blocks));
  if (peers)
    std::printf(
        "peer fetch:       %llu blocks fetched (%.1f%% of prompt blocks) in %llu fetches, "
        "%llu with a failure counted\n",
        static_cast<unsigned long long>(fetched), 100 * from_peers,
        static_cast<unsigned long long>(fetches), static_cast<unsigned long long>(fetch_failures));
  std::printf(
      "hit rate:         kvpool %.1f%% (peer fetch %s)   simulation: separate caches "
      "%.1f%%, one shared cache %.1f%%   ceiling %.1f%%   (of %llu prompt blocks)\n",
      100 * hit, peers ? "on" : "off", 100 * sim->separate, 100 * sim->shared, 100 * tf.ceiling(),
      static_cast<unsigned long long>(r.prompt_blocks));
  if (!peers && plan.max_sim_gap >= 0 && std::abs(100 * (hit - sim->separate)) > plan.max_sim_gap)
    r.violations.push_back("hit rate " + std::to_string(100 * hit) + "% is more than " +
                           std::to_string(plan.max_sim_gap) +
                           " points from the separate caches' simulation's " +
                           std::to_string(100 * sim->separate) + "%");
  for (size_t i = 0; i < r.violations.size() && i < 20; ++i)
    std::printf("VIOLATION: %s\n", r.violations[i].c_str());
  std::printf("verdict:          %s\n", r.violations.empty() ? "PASS" : "FAIL");
  out["hosts"] = hosts.size();
  out["peer_fetch"] = peers;
  out["served"] = r.requests;
  out["hit_rate"] = hit;
  out["peer_fetched_blocks"] = fetched;
  out["peer_fetched_rate"] = from_peers;
  out["simulated_separate_hit_rate"] = sim->separate;
  out["simulated_shared_hit_rate"] = sim->shared;
  out["wrong_blocks"] = r.corrupt_blocks;
  out["pass"] = r.violations.empty();
  return r.violations.empty() ? 0 : 1;
}

}  // namespace kvpool::replay
