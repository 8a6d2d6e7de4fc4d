#include "connection.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "device_view.hpp"
#include "kvpool/core/paths.hpp"
#include "kvpool/core/version.hpp"
#include "kvpool/cuda/device.hpp"
#include "kvpool/shm/handshake.hpp"

namespace kvpool::detail {
namespace {

constexpr uint32_t kReleaseBatch = 64;

// Bumped in every child of fork(): a Client inherited by a child shares the parent's socket
// and rings but has no lease thread, and its calls would hang once the parent is gone.
std::atomic<uint64_t> g_fork_generation{0};
uint64_t fork_generation() {
  static std::once_flag once;
  std::call_once(once, [] {
    ::pthread_atfork(nullptr, nullptr,
                     [] { g_fork_generation.fetch_add(1, std::memory_order_relaxed); });
  });
  return g_fork_generation.load(std::memory_order_relaxed);
}

// Every pool's storage kind and hash scheme must be known to this build, and the Welcome
// must carry, after the first three (registry segments already taken by attach_client), one
// data descriptor per pool whose storage travels as one (proto::welcome_carries_fd: host
// pools open to us; device pools come as an IPC handle).
Status check_pools(std::span<const shm::PoolInfo> infos, const proto::Welcome& w, size_t fds) {
  size_t pool_fds = 0;
  for (uint32_t i = 0; i < infos.size(); ++i) {
    auto kind = static_cast<shm::StorageKind>(infos[i].storage);
    if (kind != shm::StorageKind::kHost && kind != shm::StorageKind::kCuda)
      return Status(
          ErrorCode::kVersionMismatch,
          "pool " + std::to_string(i) + " has storage kind " + std::to_string(infos[i].storage) +
              ", unknown to this libkvpool; rebuild the worker against a matching libkvpool");
    // A scheme this build cannot compute: every hash it made would silently never match.
    if (infos[i].hash_scheme > kMaxHashScheme)
      return Status(ErrorCode::kVersionMismatch,
                    "pool " + std::to_string(i) + " hashes with scheme " +
                        std::to_string(infos[i].hash_scheme) +
                        ", unknown to this libkvpool; rebuild the worker against a matching "
                        "libkvpool");
    pool_fds += shm::pool_open_to(w, i) && proto::welcome_carries_fd(kind) ? 1 : 0;
  }
  if (fds != 3 + pool_fds)
    return Status(ErrorCode::kProtocolError,
                  "welcome carries " + std::to_string(fds) + " descriptors for " +
                      std::to_string(infos.size()) + " pools, " + std::to_string(pool_fds) +
                      " of them with a data descriptor");
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Connection>> Connection::open(const std::string& instance,
                                                     const ConnectionOptions& options) {
  KVPOOL_RETURN_IF_ERROR(validate_instance_name(instance));
  if (options.pin_host_pools && !cuda::built_with_cuda())
    return Status(ErrorCode::kUnsupported, "pin_host_pools: " + cuda::no_device_reason());
  std::unique_ptr<Connection> c(new Connection());
  c->fork_generation_ = fork_generation();
  auto at = shm::attach_client(instance, options.runtime_dir, options.layout_major,
                               static_cast<int>(options.connect_timeout.count()));
  if (!at) return at.status();
  auto ch = shm::ClientChannel::create(
      *at,
      shm::ChannelOptions{std::chrono::microseconds(options.poll_us), options.unresponsive_after});
  if (!ch) return ch.status();
  c->channel_ = std::move(ch.value());
  KVPOOL_RETURN_IF_ERROR(c->map_pools(at->welcome, at->fds, options));
  // Ready only once the lease is held: from then on the daemon judges us by it.
  KVPOOL_RETURN_IF_ERROR(c->channel_->start(c.get()));
  return c;
}

Status Connection::map_pools(const proto::Welcome& w, std::vector<shm::UniqueFd>& fds,
                             const ConnectionOptions& options) {
  const std::span<const shm::PoolInfo> infos = channel_->control_reader().pool_infos();
  KVPOOL_RETURN_IF_ERROR(check_pools(infos, w, fds.size()));
  size_t next_fd = 3;
  for (uint32_t i = 0; i < infos.size(); ++i) {
    const bool usable = shm::pool_open_to(w, i);
    shm::UniqueFd* data_fd = nullptr;
    if (usable && proto::welcome_carries_fd(static_cast<shm::StorageKind>(infos[i].storage)))
      data_fd = &fds[next_fd++];
    shm::PoolInfo info = infos[i];
    // A device pool's IPC handle travels only in its registry segment (its clients').
    const shm::ControlReader& ctl = channel_->control_reader();
    if (usable && ctl.has_pool(i))
      std::memcpy(info.ipc_handle, ctl.registry(i).header().ipc_handle, sizeof(info.ipc_handle));
    auto view = map_pool(info, usable, data_fd, options);
    if (!view) return view.status();
    pools_.push_back(std::move(view.value()));
  }
  return Status::ok();
}

// One pool as this client sees it. Closed to us by its allow-lists: listed (so pool indices
// match), never mapped. Host pools: mapped read-write and read-only (immutable blocks'
// addresses), pinned on request. Device pools: the slab is opened on first use.
Result<PoolView> Connection::map_pool(const shm::PoolInfo& in, bool usable, shm::UniqueFd* data_fd,
                                      const ConnectionOptions& options) {
  shm::PoolInfo info = in;
  info.name[sizeof(info.name) - 1] = '\0';
  auto layout = Layout::create(info.layout);
  if (!layout) return layout.status();
  PoolView view{info.name, info, layout.value(), shm::Segment(), shm::Segment(), usable,
                0,         0,    nullptr,        nullptr};
  if (!usable) return view;
  if (view.is_device()) {
    if (info.data_bytes < layout->total_bytes())
      return Status(ErrorCode::kProtocolError,
                    std::string("pool '") + info.name + "' slab is smaller than its layout");
    view.device = std::make_shared<DeviceView>(info);
    return view;
  }
  struct stat st {};
  if (::fstat(data_fd->get(), &st) != 0) return io_error("fstat pool descriptor", errno);
  view.data_dev = st.st_dev;
  view.data_ino = st.st_ino;
  auto ro_fd = shm::UniqueFd(::fcntl(data_fd->get(), F_DUPFD_CLOEXEC, 0));
  if (!ro_fd) return io_error("dup pool descriptor", errno);
  auto data = shm::Segment::map_fd(std::move(*data_fd), true);
  if (!data) return data.status();
  auto data_ro = shm::Segment::map_fd(std::move(ro_fd), false);
  if (!data_ro) return data_ro.status();
  view.data_ro = std::move(data_ro.value());
  if (data->size() < layout->total_bytes())
    return Status(ErrorCode::kProtocolError,
                  std::string("pool '") + info.name + "' data is smaller than its layout");
  view.data = std::move(data.value());
  if (options.pin_host_pools) {
    auto pin = cuda::HostRegistration::pin(view.data.data(), view.data.size());
    if (!pin)
      return Status(pin.status().code(), std::string("pin_host_pools: pool '") + info.name + "' (" +
                                             std::to_string(view.data.size()) +
                                             " bytes): " + pin.status().message());
    view.pinned = std::make_shared<cuda::HostRegistration>(std::move(pin.value()));
  }
  return view;
}

Connection::~Connection() {
  if (!channel_) return;
  if (!gone()) {
    std::lock_guard lk(send_mutex_);
    (void)flush_locked(/*now=*/true);
  }
  channel_->stop();  // before the members its lease thread's work uses go
}

// ---- the lease thread's work -------------------------------------------------------------

bool Connection::pending() const {
  if (pending_count_.load(std::memory_order_relaxed) > 0 ||
      abandoned_count_.load(std::memory_order_relaxed) > 0)
    return true;
  const shm::LeaseWork* up = upstream_.load(std::memory_order_acquire);
  return up != nullptr && up->pending();
}

// try_lock: a caller holding either lock sends or reads anyway.
bool Connection::run() {
  // The client's dropped references first: they join our batch below.
  if (shm::LeaseWork* up = upstream_.load(std::memory_order_acquire); up && up->pending())
    (void)up->run();
  // Answers whose futures were dropped unread: give back what they carry.
  if (abandoned_count_.load(std::memory_order_relaxed) > 0) {
    LaterReleases later{this, {}};
    std::unique_lock rl(recv_mutex_, std::try_to_lock);
    if (rl.owns_lock() && !reading_) drain_answers_locked(&later);  // else the reader does
  }
  if (pending_count_.load(std::memory_order_relaxed) == 0) return false;
  std::unique_lock lk(send_mutex_, std::try_to_lock);
  if (lk.owns_lock()) (void)flush_locked(/*now=*/true);
  return true;
}

// ---- state -------------------------------------------------------------------------------

Status Connection::gone_reason() const {
  if (Status s = check_usable(); !s.is_ok()) return s;
  return channel_->gone_status("now");
}

Status Connection::check_usable() const {
  if (fork_generation() != fork_generation_)
    return Status(ErrorCode::kDisconnected,
                  "this kvpool client was connected before fork(); it belongs to the parent "
                  "process: connect a new Client in the child");
  if (gone()) return channel_->gone_status("before the request was sent");
  return Status::ok();
}

// ---- sending -----------------------------------------------------------------------------

// The daemon stops taking requests while our answers are unread (backpressure); a thread
// that issues many async calls before reading any would wait for room forever. Read them
// for their futures (try_lock: a waiter holding it reads them anyway). send_mutex_ held, so
// the releases of abandoned answers queue at once.
void Connection::drain_if_free() {
  if (std::unique_lock rl(recv_mutex_, std::try_to_lock); rl.owns_lock() && !reading_) {
    drain_answers_locked(nullptr);
    answered_.notify_all();  // a waiter whose answer this read takes it
  }
}

Status Connection::flush_locked(bool now) {
  if (pending_.empty()) return Status::ok();
  for (auto& p : pending_) {
    if (p.refs.empty()) continue;
    uint32_t bytes = static_cast<uint32_t>(sizeof(proto::RequestHeader) +
                                           p.refs.size() * sizeof(pool::BlockRef));
    auto c = channel_->claim(static_cast<uint32_t>(p.immutable ? proto::Opcode::kReleaseImmutable
                                                               : proto::Opcode::kReleaseMutable),
                             bytes, [this] { drain_if_free(); });
    if (!c) {
      pending_.clear();
      pending_count_.store(0, std::memory_order_relaxed);
      return c.status();
    }
    proto::RequestHeader h{0, p.pool, static_cast<uint32_t>(p.refs.size())};
    std::memcpy(*c, &h, sizeof(h));
    std::memcpy(static_cast<std::byte*>(*c) + sizeof(h), p.refs.data(),
                p.refs.size() * sizeof(pool::BlockRef));
  }
  pending_.clear();
  pending_count_.store(0, std::memory_order_relaxed);
  if (now)
    channel_->publish();
  else
    channel_->publish_deferred();
  return Status::ok();
}

void Connection::release(uint32_t pool, bool immutable, pool::BlockRef ref) {
  if (gone()) return;  // the daemon reclaims everything of ours anyway
  if (fork_generation() != fork_generation_) return;  // the parent's blocks, not ours
  std::lock_guard lk(send_mutex_);
  queue_release_locked(pool, immutable, ref);
}

void Connection::kick_lease() {
  if (fork_generation() == fork_generation_) channel_->kick_if_parked();
}

void Connection::release(uint32_t pool, bool immutable, std::span<const pool::BlockRef> refs) {
  if (refs.empty() || gone()) return;
  if (fork_generation() != fork_generation_) return;
  std::lock_guard lk(send_mutex_);
  // As queue_release_locked, a batch's worth at a time.
  for (size_t at = 0; at < refs.size();) {
    if (pending_.empty() || pending_.back().pool != pool ||
        pending_.back().immutable != immutable) {
      pending_.push_back(PendingRelease{pool, immutable, {}});
      pending_.back().refs.reserve(kReleaseBatch);
    }
    // Below a batch: a full one went out when it filled (or was dropped with a dead ring).
    const uint32_t before =
        std::min(pending_count_.load(std::memory_order_relaxed), kReleaseBatch - 1);
    const size_t take = std::min<size_t>(refs.size() - at, kReleaseBatch - before);
    auto& out = pending_.back().refs;
    out.insert(out.end(), refs.begin() + static_cast<std::ptrdiff_t>(at),
               refs.begin() + static_cast<std::ptrdiff_t>(at + take));
    at += take;
    pending_count_.store(before + static_cast<uint32_t>(take), std::memory_order_relaxed);
    if (before + take >= kReleaseBatch)
      (void)flush_locked(/*now=*/false);  // as queue_release_locked
    else if (before == 0)
      channel_->kick_if_parked();
  }
}

void Connection::queue_release_locked(uint32_t pool, bool immutable, pool::BlockRef ref) {
  if (pending_.empty() || pending_.back().pool != pool || pending_.back().immutable != immutable) {
    pending_.push_back(PendingRelease{pool, immutable, {}});
    pending_.back().refs.reserve(kReleaseBatch);  // one allocation per batch, not seven
  }
  pending_.back().refs.push_back(ref);
  const uint32_t queued = pending_count_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (queued >= kReleaseBatch) {
    // A full batch goes out now, but a parked daemon is not woken for it: an engine drops
    // its step's handles and sleeps; the next request (or a lease tick) wakes the daemon.
    (void)flush_locked(/*now=*/false);
  } else if (queued == 1) {
    // The first of a batch: the lease thread flushes it within one tick.
    channel_->kick_if_parked();
  }
}

void Connection::flush() {
  std::lock_guard lk(send_mutex_);
  (void)flush_locked(/*now=*/true);
}

Result<uint64_t> Connection::send(proto::Opcode op, uint32_t pool, uint32_t count,
                                  const void* items, size_t item_bytes) {
  KVPOOL_RETURN_IF_ERROR(check_usable());
  std::lock_guard lk(send_mutex_);
  // Releases first: the daemon must see them before a request that may depend on them.
  // (The request's own publish wakes the daemon for both.)
  if (!pending_.empty()) KVPOOL_RETURN_IF_ERROR(flush_locked(/*now=*/false));
  return channel_->send(op, pool, count, items, item_bytes, [this] { drain_if_free(); });
}

// ---- receiving ---------------------------------------------------------------------------

Connection::LaterReleases::~LaterReleases() {
  for (const auto& [pool, immutable, ref] : items) conn->release(pool, immutable, ref);
}

// An answer for another caller: kept for it, or, when its future was dropped unread,
// what it carries goes back to the daemon. recv_mutex_ held. `later` null: the caller also
// holds send_mutex_ and the releases are queued at once; else they are made once the
// caller has let go of recv_mutex_ (lock order: never send_mutex_ inside recv_mutex_).
void Connection::stash_locked(uint64_t corr, Response r, LaterReleases* later) {
  auto it = abandoned_.find(corr);
  if (it == abandoned_.end()) {
    early_.emplace(corr, std::move(r));
    return;
  }
  Abandoned a = std::move(it->second);
  abandoned_.erase(it);
  abandoned_count_.store(static_cast<uint32_t>(abandoned_.size()), std::memory_order_relaxed);
  // Success: what the answer carries. Failure: nothing changed daemon-side, so the blocks
  // the request handed over (a register's) are still ours to give back.
  const bool ok = r.code == ErrorCode::kOk;
  const bool immutable = ok ? a.immutable : false;
  for (const pool::BlockRef& ref : ok ? r.refs : a.on_failure) {
    if (later == nullptr) {
      queue_release_locked(a.pool, immutable, ref);
    } else {
      later->items.emplace_back(a.pool, immutable, ref);
    }
  }
}

void Connection::abandon(uint64_t corr, uint32_t pool, bool immutable,
                         std::vector<pool::BlockRef> on_failure) {
  LaterReleases later{this, {}};
  std::lock_guard lk(recv_mutex_);
  abandoned_.emplace(corr, Abandoned{pool, immutable, std::move(on_failure)});
  channel_->kick();  // the lease thread reads the answer when it comes
  if (auto it = early_.find(corr); it != early_.end()) {
    Response r = std::move(it->second);
    early_.erase(it);
    stash_locked(corr, std::move(r), &later);
    return;
  }
  abandoned_count_.store(static_cast<uint32_t>(abandoned_.size()), std::memory_order_relaxed);
}

// Reads every answer there is, for whoever will ask (or for nobody: abandoned ones are
// released). recv_mutex_ held.
void Connection::drain_answers_locked(LaterReleases* later) {
  while (true) {
    auto got = channel_->read_answer();
    if (!got || !*got) return;
    stash_locked((*got)->first, std::move((*got)->second), later);
  }
}

// One thread at a time reads the answer ring (the reader); it stashes every answer that is
// not its own and wakes the others, who wait on answered_ and take theirs from early_. The
// reader does not hold recv_mutex_ while it waits: a call whose answer takes long (an
// onboard of disk reads, a peer fetch) must not hold up the answers of this client's other
// threads, which arrive meanwhile. When the reader's own answer comes, it steps down and a
// waiting thread becomes the reader.
Result<Response> Connection::wait(uint64_t correlation_id) {
  if (fork_generation() != fork_generation_) return check_usable();
  LaterReleases later{this, {}};  // destroyed after the lock below is let go
  std::unique_lock lk(recv_mutex_);
  for (;;) {
    if (auto it = early_.find(correlation_id); it != early_.end()) {
      Response r = std::move(it->second);
      early_.erase(it);
      return r;
    }
    if (!reading_) break;
    answered_.wait(lk);
  }
  reading_ = true;
  lk.unlock();
  auto got = channel_->wait(correlation_id, [&](uint64_t corr, Response&& r) {
    std::lock_guard g(recv_mutex_);
    stash_locked(corr, std::move(r), &later);
    answered_.notify_all();
  });
  lk.lock();
  reading_ = false;
  answered_.notify_all();  // the next waiter reads (or finds its answer stashed)
  return got;
}

Result<Response> Connection::call(proto::Opcode op, uint32_t pool, uint32_t count,
                                  const void* items, size_t item_bytes) {
  auto corr = send(op, pool, count, items, item_bytes);
  if (!corr) return corr.status();
  return wait(*corr);
}

}  // namespace kvpool::detail
