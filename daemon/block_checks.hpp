// kvpoold's side of per-block checksums (kvpool/core/checksum.hpp): it hashes a host
// pool's block bytes itself and hands the result to the pool core, which counts it and
// poisons a block whose bytes no longer match what its registering client sent. A client
// never gets to say "this block is corrupt": it could then evict everyone's good blocks.
//
// Hashing runs on the engine thread, which serves every client, so one request hashes at
// most proto::kCheckSliceBytes (tens of microseconds), and a scrub of a whole
// pool is many requests (kvpoolctl scrub loops them).
//
// The bytes are read while clients may write them (a hostile one may, through its
// read-write mapping of the pool): a torn read only makes the hash differ, which is the
// answer such a block deserves. The memory cannot vanish under the read: host pools are
// sealed against shrinking (daemon/host_pool_memory.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "kvpool/core/layout.hpp"
#include "kvpool/pool/pool_core.hpp"
#include "kvpool/shm/check_slice.hpp"
#include "kvpool/shm/protocol.hpp"

namespace kvpool::daemon {

class BlockChecker {
 public:
  BlockChecker() = default;  // a pool whose bytes the daemon cannot read (device pools)
  BlockChecker(const std::byte* base, const Layout& layout) : base_(base), layout_(layout) {}

  bool available() const { return base_ != nullptr && layout_.has_value(); }
  // Blocks one kVerify may name: the budget's worth, at least one.
  uint32_t max_verify_blocks() const;

  // Hashes registered block `id` (unless it has no checksum, or is already poisoned) and
  // records the outcome in `core`.
  proto::ChecksumOutcome verify(pool::PoolCore& core, uint32_t id) const;

  // One scrub step: registered blocks from `start` on, hashing at most `byte_budget`
  // bytes (clamped to kCheckSliceBytes; at least one block is hashed, so every step
  // makes progress) and visiting at most kMaxScrubVisit blocks. Mismatches are poisoned
  // and the first out.size() of them described in `out`.
  proto::ScrubSummary scrub(pool::PoolCore& core, uint32_t start, uint64_t byte_budget,
                            std::span<proto::ScrubMismatch> out) const;

 private:
  const std::byte* base_ = nullptr;
  std::optional<Layout> layout_;
};

}  // namespace kvpool::daemon
