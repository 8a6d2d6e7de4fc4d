#include "kvpool/block.hpp"

#include "client_impl.hpp"

namespace kvpool {

MutableBlock::MutableBlock(std::shared_ptr<detail::ClientImpl> c, uint32_t pool, uint32_t id,
                           uint32_t gen, uint32_t page_size)
    : client_(c),
      pool_(pool),
      id_(id),
      generation_(gen),
      // commit() hashes with the pool's scheme (PoolInfo::hash_scheme).
      state_(page_size, c->conn->pools()[pool].hash_scheme()) {}

MutableBlock::MutableBlock(MutableBlock&& o) noexcept
    : client_(std::move(o.client_)),
      pool_(o.pool_),
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
    id_ = o.id_;
    generation_ = o.generation_;
    priority_ = o.priority_;
    state_ = std::move(o.state_);
  }
  return *this;
}

MutableBlock::~MutableBlock() { release(); }

void MutableBlock::release() {
  if (client_) client_->conn->release(pool_, /*immutable=*/false, pool::BlockRef{id_, generation_});
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
  return client_->address(pool_, id_, layer, outer);
}

SequenceHash ImmutableBlock::sequence_hash() const { return state_ ? state_->sequence_hash : 0; }
uint32_t ImmutableBlock::block_id() const { return state_ ? state_->ref.id : 0; }
uint32_t ImmutableBlock::generation() const { return state_ ? state_->ref.generation : 0; }
uint32_t ImmutableBlock::pool_index() const { return state_ ? state_->pool : 0; }

Result<const std::byte*> ImmutableBlock::address(uint32_t layer, uint32_t outer) const {
  if (!state_) return Status(ErrorCode::kInvalidState, "empty ImmutableBlock");
  auto a = state_->client->address(state_->pool, state_->ref.id, layer, outer, /*readonly=*/true);
  if (!a) return a.status();
  return static_cast<const std::byte*>(*a);
}

}  // namespace kvpool
