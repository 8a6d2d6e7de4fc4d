// BatchStore (kvpool/batch_store.hpp): opaque keys over one host pool. The daemon decides
// which block holds which index hash (kLookup / kMatch / kAllocate / kRegister / kRemove);
// this process checks keys and copies bytes through its own mapping of the pool.
#include "kvpool/batch_store.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "client_impl.hpp"
#include "key_block.hpp"

namespace kvpool {
namespace detail {

using proto::Opcode;

// One queued batch. Batches are recycled (clear() keeps capacity), so a steady stream of
// batches allocates nothing per key.
struct Batch {
  uint64_t id = 0;
  BatchOp op = BatchOp::kExists;
  std::vector<std::byte> key_blob;
  std::vector<uint32_t> key_ends;  // key i is key_blob[key_ends[i-1] .. key_ends[i])
  std::vector<IoBuffer> buffers;
  size_t size() const { return key_ends.size(); }
  KeyBytes key(size_t i) const {
    const uint32_t begin = i == 0 ? 0 : key_ends[i - 1];
    return {key_blob.data() + begin, key_ends[i] - begin};
  }
};

class BatchStoreImpl {
 public:
  BatchStoreImpl(std::shared_ptr<ClientImpl> c, uint32_t pool, std::string pool_name,
                 uint64_t block_bytes, const BatchStoreOptions& o, int efd)
      : client_(std::move(c)),
        pool_(pool),
        pool_name_(std::move(pool_name)),
        block_bytes_(block_bytes),
        options_(o),
        value_offset_(static_cast<uint32_t>(
            key_value_offset(o.max_key_bytes, static_cast<uint32_t>(o.key_namespace.size())))),
        mask_(o.index_bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << o.index_bits) - 1),
        efd_(efd) {
    const size_t n = options_.keys_per_request;
    hashes_.reserve(n);
    refs_.reserve(n);
    hits_.reserve(n);
    items_.reserve(n);
    worker_ = std::thread([this] { run(); });
  }
  ~BatchStoreImpl() {
    close();
    if (worker_.joinable()) worker_.join();
    ::close(efd_);
  }

  uint64_t value_capacity() const { return block_bytes_ - value_offset_; }
  const BatchStoreOptions& options() const { return options_; }
  const std::string& pool_name() const { return pool_name_; }
  int event_fd() const { return efd_; }

  uint64_t index_hash(KeyBytes key) const {
    std::string nkey;
    namespaced_key(options_.key_namespace, key, nkey);
    return index_of(nkey);
  }

  Result<uint64_t> submit(BatchOp op, std::span<const KeyBytes> keys,
                          std::span<const IoBuffer> buffers) {
    const bool data = op == BatchOp::kGet || op == BatchOp::kSet;
    if (static_cast<uint32_t>(op) > static_cast<uint32_t>(BatchOp::kExistsPrefix))
      return Status(ErrorCode::kInvalidArgument,
                    "unknown batch op " + std::to_string(static_cast<uint32_t>(op)));
    if (data ? buffers.size() != keys.size() : !buffers.empty())
      return Status(ErrorCode::kInvalidArgument,
                    std::to_string(buffers.size()) + " buffers for " + std::to_string(keys.size()) +
                        " keys: get and set take one buffer per key, the others none");
    uint64_t total = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (keys[i].size() > options_.max_key_bytes)
        return Status(ErrorCode::kInvalidArgument,
                      "key " + std::to_string(i) + " has " + std::to_string(keys[i].size()) +
                          " bytes; this store takes at most " +
                          std::to_string(options_.max_key_bytes) + " (max_key_bytes)");
      total += keys[i].size();
    }
    std::unique_ptr<Batch> b;
    {
      std::lock_guard lk(mu_);
      if (closed_) return Status(ErrorCode::kInvalidState, "the batch store is closed");
      if (!spare_.empty()) {
        b = std::move(spare_.back());
        spare_.pop_back();
      }
    }
    if (!b) b = std::make_unique<Batch>();
    b->op = op;
    b->key_blob.resize(total);
    b->key_ends.resize(keys.size());
    uint32_t at = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!keys[i].empty()) std::memcpy(b->key_blob.data() + at, keys[i].data(), keys[i].size());
      at += static_cast<uint32_t>(keys[i].size());
      b->key_ends[i] = at;
    }
    b->buffers.assign(buffers.begin(), buffers.end());
    std::lock_guard lk(mu_);
    if (closed_) return Status(ErrorCode::kInvalidState, "the batch store is closed");
    b->id = ++next_id_;
    const uint64_t id = b->id;
    queue_.push_back(std::move(b));
    work_cv_.notify_one();
    return id;
  }

  std::vector<BatchCompletion> drain() {
    uint64_t v;
    while (::read(efd_, &v, sizeof(v)) < 0 && errno == EINTR) {
    }
    std::lock_guard lk(mu_);
    std::vector<BatchCompletion> out(std::make_move_iterator(done_.begin()),
                                     std::make_move_iterator(done_.end()));
    done_.clear();
    return out;
  }

  Result<BatchCompletion> wait(uint64_t id, std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    auto found = [&] {
      return std::find_if(done_.begin(), done_.end(),
                          [id](const BatchCompletion& c) { return c.id == id; });
    };
    if (!done_cv_.wait_for(lk, timeout, [&] { return found() != done_.end(); }))
      return Status(ErrorCode::kTimeout, "batch " + std::to_string(id) + " not done within " +
                                             std::to_string(timeout.count()) + " ms");
    auto it = found();
    BatchCompletion c = std::move(*it);
    done_.erase(it);
    // Nothing left for drain(): reset event_fd, so that a caller mixing wait() and polling
    // does not wake for completions already taken. (A completion posted meanwhile writes the
    // eventfd after it is queued, so it still wakes the poller.)
    if (done_.empty()) {
      uint64_t v;
      while (::read(efd_, &v, sizeof(v)) < 0 && errno == EINTR) {
      }
    }
    return c;
  }

  void close() {
    std::deque<std::unique_ptr<Batch>> cancelled;
    {
      std::lock_guard lk(mu_);
      if (closed_) return;
      closed_ = true;
      cancelled.swap(queue_);
      work_cv_.notify_all();
    }
    for (auto& b : cancelled) {
      BatchCompletion c = start(*b);
      c.status = Status(ErrorCode::kInvalidState, "the batch store was closed first");
      post(std::move(c), std::move(b));
    }
  }

  BatchStoreStats stats() const {
    BatchStoreStats s;
    s.batches = batches_.load(std::memory_order_relaxed);
    s.keys = keys_.load(std::memory_order_relaxed);
    s.hits = hits_count_.load(std::memory_order_relaxed);
    s.misses = misses_.load(std::memory_order_relaxed);
    s.key_mismatches = mismatches_.load(std::memory_order_relaxed);
    s.bytes_in = bytes_in_.load(std::memory_order_relaxed);
    s.bytes_out = bytes_out_.load(std::memory_order_relaxed);
    return s;
  }

 private:
  uint64_t index_of(const std::string& nkey) const {
    return XXH3_64bits_withSeed(nkey.data(), nkey.size(), kKeyIndexSeed) & mask_;
  }

  static BatchCompletion start(const Batch& b) {
    BatchCompletion c;
    c.id = b.id;
    c.op = b.op;
    c.results.assign(b.size(), KeyResult::kFailed);
    if (b.op == BatchOp::kGet) c.value_sizes.assign(b.size(), 0);
    return c;
  }

  void post(BatchCompletion c, std::unique_ptr<Batch> b) {
    {
      std::lock_guard lk(mu_);
      done_.push_back(std::move(c));
      if (spare_.size() < 8) spare_.push_back(std::move(b));
      done_cv_.notify_all();
    }
    const uint64_t one = 1;
    while (::write(efd_, &one, sizeof(one)) < 0 && errno == EINTR) {
    }
  }

  void run() {
    for (;;) {
      std::unique_ptr<Batch> b;
      {
        std::unique_lock lk(mu_);
        work_cv_.wait(lk, [&] { return closed_ || !queue_.empty(); });
        if (queue_.empty()) return;  // closed
        b = std::move(queue_.front());
        queue_.pop_front();
      }
      BatchCompletion c = start(*b);
      c.status = execute(*b, c);
      batches_.fetch_add(1, std::memory_order_relaxed);
      keys_.fetch_add(b->size(), std::memory_order_relaxed);
      post(std::move(c), std::move(b));
    }
  }

  Status execute(const Batch& b, BatchCompletion& c) {
    const size_t per = std::max<uint32_t>(1, options_.keys_per_request);
    for (size_t at = 0; at < b.size(); at += per) {
      const size_t n = std::min(per, b.size() - at);
      Status st;
      bool more = true;
      switch (b.op) {
        case BatchOp::kSet:
          st = set_chunk(b, at, n, c);
          break;
        case BatchOp::kExistsPrefix:
          st = prefix_chunk(b, at, n, c, &more);
          break;
        default:
          st = lookup_chunk(b, at, n, c);
          break;
      }
      if (!st.is_ok()) return st;
      if (!more) break;
    }
    if (b.op == BatchOp::kExistsPrefix)  // keys after the prefix were not asked about
      for (size_t i = c.prefix; i < b.size(); ++i) c.results[i] = KeyResult::kMiss;
    return Status::ok();
  }

  // The chunk's namespaced keys (nkeys_) and index hashes (hashes_).
  void prepare(const Batch& b, size_t at, size_t n) {
    if (nkeys_.size() < n) nkeys_.resize(n);
    hashes_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      namespaced_key(options_.key_namespace, b.key(at + i), nkeys_[i]);
      hashes_[i] = index_of(nkeys_[i]);
    }
  }

  // kLookup (or kMatch) of the chunk's hashes; the hits are ours (took) under *inc.
  Result<Response> find(Opcode op, size_t n, uint32_t* inc) {
    auto call =
        client_->send(op, pool_, static_cast<uint32_t>(n), hashes_.data(), n * sizeof(uint64_t));
    if (!call) return call.status();
    auto r = call->conn->wait(call->corr);
    if (!r) return r.status();
    if (r->code != ErrorCode::kOk) return r->status();
    hits_.clear();
    for (const pool::BlockRef& ref : r->refs)
      if (ref.id != proto::kNoBlock) hits_.push_back(ref);
    auto i = client_->took(*call, pool_, hits_, /*immutable=*/true);
    if (!i) return i.status();
    *inc = *i;
    return r;
  }

  // The block `ref` (held) when it holds chunk key i; its value's place in *off / *len.
  const std::byte* check_key(uint32_t inc, pool::BlockRef ref, size_t i, uint64_t* off,
                             uint64_t* len) {
    auto a = client_->address(pool_, inc, ref, 0, 0, /*readonly=*/true);
    if (!a) return nullptr;
    if (!key_block_matches(*a, block_bytes_, nkeys_[i], hashes_[i], off, len)) {
      mismatches_.fetch_add(1, std::memory_order_relaxed);
      return nullptr;
    }
    return *a;
  }

  void release_all(uint32_t inc, std::span<const pool::BlockRef> refs) {
    for (const pool::BlockRef& ref : refs)
      if (ref.id != proto::kNoBlock) client_->release(pool_, inc, /*immutable=*/true, ref);
  }

  Status lookup_chunk(const Batch& b, size_t at, size_t n, BatchCompletion& c) {
    prepare(b, at, n);
    uint32_t inc = 0;
    auto r = find(Opcode::kLookup, n, &inc);
    if (!r) return r.status();
    if (r->refs.size() != n)
      return Status(ErrorCode::kProtocolError, "lookup answer of " +
                                                   std::to_string(r->refs.size()) + " blocks for " +
                                                   std::to_string(n) + " keys");
    refs_.clear();  // kDelete: the blocks to remove
    for (size_t i = 0; i < n; ++i) {
      const pool::BlockRef ref = r->refs[i];
      uint64_t off = 0, len = 0;
      const std::byte* block =
          ref.id == proto::kNoBlock ? nullptr : check_key(inc, ref, i, &off, &len);
      KeyResult& out = c.results[at + i];
      if (block == nullptr) {
        out = KeyResult::kMiss;
        misses_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      hits_count_.fetch_add(1, std::memory_order_relaxed);
      out = KeyResult::kOk;
      if (b.op == BatchOp::kGet) {
        const IoBuffer& buf = b.buffers[at + i];
        if (buf.size < len) {
          out = KeyResult::kTooLarge;
          continue;
        }
        std::memcpy(buf.data, block + off, len);
        c.value_sizes[at + i] = len;
        bytes_out_.fetch_add(len, std::memory_order_relaxed);
      } else if (b.op == BatchOp::kDelete) {
        refs_.push_back(ref);
        out = KeyResult::kMiss;  // until the remove says otherwise
      }
    }
    Status st;
    if (b.op == BatchOp::kDelete && !refs_.empty()) st = remove(n, c, at, *r);
    release_all(inc, r->refs);
    return st;
  }

  Status remove(size_t n, BatchCompletion& c, size_t at, const Response& found) {
    auto r = client_->call(Opcode::kRemove, pool_, static_cast<uint32_t>(refs_.size()),
                           refs_.data(), refs_.size() * sizeof(pool::BlockRef));
    if (!r) return r.status();
    if (r->code != ErrorCode::kOk) return r->status();
    if (r->refs.size() != refs_.size())
      return Status(ErrorCode::kProtocolError, "remove answer of " +
                                                   std::to_string(r->refs.size()) + " for " +
                                                   std::to_string(refs_.size()) + " blocks");
    size_t k = 0;
    for (size_t i = 0; i < n && k < refs_.size(); ++i) {
      if (found.refs[i].id != refs_[k].id || found.refs[i].generation != refs_[k].generation)
        continue;
      if (r->refs[k].id != proto::kNoBlock) c.results[at + i] = KeyResult::kOk;
      ++k;
    }
    return Status::ok();
  }

  Status prefix_chunk(const Batch& b, size_t at, size_t n, BatchCompletion& c, bool* more) {
    prepare(b, at, n);
    uint32_t inc = 0;
    auto r = find(Opcode::kMatch, n, &inc);
    if (!r) return r.status();
    size_t hit = 0;
    for (; hit < r->refs.size(); ++hit) {
      uint64_t off = 0, len = 0;
      if (check_key(inc, r->refs[hit], hit, &off, &len) == nullptr) break;
      c.results[at + hit] = KeyResult::kOk;
    }
    hits_count_.fetch_add(hit, std::memory_order_relaxed);
    misses_.fetch_add(n - hit, std::memory_order_relaxed);
    c.prefix += static_cast<uint32_t>(hit);
    *more = hit == n;
    release_all(inc, r->refs);
    return Status::ok();
  }

  // Allocates up to `want` blocks: all, or (pool short of blocks) as many as it can give,
  // halving the ask. Zero blocks is not an error: those keys are not stored.
  Result<Response> allocate(size_t want, uint32_t* inc) {
    for (size_t ask = want; ask > 0; ask /= 2) {
      auto call = client_->send(Opcode::kAllocate, pool_, static_cast<uint32_t>(ask), nullptr, 0);
      if (!call) return call.status();
      auto r = call->conn->wait(call->corr);
      if (!r) return r.status();
      if (r->code == ErrorCode::kNotEnoughBlocks || r->code == ErrorCode::kQuotaExceeded) continue;
      if (r->code != ErrorCode::kOk) return r->status();
      auto i = client_->took(*call, pool_, r->refs, /*immutable=*/false);
      if (!i) return i.status();
      *inc = *i;
      return r;
    }
    return Response{};
  }

  Status set_chunk(const Batch& b, size_t at, size_t n, BatchCompletion& c) {
    prepare(b, at, n);
    const uint64_t cap = value_capacity();
    size_t want = 0;
    for (size_t i = 0; i < n; ++i) {
      if (b.buffers[at + i].size > cap) {
        c.results[at + i] = KeyResult::kTooLarge;
      } else {
        ++want;
      }
    }
    if (want == 0) return Status::ok();
    uint32_t inc = 0;
    auto blocks = allocate(want, &inc);
    if (!blocks) return blocks.status();
    // Fill our blocks in key order; keys beyond the blocks we got are not stored (a miss).
    items_.clear();
    std::fill(slot_.begin(), slot_.end(), 0);
    slot_.resize(n);
    for (size_t i = 0, k = 0; i < n; ++i) {
      KeyResult& out = c.results[at + i];
      if (out == KeyResult::kTooLarge) continue;
      if (k == blocks->refs.size()) {
        out = KeyResult::kMiss;
        misses_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      const pool::BlockRef ref = blocks->refs[k++];
      auto a = client_->address(pool_, inc, ref, 0, 0, /*readonly=*/false);
      if (!a) {
        release_mutable(inc, blocks->refs);
        return a.status();
      }
      const IoBuffer& buf = b.buffers[at + i];
      write_key_block(*a, nkeys_[i], hashes_[i], value_offset_, buf.data, buf.size);
      bytes_in_.fetch_add(buf.size, std::memory_order_relaxed);
      items_.push_back(pool::RegisterItem{ref, hashes_[i], hashes_[i], 0, options_.priority, 0});
      slot_[i] = static_cast<uint32_t>(items_.size());  // 1-based: 0 is "no block"
    }
    if (items_.empty()) return Status::ok();
    auto call = send_register(n);
    if (!call) {
      release_mutable(inc, blocks->refs);
      return call.status();
    }
    auto r = call->conn->wait(call->corr);
    if (!r || r->code != ErrorCode::kOk) {
      release_mutable(inc, blocks->refs);
      return r ? r->status() : r.status();
    }
    if (r->refs.size() != items_.size())
      return Status(ErrorCode::kProtocolError, "register answer of " +
                                                   std::to_string(r->refs.size()) + " for " +
                                                   std::to_string(items_.size()) + " blocks");
    refs_.clear();
    for (const auto& it : items_) refs_.push_back(it.block);
    auto reg = client_->registered(*call, pool_, refs_, r->refs);
    if (!reg) return reg.status();
    for (size_t i = 0; i < n; ++i) {
      if (slot_[i] == 0) continue;
      const pool::BlockRef mine = items_[slot_[i] - 1].block;
      const pool::BlockRef got = r->refs[slot_[i] - 1];
      uint64_t off = 0, len = 0;
      // Deduplicated onto a block registered under the same hash: stored already when that
      // block holds this key; another key with a colliding hash holds it otherwise.
      const bool ok = (got.id == mine.id && got.generation == mine.generation) ||
                      check_key(*reg, got, i, &off, &len) != nullptr;
      c.results[at + i] = ok ? KeyResult::kOk : KeyResult::kMiss;
      if (!ok) misses_.fetch_add(1, std::memory_order_relaxed);
    }
    release_all(*reg, r->refs);  // inactive now: matchable until evicted
    return Status::ok();
  }

  // The register of items_ (chunk keys with slot_ set, in order): with each namespaced key
  // (kRegisterTokens without token ids), so that the Stored events name the key; plain when
  // options_.event_keys is off. A key over kMaxRegisterKeyBytes goes without (its events
  // name the index hash only). payload_ is reused: no allocation once it has grown.
  Result<detail::Call> send_register(size_t n) {
    const auto count = static_cast<uint32_t>(items_.size());
    if (!options_.event_keys)
      return client_->send(Opcode::kRegister, pool_, count, items_.data(),
                           items_.size() * sizeof(pool::RegisterItem));
    auto sent = [](const std::string& k) {
      return k.size() <= proto::kMaxRegisterKeyBytes ? static_cast<uint32_t>(k.size()) : 0u;
    };
    uint64_t key_bytes = 0;
    for (size_t i = 0; i < n; ++i)
      if (slot_[i] != 0) key_bytes += sent(nkeys_[i]);
    const proto::RegisterExtrasHeader h{0, static_cast<uint32_t>(key_bytes)};
    payload_.resize(proto::register_extras_bytes(count, 0, key_bytes));
    std::byte* at = payload_.data();
    std::memcpy(at, &h, sizeof(h));
    at += sizeof(h);
    std::memcpy(at, items_.data(), items_.size() * sizeof(pool::RegisterItem));
    at += items_.size() * sizeof(pool::RegisterItem);
    std::byte* key_at = at + uint64_t{count} * sizeof(uint32_t);
    for (size_t i = 0; i < n; ++i) {
      if (slot_[i] == 0) continue;
      const uint32_t len = sent(nkeys_[i]);
      std::memcpy(at, &len, sizeof(len));
      at += sizeof(len);
      if (len != 0) std::memcpy(key_at, nkeys_[i].data(), len);
      key_at += len;
    }
    return client_->send(Opcode::kRegisterTokens, pool_, count, payload_.data(), payload_.size());
  }

  void release_mutable(uint32_t inc, std::span<const pool::BlockRef> refs) {
    for (const pool::BlockRef& ref : refs) client_->release(pool_, inc, /*immutable=*/false, ref);
  }

  const std::shared_ptr<ClientImpl> client_;
  const uint32_t pool_;
  const std::string pool_name_;
  const uint64_t block_bytes_;
  const BatchStoreOptions options_;
  const uint32_t value_offset_;
  const uint64_t mask_;
  const int efd_;

  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  bool closed_ = false;
  uint64_t next_id_ = 0;
  std::deque<std::unique_ptr<Batch>> queue_;
  std::deque<BatchCompletion> done_;
  std::vector<std::unique_ptr<Batch>> spare_;

  // The worker's scratch, sized for one request and reused.
  std::vector<std::string> nkeys_;
  std::vector<uint64_t> hashes_;
  std::vector<pool::BlockRef> refs_;
  std::vector<pool::BlockRef> hits_;
  std::vector<pool::RegisterItem> items_;
  std::vector<uint32_t> slot_;
  std::vector<std::byte> payload_;  // a register with keys

  std::atomic<uint64_t> batches_{0}, keys_{0}, hits_count_{0}, misses_{0}, mismatches_{0},
      bytes_in_{0}, bytes_out_{0};
  std::thread worker_;  // last: starts once everything above exists
};

}  // namespace detail

uint64_t batch_store_block_bytes(uint32_t max_key_bytes, uint64_t value_bytes,
                                 uint32_t namespace_bytes) {
  return detail::key_value_offset(max_key_bytes, namespace_bytes) + value_bytes;
}

Result<BatchStore> BatchStore::open(const Client& client, std::string_view pool,
                                    const BatchStoreOptions& options) {
  auto p = client.pool(pool);
  if (!p) return p.status();
  const detail::PoolView& view = p->client_->conn().pools()[p->index_];
  const std::string name(pool);
  if (view.is_device())
    return Status(ErrorCode::kUnsupported,
                  "pool '" + name + "' is a device pool: a batch store copies through a host pool");
  if (view.layout.config().kind != LayoutKind::kFullyContiguous)
    return Status(ErrorCode::kUnsupported,
                  "pool '" + name +
                      "' is LayerSeparate: a batch store needs each block's bytes "
                      "in one piece (layout kind FullyContiguous)");
  if (options.index_bits == 0 || options.index_bits > 64)
    return Status(ErrorCode::kInvalidArgument,
                  "index_bits is " + std::to_string(options.index_bits) + ", must be 1..64");
  if (options.keys_per_request == 0)
    return Status(ErrorCode::kInvalidArgument, "keys_per_request must be > 0");
  const uint64_t block = view.layout.block_bytes();
  const uint64_t need = batch_store_block_bytes(
      options.max_key_bytes, 1, static_cast<uint32_t>(options.key_namespace.size()));
  if (block < need)
    return Status(ErrorCode::kInvalidArgument,
                  "pool '" + name + "' has blocks of " + std::to_string(block) +
                      " bytes: a key of up to " + std::to_string(options.max_key_bytes) +
                      " bytes and its header leave no room for a value (lower max_key_bytes "
                      "or give the pool larger blocks)");
  const int efd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (efd < 0) return Status(ErrorCode::kIoError, std::string("eventfd: ") + std::strerror(errno));
  return BatchStore(
      std::make_unique<detail::BatchStoreImpl>(p->client_, p->index_, name, block, options, efd));
}

BatchStore::BatchStore(std::unique_ptr<detail::BatchStoreImpl> impl) : impl_(std::move(impl)) {}
BatchStore::BatchStore(BatchStore&&) noexcept = default;
BatchStore& BatchStore::operator=(BatchStore&&) noexcept = default;
BatchStore::~BatchStore() = default;

Result<uint64_t> BatchStore::submit(BatchOp op, std::span<const KeyBytes> keys,
                                    std::span<const IoBuffer> buffers) {
  return impl_->submit(op, keys, buffers);
}
int BatchStore::event_fd() const { return impl_->event_fd(); }
std::vector<BatchCompletion> BatchStore::drain() { return impl_->drain(); }
Result<BatchCompletion> BatchStore::wait(uint64_t id, std::chrono::milliseconds timeout) {
  return impl_->wait(id, timeout);
}
void BatchStore::close() { impl_->close(); }
uint64_t BatchStore::value_capacity() const { return impl_->value_capacity(); }
uint32_t BatchStore::max_key_bytes() const { return impl_->options().max_key_bytes; }
const std::string& BatchStore::pool_name() const { return impl_->pool_name(); }
BatchStoreStats BatchStore::stats() const { return impl_->stats(); }
uint64_t BatchStore::index_hash(KeyBytes key) const { return impl_->index_hash(key); }

}  // namespace kvpool
