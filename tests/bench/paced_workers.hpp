// kvpool_paced_bench's client processes. The coordinator (a process that never starts a
// thread, so that every fork is clean) forks kCount workers once; each connects to the
// servers on first use and runs the cells it is told to over a socket, writing its samples
// into a shared mapping.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <span>
#include <vector>

#include "bench_backends.hpp"
#include "paced_floors.hpp"

namespace kvpool::bench {

struct Servers {
  KvpooldServer* kvpoold;
  SocketServer* socket;
  RedisServer* redis;  // nullptr: no redis-server here
  FloorServer* futex;
  FloorServer* eventfd;
  FloorServer* pipe;
  uint32_t blocks;

  std::vector<pid_t> pids() const;
};

// One cell's run in one worker: `warmup` + `samples` calls, each after sleeping `gap_ns`.
struct Command {
  enum Type : int { kFill, kRun, kQuit } type = kRun;
  int backend = 0;  // BackendId
  int op = 0;       // Op
  int cpu = -1;     // pin the calling thread here (-1: any allowed CPU)
  int samples = 0;
  int warmup = 0;
  int64_t gap_ns = 0;
  uint64_t seed = 0;
};

class ClientWorkers {
 public:
  static constexpr int kCount = 4;  // the clients4 placement's client processes

  // Forks the workers. `num_hashes`: the registered hashes (blocks / 2); `capacity`: the
  // most samples one command asks of one worker.
  ClientWorkers(const Servers& servers, size_t num_hashes, size_t capacity);
  ~ClientWorkers();  // quit()
  ClientWorkers(const ClientWorkers&) = delete;
  ClientWorkers& operator=(const ClientWorkers&) = delete;

  // Worker 0 registers the pool's hashes in kvpoold and the same hashes in the others.
  void fill();
  // Runs `c` on workers 0..clients-1 at once (each its own seed) and appends their samples.
  void run(Command c, int clients, std::vector<double>& out);
  // Every worker disconnects and exits.
  void quit();

 private:
  struct Handle {
    pid_t pid = -1;
    int fd = -1;
  };
  void send(const Handle& w, const Command& c);
  int wait(const Handle& w);

  uint64_t* hashes_ = nullptr;
  double* samples_ = nullptr;  // kCount x capacity_
  size_t num_hashes_ = 0, capacity_ = 0, bytes_ = 0;
  uint64_t next_seed_ = 1;
  std::vector<Handle> workers_;
};

}  // namespace kvpool::bench
