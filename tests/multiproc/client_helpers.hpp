// Helpers the multi-process test files share: clients of a test daemon, pool-count waits,
// invariant checks and raw protocol calls. Everything reads the daemon's real state.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "harness.hpp"
#include "kvpool/client.hpp"
#include "support/raw_connection.hpp"  // raw protocol calls

namespace kvpool::mptest {

using pool::BlockRef;
using pool::BlockStateCode;
using proto::Opcode;

inline bool contains(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

inline Client connect_client(const DaemonProcess& d, bool reattach = false,
                             std::chrono::milliseconds reattach_timeout = 15s) {
  ConnectOptions o;
  o.runtime_dir = d.runtime_dir();
  o.connect_timeout = 10s;
  o.poll_us = 20;
  // Off unless asked: most tests assert what calls say while no daemon runs.
  o.reattach = reattach;
  o.reattach_timeout = reattach_timeout;
  auto c = Client::connect(d.instance(), o);
  if (!c) throw HarnessError("cannot connect to kvpoold: " + c.status().to_string());
  return std::move(c.value());
}

inline Pool pool_of(Client& c, const std::string& name = "g") {
  auto p = c.pool(name);
  if (!p) throw HarnessError(p.status().to_string());
  return p.value();
}

// Options for a raw-protocol connection to this daemon (support/raw_connection.hpp).
inline RawOptions connection_options(const DaemonProcess& d) {
  RawOptions o;
  o.runtime_dir = d.runtime_dir();
  o.connect_timeout = 10s;
  o.poll_us = 20;
  return o;
}

inline std::unique_ptr<RawConnection> open_connection(const DaemonProcess& d) {
  auto c = RawConnection::open(d.instance(), connection_options(d));
  if (!c) throw HarnessError("cannot open a connection: " + c.status().to_string());
  return std::move(c.value());
}

// Wanted pool counts; -1: any.
struct Want {
  int64_t free = -1, mut = -1, active = -1, inactive = -1;
};

inline bool counts_match(const pool::PoolCounts& c, const Want& w) {
  return (w.free < 0 || c.free == w.free) && (w.mut < 0 || c.mutable_blocks == w.mut) &&
         (w.active < 0 || c.active == w.active) && (w.inactive < 0 || c.inactive == w.inactive);
}

inline void wait_counts(const DaemonView& v, const Want& w, std::chrono::milliseconds timeout = 10s,
                        uint32_t pool = 0) {
  wait_until([&] { return counts_match(v.counts(pool), w); }, timeout,
             "pool counts free " + std::to_string(w.free) + " mutable " + std::to_string(w.mut) +
                 " active " + std::to_string(w.active) + " inactive " + std::to_string(w.inactive) +
                 " (-1: any)",
             [&] { return v.describe(); });
}

inline void expect_counts_add_up(const DaemonView& v, uint32_t pool = 0) {
  auto c = v.counts(pool);
  EXPECT_EQ(c.free + c.mutable_blocks + c.active + c.inactive, c.total) << v.describe();
}

// The pool core's own structural check, on a quiet daemon. The snapshot is read while the
// daemon may still be finishing an update, so a failure is retried until the deadline.
inline void expect_invariants(const DaemonView& v, uint32_t pool = 0) {
  Status last;
  try {
    wait_until(
        [&] {
          last = v.pool(pool).check_invariants();
          return last.is_ok();
        },
        5s, "the pool invariants to hold");
  } catch (const HarnessError& e) {
    ADD_FAILURE() << e.what() << ": " << last.to_string() << "; " << v.describe();
  }
}

inline uint8_t state_of(const DaemonView& v, uint32_t id) { return v.pool().block(id).state; }
constexpr uint8_t code(BlockStateCode s) { return static_cast<uint8_t>(s); }

inline uint64_t stat_of(const std::atomic<uint64_t>& a) {
  return a.load(std::memory_order_relaxed);
}

// The state letter of /proc/<pid>/stat (or /proc/self/task/<tid>/stat): R, S, T, Z, ...
inline char proc_state(const std::string& stat_path) {
  std::ifstream f(stat_path);
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto p = s.rfind(')');
  return p == std::string::npos || p + 2 >= s.size() ? '?' : s[p + 2];
}

// A request record with any opcode and bytes, put on the ring as is; returns the answer
// the daemon sends for `correlation_id`.
inline RawResponse raw_call(RawConnection& c, uint32_t type, uint64_t correlation_id, uint32_t pool,
                            uint32_t count, const void* items, size_t item_bytes) {
  std::vector<std::byte> rec(sizeof(proto::RequestHeader) + item_bytes);
  proto::RequestHeader h{correlation_id, pool, count};
  std::memcpy(rec.data(), &h, sizeof(h));
  if (item_bytes) std::memcpy(rec.data() + sizeof(h), items, item_bytes);
  Status st = c.send_raw(type, rec.data(), static_cast<uint32_t>(rec.size()));
  if (!st.is_ok()) throw HarnessError("send_raw: " + st.to_string());
  auto r = c.wait(correlation_id);
  if (!r) throw HarnessError("no answer to a raw record: " + r.status().to_string());
  return r.value();
}

inline RawResponse must_call(RawConnection& c, Opcode op, uint32_t pool, uint32_t count,
                             const void* items, size_t bytes) {
  auto r = c.call(op, pool, count, items, bytes);
  if (!r) throw HarnessError("call failed: " + r.status().to_string());
  return r.value();
}

}  // namespace kvpool::mptest
