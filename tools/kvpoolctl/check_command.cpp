// kvpoolctl check [--instance NAME] [--runtime-dir DIR] [--json]
// Verifies every pool's invariants (PoolCore::check_invariants) without disturbing the
// daemon: each arena is copied out of the read-only mapping into private memory, and the
// copy is checked. The engine may be writing meanwhile, so a copy is kept only when the
// arena's seqlock says nothing changed during it (ArenaView::copy_to); otherwise the copy
// is retried. Also checks that no free client slot still holds blocks.
//
// Exit 0: all invariants hold. Exit 1: a violation (named on stderr) or no daemon.
// Exit 3: the daemon kept writing and no consistent copy could be taken; try again.
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "control_view.hpp"

namespace kvpool {
namespace {

constexpr int kMaxAttempts = 200;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<std::byte, FreeDeleter>;

void backoff(int attempt) {
  if (attempt < 8) return;  // a write lasts microseconds: just try again
  timespec ts{0, std::min(attempt, 20) * 1'000'000L};
  nanosleep(&ts, nullptr);
}

struct PoolResult {
  std::string name;
  uint32_t blocks = 0;
  int attempts = 0;
  bool consistent = false;  // a stable copy was taken
  std::string violation;    // empty: invariants hold
};

PoolResult check_pool(const ctl::ControlView& v, size_t index) {
  const pool::ArenaView& live = v.pools[index];
  PoolResult r;
  r.name = live.name();
  r.blocks = live.num_blocks();
  const size_t bytes = live.bytes();
  Buffer copy(static_cast<std::byte*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
  if (!copy) throw CommandError("cannot allocate " + std::to_string(bytes) + " bytes for a copy");
  const uint32_t max_clients = v.header->max_clients;
  std::vector<uint32_t> state_before(max_clients), gen_before(max_clients);

  for (r.attempts = 1; r.attempts <= kMaxAttempts; ++r.attempts) {
    for (uint32_t i = 0; i < max_clients; ++i) {
      state_before[i] = v.slot(i).state.load(std::memory_order_acquire);
      gen_before[i] = v.slot(i).generation.load(std::memory_order_relaxed);
    }
    if (!live.copy_to(copy.get())) {  // the engine wrote meanwhile: the copy may be torn
      backoff(r.attempts);
      continue;
    }
    r.consistent = true;
    auto core = pool::PoolCore::attach(copy.get(), bytes, static_cast<uint32_t>(index), r.name);
    if (!core) {
      r.violation = "arena does not attach: " + core.status().message();
      return r;
    }
    if (Status st = core->check_invariants(); !st.is_ok()) {
      r.violation = st.message();
      return r;
    }
    // A slot that was free (same generation) all along the copy must hold nothing.
    for (uint32_t i = 0; i < max_clients && i < core->max_owners(); ++i) {
      uint32_t state = v.slot(i).state.load(std::memory_order_acquire);
      uint32_t gen = v.slot(i).generation.load(std::memory_order_relaxed);
      if (state != static_cast<uint32_t>(shm::SlotState::kFree) || state_before[i] != state ||
          gen_before[i] != gen)
        continue;
      const pool::OwnerRecord& o = core->owner_record(i);
      if (o.mutable_count != 0 || o.hold_entries != 0) {
        r.violation = "client slot " + std::to_string(i) + " is free but still holds " +
                      std::to_string(o.mutable_count) + " mutable and " +
                      std::to_string(o.hold_entries) + " registered block(s)";
        return r;
      }
    }
    return r;
  }
  r.attempts = kMaxAttempts;
  return r;
}

void run_check(const ctl::ViewOptions& o) {
  ctl::ControlView v = ctl::open_control(o.instance, o.runtime_dir);
  std::vector<PoolResult> results;
  for (size_t i = 0; i < v.pools.size(); ++i) results.push_back(check_pool(v, i));

  const PoolResult* broken = nullptr;
  const PoolResult* busy = nullptr;
  for (const auto& r : results) {
    if (!r.violation.empty() && !broken) broken = &r;
    if (!r.consistent && !busy) busy = &r;
  }
  if (o.json) {
    nlohmann::json pools = nlohmann::json::array();
    for (const auto& r : results) {
      nlohmann::json violation = nullptr;
      if (!r.violation.empty()) violation = r.violation;
      pools.push_back({{"name", r.name},
                       {"blocks", r.blocks},
                       {"ok", r.consistent && r.violation.empty()},
                       {"consistent_snapshot", r.consistent},
                       {"attempts", r.attempts},
                       {"violation", violation}});
    }
    std::cout << nlohmann::json{{"instance", std::string(v.header->instance)},
                                {"ok", !broken && !busy},
                                {"pools", pools}}
                     .dump(2)
              << "\n";
  } else {
    for (const auto& r : results) {
      if (r.consistent && r.violation.empty())
        std::cout << "pool '" << r.name << "': ok (" << r.blocks << " blocks, snapshot after "
                  << r.attempts << " attempt" << (r.attempts == 1 ? "" : "s") << ")\n";
    }
  }
  if (broken)
    throw CommandError("pool '" + broken->name + "': invariant violated: " + broken->violation);
  if (busy)
    throw CommandError("pool '" + busy->name + "': no consistent snapshot in " +
                           std::to_string(kMaxAttempts) +
                           " attempts (the daemon kept writing); try again",
                       3);
  if (!o.json) std::cout << "check: ok, every invariant holds\n";
}

}  // namespace

void add_check_command(CLI::App& app) {
  auto opts = std::make_shared<ctl::ViewOptions>();
  auto* cmd = app.add_subcommand(
      "check",
      "verify every pool's invariants on a private snapshot (read-only); exit 1 on a "
      "violation");
  ctl::add_view_options(cmd, *opts);
  cmd->callback([opts] { run_check(*opts); });
}

}  // namespace kvpool
