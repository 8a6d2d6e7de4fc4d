// The disk tier's file format, written down once (DESIGN §6a). The file is
//
//   [FileHeader sector: 4 KiB][slot 0][slot 1]...[slot num_slots-1]
//   slot = [SlotHeader sector: 4 KiB][block data, padded to 4 KiB]
//
// Every part starts on a 4 KiB boundary so O_DIRECT can read and write it in place. A
// block's data is its regions in (layer, outer) order, without the pool's padding: the same
// bytes whatever the host pool's kind or alignment (block_checksum hashes the same bytes).
//
// Nothing in a slot is trusted at a start: a slot counts only when its header's own
// checksum holds, it names this file's generation and its own index, and it was written
// for this layout and hash scheme. Its data checksum is verified on every read (onboard),
// so a torn or flipped slot is a miss, never a served block.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <type_traits>

#include "kvpool/core/hash.hpp"
#include "kvpool/core/layout.hpp"

namespace kvpool::daemon::disk {

inline constexpr uint64_t kSectorBytes = 4096;

// One sector of memory aligned for O_DIRECT (a slot's header goes through it).
struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using SectorBuffer = std::unique_ptr<std::byte, FreeDeleter>;
inline SectorBuffer sector_buffer() {
  return SectorBuffer(static_cast<std::byte*>(std::aligned_alloc(kSectorBytes, kSectorBytes)));
}
inline constexpr uint64_t kFileMagic = 0x314b534944505654ull;  // "TVPDISK1" little-endian
inline constexpr uint64_t kSlotMagic = 0x31544f4c53505654ull;  // "TVPSLOT1"
inline constexpr uint32_t kFormatVersion = 1;

struct FileHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t hash_scheme;
  uint64_t slot_bytes;
  uint64_t num_slots;
  uint64_t layout_fingerprint;
  uint64_t generation;  // new at every (re)initialisation: older slots never count again
  uint64_t checksum;    // XXH3 of the bytes before it
};
static_assert(std::is_standard_layout_v<FileHeader> && std::is_trivially_copyable_v<FileHeader>);
static_assert(sizeof(FileHeader) == 56);
static_assert(offsetof(FileHeader, checksum) == 48);

struct SlotHeader {
  uint64_t magic;
  uint64_t generation;  // the file's
  uint64_t slot;        // its own index: a header read at another offset does not count
  uint64_t sequence_hash;
  uint64_t parent_hash;  // valid when has_parent
  uint64_t block_hash;
  uint64_t layout_fingerprint;
  uint64_t data_checksum;  // block_checksum of the data that follows
  uint64_t write_seq;      // higher wins when two slots claim one hash; orders the LRU
  uint32_t hash_scheme;
  uint32_t has_parent;
  uint32_t priority;
  uint32_t reserved;
  uint64_t checksum;  // XXH3 of the bytes before it
};
static_assert(std::is_standard_layout_v<SlotHeader> && std::is_trivially_copyable_v<SlotHeader>);
static_assert(sizeof(SlotHeader) == 96);
static_assert(offsetof(SlotHeader, checksum) == 88);

constexpr uint64_t round_up_sector(uint64_t n) {
  return (n + kSectorBytes - 1) / kSectorBytes * kSectorBytes;
}
// Bytes of one slot for blocks of `block_bytes` data bytes.
constexpr uint64_t slot_bytes_for(uint64_t block_bytes) {
  return kSectorBytes + round_up_sector(block_bytes);
}
constexpr uint64_t slot_offset(uint64_t slot_bytes, uint64_t slot) {
  return kSectorBytes + slot * slot_bytes;
}
constexpr uint64_t file_bytes_for(uint64_t slot_bytes, uint64_t num_slots) {
  return kSectorBytes + num_slots * slot_bytes;
}

// What makes a block's bytes mean the same thing: the shape of its data (not the pool's
// size, kind or alignment, which do not change the bytes on disk) and the element type.
uint64_t layout_fingerprint(const LayoutConfig& layout, uint32_t dtype);

void seal(FileHeader& h);
bool sealed(const FileHeader& h);
void seal(SlotHeader& h);
bool sealed(const SlotHeader& h);

}  // namespace kvpool::daemon::disk
