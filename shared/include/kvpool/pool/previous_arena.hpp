// The arena of a daemon that is gone, opened for adoption (issue 27, item 2). Anyone of the
// daemon's uid may have written it while no daemon ran: it is hostile input.
#pragma once

#include <cstddef>
#include <string>

#include "kvpool/core/status.hpp"
#include "kvpool/pool/pool_core.hpp"

namespace kvpool::pool {

// PoolCore::validate() (every size, capacity and offset of its header against what its block
// count and limits make them, each error naming the field), every hash table with the empty
// slots that end a probe, and, when its writer died between two calls (write sequence
// even), every invariant. What passes is safe for PoolCore::adopt_registry, which bounds
// every index it reads. `memory` is only read. An error says what is wrong; the caller
// starts that pool empty.
Result<PoolCore> open_previous_arena(const void* memory, size_t bytes, std::string name);

// kInternal when a hash table of the arena (whose header validate() passed) is fuller than a
// sound one can be: each capacity is at least twice what it may hold, and a probe in a full
// one never ends.
Status arena_tables_have_room(const ArenaHeader& h);

}  // namespace kvpool::pool
