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
  // acq_rel: whoever drops the last copy sees every other copy's use of the block finished.
  if (e && e->copies.fetch_sub(1, std::memory_order_acq_rel) == 1) detail::ImmutableSlab::drop(e);
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
// Entries start at the first multiple of their alignment after the slab header.
constexpr size_t kEntriesOffset = (sizeof(ImmutableSlab) + alignof(ImmutableEntry) - 1) /
                                  alignof(ImmutableEntry) * alignof(ImmutableEntry);
static_assert(alignof(ImmutableSlab) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__ &&
              alignof(ImmutableEntry) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);
}  // namespace

ImmutableEntry* ImmutableSlab::entries() {
  return std::launder(
      reinterpret_cast<ImmutableEntry*>(reinterpret_cast<std::byte*>(this) + kEntriesOffset));
}

ImmutableSlab* ImmutableSlab::of(const ImmutableEntry* e) {
  auto* first = reinterpret_cast<const std::byte*>(e - e->index);
  return std::launder(
      reinterpret_cast<ImmutableSlab*>(const_cast<std::byte*>(first) - kEntriesOffset));
}

ImmutableSlab* ImmutableSlab::create(std::shared_ptr<ClientImpl> c, uint32_t pool,
                                     uint32_t incarnation, std::span<const pool::BlockRef> refs,
                                     std::span<const SequenceHash> hashes) {
  void* mem = ::operator new(kEntriesOffset + refs.size() * sizeof(ImmutableEntry));
  auto* slab = new (mem) ImmutableSlab();
  slab->client = std::move(c);
  slab->pool = pool;
  slab->incarnation = incarnation;
  slab->count = static_cast<uint32_t>(refs.size());
  slab->live.store(slab->count, std::memory_order_relaxed);
  auto* first = reinterpret_cast<std::byte*>(mem) + kEntriesOffset;
  for (uint32_t i = 0; i < slab->count; ++i) {
    auto* e = new (first + i * sizeof(ImmutableEntry)) ImmutableEntry();
    e->index = i;
    e->ref = refs[i];
    e->sequence_hash = hashes[i];
  }
  return slab;
}

void ImmutableSlab::drop(ImmutableEntry* e) {
  ImmutableSlab* slab = of(e);
  if (slab->client)
    slab->client->release(slab->pool, slab->incarnation, /*immutable=*/true, e->ref);
  if (slab->live.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  ImmutableEntry* es = slab->entries();
  for (uint32_t i = 0; i < slab->count; ++i) es[i].~ImmutableEntry();
  slab->~ImmutableSlab();
  ::operator delete(static_cast<void*>(slab));
}

}  // namespace detail

}  // namespace kvpool
