#include "paced_workers.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <random>
#include <string>

#include "paced_cells.hpp"
#include "paced_cpu.hpp"

namespace kvpool::bench {

std::vector<pid_t> Servers::pids() const {
  std::vector<pid_t> p = {kvpoold->pid(), socket->pid(), futex->pid(), eventfd->pid(), pipe->pid()};
  if (redis) p.push_back(redis->pid());
  return p;
}

namespace {

struct Reply {
  int samples = 0;
};

void sleep_ns(int64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR) {
  }
}

// One client process: its connections (made on first use, so workers 1..3 attach only
// when clients4 runs) and the loop that times one cell.
class Worker {
 public:
  Worker(int index, const Servers& s, std::span<uint64_t> hashes, double* samples)
      : index_(index), s_(s), hashes_(hashes), samples_(samples) {}

  void fill() {
    std::vector<uint64_t> hashes(hashes_.size());
    daemon()->fill_pages(hashes);
    std::copy(hashes.begin(), hashes.end(), hashes_.begin());
    for (int id : {kSocket, kRedis, kCore})
      if (Backend* b = backend(id)) b->fill(hashes);
  }

  void run(const Command& c) {
    Backend* b = is_floor(c.backend) ? nullptr : backend(c.backend);
    if (!is_floor(c.backend) && !b) die(std::string("no ") + kBackendNames[c.backend] + " here");
    FloorServer* floor = c.backend == kFutexFloor     ? s_.futex
                         : c.backend == kEventfdFloor ? s_.eventfd
                                                      : s_.pipe;
    pin_this_thread(c.cpu);
    std::mt19937_64 rng(c.seed);
    for (int i = -c.warmup; i < c.samples; ++i) {
      if (c.gap_ns > 0) sleep_ns(c.gap_ns);  // the engine's GPU step
      const auto q =
          std::span<const uint64_t>(hashes_).subspan(rng() % (hashes_.size() - kBatch), kBatch);
      const uint64_t seed = c.seed * 1'000'003 + static_cast<uint64_t>(i + c.warmup);
      const auto t0 = Clock::now();
      if (!b)
        floor->round_trip(index_);
      else if (c.op == kMatch)
        b->match(q);
      else
        b->engine_step(q, seed, rng);
      const double us = us_since(t0);
      if (i >= 0) samples_[i] = us;
    }
    pin_this_thread(-1);
  }

  void close() {
    for (auto& b : backends_) b.reset();
    daemon_.reset();
  }

 private:
  DaemonBackend* daemon() {
    if (!daemon_) daemon_ = std::make_unique<DaemonBackend>(*s_.kvpoold);
    return daemon_.get();
  }
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
  std::span<uint64_t> hashes_;
  double* samples_;
  std::unique_ptr<DaemonBackend> daemon_;
  std::unique_ptr<Backend> backends_[kBackends];
};

[[noreturn]] void worker_main(Worker& w, int fd) {
  for (Command c;;) {
    if (recv(fd, &c, sizeof(c), 0) != sizeof(c) || c.type == Command::kQuit) break;
    if (c.type == Command::kFill)
      w.fill();
    else
      w.run(c);
    const Reply r{c.samples};
    if (::send(fd, &r, sizeof(r), MSG_NOSIGNAL) != sizeof(r)) break;
  }
  w.close();  // detached before the idle-CPU figure, which wants one quiet client only
  _exit(0);   // never the coordinator's destructors: they stop the servers
}

}  // namespace

ClientWorkers::ClientWorkers(const Servers& servers, size_t num_hashes, size_t capacity)
    : num_hashes_(num_hashes), capacity_(capacity) {
  bytes_ = num_hashes * sizeof(uint64_t) + kCount * capacity * sizeof(double);
  void* m = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) die(std::string("mmap: ") + std::strerror(errno));
  hashes_ = static_cast<uint64_t*>(m);
  samples_ = reinterpret_cast<double*>(hashes_ + num_hashes);
  const pid_t parent = getpid();
  for (int i = 0; i < kCount; ++i) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) die("socketpair");
    const pid_t pid = fork();
    if (pid < 0) die("fork worker");
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(0);
      ::close(sv[0]);
      for (const Handle& other : workers_) ::close(other.fd);  // the coordinator's, not ours
      Worker w(i, servers, {hashes_, num_hashes_}, samples_ + static_cast<size_t>(i) * capacity_);
      worker_main(w, sv[1]);
    }
    ::close(sv[1]);
    workers_.push_back({pid, sv[0]});
  }
}

ClientWorkers::~ClientWorkers() {
  quit();
  munmap(hashes_, bytes_);
}

void ClientWorkers::send(const Handle& w, const Command& c) {
  if (::send(w.fd, &c, sizeof(c), MSG_NOSIGNAL) != sizeof(c)) die("a worker exited (see above)");
}

int ClientWorkers::wait(const Handle& w) {
  Reply r;
  if (recv(w.fd, &r, sizeof(r), 0) != sizeof(r)) die("a worker exited (see above)");
  return r.samples;
}

void ClientWorkers::fill() {
  send(workers_[0], Command{Command::kFill});
  wait(workers_[0]);
}

void ClientWorkers::run(Command c, int clients, std::vector<double>& out) {
  if (static_cast<size_t>(c.samples) > capacity_) die("more samples than the shared area holds");
  for (int w = 0; w < clients; ++w) {
    c.seed = next_seed_++;
    send(workers_[w], c);
  }
  for (int w = 0; w < clients; ++w) {
    const int got = wait(workers_[w]);
    const double* s = samples_ + static_cast<size_t>(w) * capacity_;
    out.insert(out.end(), s, s + got);
  }
}

void ClientWorkers::quit() {
  for (auto& w : workers_) {
    Command q{Command::kQuit};
    (void)::send(w.fd, &q, sizeof(q), MSG_NOSIGNAL);
    ::close(w.fd);
    waitpid(w.pid, nullptr, 0);
  }
  workers_.clear();
}

}  // namespace kvpool::bench
