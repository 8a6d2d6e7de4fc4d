// Cross-process cost of kvpool, and how it scales with client processes (issue 32).
//  1. the same registry operations on the in-process core and through kvpoold (client and
//     daemon in separate processes), in one run, as ratios;
//  2. aggregate throughput of 1, 2, 4, 8, 16 client processes calling flat out, each count
//     run --reps times (interleaved), with median and spread: match-64; an engine-step mix
//     (match-64 + allocate-16 + register-16 + release of all); match-64 with the clients
//     pinned two to a core;
//  3. the same flat-out match-64 and engine steps against the alternatives, in the same run
//     and interleaved with kvpoold: our blocking Unix-socket server (a thread per connection,
//     the daemon's own request code under a mutex) and redis-server (bench_backends.hpp), so
//     that a loss as clients are added can be told apart from what the host does to anyone;
//  4. a victim's latency (one match-64 every millisecond) alone and beside 16 flat-out clients;
//  5. idle CPU of kvpoold and quiet attached clients.
//   ./build/tests/bench/kvpool_ipc_bench [--blocks N] [--samples N] [--seconds S] [--reps R]
//                                         [--clients 1,2,4,8,16] [--idle-seconds S]
//                                         [--max-clients N] (kvpoold's slots; default 64)
//                                         [--alternatives 1|0] (default 1)
// Starts its own kvpoold (a temp runtime dir; KVPOOLD overrides the binary) and stops it;
// the alternatives' servers too (REDIS_SERVER overrides redis-server; none: no redis column).
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kvpool/client.hpp"
#include "kvpool/pool/pool_core.hpp"
#include "support/daemon_process.hpp"
#ifdef KVPOOL_IPC_ALTERNATIVES
#include "bench_backends.hpp"
#endif

using namespace kvpool;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

constexpr uint32_t kBatch = 64;

struct Args {
  uint32_t blocks = 100'000;
  int samples = 20'000;
  double seconds = 1.0;
  int reps = 3;
  std::vector<int> clients = {1, 2, 4, 8, 16};
  double idle_seconds = 5.0;
  uint32_t max_clients = 64;  // kvpoold's slots: the engine looks at every one each pass
  bool alternatives = true;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

std::vector<Token> tokens_for(uint64_t seed, uint32_t page) {
  std::vector<Token> t(page);
  for (uint32_t i = 0; i < page; ++i) t[i] = static_cast<Token>(seed * 131 + i);
  return t;
}

// ---- in-process core -------------------------------------------------------------------

struct CoreFigures {
  double match, allocate, register64;
};

CoreFigures run_core(const Args& a, const std::vector<uint64_t>& hashes) {
  pool::PoolCoreConfig c{a.blocks, 4, 0};
  size_t bytes = *pool::PoolCore::arena_bytes(c);
  char* mem = static_cast<char*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
  auto core = std::move(pool::PoolCore::create(mem, bytes, c).value());
  std::vector<pool::BlockRef> refs(hashes.size()), out(hashes.size());
  // As in the daemon: the queried half at priority 1, so churn (priority 0) evicts churn.
  const uint32_t n = static_cast<uint32_t>(hashes.size());
  (void)core.allocate(0, n, refs.data());
  std::vector<pool::RegisterItem> items(n);
  for (uint32_t i = 0; i < n; ++i) items[i] = {refs[i], hashes[i], hashes[i], 0, 1, 0};
  (void)core.register_blocks(0, items, out.data());
  (void)core.release_immutable(0, {out.data(), n});
  std::mt19937_64 rng(7);
  std::vector<double> m, al, rg;
  std::vector<uint64_t> q(kBatch);
  std::vector<pool::BlockRef> r(kBatch);
  std::vector<pool::RegisterItem> it(kBatch);
  for (int s = 0; s < a.samples; ++s) {
    size_t start = rng() % (hashes.size() - kBatch);
    std::copy_n(hashes.begin() + static_cast<long>(start), kBatch, q.begin());
    auto t0 = Clock::now();
    auto hit = core.match(1, q, r.data());
    if (*hit != kBatch) std::fprintf(stderr, "in-process match hit only %u\n", *hit);
    (void)core.release_immutable(1, {r.data(), *hit});
    m.push_back(us_since(t0));
    t0 = Clock::now();
    (void)core.allocate(1, kBatch, r.data());
    (void)core.release_mutable(1, r);
    al.push_back(us_since(t0));
    t0 = Clock::now();
    (void)core.allocate(1, kBatch, r.data());
    for (uint32_t i = 0; i < kBatch; ++i) {
      uint64_t h = rng();
      it[i] = {r[i], h, h, 0, 0, 0};
    }
    (void)core.register_blocks(1, it, r.data());
    (void)core.release_immutable(1, r);
    rg.push_back(us_since(t0));
  }
  std::free(mem);
  return {median(m), median(al), median(rg)};
}

// ---- daemon ----------------------------------------------------------------------------

// kvpoold's config: one pool of small blocks (the figures are about the calls, not bytes).
nlohmann::json bench_config(const Args& a) {
  nlohmann::json layout = {{"num_layers", 1}, {"outer_dim", 1},   {"page_size", 16},
                           {"inner_dim", 8},  {"dtype_bytes", 2}, {"alignment", 64}};
  return {{"log_level", "warn"},
          {"max_clients", a.max_clients},
          {"pools", nlohmann::json::array(
                        {{{"name", "bench"}, {"num_blocks", a.blocks}, {"layout", layout}}})}};
}

Result<Client> connect(const testsupport::DaemonProcess& d) {
  ConnectOptions o;
  o.runtime_dir = d.runtime_dir();
  return Client::connect(d.instance(), o);
}

// Registers hashes.size() blocks at priority 1 and returns them (inactive, matchable); the
// benchmark's own churn registers at priority 0, so it evicts its own blocks, not these.
void fill(Pool& pool, std::vector<uint64_t>& hashes, uint32_t n) {
  uint32_t page = pool.page_size();
  for (uint32_t done = 0; done < n;) {
    uint32_t k = std::min<uint32_t>(1024, n - done);
    auto blocks = pool.allocate_blocks(k);
    if (!blocks) {
      std::fprintf(stderr, "fill: %s\n", blocks.status().to_string().c_str());
      std::exit(1);
    }
    for (uint32_t i = 0; i < k; ++i) {
      auto& b = (*blocks)[i];
      (void)b.init_sequence(0);
      auto t = tokens_for(done + i, page);
      (void)b.add_tokens(t);
      (void)b.commit();
      b.set_priority(1);
      hashes[done + i] = *b.sequence_hash();
    }
    auto imm = pool.register_blocks(std::move(*blocks));
    done += k;
  }
}

struct DaemonFigures {
  double match, match_p99, allocate, register64, idle_match;
};

DaemonFigures run_daemon(const Args& a, Pool& pool, const std::vector<uint64_t>& hashes) {
  std::mt19937_64 rng(7);
  std::vector<double> m, al, rg, idle;
  uint32_t page = pool.page_size();
  for (int s = 0; s < a.samples; ++s) {
    size_t start = rng() % (hashes.size() - kBatch);
    std::span<const uint64_t> q(hashes.data() + start, kBatch);
    auto t0 = Clock::now();
    {
      auto r = pool.match_sequence_hashes(q);
      if (r->size() != kBatch) std::fprintf(stderr, "kvpoold match hit only %zu\n", r->size());
    }
    m.push_back(us_since(t0));
    t0 = Clock::now();
    { auto r = pool.allocate_blocks(kBatch); }
    al.push_back(us_since(t0));
    t0 = Clock::now();
    {
      auto r = pool.allocate_blocks(kBatch);
      for (auto& b : *r) {
        (void)b.init_sequence(rng());
        (void)b.add_tokens(tokens_for(s, page));
        (void)b.commit();
      }
      auto imm = pool.register_blocks(std::move(*r));
    }
    rg.push_back(us_since(t0));
  }
  // Idle: let the engine park (it spins spin_iterations polls first), then ask.
  for (int s = 0; s < 50; ++s) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    size_t start = rng() % (hashes.size() - kBatch);
    auto t0 = Clock::now();
    { auto r = pool.match_sequence_hashes({hashes.data() + start, kBatch}); }
    idle.push_back(us_since(t0));
  }
  return {median(m), pct(m, 0.99), median(al), median(rg), median(idle)};
}

// ---- many clients ------------------------------------------------------------------------

// What each client process of a run does, flat out, until the deadline.
enum class Load { kMatch, kMix };
// Whom the clients call: kvpoold through libkvpool, or one of the alternatives.
enum class Target { kKvpoold, kSocket, kRedis };

// The servers a run's clients may call (the alternatives' are null when not started).
struct Servers {
  const testsupport::DaemonProcess* kvpoold = nullptr;
#ifdef KVPOOL_IPC_ALTERNATIVES
  const bench::SocketServer* socket = nullptr;
  const bench::RedisServer* redis = nullptr;
#endif
  uint32_t blocks = 0;
  pid_t pid(Target t) const;
};

pid_t Servers::pid(Target t) const {
#ifdef KVPOOL_IPC_ALTERNATIVES
  if (t == Target::kSocket) return socket->pid();
  if (t == Target::kRedis) return redis->pid();
#endif
  (void)t;
  return kvpoold->pid();
}

struct RunSpec {
  Target target = Target::kKvpoold;
  int clients = 1;
  Load load = Load::kMatch;
  bool pinned = false;  // two clients to a core: client i on allowed CPU (i / 2) % cores
  bool victim = false;  // one more client that calls every millisecond and times each call
  double seconds = 1.0;
};

struct RunResult {
  double ops_per_s = 0;  // aggregate of the flat-out clients
  double victim_p50 = 0, victim_p99 = 0;
  // Where the time went (the evidence for issue 32): kvpoold's CPU as a share of one core
  // and its engine thread's voluntary (parks) and involuntary (preempted) context switches
  // per 1000 calls; the flat-out clients' CPU (all their threads) and context switches per
  // call.
  double daemon_cpu = 0, daemon_vcs_per_k = 0, daemon_ivcs_per_k = 0;
  double client_cpu_us = 0, client_vcs = 0, client_ivcs = 0;
};

// A process's (or thread's) CPU and context switches, from /proc.
struct ProcSample {
  uint64_t cpu_ticks = 0;
  uint64_t vcs = 0, ivcs = 0;
};

std::vector<int> allowed_cpus() {
  cpu_set_t m;
  CPU_ZERO(&m);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof(m), &m) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &m)) out.push_back(c);
  return out;
}

void pin_to(int cpu) {
  cpu_set_t m;
  CPU_ZERO(&m);
  CPU_SET(cpu, &m);
  (void)sched_setaffinity(0, sizeof(m), &m);
}

// One engine step: match-64 (all hit) + allocate-16 + register-16 + release of everything.
void engine_step(Pool& pool, std::span<const uint64_t> q, std::mt19937_64& rng) {
  auto hit = pool.match_sequence_hashes(q);
  auto fresh = pool.allocate_blocks(16);
  if (!fresh) return;
  const uint32_t page = pool.page_size();
  for (auto& b : *fresh) {
    (void)b.init_sequence(rng());
    (void)b.add_tokens(tokens_for(rng(), page));
    (void)b.commit();
  }
  auto imm = pool.register_blocks(std::move(*fresh));
}

// utime + stime of every thread of `pid`, in clock ticks (/proc/<pid>/stat fields 14, 15).
uint64_t cpu_ticks(pid_t pid) {
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (!f) return 0;
  char buf[1024];
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');  // the name may hold spaces
  if (!p) return 0;
  unsigned long utime = 0, stime = 0;
  // Fields after the name: state (3) ... utime (14), stime (15).
  if (std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime) !=
      2)
    return 0;
  return utime + stime;
}

ProcSample proc_sample(pid_t pid) {
  ProcSample p;
  p.cpu_ticks = cpu_ticks(pid);
  // The engine is kvpoold's main thread: its own status, not the process's.
  const std::string path =
      "/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/status";
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return p;
  char line[256];
  while (std::fgets(line, sizeof(line), f)) {
    unsigned long v = 0;
    if (std::sscanf(line, "voluntary_ctxt_switches: %lu", &v) == 1) p.vcs = v;
    if (std::sscanf(line, "nonvoluntary_ctxt_switches: %lu", &v) == 1) p.ivcs = v;
  }
  std::fclose(f);
  return p;
}

// What a client process reports: calls, victim p50 and p99 (0 for the others), its CPU (us)
// and its voluntary and involuntary context switches over the run.
constexpr int kClientMsg = 6;

// The body of one client process: connect, say ready, wait for the deadline, run.
// Writes its count (and, for the victim, its p50 and p99) to `out`.
// One call of a flat-out client to an alternative server, or null for kvpoold (the client
// then calls through libkvpool).
using AltCall = std::function<void(std::span<const uint64_t>, std::mt19937_64&)>;

AltCall alternative_call(const Servers& s, const RunSpec& spec) {
#ifdef KVPOOL_IPC_ALTERNATIVES
  if (spec.target == Target::kKvpoold) return {};
  std::shared_ptr<bench::Backend> b = spec.target == Target::kSocket
                                          ? bench::make_socket_backend(*s.socket)
                                          : bench::make_redis_backend(*s.redis, s.blocks);
  if (spec.load == Load::kMatch)
    return [b](std::span<const uint64_t> q, std::mt19937_64&) { b->match(q); };
  return [b](std::span<const uint64_t> q, std::mt19937_64& rng) { b->engine_step(q, rng(), rng); };
#else
  (void)s;
  (void)spec;
  return {};
#endif
}

[[noreturn]] void client_main(const Servers& s, const std::vector<uint64_t>& hashes,
                              const RunSpec& spec, int index, bool is_victim, int ready_fd,
                              int go_fd, int out_fd) {
  if (spec.pinned && !is_victim) {
    const auto cpus = allowed_cpus();
    if (!cpus.empty()) pin_to(cpus[static_cast<size_t>(index / 2) % cpus.size()]);
  }
  const AltCall alt = alternative_call(s, spec);
  std::optional<Result<Client>> cl;
  std::optional<Pool> pool;
  if (!alt) {
    cl.emplace(connect(*s.kvpoold));
    if (*cl) pool.emplace(*(*cl)->pool("bench"));
  }
  const char one = 1;
  ssize_t w = write(ready_fd, &one, 1);
  int64_t deadline_ns = 0;
  if (read(go_fd, &deadline_ns, sizeof(deadline_ns)) != sizeof(deadline_ns)) _exit(1);
  const auto deadline = Clock::time_point(std::chrono::nanoseconds(deadline_ns));
  std::mt19937_64 rng(static_cast<uint64_t>(index) * 7919 + 1);
  uint64_t ops = 0;
  std::vector<double> lat;
  rusage ru0{};
  getrusage(RUSAGE_SELF, &ru0);
  while ((pool || alt) && Clock::now() < deadline) {
    const size_t start = rng() % (hashes.size() - kBatch);
    const std::span<const uint64_t> q(hashes.data() + start, kBatch);
    if (alt) {
      alt(q, rng);
    } else if (is_victim) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      const auto t0 = Clock::now();
      { auto r = pool->match_sequence_hashes(q); }
      lat.push_back(us_since(t0));
    } else if (spec.load == Load::kMatch) {
      auto r = pool->match_sequence_hashes(q);
    } else {
      engine_step(*pool, q, rng);
    }
    ++ops;
  }
  rusage ru1{};
  getrusage(RUSAGE_SELF, &ru1);
  auto us = [](const timeval& t) { return 1e6 * static_cast<double>(t.tv_sec) + t.tv_usec; };
  const double cpu_us = us(ru1.ru_utime) - us(ru0.ru_utime) + us(ru1.ru_stime) - us(ru0.ru_stime);
  double msg[kClientMsg] = {static_cast<double>(ops),
                            median(lat),
                            pct(lat, 0.99),
                            cpu_us,
                            static_cast<double>(ru1.ru_nvcsw - ru0.ru_nvcsw),
                            static_cast<double>(ru1.ru_nivcsw - ru0.ru_nivcsw)};
  w = write(out_fd, msg, sizeof(msg));
  (void)w;
  pool.reset();
  _exit(0);
}

// Forks the clients of one run, starts them together once all are attached, and sums.
RunResult run_clients(const Servers& s, const std::vector<uint64_t>& hashes, const RunSpec& spec) {
  int ready[2], go[2], out[2];
  if (pipe(ready) != 0 || pipe(go) != 0 || pipe(out) != 0) return {};
  const int total = spec.clients + (spec.victim ? 1 : 0);
  std::vector<pid_t> kids;
  for (int c = 0; c < total; ++c) {
    const pid_t p = fork();
    if (p == 0) {
      close(ready[0]);
      close(go[1]);
      close(out[0]);
      client_main(s, hashes, spec, c, spec.victim && c == spec.clients, ready[1], go[0], out[1]);
    }
    kids.push_back(p);
  }
  close(ready[1]);
  close(go[0]);
  close(out[1]);
  char b;
  for (int c = 0; c < total; ++c)
    if (read(ready[0], &b, 1) != 1) break;
  // Everyone attached: one deadline for all (steady_clock is CLOCK_MONOTONIC, shared).
  const int64_t deadline =
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          (Clock::now() + std::chrono::duration<double>(spec.seconds)).time_since_epoch())
          .count();
  const pid_t server = s.pid(spec.target);
  const ProcSample d0 = proc_sample(server);
  for (int c = 0; c < total; ++c) {
    ssize_t w = write(go[1], &deadline, sizeof(deadline));
    (void)w;
  }
  RunResult r;
  uint64_t sum = 0;
  double cpu_us = 0, vcs = 0, ivcs = 0;
  for (int c = 0; c < total; ++c) {
    double msg[kClientMsg];
    if (read(out[0], msg, sizeof(msg)) != sizeof(msg)) continue;
    if (c == 0) {
      // The first report comes once the deadline passed: kvpoold's share ends here.
      const ProcSample d1 = proc_sample(server);
      const double tick_s = 1.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
      r.daemon_cpu = static_cast<double>(d1.cpu_ticks - d0.cpu_ticks) * tick_s / spec.seconds;
      r.daemon_vcs_per_k = static_cast<double>(d1.vcs - d0.vcs);
      r.daemon_ivcs_per_k = static_cast<double>(d1.ivcs - d0.ivcs);
    }
    if (msg[1] > 0) {  // the victim
      r.victim_p50 = msg[1];
      r.victim_p99 = msg[2];
    } else {
      sum += static_cast<uint64_t>(msg[0]);
      cpu_us += msg[3];
      vcs += msg[4];
      ivcs += msg[5];
    }
  }
  if (sum > 0) {
    const double calls = static_cast<double>(sum);
    r.daemon_vcs_per_k *= 1000.0 / calls;
    r.daemon_ivcs_per_k *= 1000.0 / calls;
    r.client_cpu_us = cpu_us / calls;
    r.client_vcs = vcs / calls;
    r.client_ivcs = ivcs / calls;
  }
  for (pid_t p : kids) waitpid(p, nullptr, 0);
  close(ready[0]);
  close(go[1]);
  close(out[0]);
  r.ops_per_s = static_cast<double>(sum) / spec.seconds;
  return r;
}

// Each client count `reps` times, the counts interleaved (1, 2, 4, ... then again), so drift
// on a shared machine weighs on all of them alike; median and spread (min-max) per count.
void scaling_table(const char* title, const Servers& d, const std::vector<uint64_t>& hashes,
                   RunSpec spec, const std::vector<int>& counts, int reps) {
  std::vector<std::vector<RunResult>> runs(counts.size());
  for (int r = 0; r < reps; ++r)
    for (size_t i = 0; i < counts.size(); ++i) {
      spec.clients = counts[i];
      runs[i].push_back(run_clients(d, hashes, spec));
    }
  std::printf("\n%s (%d runs of %.1f s each, aggregate per second)\n", title, reps, spec.seconds);
  std::printf("%8s %12s %12s %12s %8s %10s | %7s %13s | %8s %11s\n", "clients", "median", "min",
              "max", "spread", "vs 1", "kvpoold", "cs/1k vol inv", "client", "cs/call v i");
  auto rates = [&](size_t i) {
    std::vector<double> v;
    for (const RunResult& rr : runs[i]) v.push_back(rr.ops_per_s);
    return v;
  };
  auto mean = [&](size_t i, double RunResult::*field) {
    double sum = 0;
    for (const RunResult& rr : runs[i]) sum += rr.*field;
    return runs[i].empty() ? 0 : sum / static_cast<double>(runs[i].size());
  };
  const double one = counts.empty() ? 0 : median(rates(0));
  for (size_t i = 0; i < counts.size(); ++i) {
    const std::vector<double> v = rates(i);
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    const double med = median(v);
    // The diagnostics are means over the runs: kvpoold's CPU (share of one core), its engine
    // thread's context switches per 1000 calls; the clients' CPU per call (us) and context
    // switches per call.
    std::printf(
        "%8d %12.0f %12.0f %12.0f %7.0f%% %9.2fx | %6.0f%% %6.1f %6.1f | %6.1fus %5.2f %5.2f\n",
        counts[i], med, *lo, *hi, med > 0 ? 100.0 * (*hi - *lo) / med : 0, one > 0 ? med / one : 0,
        100.0 * mean(i, &RunResult::daemon_cpu), mean(i, &RunResult::daemon_vcs_per_k),
        mean(i, &RunResult::daemon_ivcs_per_k), mean(i, &RunResult::client_cpu_us),
        mean(i, &RunResult::client_vcs), mean(i, &RunResult::client_ivcs));
  }
}

// The same flat-out load against kvpoold and each alternative started, interleaved (per
// repetition and client count, every target in turn), so drift weighs on all alike: each
// target's median aggregate rate (min-max) and against its own one client.
void alternatives_table(const char* title, const Servers& s, const std::vector<uint64_t>& hashes,
                        RunSpec spec, const std::vector<int>& counts, int reps) {
  std::vector<std::pair<Target, const char*>> targets = {{Target::kKvpoold, "kvpoold"}};
#ifdef KVPOOL_IPC_ALTERNATIVES
  targets.push_back({Target::kSocket, "unix-socket"});
  if (s.redis) targets.push_back({Target::kRedis, "redis"});
#endif
  // rates[target][count][rep]
  std::vector<std::vector<std::vector<double>>> rates(
      targets.size(), std::vector<std::vector<double>>(counts.size()));
  for (int r = 0; r < reps; ++r)
    for (size_t i = 0; i < counts.size(); ++i)
      for (size_t t = 0; t < targets.size(); ++t) {
        spec.clients = counts[i];
        spec.target = targets[t].first;
        rates[t][i].push_back(run_clients(s, hashes, spec).ops_per_s);
      }
  std::printf(
      "\n%s (%d runs of %.1f s each, aggregate per second, median (min-max), vs its own "
      "1 client)\n%8s",
      title, reps, spec.seconds, "clients");
  for (const auto& t : targets) std::printf(" %32s", t.second);
  std::printf("\n");
  for (size_t i = 0; i < counts.size(); ++i) {
    std::printf("%8d", counts[i]);
    for (size_t t = 0; t < targets.size(); ++t) {
      const std::vector<double>& v = rates[t][i];
      const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
      const double one = median(rates[t][0]);
      const double med = median(v);
      char cell[64];
      std::snprintf(cell, sizeof(cell), "%.0f (%.0f-%.0f) %.2fx", med, *lo, *hi,
                    one > 0 ? med / one : 0);
      std::printf(" %32s", cell);
    }
    std::printf("\n");
  }
}

// kvpoold and `quiet` attached clients that make no call: their CPU over `seconds`.
void idle_cpu(const testsupport::DaemonProcess& d, int quiet, double seconds) {
  int ready[2], quit[2];
  if (pipe(ready) != 0 || pipe(quit) != 0) return;
  std::vector<pid_t> kids;
  for (int c = 0; c < quiet; ++c) {
    const pid_t p = fork();
    if (p == 0) {
      close(ready[0]);
      close(quit[1]);
      auto cl = connect(d);
      const char one = 1;
      ssize_t w = write(ready[1], &one, 1);
      (void)w;
      char b;
      while (read(quit[0], &b, 1) < 0 && errno == EINTR) {
      }
      _exit(cl ? 0 : 1);
    }
    kids.push_back(p);
  }
  close(ready[1]);
  close(quit[0]);
  char b;
  for (int c = 0; c < quiet; ++c)
    if (read(ready[0], &b, 1) != 1) break;
  std::this_thread::sleep_for(std::chrono::seconds(2));  // lease threads' linger ends (~1 s)
  const uint64_t d0 = cpu_ticks(d.pid());
  uint64_t c0 = 0;
  for (pid_t p : kids) c0 += cpu_ticks(p);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const uint64_t d1 = cpu_ticks(d.pid());
  uint64_t c1 = 0;
  for (pid_t p : kids) c1 += cpu_ticks(p);
  close(quit[1]);  // every quiet client reads EOF and leaves
  for (pid_t p : kids) waitpid(p, nullptr, 0);
  close(ready[0]);
  const double tick_ms = 1000.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
  auto percent = [&](uint64_t t) { return 100.0 * t * tick_ms / 1000.0 / seconds; };
  std::printf(
      "\nidle CPU over %.0f s (one tick = %.0f ms): kvpoold %.2f%% of a core, %d quiet "
      "clients %.2f%% together\n",
      seconds, tick_ms, percent(d1 - d0), quiet, percent(c1 - c0));
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--blocks")) a.blocks = static_cast<uint32_t>(std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--samples")) a.samples = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--seconds")) a.seconds = std::atof(argv[i + 1]);
    if (!std::strcmp(argv[i], "--reps")) a.reps = std::max(1, std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--idle-seconds")) a.idle_seconds = std::atof(argv[i + 1]);
    if (!std::strcmp(argv[i], "--alternatives")) a.alternatives = std::atoi(argv[i + 1]) != 0;
    if (!std::strcmp(argv[i], "--max-clients"))
      a.max_clients = static_cast<uint32_t>(std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--clients")) {
      a.clients.clear();
      std::stringstream ss(argv[i + 1]);
      for (std::string n; std::getline(ss, n, ',');) a.clients.push_back(std::atoi(n.c_str()));
    }
  }
  Servers sv;
  sv.blocks = a.blocks;
#ifdef KVPOOL_IPC_ALTERNATIVES
  // Forked before this process starts a thread (connecting starts libkvpool's lease thread).
  std::optional<bench::SocketServer> socket;
  std::optional<bench::RedisServer> redis;
  if (a.alternatives) {
    socket.emplace(a.blocks);
    sv.socket = &*socket;
    const std::string redis_bin = bench::RedisServer::find_binary();
    if (!redis_bin.empty()) {
      redis.emplace(redis_bin);
      sv.redis = &*redis;
    }
  }
#endif
  const char* kvpoold = std::getenv("KVPOOLD");
  testsupport::DaemonProcess d(bench_config(a), kvpoold ? kvpoold : KVPOOLD_PATH);
  sv.kvpoold = &d;
  try {
    d.start(20s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  auto client = connect(d);
  if (!client) {
    std::fprintf(stderr, "cannot reach kvpoold: %s\n", client.status().to_string().c_str());
    return 1;
  }
  auto pool = client->pool("bench");
  std::vector<uint64_t> hashes(a.blocks / 2);
  fill(*pool, hashes, a.blocks / 2);
  client->flush();
#ifdef KVPOOL_IPC_ALTERNATIVES
  if (sv.socket) bench::make_socket_backend(*sv.socket)->fill(hashes);
  if (sv.redis) bench::make_redis_backend(*sv.redis, a.blocks)->fill(hashes);
#endif

  CoreFigures core = run_core(a, hashes);
  DaemonFigures dm = run_daemon(a, *pool, hashes);
  std::printf("kvpool cross-process cost: pool of %u blocks, batches of %u, %d samples, medians\n",
              a.blocks, kBatch, a.samples);
  std::printf("%-34s %12s %12s %8s\n", "operation", "in-process", "kvpoold", "ratio");
  std::printf("%-34s %10.2fus %10.2fus %7.1fx\n", "match-64 (all hit) + release", core.match,
              dm.match, dm.match / core.match);
  std::printf("%-34s %10.2fus %10.2fus %7.1fx\n", "allocate-64 + release", core.allocate,
              dm.allocate, dm.allocate / core.allocate);
  std::printf("%-34s %10.2fus %10.2fus %7.1fx\n", "allocate+register-64 + release", core.register64,
              dm.register64, dm.register64 / core.register64);
  std::printf("match-64 p99 (busy daemon): %.2f us\n", dm.match_p99);
  std::printf("match-64 against an idle (parked) daemon: %.2f us median\n", dm.idle_match);
  RunSpec spec;
  spec.seconds = a.seconds;
  scaling_table("match-64, client processes flat out", sv, hashes, spec, a.clients, a.reps);
  spec.load = Load::kMix;
  scaling_table("engine steps (match-64 + allocate-16 + register-16 + release), flat out", sv,
                hashes, spec, a.clients, a.reps);
  spec.load = Load::kMatch;
  spec.pinned = true;
  scaling_table("match-64, clients pinned two to a core, flat out", sv, hashes, spec, a.clients,
                a.reps);
  spec.pinned = false;
#ifdef KVPOOL_IPC_ALTERNATIVES
  if (sv.socket) {
    alternatives_table("match-64 flat out, kvpoold beside the alternatives", sv, hashes, spec,
                       a.clients, a.reps);
    spec.load = Load::kMix;
    alternatives_table("engine steps flat out, kvpoold beside the alternatives", sv, hashes, spec,
                       a.clients, a.reps);
    spec.load = Load::kMatch;
  }
#endif
  spec.victim = true;
  std::printf("\nvictim: one match-64 every 1 ms, %.1f s (median of %d runs)\n", a.seconds, a.reps);
  for (int n : {0, 16}) {
    std::vector<double> p50, p99, agg;
    for (int r = 0; r < a.reps; ++r) {
      spec.clients = n;
      const RunResult rr = run_clients(sv, hashes, spec);
      p50.push_back(rr.victim_p50);
      p99.push_back(rr.victim_p99);
      agg.push_back(rr.ops_per_s);
    }
    std::printf(
        "  beside %2d flat-out clients: p50 %8.1f us, p99 %8.1f us (others: %.0f matches/s)\n", n,
        median(p50), median(p99), median(agg));
  }
  if (a.idle_seconds > 0) idle_cpu(d, 4, a.idle_seconds);
  d.kill(SIGTERM);
  return d.wait_exit(10s) ? 0 : 1;
}
