// kvpool at an engine's cadence. An inference engine does not call its block manager back
// to back: it calls between GPU steps, milliseconds apart, while the machine does other
// work. This program measures every backend that way, in one process tree, and prints a
// table (it is a benchmark, not a test: no thresholds).
//   operations  match-64 (all hit) + release; an engine step: match-64 + allocate-16 +
//               register-16 + release of everything
//   gaps        the caller sleeps this long (clock_nanosleep) before each call
//   placements  unpinned; split (server and client on different cores); same (both on one
//               core: sched_setaffinity on every thread of the server and on the calling
//               thread); clients4 (4 client processes at once, unpinned)
//   backends    kvpoold through libkvpool, kvpoold's rings raw, our blocking Unix-socket
//               server, redis-server on a Unix socket (bench_backends.hpp), and three floors,
//               futex, eventfd and pipe round trips between processes, paced the same way
//               (paced_floors.hpp); the in-process core op for reference
// Backends take turns in rounds within each (gap, placement), so a noisy machine weighs on
// all of them alike. Then: kvpoold's and one quiet client's CPU over --cpu-seconds.
//   kvpool_paced_bench [--quick] [--samples-scale X] [--gaps 0,0.1,1,5,20]
//                      [--placements unpinned,split,same,clients4] [--ops match,step]
//                      [--blocks N] [--cpu-seconds S] [--busy]
//   --busy      a busy host: one CPU-bound process (a pure spin loop, like a compiler or a
//               tokenizer) pinned to every allowed core for the whole run, at the same nice
//               level as everyone else
// Env: KVPOOLD (daemon binary), REDIS_SERVER (redis-server binary; without one the redis
// column is empty).
//
// Process tree: this process (the coordinator) never starts a thread; it forks the servers,
// then the client workers (paced_workers.hpp) and tells them which cell to run.
#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_backends.hpp"
#include "paced_cells.hpp"
#include "paced_cpu.hpp"
#include "paced_floors.hpp"
#include "paced_report.hpp"
#include "paced_workers.hpp"

using namespace kvpool::bench;

namespace {

struct Args {
  uint32_t blocks = 100'000;
  double scale = 1.0;
  double cpu_seconds = 10.0;
  std::vector<double> gaps_ms = {0, 0.1, 1, 5, 20};
  std::vector<std::string> placements = {"unpinned", "split", "same", "clients4"};
  std::vector<std::string> ops = {"match", "step"};
  bool busy = false;
};

// Samples per cell at a gap: fewer at long gaps, so the whole run stays under ~4 minutes on
// the 2-core VM (the 20 ms cells alone take 4 placements x 10 cells x 100 x 20 ms = 80 s).
int base_samples(double gap_ms) {
  if (gap_ms <= 0) return 2000;
  if (gap_ms <= 0.1) return 800;
  if (gap_ms <= 1) return 300;
  if (gap_ms <= 5) return 120;
  return 100;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

Args parse_args(int argc, char** argv) {
  Args a;
  bool cpu_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--quick") {
      a.scale = 0.2;
      if (!cpu_given) a.cpu_seconds = 3;
    } else if (flag == "--samples-scale") {
      a.scale = std::atof(value().c_str());
      if (!(a.scale > 0)) die("--samples-scale must be > 0");
    } else if (flag == "--cpu-seconds") {
      a.cpu_seconds = std::atof(value().c_str());
      cpu_given = true;
    } else if (flag == "--busy") {
      a.busy = true;
    } else if (flag == "--blocks") {
      a.blocks = static_cast<uint32_t>(std::atoi(value().c_str()));
    } else if (flag == "--gaps") {
      a.gaps_ms.clear();
      for (auto& g : split_list(value())) {
        char* end = nullptr;
        const double ms = std::strtod(g.c_str(), &end);
        if (*end || ms < 0 || ms > 1000) die("--gaps: '" + g + "' is not a gap in ms (0..1000)");
        a.gaps_ms.push_back(ms);
      }
    } else if (flag == "--placements") {
      a.placements = split_list(value());
      for (auto& p : a.placements)
        if (!contains({"unpinned", "split", "same", "clients4"}, p))
          die("--placements: '" + p + "' is not one of unpinned,split,same,clients4");
    } else if (flag == "--ops") {
      a.ops = split_list(value());
      for (auto& o : a.ops)
        if (!contains({"match", "step"}, o)) die("--ops: '" + o + "' is not one of match,step");
    } else {
      die("unknown option " + flag +
          " (--quick --samples-scale X --gaps ms,.. --placements unpinned,split,same,clients4 "
          "--ops match,step --blocks N --cpu-seconds S --busy)");
    }
  }
  if (a.blocks < 4 * kFillBatch) die("--blocks must be at least 4096");
  if (a.gaps_ms.empty() || a.placements.empty() || a.ops.empty()) die("nothing to run");
  return a;
}

std::vector<Placement> make_placements(const Args& a) {
  const std::vector<int> cpus = allowed_cpus();
  std::vector<Placement> out;
  for (const auto& name : a.placements) {
    if (name == "unpinned") out.push_back({name, -1, -1, 1});
    if (name == "same") out.push_back({name, cpus[0], cpus[0], 1});
    if (name == "clients4") out.push_back({name, -1, -1, ClientWorkers::kCount});
    if (name == "split") {
      if (cpus.size() < 2) {
        std::fprintf(stderr, "paced_bench: one CPU allowed, placement 'split' skipped\n");
        continue;
      }
      out.push_back({name, cpus[1], cpus[0], 1});
    }
  }
  return out;
}

// --busy: one spinning process per allowed core, killed when this goes out of scope.
class BusyNeighbours {
 public:
  explicit BusyNeighbours(bool on) {
    if (!on) return;
    for (int cpu : allowed_cpus()) {
      const pid_t pid = ::fork();
      if (pid < 0) die("fork of a busy neighbour failed");
      if (pid == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the run
        pin_this_thread(cpu);
        uint64_t x = 0;
        for (;;) asm volatile("" : "+r"(x));  // spins; the asm keeps the loop from folding
      }
      pids_.push_back(pid);
    }
  }
  ~BusyNeighbours() {
    for (pid_t p : pids_) ::kill(p, SIGKILL);
    for (pid_t p : pids_) ::waitpid(p, nullptr, 0);
  }
  BusyNeighbours(const BusyNeighbours&) = delete;
  BusyNeighbours& operator=(const BusyNeighbours&) = delete;

 private:
  std::vector<pid_t> pids_;
};

struct CellKey {
  int op, backend;
};

// The cells of one (placement, gap): every backend for every op, the floors once (they do
// no pool work), and the in-process op the first time this gap comes up.
std::vector<CellKey> cells_of(const std::vector<int>& ops, bool redis, bool with_core) {
  std::vector<CellKey> cells;
  for (int op : ops)
    for (int b : {kLibkvpool, kRing, kSocket, kRedis})
      if (b != kRedis || redis) cells.push_back({op, b});
  for (int b : {kFutexFloor, kEventfdFloor, kPipeFloor}) cells.push_back({ops[0], b});
  if (with_core)
    for (int op : ops) cells.push_back({op, kCore});
  return cells;
}

// Runs every cell of the run; backends take turns in rounds within each (placement, gap).
void run_cells(const Args& a, const std::vector<Placement>& placements, const std::vector<int>& ops,
               const Servers& servers, ClientWorkers& workers, Results& results) {
  const auto t0 = Clock::now();
  for (size_t pi = 0; pi < placements.size(); ++pi) {
    const Placement& pl = placements[pi];
    for (size_t gi = 0; gi < a.gaps_ms.size(); ++gi) {
      const double gap_ms = a.gaps_ms[gi];
      const auto cells = cells_of(ops, servers.redis != nullptr, pi == 0);
      const int n = std::max(10, static_cast<int>(std::lround(base_samples(gap_ms) * a.scale)));
      const int rounds = std::clamp(n / 25, 1, 4);
      const int per_round = (n + rounds - 1) / rounds;
      std::fprintf(stderr, "paced_bench: %-9s gap %5.1f ms: %zu cells x %d samples (%.0f s)\n",
                   pl.name.c_str(), gap_ms, cells.size(), n, us_since(t0) / 1e6);
      for (int r = 0; r < rounds; ++r)
        for (size_t k = 0; k < cells.size(); ++k) {
          const CellKey& cell = cells[(k + static_cast<size_t>(r)) % cells.size()];  // rotate
          for (pid_t p : servers.pids()) pin_process(p, pl.server_cpu);
          const int clients = cell.backend == kCore ? 1 : pl.clients;
          Command c;
          c.backend = cell.backend;
          c.op = cell.op;
          c.cpu = pl.client_cpu;
          // Clients share the cell's samples (pooled, as many as one client's): the same
          // statistics in a quarter of the time.
          c.samples = (per_round + clients - 1) / clients;
          c.warmup = gap_ms >= 1 ? 1 : std::max(1, per_round / 20);
          c.gap_ns = static_cast<int64_t>(gap_ms * 1e6);
          workers.run(
              c, clients,
              results.at(cell.op, static_cast<int>(gi), static_cast<int>(pi), cell.backend));
        }
    }
  }
  for (pid_t p : servers.pids()) pin_process(p, -1);
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse_args(argc, argv);
  const char* kvpoold_bin = std::getenv("KVPOOLD");
  if (!kvpoold_bin) kvpoold_bin = KVPOOLD_PATH;
  remember_allowed_cpus();
  const auto t_start = Clock::now();
  std::vector<int> ops;
  for (int o = 0; o < kOps; ++o)
    if (contains(a.ops, kOpNames[o])) ops.push_back(o);
  const std::vector<Placement> placements = make_placements(a);

  // Servers first, then workers: this process never starts a thread, so every fork is clean.
  KvpooldServer kvpoold(a.blocks, kvpoold_bin);
  SocketServer socket_server(a.blocks);
  const std::string redis_bin = RedisServer::find_binary();
  std::optional<RedisServer> redis;
  if (redis_bin.empty())
    std::fprintf(stderr,
                 "paced_bench: no redis-server (PATH or REDIS_SERVER): redis column empty\n");
  else
    redis.emplace(redis_bin);
  FloorServer futex(FloorServer::Kind::kFutex);
  FloorServer eventfd(FloorServer::Kind::kEventfd);
  FloorServer pipe(FloorServer::Kind::kPipe);
  const Servers servers{&kvpoold, &socket_server, redis ? &*redis : nullptr, &futex, &eventfd,
                        &pipe,    a.blocks};

  size_t capacity = 0;
  for (double g : a.gaps_ms)
    capacity = std::max(capacity, static_cast<size_t>(std::ceil(base_samples(g) * a.scale)) + 64);
  Results results(a.gaps_ms.size(), placements.size());
  {
    ClientWorkers workers(servers, a.blocks / 2, capacity);
    workers.fill();
    BusyNeighbours busy(a.busy);
    if (a.busy)
      std::printf("Busy host: one CPU-bound process pinned to each of the %zu cores.\n",
                  allowed_cpus().size());
    run_cells(a, placements, ops, servers, workers, results);
  }  // the workers detach and exit
  print_tables(results, placements, a.gaps_ms, ops, a.blocks);

  // Idle CPU: one client attaches and stays quiet.
  std::optional<IdleCpu> cpu;
  if (a.cpu_seconds > 0) {
    cpu = measure_idle_cpu(kvpoold, a.cpu_seconds);
    print_idle_cpu(*cpu, a.cpu_seconds);
  }
  print_targets(results, placements, a.gaps_ms, ops, cpu);
  std::printf("total %.0f s\n", us_since(t_start) / 1e6);
  return 0;
}
