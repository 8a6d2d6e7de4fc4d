// The backends kvpool's comparison benchmarks measure, one registry workload on each:
//   in-process    kvpool's PoolCore, called directly
//   kvpoold       the daemon over shared memory, through libkvpool
//   kvpoold-ring  the same daemon through libkvpool's transport alone (raw records)
//   unix-socket   a request/response server of ours: one process, a blocking thread per
//                 connection on a SOCK_SEQPACKET socket, the same PoolCore and the daemon's
//                 own request validation (daemon::Dispatcher), records as on kvpoold's rings
//   redis         a real redis-server on a Unix socket, used as a user would: the registry is
//                 hash -> block id strings (MSET / MGET), the free list a LIST (LPOP count /
//                 RPUSH); releases are pipelined (their replies read with the next command's),
//                 as libkvpool batches them
// Servers (kvpoold, the socket server, redis-server) are processes the benchmark forks; a
// backend is one client's connection to one, so several client processes can share a server.
// Fork every server before the process starts a thread (libkvpool starts a lease thread).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "kvpool/core/hash.hpp"

namespace kvpool::bench {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kBatch = 64;       // match-64, allocate-64, register-64
constexpr uint32_t kStepBlocks = 16;  // the engine step's allocate and register
constexpr uint32_t kPage = 16;
constexpr uint32_t kFillBatch = 1024;

[[noreturn]] void die(const std::string& what);
double us_since(Clock::time_point t0);
// The p-quantile (0..1) of `v` by nearest rank; 0 when empty.
double pct(std::vector<double> v, double p);
std::vector<Token> tokens_for(uint64_t seed);
// `n` hashes of one page of tokens under `n` random salts, as a worker that commits n blocks.
void hash_pages(uint64_t seed, std::mt19937_64& rng, std::vector<uint64_t>& out,
                uint32_t n = kBatch);
// Removes a directory tree the benchmark made (a temp runtime dir).
void remove_dir(const std::string& dir);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // Registers `hashes` (priority 1) and leaves them inactive, matchable. Once per server.
  virtual void fill(const std::vector<uint64_t>& hashes) = 0;
  // match-64 (q.size() hashes, all registered) and the release of what it returned.
  virtual void match(std::span<const uint64_t> q) = 0;
  virtual void allocate_release() = 0;
  // allocate-64, hash 64 token pages, register them, release.
  virtual void register_release(uint64_t seed, std::mt19937_64& rng) = 0;
  // What an inference engine does between two GPU steps: match-64 (all hit) + allocate-16 +
  // register-16 (fresh pages) + release of everything it got.
  virtual void engine_step(std::span<const uint64_t> q, uint64_t seed, std::mt19937_64& rng) = 0;
};

// ---- servers ---------------------------------------------------------------------------

// kvpoold with one host pool "bench" of `blocks` blocks, in a temp runtime dir; default
// engine and client settings (the wait protocol's own defaults are what is measured).
class KvpooldServer {
 public:
  KvpooldServer(uint32_t blocks, const char* kvpoold);
  ~KvpooldServer();  // SIGTERM, wait, remove the runtime dir
  KvpooldServer(const KvpooldServer&) = delete;
  KvpooldServer& operator=(const KvpooldServer&) = delete;
  pid_t pid() const { return pid_; }
  const std::string& instance() const { return instance_; }
  const std::string& runtime_dir() const { return dir_; }

 private:
  pid_t pid_ = -1;
  std::string dir_, instance_;
};

// Our blocking Unix-socket server, listening on a SOCK_SEQPACKET socket in a temp dir.
// Message: u32 opcode, u32 zero, then the record (RequestHeader + items) exactly as on a
// kvpoold ring. Answers (not for releases): ResponseHeader + BlockRefs + error text.
class SocketServer {
 public:
  static constexpr uint32_t kMaxConnections = 32;
  explicit SocketServer(uint32_t blocks);
  ~SocketServer();
  SocketServer(const SocketServer&) = delete;
  SocketServer& operator=(const SocketServer&) = delete;
  pid_t pid() const { return pid_; }
  const std::string& path() const { return path_; }

 private:
  pid_t pid_ = -1;
  std::string dir_, path_;
};

// redis-server (REDIS_SERVER, else redis-server on PATH) on a Unix socket in a temp dir,
// no persistence.
class RedisServer {
 public:
  // The redis-server binary to run, or "" when there is none.
  static std::string find_binary();
  explicit RedisServer(const std::string& binary);
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;
  pid_t pid() const { return pid_; }
  const std::string& socket_path() const { return sock_; }
  // Dies with a clear message if the server exited (e.g. a bad binary).
  void check_alive() const;

 private:
  pid_t pid_ = -1;
  std::string dir_, sock_;
};

// ---- backends (one client connection each) ---------------------------------------------

std::unique_ptr<Backend> make_core_backend(uint32_t blocks);

class DaemonBackend : public Backend {
 public:
  // Connects, waiting up to 20 s for a daemon that is still starting.
  explicit DaemonBackend(const KvpooldServer& server);
  ~DaemonBackend() override;
  const char* name() const override { return "kvpoold"; }
  // Registers hashes.size() fresh pages (priority 1) and writes their hashes: the hashes
  // every backend's match asks for come from here.
  void fill_pages(std::vector<uint64_t>& hashes);
  void fill(const std::vector<uint64_t>&) override {}  // fill_pages did it
  void match(std::span<const uint64_t> q) override;
  void allocate_release() override;
  void register_release(uint64_t seed, std::mt19937_64& rng) override;
  void engine_step(std::span<const uint64_t> q, uint64_t seed, std::mt19937_64& rng) override;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

std::unique_ptr<Backend> make_ring_backend(const KvpooldServer& server);
std::unique_ptr<Backend> make_socket_backend(const SocketServer& server);
// Connects, waiting up to 20 s for a server that is still starting.
std::unique_ptr<Backend> make_redis_backend(const RedisServer& server, uint32_t blocks);

}  // namespace kvpool::bench
