// Block handles a worker holds, mirroring Dynamo's BlockPool API.
//
// MutableBlock: unique and move-only. Fill it (token API, and bytes at address()), then
// hand it to Pool::register_blocks. Destroying it returns the block, reset, to the pool.
//
// ImmutableBlock: a registered block, shared. Copies are cheap; the last copy in this
// process drops one daemon reference. A block nobody references stays matchable
// (inactive) until the pool needs it back.
//
// Releases are batched and sent without waiting for an answer. Handles must not outlive
// the Client they came from (they keep its connection alive while they exist).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "kvpool/core/block_state.hpp"
#include "kvpool/core/hash.hpp"
#include "kvpool/core/status.hpp"

namespace kvpool {

namespace detail {
class ClientImpl;
struct ImmutableEntry;
}  // namespace detail

class MutableBlock {
 public:
  MutableBlock(MutableBlock&&) noexcept;
  MutableBlock& operator=(MutableBlock&&) noexcept;
  MutableBlock(const MutableBlock&) = delete;
  MutableBlock& operator=(const MutableBlock&) = delete;
  ~MutableBlock();

  // Token API (docs/design.md §1): Reset -> Partial -> Complete.
  Status init_sequence(Salt salt, std::optional<SequenceHash> parent = std::nullopt);
  Status add_token(Token token);
  Result<size_t> add_tokens(std::span<const Token> tokens);  // how many fitted
  Status pop_token();
  Status pop_tokens(size_t n);
  Status commit();  // only when exactly page_size tokens; computes the hashes
  // Reset -> Complete with hashes computed elsewhere (BlockState::complete_as): for a copy
  // of a block whose bytes came from another host's kvpoold (kvpool-peer).
  Status complete_as(SequenceHash sequence_hash, BlockHash block_hash,
                     std::optional<SequenceHash> parent) {
    return state_.complete_as(sequence_hash, block_hash, parent);
  }
  void reset();
  const BlockState& state() const { return state_; }
  Result<SequenceHash> sequence_hash() const { return state_.sequence_hash(); }

  // Eviction priority once registered and unreferenced: lower is evicted first.
  void set_priority(uint32_t priority) { priority_ = priority; }
  uint32_t priority() const { return priority_; }

  // Region (layer, outer) of this block. Host pools: a pointer into the pool mapped in this
  // process. Device pools: a device pointer on Pool::cuda_device() (write it with kernels
  // or copies, never dereference it on the host); the first one opens the pool's CUDA IPC
  // handle in this process, and fails with kDeviceError when that GPU is not visible here.
  Result<std::byte*> address(uint32_t layer, uint32_t outer) const;
  uint32_t block_id() const { return id_; }
  uint32_t generation() const { return generation_; }
  uint32_t pool_index() const { return pool_; }
  bool valid() const { return client_ != nullptr; }

 private:
  friend class Pool;
  friend class PoolAccess;
  MutableBlock(std::shared_ptr<detail::ClientImpl> c, uint32_t pool, uint32_t incarnation,
               uint32_t id, uint32_t gen, uint32_t page_size);
  void release();
  std::shared_ptr<detail::ClientImpl> client_;
  uint32_t pool_ = 0;
  uint32_t incarnation_ = 0;  // of its pool in this client (a restart may reset the pool)
  uint32_t id_ = 0;
  uint32_t generation_ = 0;
  uint32_t priority_ = 0;
  BlockState state_;
};

class ImmutableBlock {
 public:
  ImmutableBlock() = default;
  // Copies share the one reference; it goes back when the last copy goes.
  ImmutableBlock(const ImmutableBlock& o) noexcept;
  ImmutableBlock& operator=(const ImmutableBlock& o) noexcept;
  ImmutableBlock(ImmutableBlock&& o) noexcept : entry_(o.entry_) { o.entry_ = nullptr; }
  ImmutableBlock& operator=(ImmutableBlock&& o) noexcept;
  ~ImmutableBlock() { reset(); }

  SequenceHash sequence_hash() const;
  uint32_t block_id() const;
  uint32_t generation() const;
  uint32_t pool_index() const;
  // Region (layer, outer) of this block, to read (the writer is done): a host pointer for
  // host pools, a device pointer for device pools (see MutableBlock::address).
  Result<const std::byte*> address(uint32_t layer, uint32_t outer) const;
  bool valid() const { return entry_ != nullptr; }
  // Drops this copy now (the reference goes when the last copy goes).
  void reset() noexcept;

 private:
  friend class Pool;
  friend class PoolAccess;
  // Adopts one copy of `e` (an entry of the answer's slab, libclient/src/client_impl.hpp).
  explicit ImmutableBlock(detail::ImmutableEntry* e) : entry_(e) {}
  detail::ImmutableEntry* entry_ = nullptr;
};

}  // namespace kvpool
