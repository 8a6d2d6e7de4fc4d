// A read-only view of a pool arena that a writer (the daemon's progress engine) keeps
// changing, for the processes that only look: kvpoolctl, kvpool-events, tests. It never
// hands out anything writable, so it can sit on a PROT_READ mapping without a caveat.
//
// What it reads while the writer runs is either fixed at creation (sizes, written before
// the daemon published kReady, which every reader loads with acquire), a relaxed atomic
// counter (PoolStats), or a plain field loaded whole with a relaxed atomic load (an
// owner's holdings): each value is a moment old, never torn. Anything more (blocks, tables)
// is read from a private copy taken under the arena's seqlock (copy_to).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kvpool/core/status.hpp"
#include "kvpool/pool/arena.hpp"
#include "kvpool/pool/pool_core.hpp"

namespace kvpool::pool {

// What one owner (client slot) holds: its mutable blocks and the distinct registered blocks
// it references (OwnerRecord), each field loaded whole.
struct OwnerHoldings {
  uint32_t mutable_blocks = 0;
  uint32_t held_blocks = 0;  // distinct immutable blocks referenced
  uint64_t held_refs = 0;    // references (a block matched twice counts twice)
};

class ArenaView {
 public:
  ArenaView() = default;
  // Validates the arena header (magic, version, every offset within `bytes`) once.
  static Result<ArenaView> attach(const void* memory, size_t bytes, std::string name);

  const std::string& name() const { return name_; }
  size_t bytes() const { return bytes_; }
  // Fixed when the arena was created.
  uint32_t num_blocks() const { return header_->num_blocks; }
  uint32_t max_owners() const { return header_->max_owners; }
  // The writer's counters (relaxed atomics: each a moment old).
  const PoolStats& stats() const { return header_->stats; }
  PoolCounts counts() const;
  // Zero for an owner index beyond max_owners.
  OwnerHoldings holdings(uint32_t owner) const;
  // The checksum block `id` was registered with (kNoChecksum: none, or `id` out of range),
  // loaded whole. It means something only to a reader that holds the block (a reference):
  // the writer sets it before the register's answer and changes it only when the block is
  // allocated again, which a held block is not.
  uint64_t checksum(uint32_t id) const;

  // The one seqlock snapshot of the arena: copies all bytes() of it to `out` (64-byte
  // aligned, bytes() long) and returns true when the writer changed nothing meanwhile (its
  // write sequence was the same even value before and after). A false copy may be torn:
  // retry, or use it only as a best effort.
  bool copy_to(void* out) const;

 private:
  const ArenaHeader* header_ = nullptr;
  const OwnerRecord* owners_ = nullptr;
  const uint64_t* checksums_ = nullptr;
  size_t bytes_ = 0;
  std::string name_;
};

}  // namespace kvpool::pool
