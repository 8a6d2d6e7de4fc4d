#include "paced_report.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

#include "bench_backends.hpp"

namespace kvpool::bench {

namespace {

void print_cell(const std::vector<double>& v) {
  if (v.empty())
    std::printf(" | %16s", "-");
  else
    std::printf(" | %7.1f /%8.1f", pct(v, 0.5), pct(v, 0.99));
}

void print_ratio(double num, double den) {
  if (num <= 0 || den <= 0)
    std::printf(" %11s", "-");
  else
    std::printf(" %10.2fx", num / den);
}

// ---- issue 13's targets, judged on this run's table (libkvpool, the path users take) ------

struct Tally {
  int met = 0, total = 0;
  double worst = 0;  // the largest value / limit
  std::string where;

  void add(double value, double limit, const std::string& cell) {
    if (value <= 0 || limit <= 0) return;  // a cell this run did not measure
    ++total;
    if (value <= limit) ++met;
    if (value / limit > worst) {
      worst = value / limit;
      where = cell;
    }
  }
  void print(const char* what) const {
    if (total == 0) return;
    std::printf("  %-48s %3d/%-3d cells met; worst %.2fx the limit (%s)\n", what, met, total, worst,
                where.c_str());
  }
};

const char* verdict(bool met) { return met ? "met" : "NOT met"; }

}  // namespace

void print_targets(Results& r, const std::vector<Placement>& placements,
                   const std::vector<double>& gaps, const std::vector<int>& ops,
                   const std::optional<IdleCpu>& cpu) {
  std::printf("\ntargets of issue 13 on this run (libkvpool's cells; limits from the same run):\n");
  Tally vs_socket, vs_redis, tail;
  for (int op : ops)
    for (size_t pi = 0; pi < placements.size(); ++pi)
      for (size_t gi = 0; gi < gaps.size(); ++gi) {
        const int g = static_cast<int>(gi), p = static_cast<int>(pi);
        char cell[64];
        std::snprintf(cell, sizeof(cell), "%s %s %.1f ms", kOpNames[op],
                      placements[pi].name.c_str(), gaps[gi]);
        const auto& kv = r.at(op, g, p, kLibkvpool);
        const double p50 = pct(kv, 0.5);
        vs_socket.add(p50, pct(r.at(op, g, p, kSocket), 0.5), cell);
        vs_redis.add(p50, pct(r.at(op, g, p, kRedis), 0.5), cell);
        tail.add(pct(kv, 0.99), 3 * p50, cell);
      }
  vs_socket.print("p50 <= unix-socket server's p50, every cell:");
  vs_redis.print("p50 <= redis's p50, every cell:");
  tail.print("p99 <= 3x its own p50, every cell:");
  const bool has_match = std::find(ops.begin(), ops.end(), kMatch) != ops.end();
  for (size_t pi = 0; has_match && pi < placements.size(); ++pi) {
    const int p = static_cast<int>(pi);
    if (placements[pi].name == "split")
      for (size_t gi = 0; gi < gaps.size(); ++gi) {
        if (gaps[gi] < 1) continue;
        const int g = static_cast<int>(gi);
        const double kv = pct(r.at(kMatch, g, p, kLibkvpool), 0.5);
        const double limit =
            pct(r.at(kMatch, g, p, kFutexFloor), 0.5) + pct(r.at(kMatch, g, 0, kCore), 0.5) + 10;
        std::printf(
            "  split, gap %4.1f ms: match p50 %.1f us <= futex floor + in-process (at that gap) + "
            "10 = %.1f us: %s\n",
            gaps[gi], kv, limit, verdict(kv <= limit));
      }
    if (placements[pi].name == "unpinned")
      for (size_t gi = 0; gi < gaps.size(); ++gi) {
        if (gaps[gi] != 0) continue;
        const int g = static_cast<int>(gi);
        const double kv = pct(r.at(kMatch, g, p, kLibkvpool), 0.5);
        const double core = pct(r.at(kMatch, g, 0, kCore), 0.5);
        const double sock = pct(r.at(kMatch, g, p, kSocket), 0.5);
        std::printf("  unpinned, gap 0: match p50 %.1f us <= 1.3x in-process %.1f = %.1f us: %s\n",
                    kv, core, 1.3 * core, verdict(kv <= 1.3 * core));
        std::printf(
            "  unpinned, gap 0: match overhead over in-process %.1f us <= a third of the socket "
            "server's %.1f = %.1f us: %s\n",
            kv - core, sock - core, (sock - core) / 3, verdict(kv - core <= (sock - core) / 3));
      }
  }
  if (cpu)
    std::printf("  idle CPU < 0.5%% of a core: kvpoold %.2f%% %s, idle client %.2f%% %s\n",
                cpu->daemon_percent, verdict(cpu->daemon_percent < 0.5), cpu->client_percent,
                verdict(cpu->client_percent < 0.5));
  std::printf(
      "  (not judged here: allocate-64 / register-64 overheads, kvpool_compare_bench; throughput "
      "with 2-8 clients, kvpool_ipc_bench)\n");
}

void print_tables(Results& results, const std::vector<Placement>& placements,
                  const std::vector<double>& gaps, const std::vector<int>& ops, uint32_t blocks) {
  std::printf(
      "kvpool at an engine's cadence: pool of %u blocks (%u registered); the caller sleeps the "
      "gap before each call.\n"
      "Cells: p50 / p99 in us. Placements: unpinned; split = server and client on different "
      "cores; same = both on one core; clients4 = 4 client processes at once (their samples "
      "pooled).\n"
      "Floors: a request/answer round trip to a parked process (futex / eventfd / pipe), no pool "
      "work, "
      "paced the same way. in-process: PoolCore alone, at that gap, in the first placement.\n",
      blocks, blocks / 2);
  for (int op : ops) {
    std::printf("\n%s\n%-9s %6s", kOpTitles[op], "placement", "gap ms");
    for (int b = 0; b < kBackends; ++b) std::printf(" | %16s", kBackendNames[b]);
    std::printf("\n");
    for (size_t pi = 0; pi < placements.size(); ++pi)
      for (size_t gi = 0; gi < gaps.size(); ++gi) {
        std::printf("%-9s %6.1f", placements[pi].name.c_str(), gaps[gi]);
        for (int b = 0; b < kBackends; ++b) {
          const int floor_op = is_floor(b) ? ops[0] : op;
          // The in-process op was measured in the first placement only.
          const int p = b == kCore ? 0 : static_cast<int>(pi);
          print_cell(results.at(floor_op, static_cast<int>(gi), p, b));
        }
        std::printf("\n");
      }
  }
  for (int op : ops) {
    std::printf(
        "\n%s: kvpool's p50 as a ratio to the others' p50 (lib = libkvpool, ring = its rings "
        "raw; floor = futex floor); p99/p50 its own tail; excess = p50 - futex floor p50 - "
        "in-process p50 (us)\n%-9s %6s",
        kOpNames[op], "placement", "gap ms");
    for (const char* who : {"lib", "ring"}) {
      std::printf(" |");
      for (const char* col : {"/socket", "/redis", "/floor", " p99/p50", " excess"})
        std::printf(" %11s", (who + std::string(col)).c_str());
    }
    std::printf("\n");
    for (size_t pi = 0; pi < placements.size(); ++pi)
      for (size_t gi = 0; gi < gaps.size(); ++gi) {
        const int g = static_cast<int>(gi), p = static_cast<int>(pi);
        auto p50 = [&](int o, int pl, int b) { return pct(results.at(o, g, pl, b), 0.5); };
        const double sock = p50(op, p, kSocket), red = p50(op, p, kRedis);
        const double floor = p50(ops[0], p, kFutexFloor), core = p50(op, 0, kCore);
        std::printf("%-9s %6.1f", placements[pi].name.c_str(), gaps[gi]);
        for (int b : {kLibkvpool, kRing}) {
          const double kv = p50(op, p, b);
          std::printf(" |");
          print_ratio(kv, sock);
          print_ratio(kv, red);
          print_ratio(kv, floor);
          print_ratio(pct(results.at(op, g, p, b), 0.99), kv);
          std::printf(" %11.1f", kv - floor - core);
        }
        std::printf("\n");
      }
  }
  std::fflush(stdout);
}

void print_idle_cpu(const IdleCpu& cpu, double seconds) {
  std::printf(
      "\nidle CPU over %.1f s, one client attached and quiet (utime+stime from /proc/<pid>/stat, "
      "tick %.1f ms = %.2f%% of a core): kvpoold %.2f%% of a core, idle client %.2f%%\n",
      seconds, cpu.tick_ms, cpu.tick_ms / (seconds * 10), cpu.daemon_percent, cpu.client_percent);
}

}  // namespace kvpool::bench
