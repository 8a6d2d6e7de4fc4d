// Every structural invariant of a pool arena, checked over a const view (the live core's
// own arena, a copy kvpoolctl took, a dead daemon's arena before adoption): O(blocks + holds).
#pragma once

#include "kvpool/core/status.hpp"
#include "kvpool/pool/arena_layout.hpp"

namespace kvpool::pool {

// kInternal naming the first break. The header must have passed validate_arena(); the hash
// tables are checked for the room that ends a probe before any look-up.
Status check_arena_invariants(const ConstArenaRegions& arena);

}  // namespace kvpool::pool
