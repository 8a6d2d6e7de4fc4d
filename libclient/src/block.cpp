#include "kvpool/block.hpp"

#include "client_impl.hpp"

namespace kvpool {

MutableBlock::MutableBlock(std::shared_ptr<detail::ClientImpl> c, uint32_t pool,
                           uint32_t incarnation, uint32_t id, uint32_t gen, uint32_t page_size)
    : client_(c),
      pool_(pool),
      incarnation_(incarnation),
      id_(id),
      generation_(gen),
      // commit() hashes with the pool's scheme (PoolInfo::hash_scheme).
      state_(page_size, c->conn().pools()[pool].hash_scheme()) {}

MutableBlock::MutableBlock(MutableBlock&& o) noexcept
    : client_(std::move(o.client_)),
      pool_(o.pool_),
      incarnation_(o.incarnation_),
      id_(o.id_),
      generation_(o.generation_),
      priority_(o.priority_),
      state_(std::move(o.state_)) {
  o.client_.reset();
}

MutableBlock& MutableBlock::operator=(MutableBlock&& o) noexcept {
  if (this != &o) {
    release();
    client_ = std::move(o.client_);
    o.client_.reset();
    pool_ = o.pool_;
    incarnation_ = o.incarnation_;
    id_ = o.id_;
    generation_ = o.generation_;
    priority_ = o.priority_;
    state_ = std::move(o.state_);
  }
  return *this;
}

MutableBlock::~MutableBlock() { release(); }

void MutableBlock::release() {
  if (client_) client_->release(pool_, incarnation_, /*immutable=*/false, {id_, generation_});
  client_.reset();
}

Status MutableBlock::init_sequence(Salt salt, std::optional<SequenceHash> parent) {
  return state_.init_sequence(salt, parent);
}
Status MutableBlock::add_token(Token token) { return state_.add_token(token); }
Result<size_t> MutableBlock::add_tokens(std::span<const Token> tokens) {
  return state_.add_tokens(tokens);
}
Status MutableBlock::pop_token() { return state_.pop_token(); }
Status MutableBlock::pop_tokens(size_t n) { return state_.pop_tokens(n); }
Status MutableBlock::commit() { return state_.commit(); }
void MutableBlock::reset() { state_.reset(); }

Result<std::byte*> MutableBlock::address(uint32_t layer, uint32_t outer) const {
  if (!client_) return Status(ErrorCode::kInvalidState, "the block was moved from or released");
  return client_->address(pool_, incarnation_, {id_, generation_}, layer, outer);
}

// ---- ImmutableBlock: a counted pointer into its answer's slab --------------------------

ImmutableBlock::ImmutableBlock(const ImmutableBlock& o) noexcept : entry_(o.entry_) {
  // Relaxed: a new copy can only be made from a live one, which keeps the entry alive.
  if (entry_) entry_->copies.fetch_add(1, std::memory_order_relaxed);
}

ImmutableBlock& ImmutableBlock::operator=(const ImmutableBlock& o) noexcept {
  if (this != &o) {
    ImmutableBlock copy(o);
    *this = std::move(copy);
  }
  return *this;
}

ImmutableBlock& ImmutableBlock::operator=(ImmutableBlock&& o) noexcept {
  if (this != &o) {
    reset();
    entry_ = o.entry_;
    o.entry_ = nullptr;
  }
  return *this;
}

void ImmutableBlock::reset() noexcept {
  detail::ImmutableEntry* e = entry_;
  entry_ = nullptr;
  if (e == nullptr) return;
  // The only copy (the common case: a match's handles are seldom copied) needs no atomic
  // decrement: a new copy is made only from a live one, and this one is ours, going now.
  // acquire, as the decrement's acq_rel: a copy dropped on another thread released its use.
  // Otherwise whoever drops the last copy sees every other copy's use of the block finished.
  if (e->copies.load(std::memory_order_acquire) == 1 ||
      e->copies.fetch_sub(1, std::memory_order_acq_rel) == 1)
    detail::ImmutableSlab::drop(e);
}

SequenceHash ImmutableBlock::sequence_hash() const { return entry_ ? entry_->sequence_hash : 0; }
uint32_t ImmutableBlock::block_id() const { return entry_ ? entry_->ref.id : 0; }
uint32_t ImmutableBlock::generation() const { return entry_ ? entry_->ref.generation : 0; }
uint32_t ImmutableBlock::pool_index() const {
  return entry_ ? detail::ImmutableSlab::of(entry_)->pool : 0;
}

Result<const std::byte*> ImmutableBlock::address(uint32_t layer, uint32_t outer) const {
  if (!entry_) return Status(ErrorCode::kInvalidState, "empty ImmutableBlock");
  const detail::ImmutableSlab* slab = detail::ImmutableSlab::of(entry_);
  auto a = slab->client->address(slab->pool, slab->incarnation, entry_->ref, layer, outer,
                                 /*readonly=*/true);
  if (!a) return a.status();
  return static_cast<const std::byte*>(*a);
}

// ---- ImmutableSlab --------------------------------------------------------------------

namespace detail {
namespace {
// Entries start at the first multiple of their alignment after the slab header; the
// dropped bits follow the entries.
constexpr size_t kEntriesOffset = (sizeof(ImmutableSlab) + alignof(ImmutableEntry) - 1) /
                                  alignof(ImmutableEntry) * alignof(ImmutableEntry);
static_assert(alignof(ImmutableSlab) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__ &&
              alignof(ImmutableEntry) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);
static_assert(sizeof(ImmutableEntry) % alignof(std::atomic<uint64_t>) == 0);

size_t bitmap_words(uint32_t count) { return (count + 63) / 64; }
}  // namespace

ImmutableEntry* ImmutableSlab::entries() {
  return std::launder(
      reinterpret_cast<ImmutableEntry*>(reinterpret_cast<std::byte*>(this) + kEntriesOffset));
}

std::atomic<uint64_t>* ImmutableSlab::dropped() {
  return std::launder(reinterpret_cast<std::atomic<uint64_t>*>(
      reinterpret_cast<std::byte*>(this) + kEntriesOffset + count * sizeof(ImmutableEntry)));
}

ImmutableSlab* ImmutableSlab::of(const ImmutableEntry* e) {
  auto* first = reinterpret_cast<const std::byte*>(e - e->index);
  return std::launder(
      reinterpret_cast<ImmutableSlab*>(const_cast<std::byte*>(first) - kEntriesOffset));
}

ImmutableSlab* ImmutableSlab::create(std::shared_ptr<ClientImpl> c, uint32_t pool,
                                     uint32_t incarnation, std::span<const pool::BlockRef> refs,
                                     std::span<const SequenceHash> hashes) {
  const auto count = static_cast<uint32_t>(refs.size());
  void* mem = ::operator new(kEntriesOffset + count * sizeof(ImmutableEntry) +
                             bitmap_words(count) * sizeof(std::atomic<uint64_t>));
  auto* slab = new (mem) ImmutableSlab();
  slab->client = std::move(c);
  slab->pool = pool;
  slab->incarnation = incarnation;
  slab->count = count;
  slab->live.store(count, std::memory_order_relaxed);
  auto* first = reinterpret_cast<std::byte*>(mem) + kEntriesOffset;
  for (uint32_t i = 0; i < count; ++i) {
    auto* e = new (first + i * sizeof(ImmutableEntry)) ImmutableEntry();
    e->index = i;
    e->ref = refs[i];
    e->sequence_hash = hashes[i];
  }
  auto* bits = first + count * sizeof(ImmutableEntry);
  for (size_t w = 0; w < bitmap_words(count); ++w)
    new (bits + w * sizeof(std::atomic<uint64_t>)) std::atomic<uint64_t>(0);
  return slab;
}

void ImmutableSlab::drop(ImmutableEntry* e) {
  ImmutableSlab* slab = of(e);
  ClientImpl* c = slab->client.get();
  if (c != nullptr) {
    // seq_cst, with the load of `listed` below: a sweep stores listed = false, then takes
    // the bits (give_back_deferred). Either it takes ours, or we see the slab unlisted and
    // list it again: a dropped reference is never left behind unlisted.
    slab->dropped()[e->index / 64].fetch_or(uint64_t{1} << (e->index % 64),
                                            std::memory_order_seq_cst);
    // Others of the answer live on: list the slab so that the reference goes back soon even
    // if they stay held. Before our `live` decrement, so the slab cannot go meanwhile.
    if (slab->live.load(std::memory_order_relaxed) > 1 &&
        !slab->listed.load(std::memory_order_seq_cst) &&
        !slab->listed.exchange(true, std::memory_order_seq_cst)) {
      slab->holds.fetch_add(1, std::memory_order_relaxed);  // the list's
      c->defer(slab);
    }
  }
  if (slab->live.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  // The answer's last block: everything still here goes back now, as one batch.
  if (c != nullptr) slab->give_back(*c);
  std::shared_ptr<ClientImpl> client = std::move(slab->client);  // after the slab's hold
  slab->unhold();
}

void ImmutableSlab::give_back(ClientImpl& c) {
  pool::BlockRef batch[64];
  size_t n = 0;
  ImmutableEntry* es = entries();
  std::atomic<uint64_t>* bits = dropped();
  for (size_t w = 0; w < bitmap_words(count); ++w) {
    // Each bit is taken once, by whoever exchanges it out: the last drop or a sweep.
    if (bits[w].load(std::memory_order_seq_cst) == 0) continue;
    for (uint64_t b = bits[w].exchange(0, std::memory_order_seq_cst); b != 0; b &= b - 1) {
      batch[n++] = es[w * 64 + static_cast<size_t>(__builtin_ctzll(b))].ref;
      if (n == std::size(batch)) {
        c.release_immutables(pool, incarnation, {batch, n});
        n = 0;
      }
    }
  }
  if (n > 0) c.release_immutables(pool, incarnation, {batch, n});
}

void ImmutableSlab::unhold() {
  if (holds.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  ImmutableEntry* es = entries();
  for (uint32_t i = 0; i < count; ++i) es[i].~ImmutableEntry();
  this->~ImmutableSlab();
  ::operator delete(static_cast<void*>(this));
}

}  // namespace detail

}  // namespace kvpool
