// kvpool against what a user would build instead: one registry workload, five backends.
//   (a) in-process  kvpool's PoolCore, called directly
//   (b) kvpoold     the daemon over shared memory, through libkvpool (started here)
//   (b') kvpoold-ring the same daemon through libkvpool's transport alone (raw records)
//   (c) unix-socket a request/response server of ours: one process, blocking I/O on a
//                   SOCK_SEQPACKET socket, the same PoolCore and the daemon's own request
//                   validation (daemon::Dispatcher), records as on kvpoold's rings
//   (d) redis       a real redis-server on a Unix socket, used as a user would: the registry
//                   is hash -> block id strings (MSET / MGET), the free list a LIST (LPOP
//                   count / RPUSH); releases are pipelined (their replies read with the next
//                   command's), as libkvpool batches them
// Operations (each a sample, medians over all samples):
//   match-64       64 registered hashes, all hit, and their release
//   allocate-64    64 blocks and their release
//   register-64    allocate 64, hash 64 token pages, register them, release
// Backends take turns in rounds so that a noisy machine weighs on all of them alike.
//   kvpool_compare_bench [--blocks N] [--samples N] [--rounds N]
// Env: KVPOOLD (daemon binary), REDIS_SERVER (redis-server binary).
#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "connection.hpp"
#include "daemon/dispatch.hpp"
#include "kvpool/client.hpp"
#include "kvpool/core/hash.hpp"
#include "kvpool/pool/pool_core.hpp"
#include "kvpool/shm/protocol.hpp"

using namespace kvpool;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint32_t kBatch = 64;
constexpr uint32_t kPage = 16;
constexpr uint32_t kFillBatch = 1024;
// The Unix-socket server's largest answer (a fill batch of 1024 refs fits).
constexpr uint32_t kSockMaxAnswer = 64 * 1024;
constexpr size_t kSockMaxMessage = 256 * 1024;

struct Args {
  uint32_t blocks = 100'000;
  int samples = 10'000;
  int rounds = 10;
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "compare_bench: %s\n", what.c_str());
  std::exit(1);
}

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}
double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

std::vector<Token> tokens_for(uint64_t seed) {
  std::vector<Token> t(kPage);
  for (uint32_t i = 0; i < kPage; ++i) t[i] = static_cast<Token>(seed * 131 + i);
  return t;
}

// What every backend's register-64 hashes: one page of tokens under 64 salts, as a worker
// that commits 64 blocks would.
void hash_pages(uint64_t seed, std::mt19937_64& rng, std::vector<uint64_t>& out) {
  const auto t = tokens_for(seed);
  out.resize(kBatch);
  for (auto& h : out) h = compute_block_hash(t, rng());
}

struct Samples {
  std::vector<double> match, allocate, register64;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // Registers `hashes` (priority 1) and leaves them inactive, matchable.
  virtual void fill(const std::vector<uint64_t>& hashes) = 0;
  virtual void match(std::span<const uint64_t> q) = 0;
  virtual void allocate_release() = 0;
  virtual void register_release(uint64_t seed, std::mt19937_64& rng) = 0;
};

// ---- (a) in-process ----------------------------------------------------------------------

class CoreBackend : public Backend {
 public:
  explicit CoreBackend(uint32_t blocks) {
    pool::PoolCoreConfig c{blocks, 2, 0};
    bytes_ = *pool::PoolCore::arena_bytes(c);
    mem_ = std::aligned_alloc(64, (bytes_ + 63) / 64 * 64);
    core_ = std::move(pool::PoolCore::create(mem_, bytes_, c).value());
    refs_.resize(kFillBatch);
    out_.resize(kFillBatch);
  }
  ~CoreBackend() override { std::free(mem_); }
  const char* name() const override { return "in-process"; }

  void fill(const std::vector<uint64_t>& hashes) override {
    std::vector<pool::RegisterItem> items;
    for (size_t done = 0; done < hashes.size();) {
      const uint32_t k = static_cast<uint32_t>(std::min<size_t>(kFillBatch, hashes.size() - done));
      if (!core_.allocate(0, k, refs_.data()).is_ok()) die("in-process fill: allocate");
      items.resize(k);
      for (uint32_t i = 0; i < k; ++i)
        items[i] = {refs_[i], hashes[done + i], hashes[done + i], 0, 1, 0};
      if (!core_.register_blocks(0, items, out_.data()).is_ok()) die("in-process fill: register");
      (void)core_.release_immutable(0, {out_.data(), k});
      done += k;
    }
  }
  void match(std::span<const uint64_t> q) override {
    auto hit = core_.match(1, q, refs_.data());
    if (!hit || *hit != q.size()) die("in-process match missed");
    (void)core_.release_immutable(1, {refs_.data(), *hit});
  }
  void allocate_release() override {
    if (!core_.allocate(1, kBatch, refs_.data()).is_ok()) die("in-process allocate");
    (void)core_.release_mutable(1, {refs_.data(), kBatch});
  }
  void register_release(uint64_t seed, std::mt19937_64& rng) override {
    if (!core_.allocate(1, kBatch, refs_.data()).is_ok()) die("in-process allocate");
    hash_pages(seed, rng, hashes_);
    items_.resize(kBatch);
    for (uint32_t i = 0; i < kBatch; ++i) items_[i] = {refs_[i], hashes_[i], hashes_[i], 0, 0, 0};
    if (!core_.register_blocks(1, items_, out_.data()).is_ok()) die("in-process register");
    (void)core_.release_immutable(1, {out_.data(), kBatch});
  }

 private:
  size_t bytes_ = 0;
  void* mem_ = nullptr;
  pool::PoolCore core_;
  std::vector<pool::BlockRef> refs_, out_;
  std::vector<pool::RegisterItem> items_;
  std::vector<uint64_t> hashes_;
};

// ---- (b) kvpoold over shm ------------------------------------------------------------------

class DaemonBackend : public Backend {
 public:
  DaemonBackend(uint32_t blocks, const char* kvpoold) {
    char tmpl[] = "/tmp/kvpool-compare-XXXXXX";
    if (!mkdtemp(tmpl)) die("mkdtemp");
    dir_ = tmpl;
    instance_ = "compare" + std::to_string(getpid());
    const std::string cfg = dir_ + "/kvpoold.json";
    std::ofstream(cfg) << "{\"instance\":\"" << instance_ << "\",\"runtime_dir\":\"" << dir_
                       << "\",\"log_level\":\"warn\",\"pools\":[{\"name\":\"bench\",\"num_blocks\":"
                       << blocks
                       << ",\"layout\":{\"num_layers\":1,\"outer_dim\":1,\"page_size\":" << kPage
                       << ",\"inner_dim\":8,\"dtype_bytes\":2,\"alignment\":64}}]}";
    pid_ = fork();
    if (pid_ == 0) {
      execl(kvpoold, kvpoold, "--config", cfg.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  ~DaemonBackend() override {
    pool_.reset();
    client_.reset();
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
    std::string rm = "rm -rf " + dir_;
    if (std::system(rm.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir_.c_str());
  }
  const char* name() const override { return "kvpoold"; }

  // Connects (the daemon may still be starting). After the other backends forked.
  void connect() {
    ConnectOptions o;
    o.runtime_dir = dir_;
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (true) {
      auto c = Client::connect(instance_, o);
      if (c) {
        client_.emplace(std::move(c.value()));
        break;
      }
      if (Clock::now() > deadline) die("cannot reach kvpoold: " + c.status().to_string());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    auto p = client_->pool("bench");
    if (!p) die("kvpoold pool: " + p.status().to_string());
    pool_.emplace(std::move(p.value()));
  }

  // The registered hashes come from here: the pages kvpoold's clients commit.
  void fill_pages(std::vector<uint64_t>& hashes) {
    for (uint32_t done = 0; done < hashes.size();) {
      const uint32_t k =
          std::min<uint32_t>(kFillBatch, static_cast<uint32_t>(hashes.size()) - done);
      auto blocks = pool_->allocate_blocks(k);
      if (!blocks) die("kvpoold fill: " + blocks.status().to_string());
      for (uint32_t i = 0; i < k; ++i) {
        auto& b = (*blocks)[i];
        (void)b.init_sequence(0);
        (void)b.add_tokens(tokens_for(done + i));
        (void)b.commit();
        b.set_priority(1);
        hashes[done + i] = *b.sequence_hash();
      }
      auto imm = pool_->register_blocks(std::move(*blocks));
      if (!imm) die("kvpoold fill: " + imm.status().to_string());
      done += k;
    }
    client_->flush();
  }
  void fill(const std::vector<uint64_t>&) override {}  // fill_pages did it
  const std::string& instance() const { return instance_; }
  const std::string& runtime_dir() const { return dir_; }
  void match(std::span<const uint64_t> q) override {
    auto r = pool_->match_sequence_hashes(q);
    if (!r || r->size() != q.size()) die("kvpoold match missed");
  }
  void allocate_release() override {
    auto r = pool_->allocate_blocks(kBatch);
    if (!r) die("kvpoold allocate: " + r.status().to_string());
  }
  void register_release(uint64_t seed, std::mt19937_64& rng) override {
    auto r = pool_->allocate_blocks(kBatch);
    if (!r) die("kvpoold allocate: " + r.status().to_string());
    const auto t = tokens_for(seed);
    for (auto& b : *r) {
      (void)b.init_sequence(rng());
      (void)b.add_tokens(t);
      (void)b.commit();
    }
    auto imm = pool_->register_blocks(std::move(*r));
    if (!imm) die("kvpoold register: " + imm.status().to_string());
  }

 private:
  pid_t pid_ = -1;
  std::string dir_, instance_;
  std::optional<Client> client_;
  std::optional<Pool> pool_;
};

// ---- (b') kvpoold's rings, raw --------------------------------------------------------------
// The same daemon through libkvpool's transport alone (detail::Connection): the records the
// Unix-socket server gets, with no RAII handles on top. Shows what the shm transport costs
// apart from the client library's per-block objects.

class RingBackend : public Backend {
 public:
  explicit RingBackend(const DaemonBackend& d) {
    detail::ConnectionOptions o;
    o.runtime_dir = d.runtime_dir();
    auto c = detail::Connection::open(d.instance(), o);
    if (!c) die("kvpoold ring: " + c.status().to_string());
    conn_ = std::move(c.value());
  }
  const char* name() const override { return "kvpoold-ring"; }
  void fill(const std::vector<uint64_t>&) override {}  // the daemon's pool is filled
  void match(std::span<const uint64_t> q) override {
    auto r = call(proto::Opcode::kMatch, static_cast<uint32_t>(q.size()), q.data(), q.size_bytes());
    post(proto::Opcode::kReleaseImmutable, r.refs);
  }
  void allocate_release() override {
    auto r = call(proto::Opcode::kAllocate, kBatch, nullptr, 0);
    post(proto::Opcode::kReleaseMutable, r.refs);
  }
  void register_release(uint64_t seed, std::mt19937_64& rng) override {
    auto r = call(proto::Opcode::kAllocate, kBatch, nullptr, 0);
    hash_pages(seed, rng, hashes_);
    items_.resize(kBatch);
    for (uint32_t i = 0; i < kBatch; ++i) items_[i] = {r.refs[i], hashes_[i], hashes_[i], 0, 0, 0};
    auto imm =
        call(proto::Opcode::kRegister, kBatch, items_.data(), items_.size() * sizeof(items_[0]));
    post(proto::Opcode::kReleaseImmutable, imm.refs);
  }

 private:
  detail::Response call(proto::Opcode op, uint32_t count, const void* items, size_t bytes) {
    auto r = conn_->call(op, 0, count, items, bytes);
    if (!r || r->code != ErrorCode::kOk)
      die("kvpoold ring: " + (r ? r->status() : r.status()).to_string());
    return std::move(r.value());
  }
  // Fire and forget, as the Unix-socket client's releases.
  void post(proto::Opcode op, const std::vector<pool::BlockRef>& refs) {
    auto corr = conn_->send(op, 0, static_cast<uint32_t>(refs.size()), refs.data(),
                            refs.size() * sizeof(pool::BlockRef));
    if (!corr) die("kvpoold ring: " + corr.status().to_string());
  }

  std::unique_ptr<detail::Connection> conn_;
  std::vector<pool::RegisterItem> items_;
  std::vector<uint64_t> hashes_;
};

// ---- (c) a Unix-socket request/response server ---------------------------------------------
// Message: u32 opcode, u32 zero, then the record (RequestHeader + items) exactly as on a
// kvpoold ring. Answers (not for releases): ResponseHeader + BlockRefs + error text.

void serve(int fd, uint32_t blocks) {
  pool::PoolCoreConfig c{blocks, 1, 0};
  size_t bytes = *pool::PoolCore::arena_bytes(c);
  void* mem = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  auto core = std::move(pool::PoolCore::create(mem, bytes, c).value());
  daemon::Dispatcher dispatcher({&core}, kSockMaxAnswer);
  std::vector<uint64_t> in(kSockMaxMessage / 8), out(kSockMaxAnswer / 8);
  auto* inb = reinterpret_cast<std::byte*>(in.data());
  auto* outb = reinterpret_cast<std::byte*>(out.data());
  for (;;) {
    const ssize_t n = recv(fd, inb, kSockMaxMessage, 0);
    if (n <= 0) break;  // the benchmark hung up
    if (n < 8) continue;
    uint32_t type;
    std::memcpy(&type, inb, 4);
    std::span<const std::byte> record(inb + 8, static_cast<size_t>(n) - 8);
    const uint32_t cap = dispatcher.answer_capacity(type, record);
    auto done = dispatcher.dispatch(0, type, record, {outb, cap});
    if (cap > 0 && send(fd, outb, done.answer_bytes, MSG_NOSIGNAL) < 0) break;
  }
  std::free(mem);
}

class SocketBackend : public Backend {
 public:
  explicit SocketBackend(uint32_t blocks) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) die("socketpair");
    for (int s : sv) {
      int size = 1 << 20;
      setsockopt(s, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
      setsockopt(s, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
    }
    pid_ = fork();
    if (pid_ == 0) {
      close(sv[0]);
      serve(sv[1], blocks);
      _exit(0);
    }
    close(sv[1]);
    fd_ = sv[0];
    msg_.resize(kSockMaxMessage / 8);
    ans_.resize(kSockMaxAnswer / 8);
  }
  ~SocketBackend() override {
    close(fd_);
    waitpid(pid_, nullptr, 0);
  }
  const char* name() const override { return "unix-socket"; }

  void fill(const std::vector<uint64_t>& hashes) override {
    std::vector<pool::RegisterItem> items;
    for (size_t done = 0; done < hashes.size();) {
      const uint32_t k = static_cast<uint32_t>(std::min<size_t>(kFillBatch, hashes.size() - done));
      auto refs = call(proto::Opcode::kAllocate, k, nullptr, 0, k);
      items.resize(k);
      for (uint32_t i = 0; i < k; ++i)
        items[i] = {refs[i], hashes[done + i], hashes[done + i], 0, 1, 0};
      auto imm = call(proto::Opcode::kRegister, k, items.data(), k * sizeof(items[0]), k);
      post(proto::Opcode::kReleaseImmutable, k, imm.data(), k * sizeof(imm[0]));
      done += k;
    }
  }
  void match(std::span<const uint64_t> q) override {
    auto r = call(proto::Opcode::kMatch, static_cast<uint32_t>(q.size()), q.data(), q.size_bytes(),
                  static_cast<uint32_t>(q.size()));
    post(proto::Opcode::kReleaseImmutable, kBatch, r.data(), r.size_bytes());
  }
  void allocate_release() override {
    auto r = call(proto::Opcode::kAllocate, kBatch, nullptr, 0, kBatch);
    post(proto::Opcode::kReleaseMutable, kBatch, r.data(), r.size_bytes());
  }
  void register_release(uint64_t seed, std::mt19937_64& rng) override {
    auto r = call(proto::Opcode::kAllocate, kBatch, nullptr, 0, kBatch);
    refs_.assign(r.begin(), r.end());
    hash_pages(seed, rng, hashes_);
    items_.resize(kBatch);
    for (uint32_t i = 0; i < kBatch; ++i) items_[i] = {refs_[i], hashes_[i], hashes_[i], 0, 0, 0};
    auto imm = call(proto::Opcode::kRegister, kBatch, items_.data(),
                    items_.size() * sizeof(items_[0]), kBatch);
    post(proto::Opcode::kReleaseImmutable, kBatch, imm.data(), imm.size_bytes());
  }

 private:
  void post(proto::Opcode op, uint32_t count, const void* items, size_t item_bytes) {
    auto* b = reinterpret_cast<std::byte*>(msg_.data());
    const uint32_t type = static_cast<uint32_t>(op), zero = 0;
    proto::RequestHeader rq{++corr_, 0, count};
    std::memcpy(b, &type, 4);
    std::memcpy(b + 4, &zero, 4);
    std::memcpy(b + 8, &rq, sizeof(rq));
    if (item_bytes) std::memcpy(b + 8 + sizeof(rq), items, item_bytes);
    if (send(fd_, b, 8 + sizeof(rq) + item_bytes, MSG_NOSIGNAL) < 0) die("unix-socket send");
  }
  // Sends a request, waits for its answer and returns its refs (which must number `want`).
  std::span<const pool::BlockRef> call(proto::Opcode op, uint32_t count, const void* items,
                                       size_t item_bytes, uint32_t want) {
    post(op, count, items, item_bytes);
    auto* a = reinterpret_cast<std::byte*>(ans_.data());
    const ssize_t n = recv(fd_, a, kSockMaxAnswer, 0);
    proto::ResponseHeader rh;
    if (n < static_cast<ssize_t>(sizeof(rh))) die("unix-socket: short answer");
    std::memcpy(&rh, a, sizeof(rh));
    if (rh.correlation_id != corr_ || rh.status != 0 || rh.count != want)
      die("unix-socket: request failed: " +
          std::string(
              reinterpret_cast<const char*>(a) + sizeof(rh) + rh.count * sizeof(pool::BlockRef),
              rh.message_len));
    return {reinterpret_cast<const pool::BlockRef*>(a + sizeof(rh)), rh.count};
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  uint64_t corr_ = 0;
  std::vector<uint64_t> msg_, ans_;
  std::vector<pool::BlockRef> refs_;
  std::vector<pool::RegisterItem> items_;
  std::vector<uint64_t> hashes_;
};

// ---- (d) redis -----------------------------------------------------------------------------

class RedisBackend : public Backend {
 public:
  explicit RedisBackend(uint32_t blocks) : blocks_(blocks) {
    char tmpl[] = "/tmp/kvpool-redis-XXXXXX";
    if (!mkdtemp(tmpl)) die("mkdtemp");
    dir_ = tmpl;
    sock_ = dir_ + "/redis.sock";
    const char* bin = std::getenv("REDIS_SERVER");
    if (!bin) bin = "redis-server";
    pid_ = fork();
    if (pid_ == 0) {
      const std::string log = dir_ + "/redis.log";
      execlp(bin, bin, "--port", "0", "--unixsocket", sock_.c_str(), "--unixsocketperm", "700",
             "--save", "", "--appendonly", "no", "--dir", dir_.c_str(), "--logfile", log.c_str(),
             static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  ~RedisBackend() override {
    if (ctx_) redisFree(ctx_);
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
    std::string rm = "rm -rf " + dir_;
    if (std::system(rm.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir_.c_str());
  }
  const char* name() const override { return "redis"; }

  void connect() {
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (true) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        die("redis-server exited at start (is it installed? scripts/bootstrap.sh installs it)");
      }
      ctx_ = redisConnectUnix(sock_.c_str());
      if (ctx_ && !ctx_->err) {
        auto* r = static_cast<redisReply*>(redisCommand(ctx_, "PING"));
        const bool ok = r && r->type == REDIS_REPLY_STATUS;
        if (r) freeReplyObject(r);
        if (ok) return;
      }
      if (ctx_) redisFree(ctx_);
      ctx_ = nullptr;
      if (Clock::now() > deadline) die("redis-server did not accept on " + sock_);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  void fill(const std::vector<uint64_t>& hashes) override {
    // Block ids 0..n-1 hold the registered hashes; the rest are the free list.
    const uint32_t n = static_cast<uint32_t>(hashes.size());
    for (uint32_t done = 0; done < n;) {
      const uint32_t k = std::min(kFillBatch, n - done);
      begin("MSET");
      for (uint32_t i = 0; i < k; ++i) {
        arg(&hashes[done + i], 8);
        arg_id(done + i);
      }
      expect(run(), REDIS_REPLY_STATUS, 0);
      done += k;
    }
    for (uint32_t done = n; done < blocks_;) {
      const uint32_t k = std::min(kFillBatch, blocks_ - done);
      begin("RPUSH");
      arg("free", 4);
      for (uint32_t i = 0; i < k; ++i) arg_id(done + i);
      expect(run(), REDIS_REPLY_INTEGER, 0);
      done += k;
    }
  }
  void match(std::span<const uint64_t> q) override {
    begin("MGET");
    for (const uint64_t& h : q) arg(&h, 8);
    redisReply* r = run();
    expect(r, REDIS_REPLY_ARRAY, q.size());
    for (size_t i = 0; i < r->elements; ++i)
      if (r->element[i]->type != REDIS_REPLY_STRING) die("redis match missed");
    freeReplyObject(r);
  }
  void allocate_release() override {
    pop_free();
    push_free();
  }
  void register_release(uint64_t seed, std::mt19937_64& rng) override {
    pop_free();
    hash_pages(seed, rng, hashes_);
    begin("MSET");
    for (uint32_t i = 0; i < kBatch; ++i) {
      arg(&hashes_[i], 8);
      arg(ids_[i].data(), ids_[i].size());
    }
    expect(run(), REDIS_REPLY_STATUS, 0);
    push_free();
  }

 private:
  void begin(const char* cmd) {
    argv_.clear();
    lens_.clear();
    store_.clear();
    arg(cmd, std::strlen(cmd));
  }
  void arg(const void* p, size_t n) {
    argv_.push_back(static_cast<const char*>(p));
    lens_.push_back(n);
  }
  void arg_id(uint32_t id) {
    store_.push_back(id);  // a deque: earlier arguments stay where they are
    arg(&store_.back(), 4);
  }
  // Sends the command and returns its reply, reading the replies of pipelined releases first.
  redisReply* run() {
    if (redisAppendCommandArgv(ctx_, static_cast<int>(argv_.size()), argv_.data(), lens_.data()) !=
        REDIS_OK)
      die("redis: append failed");
    for (; pending_ > 0; --pending_) {
      void* r = nullptr;
      if (redisGetReply(ctx_, &r) != REDIS_OK) die("redis: connection lost");
      expect(static_cast<redisReply*>(r), REDIS_REPLY_INTEGER, 0);
    }
    void* r = nullptr;
    if (redisGetReply(ctx_, &r) != REDIS_OK) die("redis: connection lost");
    return static_cast<redisReply*>(r);
  }
  void expect(redisReply* r, int type, size_t elements) {
    if (!r) die("redis: no reply");
    if (r->type != type || (type == REDIS_REPLY_ARRAY && r->elements != elements))
      die(std::string("redis: unexpected reply") +
          (r->type == REDIS_REPLY_ERROR ? ": " + std::string(r->str) : ""));
    if (type != REDIS_REPLY_ARRAY) freeReplyObject(r);
  }
  void pop_free() {
    begin("LPOP");
    arg("free", 4);
    arg("64", 2);
    redisReply* r = run();
    expect(r, REDIS_REPLY_ARRAY, kBatch);
    ids_.resize(kBatch);
    for (uint32_t i = 0; i < kBatch; ++i) ids_[i].assign(r->element[i]->str, r->element[i]->len);
    freeReplyObject(r);
  }
  // The release: pipelined, its reply read before the next command's.
  void push_free() {
    begin("RPUSH");
    arg("free", 4);
    for (auto& id : ids_) arg(id.data(), id.size());
    if (redisAppendCommandArgv(ctx_, static_cast<int>(argv_.size()), argv_.data(), lens_.data()) !=
        REDIS_OK)
      die("redis: append failed");
    ++pending_;
  }

  uint32_t blocks_;
  pid_t pid_ = -1;
  std::string dir_, sock_;
  redisContext* ctx_ = nullptr;
  std::vector<const char*> argv_;
  std::vector<size_t> lens_;
  std::deque<uint32_t> store_;
  std::vector<std::string> ids_;
  std::vector<uint64_t> hashes_;
  int pending_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--blocks")) a.blocks = static_cast<uint32_t>(std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--samples")) a.samples = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--rounds")) a.rounds = std::max(1, std::atoi(argv[i + 1]));
  }
  if (a.blocks < 4 * kFillBatch) die("--blocks must be at least 4096");
  const char* kvpoold = std::getenv("KVPOOLD");
  if (!kvpoold) kvpoold = KVPOOLD_PATH;

  // Every child is forked before this process starts a thread (libkvpool's lease thread).
  auto daemon = std::make_unique<DaemonBackend>(a.blocks, kvpoold);
  auto sock = std::make_unique<SocketBackend>(a.blocks);
  auto redis = std::make_unique<RedisBackend>(a.blocks);
  auto core = std::make_unique<CoreBackend>(a.blocks);
  daemon->connect();
  redis->connect();
  auto ring = std::make_unique<RingBackend>(*daemon);

  std::vector<uint64_t> hashes(a.blocks / 2);
  daemon->fill_pages(hashes);
  Backend* backends[] = {core.get(), daemon.get(), ring.get(), sock.get(), redis.get()};
  constexpr size_t kBackends = std::size(backends);
  for (Backend* b : backends) b->fill(hashes);

  std::vector<Samples> samples(kBackends);
  const int per_round = std::max(1, a.samples / a.rounds);
  for (int round = 0; round < a.rounds; ++round) {
    for (size_t k = 0; k < kBackends; ++k) {
      Backend& b = *backends[k];
      std::mt19937_64 rng(round * 7 + 1);
      for (int s = -per_round / 10; s < per_round; ++s) {  // a few warm-up samples first
        const size_t start = rng() % (hashes.size() - kBatch);
        auto t0 = Clock::now();
        b.match({hashes.data() + start, kBatch});
        const double m = us_since(t0);
        t0 = Clock::now();
        b.allocate_release();
        const double al = us_since(t0);
        t0 = Clock::now();
        b.register_release(
            static_cast<uint64_t>(round) * 1'000'000 + static_cast<uint64_t>(s + per_round), rng);
        const double rg = us_since(t0);
        if (s < 0) continue;
        samples[k].match.push_back(m);
        samples[k].allocate.push_back(al);
        samples[k].register64.push_back(rg);
      }
      if (std::getenv("COMPARE_VERBOSE")) {
        const size_t n = static_cast<size_t>(per_round);
        std::vector<double> last(samples[k].match.end() - static_cast<long>(n),
                                 samples[k].match.end());
        std::fprintf(stderr, "round %d %-12s match-64 median %8.2f us\n", round, b.name(),
                     pct(last, 0.5));
      }
    }
  }

  std::printf(
      "kvpool vs. the alternatives: pool of %u blocks (%zu registered), batches of %u,\n"
      "%d samples per backend in %d interleaved rounds; median us (ratio to in-process)\n",
      a.blocks, hashes.size(), kBatch, per_round * a.rounds, a.rounds);
  std::printf("%-26s", "operation");
  for (Backend* b : backends) std::printf(" %20s", b->name());
  std::printf("\n");
  auto row = [&](const char* label, std::vector<double> Samples::*field, double p) {
    std::printf("%-26s", label);
    const double base = pct(samples[0].*field, p);
    for (size_t k = 0; k < kBackends; ++k) {
      const double v = pct(samples[k].*field, p);
      std::printf(" %10.2f (%6.1fx)", v, base > 0 ? v / base : 0);
    }
    std::printf("\n");
  };
  row("match-64 + release", &Samples::match, 0.5);
  row("allocate-64 + release", &Samples::allocate, 0.5);
  row("register-64 + release", &Samples::register64, 0.5);
  row("match-64 p99", &Samples::match, 0.99);
  const double kv = pct(samples[1].match, 0.5);
  const double raw = pct(samples[2].match, 0.5);
  const double us = pct(samples[3].match, 0.5);
  const double rd = pct(samples[4].match, 0.5);
  std::printf(
      "match-64 median, kvpoold through libkvpool %.2f us: Redis %.2f us = %.1fx (target >= 20x), "
      "Unix-socket server %.2f us = %.1fx (target >= 5x)\n",
      kv, rd, rd / kv, us, us / kv);
  std::printf(
      "match-64 median, kvpoold's rings raw %.2f us: Redis = %.1fx, Unix-socket server = %.1fx\n",
      raw, rd / raw, us / raw);
  return 0;
}
