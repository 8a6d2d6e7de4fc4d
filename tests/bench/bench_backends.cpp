#include "bench_backends.hpp"

#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "daemon/dispatch.hpp"
#include "kvpool/client.hpp"
#include "kvpool/pool/pool_core.hpp"
#include "kvpool/shm/protocol.hpp"
#include "support/raw_connection.hpp"

namespace kvpool::bench {

namespace {

// The Unix-socket server's largest answer (a fill batch of 1024 refs fits).
constexpr uint32_t kSockMaxAnswer = 64 * 1024;
constexpr size_t kSockMaxMessage = 256 * 1024;

std::string make_temp_dir(const char* prefix) {
  std::string tmpl = std::string("/tmp/") + prefix + "-XXXXXX";
  if (!mkdtemp(tmpl.data())) die(std::string("mkdtemp: ") + std::strerror(errno));
  return tmpl;
}

// In a freshly forked server: it goes when the benchmark goes, even if the benchmark dies.
void die_with_parent(pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(0);
}

void stop_child(pid_t& pid) {
  if (pid <= 0) return;
  kill(pid, SIGTERM);
  waitpid(pid, nullptr, 0);
  pid = -1;
}

}  // namespace

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "bench: %s\n", what.c_str());
  std::exit(1);
}

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  // Nearest rank: of 100 samples, p99 is the 99th smallest, not the largest.
  const double rank = std::ceil(p * static_cast<double>(v.size()));
  return v[std::clamp<size_t>(static_cast<size_t>(rank), 1, v.size()) - 1];
}

std::vector<Token> tokens_for(uint64_t seed) {
  std::vector<Token> t(kPage);
  for (uint32_t i = 0; i < kPage; ++i) t[i] = static_cast<Token>(seed * 131 + i);
  return t;
}

void hash_pages(uint64_t seed, std::mt19937_64& rng, std::vector<uint64_t>& out, uint32_t n) {
  const auto t = tokens_for(seed);
  out.resize(n);
  for (auto& h : out) h = compute_block_hash(t, rng());
}

void remove_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (ec)
    std::fprintf(stderr, "bench: could not remove %s: %s\n", dir.c_str(), ec.message().c_str());
}

// ---- in-process ----------------------------------------------------------------------------

namespace {

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
    register_fresh(seed, rng, kBatch, out_.data());
    (void)core_.release_immutable(1, {out_.data(), kBatch});
  }
  void engine_step(std::span<const uint64_t> q, uint64_t seed, std::mt19937_64& rng) override {
    auto hit = core_.match(1, q, matched_.data());
    if (!hit || *hit != q.size()) die("in-process match missed");
    if (!core_.allocate(1, kStepBlocks, refs_.data()).is_ok()) die("in-process allocate");
    register_fresh(seed, rng, kStepBlocks, out_.data());
    (void)core_.release_immutable(1, {matched_.data(), *hit});
    (void)core_.release_immutable(1, {out_.data(), kStepBlocks});
  }

 private:
  // Registers the n blocks in refs_ under fresh hashes; their immutable refs go to `out`.
  void register_fresh(uint64_t seed, std::mt19937_64& rng, uint32_t n, pool::BlockRef* out) {
    hash_pages(seed, rng, hashes_, n);
    items_.resize(n);
    for (uint32_t i = 0; i < n; ++i) items_[i] = {refs_[i], hashes_[i], hashes_[i], 0, 0, 0};
    if (!core_.register_blocks(1, items_, out).is_ok()) die("in-process register");
  }

  size_t bytes_ = 0;
  void* mem_ = nullptr;
  pool::PoolCore core_;
  std::vector<pool::BlockRef> refs_, out_, matched_ = std::vector<pool::BlockRef>(kFillBatch);
  std::vector<pool::RegisterItem> items_;
  std::vector<uint64_t> hashes_;
};

}  // namespace

std::unique_ptr<Backend> make_core_backend(uint32_t blocks) {
  return std::make_unique<CoreBackend>(blocks);
}

// ---- kvpoold over shm --------------------------------------------------------------------

KvpooldServer::KvpooldServer(uint32_t blocks, const char* kvpoold) {
  dir_ = make_temp_dir("kvpool-bench");
  instance_ = "bench" + std::to_string(getpid());
  const std::string cfg = dir_ + "/kvpoold.json";
  // No wait-protocol settings: each protocol's defaults are what the benchmarks judge.
  std::ofstream(cfg) << "{\"instance\":\"" << instance_ << "\",\"runtime_dir\":\"" << dir_
                     << "\",\"log_level\":\"warn\",\"pools\":[{\"name\":\"bench\",\"num_blocks\":"
                     << blocks
                     << ",\"layout\":{\"num_layers\":1,\"outer_dim\":1,\"page_size\":" << kPage
                     << ",\"inner_dim\":8,\"dtype_bytes\":2,\"alignment\":64}}]}";
  const pid_t parent = getpid();
  pid_ = fork();
  if (pid_ < 0) die("fork kvpoold");
  if (pid_ == 0) {
    die_with_parent(parent);
    execl(kvpoold, kvpoold, "--config", cfg.c_str(), static_cast<char*>(nullptr));
    std::fprintf(stderr, "bench: cannot run %s: %s\n", kvpoold, std::strerror(errno));
    _exit(127);
  }
}

KvpooldServer::~KvpooldServer() {
  stop_child(pid_);
  remove_dir(dir_);
}

struct DaemonBackend::State {
  std::optional<Client> client;
  std::optional<Pool> pool;
};

DaemonBackend::DaemonBackend(const KvpooldServer& server) : s_(std::make_unique<State>()) {
  ConnectOptions o;
  o.runtime_dir = server.runtime_dir();
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (true) {
    auto c = Client::connect(server.instance(), o);
    if (c) {
      s_->client.emplace(std::move(c.value()));
      break;
    }
    if (Clock::now() > deadline) die("cannot reach kvpoold: " + c.status().to_string());
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the daemon is starting
  }
  auto p = s_->client->pool("bench");
  if (!p) die("kvpoold pool: " + p.status().to_string());
  s_->pool.emplace(std::move(p.value()));
}

DaemonBackend::~DaemonBackend() {
  s_->pool.reset();
  s_->client.reset();
}

void DaemonBackend::fill_pages(std::vector<uint64_t>& hashes) {
  for (uint32_t done = 0; done < hashes.size();) {
    const uint32_t k = std::min<uint32_t>(kFillBatch, static_cast<uint32_t>(hashes.size()) - done);
    auto blocks = s_->pool->allocate_blocks(k);
    if (!blocks) die("kvpoold fill: " + blocks.status().to_string());
    for (uint32_t i = 0; i < k; ++i) {
      auto& b = (*blocks)[i];
      (void)b.init_sequence(0);
      (void)b.add_tokens(tokens_for(done + i));
      (void)b.commit();
      b.set_priority(1);
      hashes[done + i] = *b.sequence_hash();
    }
    auto imm = s_->pool->register_blocks(std::move(*blocks));
    if (!imm) die("kvpoold fill: " + imm.status().to_string());
    done += k;
  }
  s_->client->flush();
}

void DaemonBackend::match(std::span<const uint64_t> q) {
  auto r = s_->pool->match_sequence_hashes(q);
  if (!r || r->size() != q.size()) die("kvpoold match missed");
}

void DaemonBackend::allocate_release() {
  auto r = s_->pool->allocate_blocks(kBatch);
  if (!r) die("kvpoold allocate: " + r.status().to_string());
}

void DaemonBackend::register_release(uint64_t seed, std::mt19937_64& rng) {
  auto r = s_->pool->allocate_blocks(kBatch);
  if (!r) die("kvpoold allocate: " + r.status().to_string());
  const auto t = tokens_for(seed);
  for (auto& b : *r) {
    (void)b.init_sequence(rng());
    (void)b.add_tokens(t);
    (void)b.commit();
  }
  auto imm = s_->pool->register_blocks(std::move(*r));
  if (!imm) die("kvpoold register: " + imm.status().to_string());
}

void DaemonBackend::engine_step(std::span<const uint64_t> q, uint64_t seed, std::mt19937_64& rng) {
  auto hit = s_->pool->match_sequence_hashes(q);
  if (!hit || hit->size() != q.size()) die("kvpoold match missed");
  auto r = s_->pool->allocate_blocks(kStepBlocks);
  if (!r) die("kvpoold allocate: " + r.status().to_string());
  const auto t = tokens_for(seed);
  for (auto& b : *r) {
    (void)b.init_sequence(rng());
    (void)b.add_tokens(t);
    (void)b.commit();
  }
  auto imm = s_->pool->register_blocks(std::move(*r));
  if (!imm) die("kvpoold register: " + imm.status().to_string());
  // hit and imm are released here, as an engine drops its handles after the step.
}

// ---- kvpoold's rings, raw ------------------------------------------------------------------
// The same daemon through its rings alone (the raw-protocol client of tests/support, which
// waits for an answer as libkvpool does): the records the Unix-socket server gets, with no
// RAII handles on top. Shows what the shm transport costs apart from the client library's
// per-block objects.

namespace {

class RingBackend : public Backend {
 public:
  explicit RingBackend(const KvpooldServer& server) {
    testsupport::RawOptions o;
    o.runtime_dir = server.runtime_dir();
    auto c = testsupport::RawConnection::open(server.instance(), o);
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
    auto imm = register_fresh(seed, rng, kBatch);
    post(proto::Opcode::kReleaseImmutable, imm.refs);
  }
  void engine_step(std::span<const uint64_t> q, uint64_t seed, std::mt19937_64& rng) override {
    auto hit =
        call(proto::Opcode::kMatch, static_cast<uint32_t>(q.size()), q.data(), q.size_bytes());
    auto imm = register_fresh(seed, rng, kStepBlocks);
    hit.refs.insert(hit.refs.end(), imm.refs.begin(), imm.refs.end());
    post(proto::Opcode::kReleaseImmutable, hit.refs);
  }

 private:
  testsupport::RawResponse register_fresh(uint64_t seed, std::mt19937_64& rng, uint32_t n) {
    auto r = call(proto::Opcode::kAllocate, n, nullptr, 0);
    hash_pages(seed, rng, hashes_, n);
    items_.resize(n);
    for (uint32_t i = 0; i < n; ++i) items_[i] = {r.refs[i], hashes_[i], hashes_[i], 0, 0, 0};
    return call(proto::Opcode::kRegister, n, items_.data(), items_.size() * sizeof(items_[0]));
  }
  testsupport::RawResponse call(proto::Opcode op, uint32_t count, const void* items, size_t bytes) {
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

  std::unique_ptr<testsupport::RawConnection> conn_;
  std::vector<pool::RegisterItem> items_;
  std::vector<uint64_t> hashes_;
};

}  // namespace

std::unique_ptr<Backend> make_ring_backend(const KvpooldServer& server) {
  return std::make_unique<RingBackend>(server);
}

// ---- a Unix-socket request/response server -------------------------------------------------

namespace {

// One pool core behind a mutex: each connection's thread blocks in recv, then runs its
// request under the lock (one writer of pool state, as in kvpoold).
struct SocketPool {
  explicit SocketPool(uint32_t blocks) {
    pool::PoolCoreConfig c{blocks, SocketServer::kMaxConnections, 0};
    const size_t bytes = *pool::PoolCore::arena_bytes(c);
    mem = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    core = std::move(pool::PoolCore::create(mem, bytes, c).value());
    dispatcher = daemon::Dispatcher({&core}, kSockMaxAnswer);
  }
  ~SocketPool() { std::free(mem); }
  void* mem = nullptr;
  pool::PoolCore core;
  daemon::Dispatcher dispatcher;
  std::mutex mutex;
  // Owner ids of connections that hung up, for the next ones (the core tracks holds per
  // owner, kMaxConnections of them; a benchmark connects far more often than that).
  std::vector<uint32_t> free_owners;
};

void serve_connection(SocketPool& p, int fd, uint32_t owner) {
  std::vector<uint64_t> in(kSockMaxMessage / 8), out(kSockMaxAnswer / 8);
  auto* inb = reinterpret_cast<std::byte*>(in.data());
  auto* outb = reinterpret_cast<std::byte*>(out.data());
  for (;;) {
    const ssize_t n = recv(fd, inb, kSockMaxMessage, 0);
    if (n <= 0) break;  // the client hung up
    if (n < 8) continue;
    uint32_t type;
    std::memcpy(&type, inb, 4);
    std::span<const std::byte> record(inb + 8, static_cast<size_t>(n) - 8);
    uint32_t cap = 0;
    daemon::Dispatcher::Outcome done;
    {
      std::lock_guard lock(p.mutex);
      cap = p.dispatcher.answer_capacity(type, record);
      done = p.dispatcher.dispatch(owner, type, record, {outb, cap});
    }
    if (cap > 0 && send(fd, outb, done.answer_bytes, MSG_NOSIGNAL) < 0) break;
  }
  close(fd);
  std::lock_guard lock(p.mutex);
  p.core.release_owner(owner);  // what a client that hung up still held, as kvpoold does
  p.free_owners.push_back(owner);
}

void set_buffers(int fd) {
  int size = 1 << 20;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
}

sockaddr_un socket_address(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof(a.sun_path)) die("socket path too long: " + path);
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  return a;
}

[[noreturn]] void run_socket_server(int listener, uint32_t blocks) {
  SocketPool p(blocks);
  for (uint32_t o = SocketServer::kMaxConnections; o-- > 0;) p.free_owners.push_back(o);
  for (;;) {
    const int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      _exit(1);
    }
    uint32_t owner = 0;
    {
      std::lock_guard lock(p.mutex);
      if (p.free_owners.empty()) {  // kMaxConnections at once: refuse (the client sees EOF)
        close(fd);
        continue;
      }
      owner = p.free_owners.back();
      p.free_owners.pop_back();
    }
    set_buffers(fd);
    std::thread(serve_connection, std::ref(p), fd, owner).detach();
  }
}

}  // namespace

SocketServer::SocketServer(uint32_t blocks) {
  dir_ = make_temp_dir("kvpool-sock");
  path_ = dir_ + "/server.sock";
  // Listening before the fork: a client may connect as soon as the constructor returns.
  const int listener = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  const sockaddr_un a = socket_address(path_);
  if (listener < 0 || bind(listener, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) != 0 ||
      listen(listener, 64) != 0)
    die("unix-socket server on " + path_ + ": " + std::strerror(errno));
  const pid_t parent = getpid();
  pid_ = fork();
  if (pid_ < 0) die("fork unix-socket server");
  if (pid_ == 0) {
    die_with_parent(parent);
    run_socket_server(listener, blocks);
  }
  close(listener);
}

SocketServer::~SocketServer() {
  stop_child(pid_);
  remove_dir(dir_);
}

namespace {

class SocketBackend : public Backend {
 public:
  explicit SocketBackend(const SocketServer& server) {
    fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    const sockaddr_un a = socket_address(server.path());
    if (fd_ < 0 || connect(fd_, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) != 0)
      die("connect to the unix-socket server: " + std::string(std::strerror(errno)));
    set_buffers(fd_);
    msg_.resize(kSockMaxMessage / 8);
    ans_.resize(kSockMaxAnswer / 8);
  }
  ~SocketBackend() override { close(fd_); }
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
    post(proto::Opcode::kReleaseImmutable, static_cast<uint32_t>(r.size()), r.data(),
         r.size_bytes());
  }
  void allocate_release() override {
    auto r = call(proto::Opcode::kAllocate, kBatch, nullptr, 0, kBatch);
    post(proto::Opcode::kReleaseMutable, kBatch, r.data(), r.size_bytes());
  }
  void register_release(uint64_t seed, std::mt19937_64& rng) override {
    auto imm = register_fresh(seed, rng, kBatch);
    post(proto::Opcode::kReleaseImmutable, kBatch, imm.data(), imm.size_bytes());
  }
  void engine_step(std::span<const uint64_t> q, uint64_t seed, std::mt19937_64& rng) override {
    const auto n = static_cast<uint32_t>(q.size());
    auto hit = call(proto::Opcode::kMatch, n, q.data(), q.size_bytes(), n);
    held_.assign(hit.begin(), hit.end());  // the answer buffer is reused by the next call
    auto imm = register_fresh(seed, rng, kStepBlocks);
    held_.insert(held_.end(), imm.begin(), imm.end());
    post(proto::Opcode::kReleaseImmutable, static_cast<uint32_t>(held_.size()), held_.data(),
         held_.size() * sizeof(held_[0]));
  }

 private:
  std::span<const pool::BlockRef> register_fresh(uint64_t seed, std::mt19937_64& rng, uint32_t n) {
    auto r = call(proto::Opcode::kAllocate, n, nullptr, 0, n);
    refs_.assign(r.begin(), r.end());
    hash_pages(seed, rng, hashes_, n);
    items_.resize(n);
    for (uint32_t i = 0; i < n; ++i) items_[i] = {refs_[i], hashes_[i], hashes_[i], 0, 0, 0};
    return call(proto::Opcode::kRegister, n, items_.data(), items_.size() * sizeof(items_[0]), n);
  }
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

  int fd_ = -1;
  uint64_t corr_ = 0;
  std::vector<uint64_t> msg_, ans_;
  std::vector<pool::BlockRef> refs_, held_;
  std::vector<pool::RegisterItem> items_;
  std::vector<uint64_t> hashes_;
};

}  // namespace

std::unique_ptr<Backend> make_socket_backend(const SocketServer& server) {
  return std::make_unique<SocketBackend>(server);
}

// ---- redis -----------------------------------------------------------------------------

std::string RedisServer::find_binary() {
  if (const char* env = std::getenv("REDIS_SERVER"); env && *env) {
    if (access(env, X_OK) != 0)
      die(std::string("REDIS_SERVER=") + env + " is not an executable: " + std::strerror(errno));
    return env;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  for (size_t start = 0; start <= dirs.size();) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::string candidate = dirs.substr(start, end - start) + "/redis-server";
    if (end > start && access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

RedisServer::RedisServer(const std::string& binary) {
  dir_ = make_temp_dir("kvpool-redis");
  sock_ = dir_ + "/redis.sock";
  const pid_t parent = getpid();
  pid_ = fork();
  if (pid_ < 0) die("fork redis-server");
  if (pid_ == 0) {
    die_with_parent(parent);
    const std::string log = dir_ + "/redis.log";
    const char* bin = binary.c_str();
    execlp(bin, bin, "--port", "0", "--unixsocket", sock_.c_str(), "--unixsocketperm", "700",
           "--save", "", "--appendonly", "no", "--dir", dir_.c_str(), "--logfile", log.c_str(),
           static_cast<char*>(nullptr));
    std::fprintf(stderr, "bench: cannot run %s: %s\n", bin, std::strerror(errno));
    _exit(127);
  }
}

RedisServer::~RedisServer() {
  stop_child(pid_);
  remove_dir(dir_);
}

void RedisServer::check_alive() const {
  if (waitpid(pid_, nullptr, WNOHANG) == pid_)
    die("redis-server exited at start (is it installed? scripts/bootstrap.sh installs it; "
        "REDIS_SERVER names another binary)");
}

namespace {

class RedisBackend : public Backend {
 public:
  RedisBackend(const RedisServer& server, uint32_t blocks) : blocks_(blocks) {
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (true) {
      server.check_alive();
      ctx_ = redisConnectUnix(server.socket_path().c_str());
      if (ctx_ && !ctx_->err) {
        auto* r = static_cast<redisReply*>(redisCommand(ctx_, "PING"));
        const bool ok = r && r->type == REDIS_REPLY_STATUS;
        if (r) freeReplyObject(r);
        if (ok) return;
      }
      if (ctx_) redisFree(ctx_);
      ctx_ = nullptr;
      if (Clock::now() > deadline) die("redis-server did not accept on " + server.socket_path());
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // the server is starting
    }
  }
  ~RedisBackend() override {
    if (ctx_) redisFree(ctx_);
  }
  const char* name() const override { return "redis"; }

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
  void match(std::span<const uint64_t> q) override { mget(q); }
  void allocate_release() override {
    pop_free(kBatch);
    push_free();
  }
  void register_release(uint64_t seed, std::mt19937_64& rng) override {
    pop_free(kBatch);
    mset_fresh(seed, rng);
    push_free();
  }
  void engine_step(std::span<const uint64_t> q, uint64_t seed, std::mt19937_64& rng) override {
    mget(q);
    pop_free(kStepBlocks);
    mset_fresh(seed, rng);
    push_free();
  }

 private:
  void mget(std::span<const uint64_t> q) {
    begin("MGET");
    for (const uint64_t& h : q) arg(&h, 8);
    redisReply* r = run();
    expect(r, REDIS_REPLY_ARRAY, q.size());
    for (size_t i = 0; i < r->elements; ++i)
      if (r->element[i]->type != REDIS_REPLY_STRING) die("redis match missed");
    freeReplyObject(r);
  }
  // Registers the popped ids under fresh hashes.
  void mset_fresh(uint64_t seed, std::mt19937_64& rng) {
    const auto n = static_cast<uint32_t>(ids_.size());
    hash_pages(seed, rng, hashes_, n);
    begin("MSET");
    for (uint32_t i = 0; i < n; ++i) {
      arg(&hashes_[i], 8);
      arg(ids_[i].data(), ids_[i].size());
    }
    expect(run(), REDIS_REPLY_STATUS, 0);
  }
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
  void pop_free(uint32_t n) {
    const std::string count = std::to_string(n);
    begin("LPOP");
    arg("free", 4);
    arg(count.data(), count.size());
    redisReply* r = run();
    expect(r, REDIS_REPLY_ARRAY, n);
    ids_.resize(n);
    for (uint32_t i = 0; i < n; ++i) ids_[i].assign(r->element[i]->str, r->element[i]->len);
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
  redisContext* ctx_ = nullptr;
  std::vector<const char*> argv_;
  std::vector<size_t> lens_;
  std::deque<uint32_t> store_;
  std::vector<std::string> ids_;
  std::vector<uint64_t> hashes_;
  int pending_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_redis_backend(const RedisServer& server, uint32_t blocks) {
  return std::make_unique<RedisBackend>(server, blocks);
}

}  // namespace kvpool::bench
