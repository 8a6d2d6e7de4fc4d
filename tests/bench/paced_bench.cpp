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
//               server, redis-server on a Unix socket (bench_backends.hpp), and two floors,
//               futex and eventfd round trips between processes, paced the same way
//               (paced_floors.hpp); the in-process core op for reference
// Backends take turns in rounds within each (gap, placement), so a noisy machine weighs on
// all of them alike. Then: kvpoold's and one quiet client's CPU over --cpu-seconds.
//   kvpool_paced_bench [--quick] [--samples-scale X] [--gaps 0,0.1,1,5,20]
//                      [--placements unpinned,split,same,clients4] [--ops match,step]
//                      [--blocks N] [--cpu-seconds S]
// Env: KVPOOLD (daemon binary), REDIS_SERVER (redis-server binary; without one the redis
// column is empty).
//
// Process tree: this process (the coordinator) never starts a thread; it forks the servers,
// then the client workers, and tells the workers over a socket which cell to run. Workers
// write their samples into a shared mapping.
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench_backends.hpp"
#include "paced_cpu.hpp"
#include "paced_floors.hpp"

using namespace kvpool::bench;

namespace {

constexpr int kWorkers = 4;  // the clients4 placement's client processes

// The columns of the table, in order.
enum BackendId { kLibkvpool, kRing, kSocket, kRedis, kFutexFloor, kEventfdFloor, kCore, kBackends };
constexpr const char* kBackendNames[kBackends] = {"libkvpool", "kvpoold-ring", "unix-socket",
                                                  "redis",     "futex-floor",  "eventfd-floor",
                                                  "in-process"};
enum Op { kMatch, kStep, kOps };
constexpr const char* kOpNames[kOps] = {"match", "step"};
constexpr const char* kOpTitles[kOps] = {
    "match-64 (all hit) + release",
    "engine step: match-64 (all hit) + allocate-16 + register-16 + release of all"};

struct Placement {
  std::string name;
  int client_cpu = -1;  // -1: any allowed CPU
  int server_cpu = -1;
  int clients = 1;
};

struct Args {
  uint32_t blocks = 100'000;
  double scale = 1.0;
  double cpu_seconds = 10.0;
  std::vector<double> gaps_ms = {0, 0.1, 1, 5, 20};
  std::vector<std::string> placements = {"unpinned", "split", "same", "clients4"};
  std::vector<std::string> ops = {"match", "step"};
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
          "--ops match,step --blocks N --cpu-seconds S)");
    }
  }
  if (a.blocks < 4 * kFillBatch) die("--blocks must be at least 4096");
  if (a.gaps_ms.empty() || a.placements.empty() || a.ops.empty()) die("nothing to run");
  return a;
}

// ---- affinity ------------------------------------------------------------------------------

cpu_set_t g_allowed;  // the CPUs this benchmark may use, as it started

cpu_set_t mask_for(int cpu) {
  if (cpu < 0) return g_allowed;
  cpu_set_t m;
  CPU_ZERO(&m);
  CPU_SET(cpu, &m);
  return m;
}

// Every thread of `pid`, the ones it starts later excepted (so this runs before each cell).
void pin_process(pid_t pid, int cpu) {
  const cpu_set_t m = mask_for(cpu);
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  for (pid_t tid : list_tasks(pid))
    if (sched_setaffinity(tid, sizeof(m), &m) != 0 && errno != ESRCH)
      die("sched_setaffinity on " + dir + "/" + std::to_string(tid) + ": " + std::strerror(errno));
}

void pin_this_thread(int cpu) {
  const cpu_set_t m = mask_for(cpu);
  if (sched_setaffinity(0, sizeof(m), &m) != 0)
    die(std::string("sched_setaffinity on the calling thread: ") + std::strerror(errno));
}

void sleep_ns(int64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR) {
  }
}

// ---- the shared mapping and the commands -------------------------------------------------

struct Command {
  enum Type : int { kFill, kRun, kQuit } type = kRun;
  int backend = 0;
  int op = 0;
  int cpu = -1;
  int samples = 0;
  int warmup = 0;
  int64_t gap_ns = 0;
  uint64_t seed = 0;
};

struct Reply {
  int samples = 0;
};

// Written by the workers, read by the coordinator after each reply.
struct SharedArea {
  uint64_t* hashes = nullptr;  // blocks / 2 registered hashes (worker 0 fills them)
  size_t num_hashes = 0;
  double* samples = nullptr;  // kWorkers x capacity
  size_t capacity = 0;

  double* worker_samples(int w) const { return samples + static_cast<size_t>(w) * capacity; }
};

SharedArea map_shared(size_t num_hashes, size_t capacity) {
  SharedArea a;
  a.num_hashes = num_hashes;
  a.capacity = capacity;
  const size_t bytes = num_hashes * 8 + kWorkers * capacity * sizeof(double);
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) die(std::string("mmap: ") + std::strerror(errno));
  a.hashes = static_cast<uint64_t*>(m);
  a.samples = reinterpret_cast<double*>(a.hashes + num_hashes);
  return a;
}

struct Servers {
  KvpooldServer* kvpoold;
  SocketServer* socket;
  RedisServer* redis;  // nullptr: no redis-server here
  FloorServer* futex;
  FloorServer* eventfd;
  uint32_t blocks;

  std::vector<pid_t> pids() const {
    std::vector<pid_t> p = {kvpoold->pid(), socket->pid(), futex->pid(), eventfd->pid()};
    if (redis) p.push_back(redis->pid());
    return p;
  }
};

// ---- a worker: one client process --------------------------------------------------------

class Worker {
 public:
  Worker(int index, const Servers& s, const SharedArea& area) : index_(index), s_(s), area_(area) {}

  void handle(const Command& c) {
    if (c.type == Command::kFill) return fill();
    pin_this_thread(c.cpu);
    std::mt19937_64 rng(c.seed);
    std::span<const uint64_t> hashes(area_.hashes, area_.num_hashes);
    double* out = area_.worker_samples(index_);
    const bool is_floor = c.backend == kFutexFloor || c.backend == kEventfdFloor;
    Backend* b = is_floor ? nullptr : backend(c.backend);
    if (!is_floor && !b) die(std::string("no ") + kBackendNames[c.backend] + " in this run");
    FloorServer* floor = c.backend == kFutexFloor ? s_.futex : s_.eventfd;
    for (int i = -c.warmup; i < c.samples; ++i) {
      if (c.gap_ns > 0) sleep_ns(c.gap_ns);
      const size_t start = rng() % (hashes.size() - kBatch);
      const auto q = hashes.subspan(start, kBatch);
      const uint64_t seed = c.seed * 1'000'003 + static_cast<uint64_t>(i + c.warmup);
      const auto t0 = Clock::now();
      if (!b)
        floor->round_trip(index_);
      else if (c.op == kMatch)
        b->match(q);
      else
        b->engine_step(q, seed, rng);
      const double us = us_since(t0);
      if (i >= 0) out[i] = us;
    }
    pin_this_thread(-1);
  }

  // Disconnects everything (the CPU figure wants only its own quiet client attached).
  void close() {
    for (auto& b : backends_) b.reset();
    daemon_.reset();
  }

 private:
  // Worker 0 registers the pool's hashes in kvpoold and the same hashes everywhere else.
  void fill() {
    std::vector<uint64_t> hashes(area_.num_hashes);
    daemon()->fill_pages(hashes);
    std::copy(hashes.begin(), hashes.end(), area_.hashes);
    for (int id : {kSocket, kRedis, kCore})
      if (Backend* b = backend(id)) b->fill(hashes);
  }

  DaemonBackend* daemon() {
    if (!daemon_) daemon_ = std::make_unique<DaemonBackend>(*s_.kvpoold);
    return daemon_.get();
  }
  // Connects on first use: workers 1..3 attach only when clients4 runs.
  Backend* backend(int id) {
    if (id == kLibkvpool) return daemon();
    auto& b = backends_[id];
    if (!b) {
      if (id == kRing) b = make_ring_backend(*s_.kvpoold);
      if (id == kSocket) b = make_socket_backend(*s_.socket);
      if (id == kRedis && s_.redis) b = make_redis_backend(*s_.redis, s_.blocks);
      if (id == kCore) b = make_core_backend(s_.blocks);
    }
    return b.get();
  }

  int index_;
  const Servers& s_;
  const SharedArea& area_;
  std::unique_ptr<DaemonBackend> daemon_;
  std::unique_ptr<Backend> backends_[kBackends];
};

[[noreturn]] void worker_main(int index, int fd, const Servers& s, const SharedArea& area) {
  Worker w(index, s, area);
  for (Command c;;) {
    const ssize_t n = recv(fd, &c, sizeof(c), 0);
    if (n != sizeof(c) || c.type == Command::kQuit) break;
    w.handle(c);
    const Reply r{c.samples};
    if (send(fd, &r, sizeof(r), MSG_NOSIGNAL) != sizeof(r)) break;
  }
  w.close();
  _exit(0);  // never the coordinator's destructors: they stop the servers
}

struct WorkerHandle {
  pid_t pid = -1;
  int fd = -1;
};

WorkerHandle start_worker(int index, const Servers& s, const SharedArea& area) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) die("socketpair");
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) die("fork worker");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(0);
    ::close(sv[0]);
    worker_main(index, sv[1], s, area);
  }
  ::close(sv[1]);
  return {pid, sv[0]};
}

void send_command(const WorkerHandle& w, const Command& c) {
  if (send(w.fd, &c, sizeof(c), MSG_NOSIGNAL) != sizeof(c)) die("a worker exited (see above)");
}
int wait_reply(const WorkerHandle& w) {
  Reply r;
  if (recv(w.fd, &r, sizeof(r), 0) != sizeof(r)) die("a worker exited (see above)");
  return r.samples;
}

// ---- the coordinator ---------------------------------------------------------------------

struct Cell {
  std::vector<double> samples;
};

struct CellKey {
  int op, gap, placement, backend;
};

class Results {
 public:
  Results(size_t gaps, size_t placements)
      : gaps_(gaps), placements_(placements), cells_(kOps * gaps * placements * kBackends) {}
  std::vector<double>& at(int op, int gap, int placement, int backend) {
    return cells_[((static_cast<size_t>(op) * gaps_ + gap) * placements_ + placement) * kBackends +
                  backend];
  }

 private:
  size_t gaps_, placements_;
  std::vector<std::vector<double>> cells_;
};

std::vector<Placement> make_placements(const Args& a) {
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &g_allowed)) cpus.push_back(c);
  std::vector<Placement> out;
  for (const auto& name : a.placements) {
    if (name == "unpinned") out.push_back({name, -1, -1, 1});
    if (name == "same") out.push_back({name, cpus[0], cpus[0], 1});
    if (name == "clients4") out.push_back({name, -1, -1, kWorkers});
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

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse_args(argc, argv);
  const char* kvpoold_bin = std::getenv("KVPOOLD");
  if (!kvpoold_bin) kvpoold_bin = KVPOOLD_PATH;
  if (sched_getaffinity(0, sizeof(g_allowed), &g_allowed) != 0) die("sched_getaffinity");
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
  const Servers servers{&kvpoold, &socket_server, redis ? &*redis : nullptr,
                        &futex,   &eventfd,       a.blocks};

  size_t capacity = 0;
  for (double g : a.gaps_ms)
    capacity = std::max(capacity, static_cast<size_t>(std::ceil(base_samples(g) * a.scale)) + 64);
  const SharedArea area = map_shared(a.blocks / 2, capacity);
  std::vector<WorkerHandle> workers;
  for (int w = 0; w < kWorkers; ++w) workers.push_back(start_worker(w, servers, area));

  send_command(workers[0], Command{Command::kFill});
  wait_reply(workers[0]);

  Results results(a.gaps_ms.size(), placements.size());
  std::vector<bool> core_done(kOps * a.gaps_ms.size(), false);
  uint64_t seed = 1;
  for (size_t pi = 0; pi < placements.size(); ++pi) {
    const Placement& pl = placements[pi];
    for (size_t gi = 0; gi < a.gaps_ms.size(); ++gi) {
      const double gap_ms = a.gaps_ms[gi];
      // The cells of this (placement, gap): every backend for every op, the floors once
      // (they do no pool work), and the in-process op the first time this gap comes up.
      std::vector<CellKey> cells;
      for (int op : ops)
        for (int b : {kLibkvpool, kRing, kSocket, kRedis})
          if (b != kRedis || redis)
            cells.push_back({op, static_cast<int>(gi), static_cast<int>(pi), b});
      for (int b : {kFutexFloor, kEventfdFloor})
        cells.push_back({ops[0], static_cast<int>(gi), static_cast<int>(pi), b});
      for (int op : ops)
        if (!core_done[op * a.gaps_ms.size() + gi]) {
          core_done[op * a.gaps_ms.size() + gi] = true;
          cells.push_back({op, static_cast<int>(gi), static_cast<int>(pi), kCore});
        }

      const int n = std::max(10, static_cast<int>(std::lround(base_samples(gap_ms) * a.scale)));
      const int rounds = std::clamp(n / 25, 1, 4);
      const int per_round = (n + rounds - 1) / rounds;
      const int warmup = gap_ms >= 1 ? 1 : std::max(1, per_round / 20);
      std::fprintf(stderr, "paced_bench: %-9s gap %5.1f ms: %zu cells x %d samples (%.0f s)\n",
                   pl.name.c_str(), gap_ms, cells.size(), n, us_since(t_start) / 1e6);
      for (int r = 0; r < rounds; ++r) {
        for (size_t k = 0; k < cells.size(); ++k) {
          const CellKey& cell = cells[(k + static_cast<size_t>(r)) % cells.size()];  // rotate
          for (pid_t p : servers.pids()) pin_process(p, pl.server_cpu);
          Command c;
          c.type = Command::kRun;
          c.backend = cell.backend;
          c.op = cell.op;
          c.cpu = pl.client_cpu;
          const int clients = cell.backend == kCore ? 1 : pl.clients;
          // Clients share the cell's samples (pooled, as many as one client's): the same
          // statistics in a quarter of the time.
          c.samples = (per_round + clients - 1) / clients;
          c.warmup = warmup;
          c.gap_ns = static_cast<int64_t>(gap_ms * 1e6);
          for (int w = 0; w < clients; ++w) {
            c.seed = seed++;
            send_command(workers[w], c);
          }
          auto& v = results.at(cell.op, cell.gap, cell.placement, cell.backend);
          for (int w = 0; w < clients; ++w) {
            const int got = wait_reply(workers[w]);
            const double* s = area.worker_samples(w);
            v.insert(v.end(), s, s + got);
          }
        }
      }
    }
  }
  for (pid_t p : servers.pids()) pin_process(p, -1);
  for (auto& w : workers) {
    send_command(w, Command{Command::kQuit});
    ::close(w.fd);
    waitpid(w.pid, nullptr, 0);
  }

  // ---- the table ----
  std::printf(
      "kvpool at an engine's cadence: pool of %u blocks (%u registered); the caller sleeps the "
      "gap before each call.\n"
      "Cells: p50 / p99 in us. Placements: unpinned; split = server and client on different "
      "cores; same = both on one core; clients4 = 4 client processes at once (their samples "
      "pooled).\n"
      "Floors: a request/answer round trip to a parked process (futex / eventfd), no pool work, "
      "paced the same way. in-process: PoolCore alone, at that gap, in the first placement.\n",
      a.blocks, a.blocks / 2);
  for (int op : ops) {
    std::printf("\n%s\n%-9s %6s", kOpTitles[op], "placement", "gap ms");
    for (int b = 0; b < kBackends; ++b) std::printf(" | %16s", kBackendNames[b]);
    std::printf("\n");
    for (size_t pi = 0; pi < placements.size(); ++pi)
      for (size_t gi = 0; gi < a.gaps_ms.size(); ++gi) {
        std::printf("%-9s %6.1f", placements[pi].name.c_str(), a.gaps_ms[gi]);
        for (int b = 0; b < kBackends; ++b) {
          const int floor_op = (b == kFutexFloor || b == kEventfdFloor) ? ops[0] : op;
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
      for (size_t gi = 0; gi < a.gaps_ms.size(); ++gi) {
        const int g = static_cast<int>(gi), p = static_cast<int>(pi);
        auto p50 = [&](int o, int pl, int b) { return pct(results.at(o, g, pl, b), 0.5); };
        const double sock = p50(op, p, kSocket), red = p50(op, p, kRedis);
        const double floor = p50(ops[0], p, kFutexFloor), core = p50(op, 0, kCore);
        std::printf("%-9s %6.1f", placements[pi].name.c_str(), a.gaps_ms[gi]);
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

  // ---- idle CPU: the bench workers are gone; one client attaches and stays quiet ----
  std::optional<IdleCpu> cpu;
  if (a.cpu_seconds > 0) {
    cpu = measure_idle_cpu(kvpoold, a.cpu_seconds);
    std::printf(
        "\nidle CPU over %.1f s, one client attached and quiet (utime+stime from /proc/<pid>/stat, "
        "tick %.1f ms = %.2f%% of a core): kvpoold %.2f%% of a core, idle client %.2f%%\n",
        a.cpu_seconds, cpu->tick_ms, cpu->tick_ms / (a.cpu_seconds * 10), cpu->daemon_percent,
        cpu->client_percent);
  }
  print_targets(results, placements, a.gaps_ms, ops, cpu);
  std::printf("total %.0f s\n", us_since(t_start) / 1e6);
  return 0;
}
