// What the public handles share: the connection, and the per-block state of immutables.
#pragma once

#include <atomic>
#include <memory>
#include <span>

#include "connection.hpp"
#include "device_view.hpp"
#include "kvpool/core/hash.hpp"

namespace kvpool::detail {

class ClientImpl {
 public:
  explicit ClientImpl(std::unique_ptr<Connection> c) : conn(std::move(c)) {}
  std::unique_ptr<Connection> conn;

  // A pool's base in this process: the host mapping, or (device pools) the device pointer
  // of the daemon's slab, opened on first use.
  // `readonly`: host pools answer from the PROT_READ mapping, so that a write through an
  // immutable block's address faults in the writer instead of corrupting every reader.
  Result<std::byte*> base(uint32_t pool, bool readonly = false) const {
    const PoolView& p = conn->pools()[pool];
    if (p.device) return p.device->base();
    if (!p.data.data())
      return Status(ErrorCode::kPermissionDenied,
                    "pool '" + p.name + "' is not open to this client (its allowed_uids/gids)");
    return static_cast<std::byte*>(readonly ? p.data_ro.data() : p.data.data());
  }

  Result<std::byte*> address(uint32_t pool, uint32_t id, uint32_t layer, uint32_t outer,
                             bool readonly = false) const {
    const PoolView& p = conn->pools()[pool];
    auto off = p.layout.offset(id, layer, outer);
    if (!off) return off.status();
    auto b = base(pool, readonly);
    if (!b) return b.status();
    return *b + *off;
  }
};

// The immutable blocks of one answer, in one allocation (a match of 64 blocks used to cost
// 64 shared states). Each block has its own count of ImmutableBlock copies: when a block's
// last copy goes, its reference goes back to the daemon at once (holding one block of an
// answer must not pin the others); the slab is freed with the answer's last live block.
struct ImmutableSlab;

struct ImmutableEntry {
  std::atomic<uint32_t> copies{1};
  uint32_t index = 0;  // in its slab
  pool::BlockRef ref{};
  SequenceHash sequence_hash = 0;
};

struct ImmutableSlab {
  std::shared_ptr<ClientImpl> client;
  uint32_t pool = 0;
  uint32_t count = 0;
  std::atomic<uint32_t> live{0};  // entries whose copies have not all gone

  // One allocation: the slab, then `refs.size()` entries (each starts with one copy).
  static ImmutableSlab* create(std::shared_ptr<ClientImpl> c, uint32_t pool,
                               std::span<const pool::BlockRef> refs,
                               std::span<const SequenceHash> hashes);
  static ImmutableSlab* of(const ImmutableEntry* e);
  ImmutableEntry* entries();

  // The last copy of `e` went: give its reference back; free the slab after its last entry.
  static void drop(ImmutableEntry* e);
};

}  // namespace kvpool::detail
