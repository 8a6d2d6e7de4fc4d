// kvpool under fire: N worker processes allocate / fill / register / match / release with
// shared prefixes and random priorities while a killer SIGKILLs random workers (and
// optionally the daemon) and starts replacements. Checks after every kill that the daemon
// reclaimed the victim, and at the end that free + inactive + active + mutable = total, no
// block is still held, and every registered block holds the bytes its writer wrote.
//   kvpool_stress --workers 8 --seconds 30 --kill-interval-ms 300 --daemon-restarts 0 --seed 1
//                 [--keep-cache [--reattach]]
// --keep-cache: kvpoold runs under `kvpoold --supervise`; a daemon restart is a kill -9 of
// the daemon, whose successor adopts the pool (docs/restarts.md): the final
// byte check then covers blocks registered before the restarts too. --reattach: workers
// connect with ConnectOptions::reattach and must ride through every restart (issue 15).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvpool/client.hpp"
#include "kvpool/pool/pool_core.hpp"
#include "kvpool/shm/handshake.hpp"

using namespace kvpool;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  int workers = 8;
  double seconds = 30;
  int kill_interval_ms = 300;
  int daemon_restarts = 0;
  bool keep_cache = false;
  bool reattach = false;  // with keep_cache: workers ride through the restarts
  uint64_t seed = 1;
  uint32_t blocks = 2048;
  std::string kvpoold = KVPOOLD_PATH;
  std::string worker = WORKER_PATH;
  std::string kvpoolctl = KVPOOLCTL_PATH;
};

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

class Stress {
 public:
  explicit Stress(Options o) : o_(std::move(o)), rng_(o_.seed) {
    char tmpl[] = "/tmp/kvpool-stress-XXXXXX";
    dir_ = mkdtemp(tmpl);
    instance_ = "stress" + std::to_string(getpid());
    std::ofstream(dir_ + "/kvpoold.json")
        << "{\"instance\":\"" << instance_ << "\",\"runtime_dir\":\"" << dir_
        << "\",\"log_level\":\"info\",\"pools\":[{\"name\":\"g2\",\"num_blocks\":" << o_.blocks
        << ",\"layout\":{\"num_layers\":2,\"outer_dim\":2,\"page_size\":16,\"inner_dim\":16,"
           "\"dtype_bytes\":2,\"alignment\":64}}]}";
  }
  ~Stress() {
    for (auto& [pid, _] : workers_) kill(pid, SIGKILL);
    for (auto& [pid, _] : workers_) waitpid(pid, nullptr, 0);
    if (daemon_ > 0) {
      kill(daemon_, SIGKILL);
      waitpid(daemon_, nullptr, 0);
    }
    // A daemon killed with SIGKILL cannot unlink its named segments: do it for it.
    (void)shm::Segment::unlink("/kvpool." + instance_ + ".ctl");
    (void)shm::Segment::unlink("/kvpool." + instance_ + ".pool.g2");
    std::string rm = "rm -rf " + dir_;
    if (std::system(rm.c_str()) != 0)
      std::fprintf(stderr, "stress: could not remove %s\n", dir_.c_str());
  }

  int run() {
    if (!start_daemon()) return fail("kvpoold did not start");
    const auto start = Clock::now();
    const Clock::time_point end = start + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(o_.seconds));
    end_ = end;
    for (int i = 0; i < o_.workers; ++i) spawn_worker(end);
    auto next_kill = Clock::now() + next_interval();
    auto next_report = Clock::now() + std::chrono::seconds(1);
    double restart_every = o_.daemon_restarts > 0 ? o_.seconds / (o_.daemon_restarts + 1) : 0;
    int restarts_done = 0;
    uint64_t last_requests = 0;
    while (Clock::now() < end) {
      reap(end);
      if (Clock::now() >= next_kill && !workers_.empty()) {
        kill_one();
        next_kill = Clock::now() + next_interval();
      }
      if (restart_every > 0 && restarts_done < o_.daemon_restarts &&
          ms_since(start) > (restarts_done + 1) * restart_every * 1000) {
        ++restarts_done;
        restart_daemon(end);
      }
      if (Clock::now() >= next_report) {
        next_report += std::chrono::seconds(1);
        auto c = counts();
        uint64_t req = ctl()->stats.requests.load(std::memory_order_relaxed);
        if (req < last_requests) last_requests = 0;  // a restarted daemon counts from 0
        std::printf(
            "[%5.1fs] %7.0f req/s  kills %3d  daemon restarts %d  free %u inactive %u active %u "
            "mutable %u\n",
            ms_since(start) / 1000, static_cast<double>(req - last_requests), kills_, restarts_done,
            c.free, c.inactive, c.active, c.mutable_blocks);
        std::fflush(stdout);
        last_requests = req;
      }
      if (!violations_.empty()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // pacing of the killer loop
    }
    // Let the survivors finish on their own (they run until `end`), then check.
    auto deadline = Clock::now() + std::chrono::seconds(20);
    while (!workers_.empty() && Clock::now() < deadline) {
      reap(end);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (!workers_.empty()) violation(std::to_string(workers_.size()) + " workers did not finish");
    final_checks();
    report();
    return violations_.empty() ? 0 : 1;
  }

 private:
  std::chrono::milliseconds next_interval() {
    return std::chrono::milliseconds(o_.kill_interval_ms / 2 + rng_() % (o_.kill_interval_ms + 1));
  }

  int fail(const std::string& m) {
    std::fprintf(stderr, "stress: %s\n", m.c_str());
    return 1;
  }
  void violation(const std::string& m) {
    std::printf("VIOLATION: %s\n", m.c_str());
    violations_.push_back(m);
  }

  const shm::ControlHeader* ctl() const { return &control_.header(); }
  const shm::SlotInfo& slot(uint32_t i) const { return control_.slot(i); }
  pool::PoolCounts counts() const { return control_.arena(0).counts(); }  // relaxed loads

  bool start_daemon() {
    daemon_ = fork();
    if (daemon_ == 0) {
      std::string cfg = dir_ + "/kvpoold.json";
      if (o_.keep_cache)
        execl(o_.kvpoold.c_str(), o_.kvpoold.c_str(), "--supervise", "--config", cfg.c_str(),
              static_cast<char*>(nullptr));
      else
        execl(o_.kvpoold.c_str(), o_.kvpoold.c_str(), "--config", cfg.c_str(),
              static_cast<char*>(nullptr));
      _exit(127);
    }
    return await_daemon(0);
  }

  // A ready kvpoold of another epoch than `old` serves the instance (20 s at most).
  bool await_daemon(uint64_t old) {
    reclaims_seen_ = 0;  // a new daemon counts from zero
    auto deadline = Clock::now() + std::chrono::seconds(20);
    while (Clock::now() < deadline) {
      auto observed = shm::observe(instance_, dir_);
      if (observed && (old == 0 || observed->epoch() != old)) {
        control_ = std::move(observed.value());
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // start-up only
    }
    return false;
  }

  void restart_daemon(Clock::time_point end) {
    std::printf("killing kvpoold (pid %lld) with SIGKILL and starting a new one\n",
                static_cast<long long>(ctl()->daemon_pid));
    // The workers attached to this daemon must notice its death. One still starting may
    // attach to the next daemon instead (it retries connecting, as a real one would): it has
    // no death to notice, and is not held to one.
    std::set<pid_t> attached;
    for (uint32_t i = 0; i < ctl()->max_clients; ++i)
      if (slot(i).state.load(std::memory_order_acquire) !=
          static_cast<uint32_t>(shm::SlotState::kFree))
        attached.insert(static_cast<pid_t>(slot(i).pid.load(std::memory_order_relaxed)));
    if (o_.keep_cache) {
      // The supervisor (daemon_) starts the next kvpoold, which adopts the pool.
      const uint64_t epoch = control_.epoch();
      const auto c = counts();
      registered_before_ += c.active + c.inactive;
      kill(static_cast<pid_t>(ctl()->daemon_pid), SIGKILL);
      control_ = shm::ControlReader();
      if (!await_daemon(epoch)) violation("the supervised kvpoold did not come back");
      if (const shm::RestartInfo* r = control_.restart()) {
        adopted_ += r->adopted_blocks;
        std::printf("the next kvpoold adopted %llu of %u registered blocks (%llu dropped)\n",
                    static_cast<unsigned long long>(r->adopted_blocks), c.active + c.inactive,
                    static_cast<unsigned long long>(r->adoption_dropped_blocks));
      }
    } else {
      restarting_ = true;
      kill(daemon_, SIGKILL);
      waitpid(daemon_, nullptr, 0);
      restarting_ = false;
      control_ = shm::ControlReader();
      // Workers see DaemonGone and exit 3; they are replaced once the new daemon is up.
      if (!start_daemon()) violation("kvpoold did not restart over its stale segments");
    }
    if (o_.reattach) {
      await_reattached(attached, end);
      return;
    }
    auto still_attached = [&] {
      for (auto& [pid, _] : workers_)
        if (attached.count(pid)) return true;
      return false;
    };
    auto deadline = Clock::now() + std::chrono::seconds(5);
    while (still_attached() && Clock::now() < deadline) {
      reap(end, /*replace=*/false);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    for (auto& [pid, _] : workers_)
      if (attached.count(pid))
        violation("worker " + std::to_string(pid) + " did not notice the daemon's death");
    while (static_cast<int>(workers_.size()) < o_.workers) spawn_worker(end);
  }

  // --reattach: every worker attached to the killed daemon either reattaches to the next one
  // (its pid in one of the new daemon's slots) or ends its run (exit 0) within its bound;
  // none exits for the daemon's death.
  void await_reattached(const std::set<pid_t>& attached, Clock::time_point end) {
    auto waiting = [&] {
      std::set<pid_t> back;
      for (uint32_t i = 0; i < ctl()->max_clients; ++i)
        if (slot(i).state.load(std::memory_order_acquire) !=
            static_cast<uint32_t>(shm::SlotState::kFree))
          back.insert(static_cast<pid_t>(slot(i).pid.load(std::memory_order_relaxed)));
      size_t n = 0;
      for (auto& [pid, _] : workers_) n += attached.count(pid) != 0 && back.count(pid) == 0;
      return n;
    };
    const auto t0 = Clock::now();
    auto deadline = t0 + std::chrono::seconds(20);
    while (waiting() != 0 && Clock::now() < deadline) {
      reap(end, /*replace=*/true);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    if (const size_t n = waiting())
      violation(std::to_string(n) + " worker(s) did not reattach to the next kvpoold in 20 s");
    else
      std::printf("every worker still running reattached within %.0f ms\n", ms_since(t0));
    ++reattach_rounds_;
  }

  void spawn_worker(Clock::time_point end) {
    double left = std::chrono::duration<double>(end - Clock::now()).count();
    if (left < 0.2) return;
    std::string secs = std::to_string(left), seed = std::to_string(rng_() % 1000000);
    pid_t p = fork();
    if (p == 0) {
      int devnull = open("/dev/null", O_WRONLY);
      dup2(devnull, 1);
      execl(o_.worker.c_str(), o_.worker.c_str(), "--instance", instance_.c_str(), "--runtime-dir",
            dir_.c_str(), "--seconds", secs.c_str(), "--seed", seed.c_str(), "--decode-us", "0",
            "--priorities", "3", "--reattach", o_.reattach ? "1" : "0",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    workers_[p] = Clock::now();
  }

  void reap(Clock::time_point end, bool replace = true) {
    int st = 0;
    pid_t p;
    while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
      if (p == daemon_) {
        if (!violations_.empty() || !restarting_) violation("kvpoold exited unexpectedly");
        continue;
      }
      if (!workers_.erase(p)) continue;
      check_exit(p, st);
      if (replace && Clock::now() < end) spawn_worker(end);
    }
  }

  // A worker that exits on its own: 0 (its run ended) and 3 (its daemon died; not with
  // --reattach, where it must reattach instead) are fine.
  void check_exit(pid_t p, int st) {
    if (!WIFEXITED(st)) return;
    int code = WEXITSTATUS(st);
    if (code == 1)
      violation("worker " + std::to_string(p) + " saw a corrupt block");
    else if (code == 3 && o_.reattach)
      violation("worker " + std::to_string(p) + " gave up on the daemon instead of reattaching");
    else if (code != 0 && code != 3)
      violation("worker " + std::to_string(p) + " exited " + std::to_string(code));
  }

  void kill_one() {
    auto it = workers_.begin();
    std::advance(it, static_cast<long>(rng_() % workers_.size()));
    pid_t victim = it->first;
    uint64_t before = ctl()->stats.reclaimed_clients.load(std::memory_order_relaxed);
    // The victim's slot, if it attached already.
    int victim_slot = -1;
    for (uint32_t i = 0; i < ctl()->max_clients; ++i)
      if (slot(i).pid.load(std::memory_order_relaxed) == victim &&
          slot(i).state.load(std::memory_order_acquire) ==
              static_cast<uint32_t>(shm::SlotState::kAttached))
        victim_slot = static_cast<int>(i);
    auto t0 = Clock::now();
    kill(victim, SIGKILL);
    ++kills_;
    // Its fate first: one that had already finished and exited on its own (a worker that hit
    // an error, or a run's end) detached; only one our SIGKILL killed must be reclaimed.
    int st = 0;
    waitpid(victim, &st, 0);
    workers_.erase(victim);
    const bool killed = WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
    if (!killed) check_exit(victim, st);
    if (!killed && victim_slot >= 0) {
      std::printf("worker %d exited on its own (status %d) before the kill\n", victim, st);
      victim_slot = -1;
    }
    if (victim_slot >= 0) {
      // Reclaimed = the slot released and the counter moved. The bound only catches a hang
      // (a loaded CI machine takes far longer than the daemon's own figure, reported below).
      constexpr double kHangMs = 10000;
      while (ms_since(t0) < kHangMs) {
        bool freed =
            slot(static_cast<uint32_t>(victim_slot)).state.load(std::memory_order_acquire) !=
                static_cast<uint32_t>(shm::SlotState::kAttached) ||
            slot(static_cast<uint32_t>(victim_slot)).pid.load(std::memory_order_relaxed) != victim;
        if (freed && ctl()->stats.reclaimed_clients.load(std::memory_order_acquire) > before) break;
        std::this_thread::yield();
      }
      double ms = ms_since(t0);
      if (ms >= kHangMs) {
        violation(
            "worker " + std::to_string(victim) + " was not reclaimed within 10 s (slot " +
            std::to_string(victim_slot) + " state " +
            std::to_string(
                slot(static_cast<uint32_t>(victim_slot)).state.load(std::memory_order_acquire)) +
            ")");
      } else {
        latencies_.push_back(ms);
        // The daemon's own timestamps (CLOCK_MONOTONIC, as steady_clock here) of this reclaim:
        // free of this process's scheduling delays on a loaded machine.
        const double k = static_cast<double>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count());
        noticed_.push_back((static_cast<double>(ctl()->stats.last_reclaim_noticed_ns.load(
                                std::memory_order_relaxed)) -
                            k) /
                           1e6);
        returned_.push_back((static_cast<double>(ctl()->stats.last_reclaim_done_ns.load(
                                 std::memory_order_relaxed)) -
                             k) /
                            1e6);
      }
    }
    if (victim_slot >= 0) check_with_kvpoolctl(victim);
    spawn_worker(end_);
  }

  // What an operator would see: `kvpoolctl clients --json` no longer lists the victim (its
  // blocks went with it), and `kvpoolctl status --json` counts the reclaim.
  void check_with_kvpoolctl(pid_t victim) {
    auto run = [&](const char* command) -> nlohmann::json {
      std::string cmd = o_.kvpoolctl + " " + command + " --json --instance " + instance_ +
                        " --runtime-dir " + dir_ + " 2>&1";
      FILE* f = ::popen(cmd.c_str(), "r");
      if (!f) return nullptr;
      std::string out;
      char buf[4096];
      for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) out.append(buf, n);
      if (::pclose(f) != 0) {
        violation(std::string("kvpoolctl ") + command + " failed: " + out);
        return nullptr;
      }
      try {
        return nlohmann::json::parse(out);
      } catch (const std::exception& e) {
        violation(std::string("kvpoolctl ") + command + " printed no JSON: " + e.what());
        return nullptr;
      }
    };
    nlohmann::json clients = run("clients");
    if (clients.is_object())
      for (const auto& c : clients["clients"])
        if (c["pid"] == victim)
          violation("kvpoolctl clients still lists killed worker " + std::to_string(victim) +
                    " holding " + c["blocks_held"].dump() + " blocks");
    nlohmann::json status = run("status");
    if (status.is_object() && status["reclaimed_clients"].get<uint64_t>() < ++reclaims_seen_)
      violation("kvpoolctl status counts " + status["reclaimed_clients"].dump() +
                " reclaimed clients after " + std::to_string(reclaims_seen_) + " measured kills");
  }

  void final_checks() {
    auto c = counts();
    std::printf("final: total %u = free %u + inactive %u + active %u + mutable %u\n", c.total,
                c.free, c.inactive, c.active, c.mutable_blocks);
    if (c.free + c.inactive + c.active + c.mutable_blocks != c.total)
      violation("counts do not add up");
    if (c.active != 0) violation(std::to_string(c.active) + " blocks still active with no client");
    if (c.mutable_blocks != 0) violation(std::to_string(c.mutable_blocks) + " mutable blocks left");
    // Every registered block still holds what its writer wrote: match each by its hash (as a
    // client) and check the pattern. A block handed to two writers would show here.
    // A copy under the arena's seqlock (the workers are gone: the first is consistent).
    const pool::ArenaView& arena = control_.arena(0);
    std::vector<char> snap(arena.bytes());
    for (int attempt = 0; attempt < 1000 && !arena.copy_to(snap.data()); ++attempt)
      std::this_thread::yield();
    auto core = pool::PoolCore::attach(snap.data(), snap.size());
    if (!core) return violation("cannot read the pool arena: " + core.status().message());
    if (auto s = core->check_invariants(); !s.is_ok()) violation("invariants: " + s.message());
    ConnectOptions co;
    co.runtime_dir = dir_;
    auto client = Client::connect(instance_, co);
    if (!client)
      return violation("cannot attach for the final check: " + client.status().message());
    auto pool = client->pool("g2");
    const LayoutConfig& L = pool->layout();
    uint64_t region = uint64_t{L.page_size} * L.inner_dim * L.dtype_bytes;
    for (uint32_t id = 0; id < core->num_blocks(); ++id) {
      const auto& b = core->block(id);
      if (b.state != static_cast<uint8_t>(pool::BlockStateCode::kInactive)) continue;
      uint64_t h = b.sequence_hash;
      auto m = pool->match_sequence_hashes(std::span<const uint64_t>(&h, 1));
      if (!m || m->size() != 1) continue;  // evicted meanwhile: nothing to check
      ++checked_;
      for (uint32_t l = 0; l < L.num_layers; ++l)
        for (uint32_t o = 0; o < L.outer_dim; ++o) {
          const std::byte* p = *(*m)[0].address(l, o);
          for (uint64_t i = 0; i < region; ++i)
            if (static_cast<uint8_t>(p[i]) != static_cast<uint8_t>((h >> ((i % 8) * 8)) ^ i)) {
              violation("block " + std::to_string(id) + " does not hold what its writer wrote");
              l = L.num_layers;
              o = L.outer_dim;
              break;
            }
        }
    }
  }

  void report() {
    auto line = [](std::vector<double>& v) {
      std::sort(v.begin(), v.end());
      auto at = [&](double p) {
        return v.empty() ? 0.0 : v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
      };
      char buf[128];
      std::snprintf(buf, sizeof(buf), "p50 %.2f ms  p99 %.2f ms  max %.2f ms", at(0.5), at(0.99),
                    v.empty() ? 0.0 : v.back());
      return std::string(buf);
    };
    std::printf("kills: %d (%zu measured)\n", kills_, latencies_.size());
    if (o_.keep_cache && registered_before_ > 0)
      std::printf("cache kept across daemon restarts: %llu of %llu registered blocks (%.1f%%)\n",
                  static_cast<unsigned long long>(adopted_),
                  static_cast<unsigned long long>(registered_before_),
                  100.0 * static_cast<double>(adopted_) / static_cast<double>(registered_before_));
    if (o_.reattach)
      std::printf("daemon restarts every running worker rode through (reattached): %d\n",
                  reattach_rounds_);
    std::printf("reclamation, daemon clock:  kill -9 -> death noticed:  %s\n",
                line(noticed_).c_str());
    std::printf("reclamation, daemon clock:  kill -9 -> blocks returned: %s\n",
                line(returned_).c_str());
    std::printf("reclamation, seen polling:  kill -9 -> blocks returned: %s\n",
                line(latencies_).c_str());
    std::printf("registered blocks checked byte for byte: %llu\n",
                static_cast<unsigned long long>(checked_));
    std::printf("verdict: %s\n", violations_.empty() ? "PASS" : "FAIL");
  }

  Options o_;
  std::mt19937_64 rng_;
  std::string dir_, instance_;
  pid_t daemon_ = -1;
  bool restarting_ = false;
  Clock::time_point end_;
  shm::ControlReader control_;
  std::map<pid_t, Clock::time_point> workers_;
  int kills_ = 0;
  uint64_t reclaims_seen_ = 0;     // kills whose reclaim was measured (this daemon run)
  std::vector<double> latencies_;  // kill -> this process saw the reclaim (polling)
  std::vector<double> noticed_;    // kill -> the daemon took up the hang-up (its clock)
  std::vector<double> returned_;   // kill -> the daemon had returned the blocks (its clock)
  std::vector<std::string> violations_;
  uint64_t checked_ = 0;
  uint64_t registered_before_ = 0;  // --keep-cache: registered blocks at each restart
  uint64_t adopted_ = 0;            // ... and how many of them the next daemon adopted
  int reattach_rounds_ = 0;         // --reattach: restarts every worker rode through
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "--keep-cache") {
      o.keep_cache = true;
      continue;
    }
    if (k == "--reattach") {
      o.reattach = true;
      continue;
    }
    std::string v = i + 1 < argc ? argv[++i] : "";
    if (k == "--workers")
      o.workers = std::stoi(v);
    else if (k == "--seconds")
      o.seconds = std::stod(v);
    else if (k == "--kill-interval-ms")
      o.kill_interval_ms = std::stoi(v);
    else if (k == "--daemon-restarts")
      o.daemon_restarts = std::stoi(v);
    else if (k == "--seed")
      o.seed = std::stoull(v);
    else if (k == "--blocks")
      o.blocks = static_cast<uint32_t>(std::stoul(v));
    else {
      std::fprintf(stderr,
                   "usage: kvpool_stress [--workers N] [--seconds S] [--kill-interval-ms M] "
                   "[--daemon-restarts K] [--keep-cache [--reattach]] [--seed X] [--blocks B]\n");
      return 2;
    }
  }
  if (o.reattach && !o.keep_cache) {
    std::fprintf(stderr,
                 "kvpool_stress: --reattach needs --keep-cache (a plain restart keeps "
                 "nothing to reattach to)\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  Stress s(o);
  return s.run();
}
