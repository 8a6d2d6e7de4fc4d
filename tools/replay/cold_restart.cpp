#include "cold_restart.hpp"

#include <array>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>

#include "final_checks.hpp"
#include "tier_sim.hpp"

namespace kvpool::replay {
namespace {

struct Phase {
  const char* name = "";
  std::vector<TraceRequest> requests;
  RunResult run;
  uint64_t disk_hits = 0;     // kvpoold's blocks_onboarded over the phase
  uint64_t ceiling_hits = 0;  // an infinite cache's, over the whole slice so far
  uint64_t swept = 0;
  std::optional<CtlStatus> after;  // settled: no client, nothing active or mutable
  uint64_t host_hits() const { return run.matched_blocks - disk_hits; }
};

// One phase: its requests on a clock that starts at the first of them, then the checks of
// a replay's end (kvpoolctl check, every cached block byte for byte) and the daemon settled.
void replay_phase(Phase& p, RunOptions run, const CtlTarget& ctl) {
  auto before = ctl_status(ctl, run.pool);
  if (!before) {
    p.run.violations.push_back(std::string(p.name) + ": " + before.status().to_string());
    return;
  }
  std::vector<TraceRequest> rebased = p.requests;
  for (auto& r : rebased) r.timestamp_ms -= p.requests.front().timestamp_ms;
  auto ran = run_replay_in_scratch(rebased, run);
  if (!ran) {
    p.run.violations.push_back(ran.status().to_string());
    return;
  }
  p.run = std::move(*ran);

  auto after = settle(ctl, run.pool);
  if (!after) p.run.violations.push_back("kvpoolctl status: " + after.status().to_string());
  if (Status st = ctl_check(ctl); !st.is_ok()) p.run.violations.push_back(st.message());
  p.swept = sweep(p.requests, run, p.run.violations);
  if (auto last = settle(ctl, run.pool)) after = last;
  if (!after) return;
  p.after = *after;
  p.disk_hits = after->disk_blocks_onboarded - before->disk_blocks_onboarded;
  // Quiet before a kill: nothing held means no write-behind queued or in flight either (the
  // tier holds every block it has yet to write), so the file has every block the model has.
  if (after->active || after->mutable_blocks)
    p.run.violations.push_back(std::string(p.name) + ": " + std::to_string(after->active) +
                               " active and " + std::to_string(after->mutable_blocks) +
                               " mutable blocks left");
}

double rate(uint64_t n, uint64_t of) { return of ? double(n) / double(of) : 0; }

void print_phase(const char* label, uint32_t first, uint32_t last, uint64_t prompt, uint64_t host,
                 uint64_t disk, const TierSimResult& sim, uint64_t ceiling_hits) {
  std::printf(
      "%-17s requests %u..%u: kvpool host %.1f%% + disk %.1f%% = %.1f%% (%llu + %llu of %llu "
      "blocks)   simulation host %.1f%% + disk %.1f%% = %.1f%% (%llu + %llu)   ceiling %.1f%%\n",
      label, first, last, 100 * rate(host, prompt), 100 * rate(disk, prompt),
      100 * rate(host + disk, prompt), static_cast<unsigned long long>(host),
      static_cast<unsigned long long>(disk), static_cast<unsigned long long>(prompt),
      100 * sim.host_hit_rate(), 100 * sim.disk_hit_rate(), 100 * sim.hit_rate(),
      static_cast<unsigned long long>(sim.host_hits),
      static_cast<unsigned long long>(sim.disk_hits), 100 * rate(ceiling_hits, prompt));
}

nlohmann::json phase_json(uint64_t prompt, uint64_t host, uint64_t disk, const TierSimResult& sim,
                          uint64_t ceiling_hits) {
  return {{"prompt_blocks", prompt},
          {"host_hits", host},
          {"disk_hits", disk},
          {"hit_rate", rate(host + disk, prompt)},
          {"simulated_host_hits", sim.host_hits},
          {"simulated_disk_hits", sim.disk_hits},
          {"simulated_hit_rate", sim.hit_rate()},
          {"ceiling", rate(ceiling_hits, prompt)}};
}

// Kills kvpoold and starts it again cold; checks the host pool came back empty and the disk
// index rebuilt with what the file held. False when the second phase cannot run.
bool restart_cold(PrivateDaemon& daemon, const CtlTarget& ctl, const std::string& pool,
                  uint64_t slots_before, std::vector<std::string>& violations) {
  if (Status st = daemon.kill_and_restart_cold(); !st.is_ok()) {
    violations.push_back("restart: " + st.to_string());
    return false;
  }
  auto s = ctl_status(ctl, pool);
  if (!s) {
    violations.push_back("after the restart: " + s.status().to_string());
    return false;
  }
  std::printf(
      "restart:          kvpoold killed (SIGKILL) and started again without a descriptor "
      "store: host pool free %u of %u, inactive %u; disk index rebuilt from the file: %llu "
      "of %llu slots (%llu before the kill)\n",
      s->free, s->total, s->inactive, static_cast<unsigned long long>(s->disk_slots_used),
      static_cast<unsigned long long>(s->disk_slots),
      static_cast<unsigned long long>(slots_before));
  std::fflush(stdout);
  if (s->free != s->total)
    violations.push_back("the restart was not cold: " + std::to_string(s->total - s->free) +
                         " host blocks came back");
  if (s->disk_slots_used != slots_before)
    violations.push_back("the disk index holds " + std::to_string(s->disk_slots_used) +
                         " slots after the restart, " + std::to_string(slots_before) +
                         " before the kill");
  return true;
}

// What each phase served and verified, and its disk tier against the model's.
void print_phase_runs(const Phase& one, const Phase& two, const TierSimResult& s1,
                      const TierSimResult& s2) {
  for (const Phase* p : {&one, &two}) {
    std::printf(
        "%-17s %llu requests served (%llu uncached), %.1f MiB verified in %llu matched blocks, "
        "%llu wrong; final sweep %llu cached blocks; %.1f s\n",
        p == &one ? "before restart:" : "after restart:",
        static_cast<unsigned long long>(p->run.requests),
        static_cast<unsigned long long>(p->run.uncached_requests),
        double(p->run.verified_bytes) / (1 << 20),
        static_cast<unsigned long long>(p->run.verified_blocks),
        static_cast<unsigned long long>(p->run.corrupt_blocks),
        static_cast<unsigned long long>(p->swept), p->run.wall_s);
    if (p->after)
      std::printf(
          "                  disk tier: %llu of %llu slots used, %llu blocks written, %llu "
          "onboarded, %llu write-queue drops (this daemon's counters); the model wrote %llu, "
          "evicted %llu\n",
          static_cast<unsigned long long>(p->after->disk_slots_used),
          static_cast<unsigned long long>(p->after->disk_slots),
          static_cast<unsigned long long>(p->after->disk_blocks_written),
          static_cast<unsigned long long>(p->after->disk_blocks_onboarded),
          static_cast<unsigned long long>(p->after->disk_write_queue_drops),
          static_cast<unsigned long long>((p == &one ? s1 : s2).disk_writes),
          static_cast<unsigned long long>((p == &one ? s1 : s2).disk_evictions));
  }
}

void print_verdict(const std::vector<std::string>& violations) {
  for (size_t i = 0; i < violations.size() && i < 20; ++i)
    std::printf("VIOLATION: %s\n", violations[i].c_str());
  if (violations.size() > 20) std::printf("VIOLATION: ... and %zu more\n", violations.size() - 20);
  std::printf("verdict:          %s\n", violations.empty() ? "PASS" : "FAIL");
}

// The two phases and the whole slice against the model, printed and as JSON.
void report(const std::vector<TraceRequest>& requests, const ColdRestartPlan& plan,
            const RunOptions& run, const Phase& one, const Phase& two,
            const std::array<TierSimResult, 2>& sim, const std::array<TierSimResult, 2>& no_disk,
            std::vector<std::string>& violations, nlohmann::json& out) {
  const auto& [s1, s2] = sim;
  print_phase("before restart:", one.requests.front().index, one.requests.back().index,
              one.run.prompt_blocks, one.host_hits(), one.disk_hits, s1, one.ceiling_hits);
  print_phase("after restart:", two.requests.front().index, two.requests.back().index,
              two.run.prompt_blocks, two.host_hits(), two.disk_hits, s2, two.ceiling_hits);
  TierSimResult both = s1;
  both.prompt_blocks += s2.prompt_blocks;
  both.host_hits += s2.host_hits;
  both.disk_hits += s2.disk_hits;
  const uint64_t prompt = one.run.prompt_blocks + two.run.prompt_blocks;
  const uint64_t host = one.host_hits() + two.host_hits(), disk = one.disk_hits + two.disk_hits;
  print_phase("whole slice:", one.requests.front().index, two.requests.back().index, prompt, host,
              disk, both, one.ceiling_hits + two.ceiling_hits);
  std::printf("disk hits after the restart: kvpool %llu, simulation %llu\n",
              static_cast<unsigned long long>(two.disk_hits),
              static_cast<unsigned long long>(s2.disk_hits));
  std::printf(
      "without the disk:  the same restart, host memory only (model): %.1f%% after it, %.1f%% "
      "over the slice\n",
      100 * no_disk[1].hit_rate(),
      100 * rate(no_disk[0].host_hits + no_disk[1].host_hits,
                 no_disk[0].prompt_blocks + no_disk[1].prompt_blocks));
  print_phase_runs(one, two, s1, s2);
  if (plan.max_sim_gap >= 0) {
    auto gap = [&](const char* what, uint64_t hits, uint64_t of, const TierSimResult& s) {
      if (std::abs(100 * (rate(hits, of) - s.hit_rate())) > plan.max_sim_gap)
        violations.push_back(std::string(what) + ": hit rate " +
                             std::to_string(100 * rate(hits, of)) + "% is more than " +
                             std::to_string(plan.max_sim_gap) + " points from the simulation's " +
                             std::to_string(100 * s.hit_rate()) + "%");
    };
    gap("before the restart", one.run.matched_blocks, one.run.prompt_blocks, s1);
    gap("after the restart", two.run.matched_blocks, two.run.prompt_blocks, s2);
    gap("whole slice", host + disk, prompt, both);
  }
  print_verdict(violations);
  out["capacity_blocks"] = plan.capacity;
  out["disk_slots"] = plan.disk_slots;
  out["workers"] = run.workers;
  out["speed"] = run.speed;
  out["cold_restart_after_index"] = requests[plan.restart_at].index;
  out["phases"] = {
      phase_json(one.run.prompt_blocks, one.host_hits(), one.disk_hits, s1, one.ceiling_hits),
      phase_json(two.run.prompt_blocks, two.host_hits(), two.disk_hits, s2, two.ceiling_hits)};
  out["simulated_hit_rate_after_restart_without_disk"] = no_disk[1].hit_rate();
  out["whole"] = phase_json(prompt, host, disk, both, one.ceiling_hits + two.ceiling_hits);
  out["pass"] = violations.empty();
}

}  // namespace

int replay_with_cold_restart(const std::vector<TraceRequest>& requests, const ColdRestartPlan& plan,
                             RunOptions run, const CtlTarget& ctl, PrivateDaemon& daemon,
                             nlohmann::json& out) {
  const size_t cut = plan.restart_at;
  auto sim = simulate_tiers_cold_restart(requests, SimOptions{plan.capacity, run.token_ms, 0},
                                         plan.disk_slots, cut);
  if (!sim) {
    std::fprintf(stderr, "kvpool-replay: simulation: %s\n", sim.status().to_string().c_str());
    return 1;
  }
  // The yardstick of what the disk kept: the same restart with no disk tier.
  auto no_disk =
      simulate_tiers_cold_restart(requests, SimOptions{plan.capacity, run.token_ms, 0}, 0, cut);
  if (!no_disk) {
    std::fprintf(stderr, "kvpool-replay: simulation: %s\n", no_disk.status().to_string().c_str());
    return 1;
  }
  Phase one, two;
  one.name = "before the restart";
  one.requests.assign(requests.begin(), requests.begin() + cut);
  two.name = "after the restart";
  two.requests.assign(requests.begin() + cut, requests.end());
  one.ceiling_hits = trace_figures(one.requests).ceiling_hits;
  two.ceiling_hits = trace_figures(requests).ceiling_hits - one.ceiling_hits;
  run.onboard = true;  // the workers continue their prefixes from disk
  std::printf("cold restart:     before request %u (%zu of the slice's %zu requests first)\n",
              requests[cut].index, cut, requests.size());
  std::fflush(stdout);

  std::vector<std::string> violations;
  replay_phase(one, run, ctl);
  const uint64_t slots_before = one.after ? one.after->disk_slots_used : 0;
  if (one.run.violations.empty() && restart_cold(daemon, ctl, run.pool, slots_before, violations))
    replay_phase(two, run, ctl);
  for (const Phase* p : {&one, &two})
    for (const std::string& v : p->run.violations) violations.push_back(v);
  report(requests, plan, run, one, two, *sim, *no_disk, violations, out);
  return violations.empty() ? 0 : 1;
}

}  // namespace kvpool::replay
