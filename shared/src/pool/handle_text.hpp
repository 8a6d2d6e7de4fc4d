// How the pool core's messages name a handle (pool_core.cpp, pool_release.cpp, ...).
#pragma once

#include <string>

#include "kvpool/shm/protocol.hpp"

namespace kvpool::pool {

inline std::string handle_text(proto::BlockRef r) {
  return "block " + std::to_string(r.id) + " (generation " + std::to_string(r.generation) + ")";
}

}  // namespace kvpool::pool
