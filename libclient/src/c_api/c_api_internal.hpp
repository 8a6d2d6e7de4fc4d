// What the C ABI's opaque handles are on the C++ side, and the error plumbing every
// function of kvpool.h shares. Internal to libkvpool_c (nothing here is exported).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "c_api_completer.hpp"
#include "kvpool/client.hpp"
#include "kvpool/kvpool.h"
#include "kvpool/shm/control_segment.hpp"

namespace kvpool::c_api {

// What a client handle and the pools taken from it share: where the daemon is (for the
// read-only view behind kvpool_pool_counts_get), and the completion thread of the async
// forms, both made on first use.
struct ClientShared {
  std::string instance;
  std::string runtime_dir;
  std::mutex mu;
  std::optional<shm::ControlReader> observed;  // the daemon's control segment, read-only
  std::shared_ptr<Completer> completer;

  Completer& completer_once();
};

// The thread's last failure; set only by failing calls.
kvpool_error_code fail(const Status& s);
kvpool_error_code fail(kvpool_error_code code, const char* message);
inline kvpool_error_code null_argument(const char* what) {
  return fail(KVPOOL_ERR_INVALID_ARGUMENT, what);
}
inline kvpool_error_code code_of(ErrorCode c) { return static_cast<kvpool_error_code>(c); }

// Runs f, turning an escaping C++ exception (only std::bad_alloc is expected: the C++ API
// reports errors as values) into a code, so that no exception crosses the C boundary.
template <typename F>
kvpool_error_code guarded(F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return fail(KVPOOL_ERR_RESOURCE_EXHAUSTED, "out of memory");
  } catch (const std::exception& e) {
    return fail(KVPOOL_ERR_INTERNAL, e.what());
  } catch (...) {
    return fail(KVPOOL_ERR_INTERNAL, "unknown C++ exception");
  }
}

}  // namespace kvpool::c_api

struct kvpool_client {
  kvpool::Client client;
  std::shared_ptr<kvpool::c_api::ClientShared> shared;
  std::vector<std::string> pool_names;
};

struct kvpool_pool {
  kvpool::Pool pool;
  std::shared_ptr<kvpool::c_api::ClientShared> shared;
};

struct kvpool_mutable_batch {
  std::vector<kvpool::MutableBlock> blocks;
};

struct kvpool_immutable_batch {
  std::vector<kvpool::ImmutableBlock> blocks;
};

// kvpool_mutable_block and kvpool_immutable_block are never defined: their pointers are
// kvpool::MutableBlock / kvpool::ImmutableBlock objects, in a batch's vector (borrowed) or
// on the heap (owned).
namespace kvpool::c_api {
inline MutableBlock* cpp(kvpool_mutable_block* b) { return reinterpret_cast<MutableBlock*>(b); }
inline const MutableBlock* cpp(const kvpool_mutable_block* b) {
  return reinterpret_cast<const MutableBlock*>(b);
}
inline kvpool_mutable_block* c(MutableBlock* b) {
  return reinterpret_cast<kvpool_mutable_block*>(b);
}
inline const ImmutableBlock* cpp(const kvpool_immutable_block* b) {
  return reinterpret_cast<const ImmutableBlock*>(b);
}
inline ImmutableBlock* cpp(kvpool_immutable_block* b) {
  return reinterpret_cast<ImmutableBlock*>(b);
}
inline const kvpool_immutable_block* c(const ImmutableBlock* b) {
  return reinterpret_cast<const kvpool_immutable_block*>(b);
}
inline kvpool_immutable_block* c(ImmutableBlock* b) {
  return reinterpret_cast<kvpool_immutable_block*>(b);
}
// kvpool_peer_fetch_options (NULL, 0, NULL: the defaults) as PeerFetchOptions.
inline PeerFetchOptions peer_options(const kvpool_peer_fetch_options* o) {
  PeerFetchOptions p;
  if (o != nullptr) {
    if (o->deadline_ms != 0) p.deadline = std::chrono::milliseconds(o->deadline_ms);
    if (o->holder != nullptr) p.holder = o->holder;
  }
  return p;
}
// kvpool_match_options (NULL: the defaults) as MatchOptions; false (the error recorded)
// when struct_size is too small. A caller built against an older header passes a shorter
// struct: the fields it lacks are off.
inline bool match_options(const kvpool_match_options* o, MatchOptions* out, const char* fn) {
  kvpool_match_options m{};
  if (o != nullptr) {
    if (o->struct_size < offsetof(kvpool_match_options, onboard) + sizeof(m.onboard)) {
      (void)fail(
          KVPOOL_ERR_INVALID_ARGUMENT,
          (std::string(fn) + ": options->struct_size is too small (use kvpool_match_options_init)")
              .c_str());
      return false;
    }
    std::memcpy(&m, o, std::min<size_t>(o->struct_size, sizeof(m)));
  }
  out->onboard = m.onboard != 0;
  return true;
}
}  // namespace kvpool::c_api
