// ClientImpl: what this client holds, and its reattach to a restarted kvpoold (issue 15).
//
// When kvpoold dies, the call in flight fails with kDaemonGone as before: whether the
// daemon did it before dying is unknown. The next call waits (ReattachPolicy::wait at most,
// 50 ms by default: well under an engine's step) for a new kvpoold on the same instance;
// when none came, the daemon is known to be down and every later call tries once to
// connect (microseconds while nothing listens) and fails at once with kDaemonGone: for an
// engine a missing daemon costs a cache miss, never a stalled step. The call that finds a
// daemon back connects, and, in the same step, tells it what
// this client still holds (kReclaim, one record per pool and batch, the last one final).
// The daemon gives back what its adoption proves this process held and answers what it
// cannot ("lost"); everything else it kept for us goes back into circulation. Handles
// then go on working: same block ids and generations, the same memory (an adopted pool's
// data segment is the same file; this client keeps its old mapping too, so addresses
// taken before the restart stay valid). A handle that was not given back, or whose pool
// the new daemon did not adopt (its memory is new), fails with kInvalidHandle on use and
// is never released to the new daemon.
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "client_impl.hpp"
#include "kvpool/shm/handshake.hpp"

namespace kvpool::detail {

// ---- HeldTable ---------------------------------------------------------------------------

HeldTable::HeldTable(uint32_t blocks) {
  if (blocks == 0) return;
  void* m = ::mmap(nullptr, uint64_t{blocks} * sizeof(uint64_t), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) throw std::bad_alloc();
  // Zero pages are zero words: std::atomic<uint64_t> is a plain word (lock-free).
  static_assert(std::atomic<uint64_t>::is_always_lock_free);
  words_ = static_cast<std::atomic<uint64_t>*>(m);
  blocks_ = blocks;
}

HeldTable::HeldTable(HeldTable&& o) noexcept : words_(o.words_), blocks_(o.blocks_) {
  o.words_ = nullptr;
  o.blocks_ = 0;
}

HeldTable& HeldTable::operator=(HeldTable&& o) noexcept {
  if (this != &o) {
    this->~HeldTable();
    words_ = o.words_;
    blocks_ = o.blocks_;
    o.words_ = nullptr;
    o.blocks_ = 0;
  }
  return *this;
}

HeldTable::~HeldTable() {
  if (words_) ::munmap(words_, uint64_t{blocks_} * sizeof(uint64_t));
}

// ---- ClientImpl --------------------------------------------------------------------------

ClientImpl::ClientImpl(std::unique_ptr<Connection> c, std::string instance,
                       ConnectionOptions options, ReattachPolicy reattach)
    : instance_(std::move(instance)), options_(std::move(options)), reattach_(reattach) {
  const size_t n = c->pools().size();
  incarnations_ = std::make_unique<std::atomic<uint32_t>[]>(n);
  mapped_by_ = std::make_unique<std::atomic<const Connection*>[]>(n);
  for (size_t i = 0; i < n; ++i) mapped_by_[i].store(c.get(), std::memory_order_relaxed);
  for (const PoolView& p : c->pools()) held_.emplace_back(p.layout.config().num_blocks);
  current_.store(c.get(), std::memory_order_release);
  c->set_upstream(this);
  connections_.push_back(std::move(c));
}

// Newest first: an older connection's lease thread has ended already (its daemon is gone).
ClientImpl::~ClientImpl() {
  for (auto& c : connections_) c->set_upstream(nullptr);
  while (!connections_.empty()) connections_.pop_back();
  // Listed slabs whose last block went (no live slab outlives us: each keeps us): their
  // references went back with that block; only the list's hold is left.
  for (ImmutableSlab* s = deferred_.exchange(nullptr); s != nullptr;) {
    ImmutableSlab* next = s->next_deferred;
    s->unhold();
    s = next;
  }
}

Result<std::byte*> ClientImpl::base(uint32_t pool, bool readonly) const {
  // Acquire: pairs with claim_back's release of a new mapping (its PoolView is complete).
  return base_of(*mapped_by_[pool].load(std::memory_order_acquire), pool, readonly);
}

Result<std::byte*> ClientImpl::base_of(const Connection& mapping, uint32_t pool,
                                       bool readonly) const {
  const PoolView& p = mapping.pools()[pool];
  if (p.device) return p.device->base();
  if (!p.data.data())
    return Status(ErrorCode::kPermissionDenied,
                  "pool '" + p.name + "' is not open to this client (its allowed_uids/gids)");
  return static_cast<std::byte*>(readonly ? p.data_ro.data() : p.data.data());
}

Status ClientImpl::check_handle(uint32_t pool, uint32_t incarnation, pool::BlockRef ref) const {
  if (incarnation != this->incarnation(pool))
    return Status(ErrorCode::kInvalidHandle,
                  "block " + std::to_string(ref.id) + " of pool '" + conn().pools()[pool].name +
                      "' is gone: kvpoold restarted and did not keep the pool (its memory is "
                      "new); allocate or match the block again");
  const uint64_t w = held_[pool].load(ref.id);
  if ((w & HeldTable::kLost) != 0 && HeldTable::generation_of(w) == ref.generation)
    return Status(ErrorCode::kInvalidHandle,
                  "block " + std::to_string(ref.id) + " of pool '" + conn().pools()[pool].name +
                      "' was not given back when this client reattached to the restarted "
                      "kvpoold (it could not prove the block was still ours); drop the handle");
  return Status::ok();
}

Result<std::byte*> ClientImpl::address(uint32_t pool, uint32_t incarnation, pool::BlockRef ref,
                                       uint32_t layer, uint32_t outer, bool readonly) const {
  // The mapping first, then the handle's check. claim_back bumps a pool's incarnation before
  // it publishes the new memory's mapping, so a handle that passes the check after this
  // load belongs to the mapping seen (or to an older one, which stays mapped): a stale
  // handle never gets an address in new memory another client may own.
  const Connection* mapping = mapped_by_[pool].load(std::memory_order_acquire);
  KVPOOL_RETURN_IF_ERROR(check_handle(pool, incarnation, ref));
  const PoolView& p = mapping->pools()[pool];
  auto off = p.layout.offset(ref.id, layer, outer);
  if (!off) return off.status();
  auto b = base_of(*mapping, pool, readonly);
  if (!b) return b.status();
  return *b + *off;
}

Result<uint64_t> ClientImpl::registered_checksum(uint32_t pool, uint32_t incarnation,
                                                 pool::BlockRef ref) const {
  KVPOOL_RETURN_IF_ERROR(check_handle(pool, incarnation, ref));
  // The current daemon's arena, not the one the pool's memory was mapped from: a block
  // registered after a restart that kept the pool is known only to the new daemon, which
  // took over the kept blocks' checksums when it adopted them (pool_adopt.cpp).
  return conn().checksum(pool, ref.id);
}

// ---- what this client holds -----------------------------------------------------------

// One daemon reference per block, however many handles: an engine with many sequences on
// one prefix matches the same block thousands of times, and the daemon's per-block cap
// (max_refs_per_block, its bound against a hostile client) must never refuse it. A
// reference the answer carries on a block we already hold goes into `surplus`, to be given
// back at once; the word counts our handles.
void ClientImpl::count_locked(uint32_t pool, std::span<const pool::BlockRef> refs, bool immutable,
                              std::vector<pool::BlockRef>* surplus) {
  HeldTable& t = held_[pool];
  for (const pool::BlockRef& r : refs) {
    uint64_t w = t.load(r.id);
    // A block we hold has one generation; anything else there is a lost one's leftover.
    if (HeldTable::generation_of(w) != r.generation) w = uint64_t{r.generation} << 32;
    if (immutable) {
      if ((w & HeldTable::kCountMask) != 0 && (w & HeldTable::kLost) == 0) surplus->push_back(r);
      w += 1;
    } else {
      w |= HeldTable::kMutable;
    }
    t.store(r.id, w);
  }
}

Result<uint32_t> ClientImpl::took(const Call& call, uint32_t pool,
                                  std::span<const pool::BlockRef> refs, bool immutable) {
  std::vector<pool::BlockRef> surplus;
  uint32_t inc = 0;
  {
    std::lock_guard lk(mu_);
    if (call.conn != current_.load(std::memory_order_relaxed))
      return proto::daemon_gone("it restarted while this answer was on its way; call again");
    count_locked(pool, refs, immutable, &surplus);
    inc = incarnation(pool);
  }
  for (const pool::BlockRef& r : surplus) call.conn->release(pool, /*immutable=*/true, r);
  return inc;
}

Result<uint32_t> ClientImpl::registered(const Call& call, uint32_t pool,
                                        std::span<const pool::BlockRef> handed,
                                        std::span<const pool::BlockRef> refs) {
  std::vector<pool::BlockRef> surplus;
  uint32_t inc = 0;
  {
    std::lock_guard lk(mu_);
    if (call.conn != current_.load(std::memory_order_relaxed))
      return proto::daemon_gone("it restarted while this answer was on its way; call again");
    HeldTable& t = held_[pool];
    for (const pool::BlockRef& r : handed) {
      const uint64_t w = t.load(r.id);
      if (HeldTable::generation_of(w) == r.generation) t.store(r.id, w & ~HeldTable::kMutable);
    }
    count_locked(pool, refs, /*immutable=*/true, &surplus);
    inc = incarnation(pool);
  }
  for (const pool::BlockRef& r : surplus) call.conn->release(pool, /*immutable=*/true, r);
  return inc;
}

void ClientImpl::forget_mutable(uint32_t pool, std::span<const pool::BlockRef> refs) {
  std::lock_guard lk(mu_);
  HeldTable& t = held_[pool];
  for (const pool::BlockRef& r : refs) {
    const uint64_t w = t.load(r.id);
    if (HeldTable::generation_of(w) == r.generation) t.store(r.id, w & ~HeldTable::kMutable);
  }
}

bool ClientImpl::let_go_locked(uint32_t pool, bool immutable, pool::BlockRef ref) {
  HeldTable& t = held_[pool];
  uint64_t w = t.load(ref.id);
  if (HeldTable::generation_of(w) != ref.generation) return true;
  const bool lost = (w & HeldTable::kLost) != 0;
  if (immutable && (w & HeldTable::kCountMask) > 0) w -= 1;
  if (!immutable) w &= ~HeldTable::kMutable;
  // Another handle still holds the block: the one daemon reference stays (count_locked).
  const bool still_held = immutable && (w & HeldTable::kCountMask) != 0;
  if ((w & (HeldTable::kCountMask | HeldTable::kMutable)) == 0) w = 0;
  t.store(ref.id, w);
  return !lost && !still_held;  // lost: the daemon did not give it back to us
}

void ClientImpl::release(uint32_t pool, uint32_t incarnation, bool immutable, pool::BlockRef ref) {
  Connection* c = nullptr;
  {
    std::lock_guard lk(mu_);
    // A pool the new daemon did not keep: nothing of it is ours there.
    if (incarnation != this->incarnation(pool)) return;
    if (!let_go_locked(pool, immutable, ref)) return;
    c = current_.load(std::memory_order_relaxed);
  }
  c->release(pool, immutable, ref);
}

void ClientImpl::release_immutables(uint32_t pool, uint32_t incarnation,
                                    std::span<const pool::BlockRef> refs) {
  pool::BlockRef out[64];
  for (size_t at = 0; at < refs.size(); at += std::size(out)) {
    const auto part = refs.subspan(at, std::min(refs.size() - at, std::size(out)));
    size_t n = 0;
    Connection* c = nullptr;
    {
      std::lock_guard lk(mu_);
      if (incarnation != this->incarnation(pool)) return;  // as release()
      for (const pool::BlockRef& r : part)
        if (let_go_locked(pool, /*immutable=*/true, r)) out[n++] = r;
      c = current_.load(std::memory_order_relaxed);
    }
    c->release(pool, /*immutable=*/true, std::span<const pool::BlockRef>(out, n));
  }
}

void ClientImpl::defer(ImmutableSlab* slab) {
  // release: a sweep that takes the stack sees next_deferred and the slab's bits.
  slab->next_deferred = deferred_.load(std::memory_order_relaxed);
  while (!deferred_.compare_exchange_weak(slab->next_deferred, slab, std::memory_order_release,
                                          std::memory_order_relaxed)) {
  }
  conn().kick_lease();  // a parked lease thread must come to sweep it
}

void ClientImpl::give_back_deferred() {
  ImmutableSlab* s = deferred_.exchange(nullptr, std::memory_order_acquire);
  while (s != nullptr) {
    // Read before unlisting: a drop may list the slab again (and rewrite it) right after.
    ImmutableSlab* next = s->next_deferred;
    // Unlisted before the bits are taken (seq_cst, with ImmutableSlab::drop): a reference
    // dropped after our take lists the slab again.
    s->listed.store(false, std::memory_order_seq_cst);
    s->give_back(*this);
    s->unhold();  // never the client's end: a slab keeps the client only while it lives
    s = next;
  }
}

bool ClientImpl::run() {
  give_back_deferred();
  return true;
}

void ClientImpl::flush() {
  if (deferred_.load(std::memory_order_relaxed) != nullptr) give_back_deferred();
  conn().flush();
}

// ---- requests and reattach ----------------------------------------------------------------

Result<Call> ClientImpl::send(proto::Opcode op, uint32_t pool, uint32_t count, const void* items,
                              size_t item_bytes) {
  // What our handles dropped goes first: the request may depend on it (room for an
  // allocate), and the daemon must see releases in the order they were made.
  if (deferred_.load(std::memory_order_relaxed) != nullptr) give_back_deferred();
  auto c = usable();
  if (!c) return c.status();
  auto corr = (*c)->send(op, pool, count, items, item_bytes);
  if (!corr) return corr.status();
  return Call{*c, *corr};
}

Result<Response> ClientImpl::call(proto::Opcode op, uint32_t pool, uint32_t count,
                                  const void* items, size_t item_bytes) {
  auto c = send(op, pool, count, items, item_bytes);
  if (!c) return c.status();
  return c->conn->wait(c->corr);
}

Result<Connection*> ClientImpl::usable() {
  Connection* c = current_.load(std::memory_order_acquire);
  if (!c->gone() || !reattach_.enabled) return c;
  // Cut off by the daemon, or inherited across fork(): not a restart; say why.
  if (Status why = c->gone_reason(); why.code() != ErrorCode::kDaemonGone) return c;
  return reattach(c);
}

Result<Connection*> ClientImpl::reattach(Connection* dead) {
  const uint64_t failures_before = reattach_failures_.load(std::memory_order_acquire);
  std::lock_guard one(reattach_mutex_);
  Connection* c = current_.load(std::memory_order_acquire);
  if (c != dead) return c;  // another thread did it
  if (!failed_.is_ok()) return failed_;
  // Another thread tried while we waited for the lock, and failed: no daemon came back
  // within the bound it waited. Its answer is ours (N threads wait one bound, not N).
  // (Relaxed: both this load and the increment are under reattach_mutex_.)
  if (reattach_failures_.load(std::memory_order_relaxed) != failures_before)
    return last_reattach_failure_;
  // Known down: one try, no wait (a daemon that is back answers it; none costs a refused
  // connect). Else the first call after the death waits the bound for a restarting one.
  const auto now = std::chrono::steady_clock::now();
  auto r = reattach_locked(dead, known_down_ ? std::chrono::milliseconds(0) : reattach_.wait);
  if (r) {
    known_down_ = false;
    return r;
  }
  if (r.status().code() == ErrorCode::kDaemonGone) {
    if (!known_down_) down_since_ = now;
    known_down_ = true;
  }
  last_reattach_failure_ = r.status();
  reattach_failures_.fetch_add(1, std::memory_order_release);
  return r;
}

Result<Connection*> ClientImpl::reattach_locked(Connection* dead, std::chrono::milliseconds bound) {
  // A daemon killed again while we claim from it is, for the next one, the previous
  // daemon: we claim from its successor what it had given back to us.
  for (Connection* from = dead;;) {
    auto fresh = reconnect(bound);
    if (!fresh) return fresh.status();
    if (Status same = check_same_pools(*from, **fresh); !same.is_ok()) {
      failed_ = same;  // no later call can do better: connect a new Client
      return same;
    }
    std::lock_guard lk(mu_);
    bool successor_died = false;
    Status claimed = claim_back(*from, **fresh, &successor_died);
    if (!claimed.is_ok()) return claimed;  // the new connection goes; the next call retries
    Connection* now = fresh->get();
    now->set_upstream(this);
    connections_.push_back(std::move(fresh.value()));
    current_.store(now, std::memory_order_release);
    if (!successor_died) return now;
    from = now;
  }
}

// A new daemon on the same instance, waited for up to `bound`: its socket may not be there
// yet, or refuse while nobody listens. Tries at least once. A handshake never waits longer
// than the policy's bound either: a socket that accepts and does not answer is a daemon
// still starting (or wedged), and a call must not stall on it.
Result<std::unique_ptr<Connection>> ClientImpl::reconnect(std::chrono::milliseconds bound) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + bound;
  auto pause = std::chrono::milliseconds(2);
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    ConnectionOptions o = options_;
    o.connect_timeout = std::max(std::chrono::milliseconds(1),
                                 std::min(o.connect_timeout, std::max(left, reattach_.wait)));
    auto fresh = Connection::open(instance_, o);
    if (fresh) return fresh;
    const ErrorCode code = fresh.status().code();
    // No daemon (yet): no socket, nobody listening, or one that is still starting or
    // stopping. Anything else (a refusal, a version mismatch) will not change by waiting.
    const bool absent = code == ErrorCode::kNotFound || code == ErrorCode::kDaemonGone ||
                        code == ErrorCode::kIoError || code == ErrorCode::kTimeout ||
                        code == ErrorCode::kDaemonUnresponsive;
    if (!absent) return fresh.status();
    if (std::chrono::steady_clock::now() + pause >= deadline) {
      const auto down_ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                (known_down_ ? down_since_ : start))
              .count();
      return proto::daemon_gone(
          "no kvpoold came back on instance '" + instance_ + "' (down for " +
          std::to_string(down_ms) + " ms; a call waits at most " +
          std::to_string(reattach_.wait.count()) +
          " ms for one, ConnectOptions::reattach_timeout, then each call tries once to "
          "reconnect and fails at once: handles stay valid); last try: " +
          fresh.status().message());
    }
    // Backing off between tries is what this wait is for: there is nothing to wait on
    // until a daemon creates the socket.
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
}

Status ClientImpl::check_same_pools(const Connection& old, const Connection& fresh) const {
  const auto& a = old.pools();
  const auto& b = fresh.pools();
  auto changed = [&](const std::string& what) {
    return Status(ErrorCode::kDaemonGone,
                  "kvpoold restarted with other pools (" + what +
                      "): this Client's pools and handles no longer exist; connect a new Client");
  };
  if (a.size() != b.size())
    return changed(std::to_string(a.size()) + " pools before, " + std::to_string(b.size()) +
                   " now");
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name)
      return changed("pool " + std::to_string(i) + " is '" + b[i].name + "', was '" + a[i].name +
                     "'");
    if (!(a[i].layout.config() == b[i].layout.config()) || a[i].info.dtype != b[i].info.dtype ||
        a[i].info.hash_scheme != b[i].info.hash_scheme || a[i].info.storage != b[i].info.storage ||
        a[i].usable != b[i].usable)
      return changed("pool '" + a[i].name +
                     "' has another shape, dtype, hash scheme, storage "
                     "or access");
  }
  return Status::ok();
}

namespace {

// Pools whose memory the new daemon kept (the same data segment file): their handles may be
// claimed back. Device pools and pools we could not use start over.
std::vector<bool> kept_pools(const Connection& old, const Connection& fresh) {
  const size_t n = old.pools().size();
  std::vector<bool> kept(n);
  for (size_t i = 0; i < n; ++i) {
    const PoolView& a = old.pools()[i];
    const PoolView& b = fresh.pools()[i];
    kept[i] = !a.is_device() && a.usable && a.data_ino != 0 && a.data_ino == b.data_ino &&
              a.data_dev == b.data_dev;
  }
  return kept;
}

// One kReclaim record on its way, and the blocks it claimed.
struct SentClaim {
  Call call;
  uint32_t pool;
  std::vector<pool::BlockRef> refs;
};

// Sends kReclaim records for the old connection's slot on the fresh one.
class ClaimSender {
 public:
  ClaimSender(const Connection& old, Connection& fresh)
      : fresh_(fresh),
        h_{old.epoch(), old.slot(), old.generation(), 0, 0},
        per_record_((fresh.max_request_payload() - sizeof(proto::RequestHeader) - sizeof(h_)) /
                    sizeof(proto::ReclaimItem)) {}

  // Items one record carries at most.
  uint64_t per_record() const { return per_record_; }
  const std::vector<SentClaim>& sent() const { return sent_; }

  Status send(uint32_t pool, std::span<const proto::ReclaimItem> items, bool final) {
    h_.flags = final ? proto::kReclaimFinal : 0;
    buf_.resize(sizeof(h_) + items.size_bytes());
    std::memcpy(buf_.data(), &h_, sizeof(h_));
    if (!items.empty()) std::memcpy(buf_.data() + sizeof(h_), items.data(), items.size_bytes());
    auto corr = fresh_.send(proto::Opcode::kReclaim, pool, static_cast<uint32_t>(items.size()),
                            buf_.data(), buf_.size());
    if (!corr) return corr.status();
    std::vector<pool::BlockRef> refs;
    for (const proto::ReclaimItem& it : items) refs.push_back(it.block);
    sent_.push_back({Call{&fresh_, *corr}, pool, std::move(refs)});
    return Status::ok();
  }

 private:
  Connection& fresh_;
  proto::ReclaimHeader h_;
  uint64_t per_record_;
  std::vector<std::byte> buf_;
  std::vector<SentClaim> sent_;
};

// Marks lost the words of `refs` whose generation is still the one claimed.
void mark_lost(HeldTable& t, std::span<const pool::BlockRef> refs) {
  for (const pool::BlockRef& ref : refs) {
    const uint64_t w = t.load(ref.id);
    if (HeldTable::generation_of(w) == ref.generation) t.store(ref.id, w | HeldTable::kLost);
  }
}

// Every handle of the kept pools: lost.
void lose_kept(std::vector<HeldTable>& held, const std::vector<bool>& kept) {
  for (uint32_t pool = 0; pool < kept.size(); ++pool) {
    if (!kept[pool]) continue;
    HeldTable& t = held[pool];
    for (uint32_t id = 0; id < t.size(); ++id)
      if (const uint64_t w = t.load(id); w != 0) t.store(id, w | HeldTable::kLost);
  }
}

// Claims what we hold in each kept pool, in records of at most per_record() items, then the
// final (empty) record: the new daemon may let go of the rest.
Status send_claims(const std::vector<HeldTable>& held, const std::vector<bool>& kept,
                   ClaimSender& sender) {
  std::vector<proto::ReclaimItem> items;
  uint32_t last_pool = 0;
  for (uint32_t pool = 0; pool < kept.size(); ++pool) {
    if (!kept[pool]) continue;
    const HeldTable& t = held[pool];
    for (uint32_t id = 0; id < t.size(); ++id) {
      const uint64_t w = t.load(id);
      if (w == 0 || (w & HeldTable::kLost) != 0) continue;
      const uint32_t gen = HeldTable::generation_of(w);
      if ((w & HeldTable::kMutable) != 0) items.push_back({{id, gen}, 0, 0});
      // One daemon reference however many handles (count_locked).
      if ((w & HeldTable::kCountMask) != 0) items.push_back({{id, gen}, 1, 0});
      if (items.size() >= sender.per_record()) {
        KVPOOL_RETURN_IF_ERROR(sender.send(pool, items, false));
        items.clear();
      }
    }
    if (!items.empty()) KVPOOL_RETURN_IF_ERROR(sender.send(pool, items, false));
    items.clear();
    last_pool = pool;
  }
  return sender.send(last_pool, {}, true);
}

// Waits for every record's answer and marks lost what the daemon would not give back.
// `refused`: a record was not ours to claim (a daemon that adopted nothing, or another
// process's slot). `successor_died`: the new daemon was killed mid-claim.
Status await_claims(const std::vector<SentClaim>& calls, const Connection& fresh,
                    std::vector<HeldTable>& held, bool* refused, bool* successor_died) {
  for (size_t k = 0; k < calls.size(); ++k) {
    const auto& [call, pool, sent] = calls[k];
    auto r = call.conn->wait(call.corr);
    if (!r && r.status().code() == ErrorCode::kDaemonGone && fresh.gone()) {
      // Killed mid-claim. The records it answered handed their blocks to our slot there,
      // and its successor keeps them for that slot: we claim them from it next. What it
      // did not answer may be under its keeper, which nobody can claim from: lost.
      for (size_t j = k; j < calls.size(); ++j) mark_lost(held[calls[j].pool], calls[j].refs);
      *successor_died = true;
      return Status::ok();
    }
    if (!r) return r.status();
    if (r->code != ErrorCode::kOk) {
      // Everything we held in the kept pools is lost.
      *refused = true;
      continue;
    }
    mark_lost(held[pool], r->refs);
  }
  return Status::ok();
}

}  // namespace

// Tells the new daemon what we still hold in each pool it kept, and waits for what it
// will not give back. Pools whose memory is new start over (a new incarnation: their
// handles fail on use). mu_ held: no handle is made or released meanwhile.
Status ClientImpl::claim_back(Connection& old, Connection& fresh, bool* successor_died) {
  const std::vector<bool> kept = kept_pools(old, fresh);
  ClaimSender sender(old, fresh);
  // Once a record went out, the new daemon may have handed blocks over to this connection,
  // and they go back into circulation when it is dropped (as it is when this fails): from
  // then on a failure loses every handle of the kept pools (they fail on use, never release).
  auto give_up = [&](const Status& why) {
    if (!sender.sent().empty()) lose_kept(held_, kept);
    return why;
  };
  if (Status st = send_claims(held_, kept, sender); !st.is_ok()) return give_up(st);
  bool refused = false;
  *successor_died = false;
  if (Status st = await_claims(sender.sent(), fresh, held_, &refused, successor_died); !st.is_ok())
    return give_up(st);
  for (uint32_t pool = 0; pool < kept.size(); ++pool) {
    if (kept[pool] && !refused) continue;
    // Cleared in place (address() reads the words without the lock): a new incarnation
    // makes every handle of a pool that was not kept fail on use, and never release.
    HeldTable& t = held_[pool];
    for (uint32_t id = 0; id < t.size(); ++id) {
      const uint64_t w = t.load(id);
      if (w != 0) t.store(id, kept[pool] ? (w | HeldTable::kLost) : 0);
    }
    if (!kept[pool]) {
      // In this order (address() reads them the other way round).
      incarnations_[pool].fetch_add(1, std::memory_order_acq_rel);
      mapped_by_[pool].store(&fresh, std::memory_order_release);
    }
  }
  return Status::ok();
}

}  // namespace kvpool::detail
