// Maps pool pages into kvpool-peer's page tables before a transfer touches them.
//
// kvpool-peer maps whole pools but touches a block's pages only when it sends or receives
// that block, so a block it has not moved before costs one page fault per 4 KiB page inside
// the copy (UCX's, the kernel's, the checksum's). One madvise(MADV_POPULATE_*) over a
// block's run maps them in one call instead: on the 2-core VM of docs/peers.md, a 64-block
// fetch of 1 MiB blocks into pages kvpool-peer had never touched went from 630-690 ms to
// 340-380 ms (the rest is the VM's own cost of a first touch); pages already mapped cost a
// page-table walk. Linux 5.14+; on older kernels
// (EINVAL) the faults simply happen in the copy, as before.
#pragma once

#include <cstddef>
#include <vector>

namespace kvpool::peer {

struct ByteRun {
  const std::byte* data;
  size_t bytes;
};

// Populates the pages of `runs` (adjacent runs are merged into one call), for writing or
// for reading. Best effort: a failure only means the pages fault in later.
void populate_pages(std::vector<ByteRun> runs, bool for_write);

}  // namespace kvpool::peer
