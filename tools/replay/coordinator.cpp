#include "coordinator.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "pattern.hpp"
#include "routing.hpp"

namespace kvpool::replay {

namespace {

using Clock = std::chrono::steady_clock;

struct Worker {
  int number = 0;  // 0..workers-1: whose share of the trace
  pid_t pid = -1;
  int out_fd = -1, in_fd = -1;
  std::string pending;  // a partial line read so far
  bool killed = false;  // by us: replace it once its pipe is drained
  bool ready = false;
};

class Coordinator {
 public:
  Coordinator(const std::vector<TraceRequest>& reqs, const RunOptions& o)
      : reqs_(reqs), o_(o), rng_(o.seed) {
    shares_.resize(static_cast<size_t>(o.workers));
    const size_t hosts = std::max<size_t>(1, o.host_dirs.size());
    std::vector<size_t> next_of_host(hosts, 0);  // round robin among a host's workers
    for (size_t i = 0; i < reqs.size(); ++i) {
      size_t w = o.route_by_first_block && !reqs[i].ids.empty()
                     ? splitmix64(reqs[i].ids[0]) % shares_.size()
                     : i % shares_.size();
      if (hosts > 1) {  // a random host, then its workers w = h, h + hosts, ...
        const size_t h = random_host(reqs[i].index, static_cast<uint32_t>(hosts), o.seed);
        const size_t per_host = (shares_.size() - h + hosts - 1) / hosts;
        w = h + hosts * (next_of_host[h]++ % per_host);
      }
      shares_[w].push_back(i);
      by_index_[reqs[i].index] = i;
    }
  }

  RunResult run() {
    for (int w = 0; w < o_.workers; ++w) spawn(w, -1);
    // Everyone attached before the clock starts, so the first requests are not skewed by
    // connect times. Bounded: a worker that cannot attach exits and says why.
    auto deadline = Clock::now() + std::chrono::seconds(30);
    while (!all_ready() && res_.violations.empty() && Clock::now() < deadline) pump(100);
    if (!all_ready()) {
      if (res_.violations.empty()) res_.violations.push_back("workers did not attach within 30 s");
      stop_all();
      return std::move(res_);
    }
    start_ = Clock::now() + std::chrono::milliseconds(20);
    start_ns_ =
        std::chrono::duration_cast<std::chrono::nanoseconds>(start_.time_since_epoch()).count();
    for (auto& [pid, wk] : live_) {
      std::string go = "GO " + std::to_string(start_ns_) + "\n";
      if (::write(wk.in_fd, go.data(), go.size()) != static_cast<ssize_t>(go.size()))
        res_.violations.push_back("cannot start worker " + std::to_string(pid));
    }
    auto next_kill = o_.kill_interval_s > 0 ? start_ + interval() : Clock::time_point::max();
    while (!live_.empty()) {
      int wait_ms = 100;
      if (next_kill != Clock::time_point::max())
        wait_ms = static_cast<int>(std::clamp<int64_t>(
            std::chrono::duration_cast<std::chrono::milliseconds>(next_kill - Clock::now()).count(),
            0, 100));
      pump(wait_ms);
      if (Clock::now() >= next_kill) {
        kill_one();
        next_kill = Clock::now() + interval();
      }
    }
    res_.wall_s = std::chrono::duration<double>(Clock::now() - start_).count();
    std::sort(late_ms_.begin(), late_ms_.end());
    if (!late_ms_.empty())
      res_.late_p99_ms = late_ms_[std::min(late_ms_.size() - 1, late_ms_.size() * 99 / 100)];
    if (done_.size() != reqs_.size())
      res_.violations.push_back(std::to_string(reqs_.size() - done_.size()) +
                                " requests were never served");
    return std::move(res_);
  }

 private:
  Clock::duration interval() {
    std::uniform_real_distribution<double> d(0.5, 1.5);  // jitter: kills land at any phase
    return std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(o_.kill_interval_s * d(rng_)));
  }
  bool all_ready() const {
    if (static_cast<int>(live_.size()) != o_.workers) return false;
    for (const auto& [_, w] : live_)
      if (!w.ready) return false;
    return true;
  }

  // Starts worker `number` on what of its share is not served yet. start_ns < 0: it says
  // READY and waits for GO; else it starts on the given clock (a replacement).
  void spawn(int number, int64_t start_ns) {
    std::string file = o_.scratch_dir + "/worker" + std::to_string(number) + "." +
                       std::to_string(spawned_++) + ".requests";
    size_t left = 0;
    {
      std::ofstream f(file);
      for (size_t i : shares_[static_cast<size_t>(number)]) {
        const auto& r = reqs_[i];
        if (done_.count(r.index)) continue;
        ++left;
        f << r.index << ' ' << r.timestamp_ms << ' ' << r.output_length << ' ' << r.ids.size();
        for (uint64_t id : r.ids) f << ' ' << id;
        f << '\n';
      }
    }
    if (left == 0 && start_ns >= 0) return;  // nothing left for a replacement to do
    int out[2], in[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(in, O_CLOEXEC) != 0) {
      res_.violations.push_back(std::string("pipe: ") + std::strerror(errno));
      return;
    }
    std::vector<std::string> args = {o_.self,
                                     "--worker",
                                     "--instance",
                                     o_.instance,
                                     "--pool",
                                     o_.pool,
                                     "--assign",
                                     file,
                                     "--speed",
                                     std::to_string(o_.speed),
                                     "--token-ms",
                                     std::to_string(o_.token_ms),
                                     "--shallow-levels",
                                     std::to_string(o_.shallow_levels)};
    const size_t host =
        o_.host_dirs.empty() ? 0 : static_cast<size_t>(number) % o_.host_dirs.size();
    const std::string& dir = o_.host_dirs.empty() ? o_.runtime_dir : o_.host_dirs[host];
    if (!dir.empty()) args.insert(args.end(), {"--runtime-dir", dir});
    if (!o_.peer_holders.empty())
      args.insert(args.end(),
                  {"--peer-holder", o_.peer_holders[(host + 1) % o_.peer_holders.size()],
                   "--peer-deadline-ms", std::to_string(o_.peer_deadline_ms)});
    if (o_.corrupt_id >= 0)
      args.insert(args.end(), {"--corrupt-id", std::to_string(o_.corrupt_id)});
    if (o_.onboard) args.insert(args.end(), {"--onboard", "1"});
    if (start_ns >= 0) args.insert(args.end(), {"--start-ns", std::to_string(start_ns)});
    pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(in[0], STDIN_FILENO);
      ::dup2(out[1], STDOUT_FILENO);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(o_.self.c_str(), argv.data());
      _exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    if (pid < 0) {
      res_.violations.push_back(std::string("fork: ") + std::strerror(errno));
      ::close(in[1]);
      ::close(out[0]);
      return;
    }
    Worker w;
    w.number = number;
    w.pid = pid;
    w.out_fd = out[0];
    w.in_fd = in[1];
    w.ready = start_ns >= 0;
    live_[pid] = std::move(w);
  }

  // Reads whatever the workers wrote (up to wait_ms for something to arrive) and retires
  // the ones whose pipe closed.
  void pump(int wait_ms) {
    std::vector<pollfd> fds;
    std::vector<pid_t> who;
    for (auto& [pid, w] : live_) {
      fds.push_back(pollfd{w.out_fd, POLLIN, 0});
      who.push_back(pid);
    }
    if (fds.empty()) return;
    if (::poll(fds.data(), fds.size(), wait_ms) <= 0) return;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Worker& w = live_[who[i]];
      char buf[1 << 16];
      ssize_t n = ::read(w.out_fd, buf, sizeof(buf));
      if (n > 0) {
        w.pending.append(buf, static_cast<size_t>(n));
        size_t nl;
        while ((nl = w.pending.find('\n')) != std::string::npos) {
          line(w, w.pending.substr(0, nl));
          w.pending.erase(0, nl + 1);
        }
      } else if (n == 0 || errno != EINTR) {
        retire(who[i]);
      }
    }
  }

  void line(Worker& w, const std::string& l) {
    std::istringstream in(l);
    std::string kind;
    in >> kind;
    if (kind == "READY") {
      w.ready = true;
    } else if (kind == "R") {
      double ns = 0;
      in >> ns;
      res_.release_us.push_back(ns / 1000);
    } else if (kind == "D") {
      uint32_t index = 0;
      uint64_t blocks = 0, matched = 0, verified = 0, corrupt = 0;
      int cached = 0;
      double late_us = 0, match_ns = 0, alloc_ns = 0, reg_ns = 0;
      in >> index >> blocks >> matched >> verified >> corrupt >> cached >> late_us >> match_ns >>
          alloc_ns >> reg_ns;
      if (!in || !by_index_.count(index)) {
        res_.violations.push_back("worker " + std::to_string(w.pid) + " wrote a bad line: " + l);
        return;
      }
      if (!done_.insert(index).second) {
        res_.violations.push_back("request " + std::to_string(index) + " served twice");
        return;
      }
      ++res_.requests;
      res_.prompt_blocks += blocks;
      res_.matched_blocks += matched;
      res_.verified_bytes += verified;
      res_.verified_blocks += matched;
      res_.corrupt_blocks += corrupt;
      res_.uncached_requests += cached ? 0 : 1;
      late_ms_.push_back(late_us / 1000);
      res_.match_us.push_back(match_ns / 1000);
      if (alloc_ns >= 0) res_.allocate_us.push_back(alloc_ns / 1000);
      if (reg_ns >= 0) res_.register_us.push_back(reg_ns / 1000);
      if (corrupt)
        res_.violations.push_back("request " + std::to_string(index) + ": " +
                                  std::to_string(corrupt) + " matched block(s) held wrong bytes");
    }
  }

  void retire(pid_t pid) {
    Worker w = std::move(live_[pid]);
    live_.erase(pid);
    ::close(w.out_fd);
    ::close(w.in_fd);
    int st = 0;
    ::waitpid(pid, &st, 0);
    if (w.killed) {
      ++res_.replacements;
      spawn(w.number, start_ns_);
      return;
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 1) return;  // corrupt blocks: counted per line
    res_.violations.push_back("worker " + std::to_string(pid) + " " +
                              (WIFEXITED(st) ? "exited " + std::to_string(WEXITSTATUS(st))
                                             : "died of signal " + std::to_string(WTERMSIG(st))));
  }

  void kill_one() {
    std::vector<pid_t> candidates;
    for (auto& [pid, w] : live_)
      if (!w.killed) candidates.push_back(pid);
    if (candidates.empty()) return;
    if (o_.max_kills >= 0 && res_.kills >= static_cast<uint64_t>(o_.max_kills)) return;
    pid_t victim = candidates[rng_() % candidates.size()];
    ::kill(victim, SIGKILL);
    std::printf(
        "killed worker %d (pid %d) with SIGKILL at %.1f s; a replacement serves the rest of its "
        "share\n",
        live_[victim].number + 1, victim,
        std::chrono::duration<double>(Clock::now() - start_).count());
    std::fflush(stdout);
    live_[victim].killed = true;  // replaced once its pipe is drained (pump -> retire)
    ++res_.kills;
  }

  void stop_all() {
    for (auto& [pid, w] : live_) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      ::close(w.out_fd);
      ::close(w.in_fd);
    }
    live_.clear();
  }

  const std::vector<TraceRequest>& reqs_;
  RunOptions o_;
  std::mt19937_64 rng_;
  std::vector<std::vector<size_t>> shares_;
  std::map<uint32_t, size_t> by_index_;
  std::map<pid_t, Worker> live_;
  std::set<uint32_t> done_;
  std::vector<double> late_ms_;
  uint64_t spawned_ = 0;
  Clock::time_point start_;
  int64_t start_ns_ = 0;
  RunResult res_;
};

}  // namespace

RunResult run_replay(const std::vector<TraceRequest>& requests, const RunOptions& options) {
  signal(SIGPIPE, SIG_IGN);
  return Coordinator(requests, options).run();
}

Result<RunResult> run_replay_in_scratch(const std::vector<TraceRequest>& requests,
                                        RunOptions options) {
  char scratch[] = "/tmp/kvpool-replay-req-XXXXXX";
  if (!::mkdtemp(scratch)) return io_error("mkdtemp /tmp/kvpool-replay-req-XXXXXX", errno);
  options.scratch_dir = scratch;
  RunResult r = run_replay(requests, options);
  std::error_code ec;
  std::filesystem::remove_all(scratch, ec);
  return r;
}

}  // namespace kvpool::replay
