// Maps pool pages into kvpool-peer's page tables before a transfer first touches them.
//
// kvpool-peer maps whole pools but touches a block's pages only when it sends or receives
// that block, so a block it has not moved before costs one page fault per 4 KiB page inside
// the copy (UCX's, the kernel's, the checksum's). One madvise(MADV_POPULATE_*) over a
// block's run maps them in one call instead: on the 2-core VM of docs/peers.md, a 64-block
// fetch of 1 MiB blocks into pages kvpool-peer had never touched went from 630-690 ms to
// 340-380 ms (the rest is the VM's own cost of a first touch). Once mapped, a block's pages
// stay mapped in this process, and populating them again still walks every page table
// entry (10% of a holder's CPU in a perf profile): PageMap remembers which blocks are done.
// Linux 5.14+; on older kernels (EINVAL) the faults simply happen in the copy, as before.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvpool::peer {

struct ByteRun {
  const std::byte* data;
  size_t bytes;
};

// Populates the pages of `runs` (adjacent runs are merged into one call), for writing or
// for reading. Best effort: a failure only means the pages fault in later.
void populate_pages(std::vector<ByteRun> runs, bool for_write);

// Which blocks of one pool this process has populated, and how (read, or read and write).
class PageMap {
 public:
  explicit PageMap(uint32_t blocks = 0) : state_(blocks, kNone) {}
  // Populates those blocks of `runs` (their ids in `ids`, same order) this process has
  // not populated for this use yet, and remembers them.
  void populate(const std::vector<uint32_t>& ids, const std::vector<ByteRun>& runs, bool for_write);

 private:
  enum : uint8_t { kNone, kRead, kWrite };
  std::vector<uint8_t> state_;
};

}  // namespace kvpool::peer
