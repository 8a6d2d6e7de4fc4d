#include "daemon/disk/slot_format.hpp"

#include <xxhash.h>

namespace kvpool::daemon::disk {

uint64_t layout_fingerprint(const LayoutConfig& layout, uint32_t dtype) {
  const uint32_t words[7] = {kFormatVersion,
                             layout.num_layers,
                             layout.outer_dim,
                             layout.page_size,
                             layout.inner_dim,
                             layout.dtype_bytes,
                             dtype};
  return XXH3_64bits(words, sizeof(words));
}

void seal(FileHeader& h) { h.checksum = XXH3_64bits(&h, offsetof(FileHeader, checksum)); }
bool sealed(const FileHeader& h) {
  return h.magic == kFileMagic && h.checksum == XXH3_64bits(&h, offsetof(FileHeader, checksum));
}
void seal(SlotHeader& h) { h.checksum = XXH3_64bits(&h, offsetof(SlotHeader, checksum)); }
bool sealed(const SlotHeader& h) {
  return h.magic == kSlotMagic && h.checksum == XXH3_64bits(&h, offsetof(SlotHeader, checksum));
}

}  // namespace kvpool::daemon::disk
