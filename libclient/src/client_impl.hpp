// What the public handles share: the connection, and the per-block state of immutables.
#pragma once

#include <memory>

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

// One daemon reference. Not copyable: a copy would release the reference twice.
struct ImmutableState {
  ImmutableState(std::shared_ptr<ClientImpl> c, uint32_t p, pool::BlockRef r, SequenceHash h)
      : client(std::move(c)), pool(p), ref(r), sequence_hash(h) {}
  ImmutableState(const ImmutableState&) = delete;
  ImmutableState& operator=(const ImmutableState&) = delete;
  std::shared_ptr<ClientImpl> client;
  uint32_t pool;
  pool::BlockRef ref;
  SequenceHash sequence_hash;
  ~ImmutableState() {
    if (client) client->conn->release(pool, /*immutable=*/true, ref);
  }
};

}  // namespace kvpool::detail
