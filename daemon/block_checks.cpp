#include "daemon/block_checks.hpp"

#include <algorithm>

#include "kvpool/core/checksum.hpp"

namespace kvpool::daemon {

uint32_t BlockChecker::max_verify_blocks() const {
  if (!available()) return 0;
  const uint64_t n = proto::kCheckSliceBytes / std::max<uint64_t>(layout_->block_bytes(), 1);
  return static_cast<uint32_t>(std::clamp<uint64_t>(n, 1, UINT32_MAX));
}

proto::ChecksumOutcome BlockChecker::verify(pool::PoolCore& core, uint32_t id) const {
  if (core.poisoned(id)) return proto::ChecksumOutcome::kMismatch;  // known bad, not recounted
  if (core.checksum(id) == kNoChecksum) return proto::ChecksumOutcome::kNone;
  return core.record_checksum(id, block_checksum(base_, *layout_, id));
}

proto::ScrubSummary BlockChecker::scrub(pool::PoolCore& core, uint32_t start, uint64_t byte_budget,
                                        std::span<proto::ScrubMismatch> out) const {
  proto::ScrubSummary s{};
  const uint32_t n = core.num_blocks();
  const uint64_t budget = byte_budget == 0
                              ? proto::kCheckSliceBytes
                              : std::min<uint64_t>(byte_budget, proto::kCheckSliceBytes);
  const uint64_t block_bytes = layout_->block_bytes();
  uint64_t hashed = 0;
  uint32_t id = std::min(start, n);
  const uint32_t end =
      static_cast<uint32_t>(std::min<uint64_t>(n, uint64_t{id} + proto::kMaxScrubVisit));
  // Stop before a block that would pass the budget (but hash one at least), or once the
  // answer cannot describe another mismatch: the next step starts where this one stopped.
  for (; id < end; ++id) {
    if (!core.registered(id)) continue;  // free, mutable or poisoned: nothing to check
    if (core.checksum(id) == kNoChecksum) {
      ++s.skipped;
      continue;
    }
    if (hashed != 0 && hashed + block_bytes > budget) break;
    if (s.reported == out.size() && s.mismatches > 0) break;
    const uint64_t sequence_hash = core.block(id).sequence_hash;
    const uint32_t generation = core.block(id).generation;
    hashed += block_bytes;
    ++s.checked;
    if (core.record_checksum(id, block_checksum(base_, *layout_, id)) ==
        proto::ChecksumOutcome::kMismatch) {
      ++s.mismatches;
      if (s.reported < out.size()) out[s.reported++] = {id, generation, sequence_hash};
    }
  }
  s.next_block = id;
  return s;
}

}  // namespace kvpool::daemon
