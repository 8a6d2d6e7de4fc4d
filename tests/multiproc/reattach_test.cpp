// Clients ride through a daemon restart (issue 15, item 2). Real kvpoold processes under
// `kvpoold --supervise`, real kill -9; the client under test is this process (a previous
// client that still runs), or a worker process.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "client_helpers.hpp"
#include "harness.hpp"
#include "restart_helpers.hpp"
#include "support/process.hpp"

namespace kvpool::mptest {
namespace {

void fill(MutableBlock& b, const Pool& p, uint8_t seed) {
  for (uint32_t l = 0; l < p.layout().num_layers; ++l)
    for (uint32_t o = 0; o < p.layout().outer_dim; ++o) {
      auto a = b.address(l, o);
      ASSERT_TRUE(a) << a.status().to_string();
      std::memset(*a, seed + l * 2 + o, region_bytes(p.layout()));
    }
}

// Whether every region of the block at `addr(l, o)` still holds fill()'s pattern.
template <class Addr>
bool holds_pattern(Addr addr, const Pool& p, uint8_t seed) {
  for (uint32_t l = 0; l < p.layout().num_layers; ++l)
    for (uint32_t o = 0; o < p.layout().outer_dim; ++o) {
      auto a = addr(l, o);
      if (!a) return false;
      const auto* bytes = reinterpret_cast<const uint8_t*>(*a);
      for (uint64_t i = 0; i < region_bytes(p.layout()); ++i)
        if (bytes[i] != static_cast<uint8_t>(seed + l * 2 + o)) return false;
    }
  return true;
}

void commit(MutableBlock& b, Token first) {
  ASSERT_TRUE(b.init_sequence(4242).is_ok());
  ASSERT_TRUE(b.add_tokens(std::vector<Token>{first, first + 1, first + 2, first + 3}));
  ASSERT_TRUE(b.commit().is_ok());
}

TEST(Reattach, HandlesHeldAcrossAKill9StayValidWithTheirBytes) {
  DaemonProcess d;
  start_supervised(d);
  auto v = d.view();
  Client c = connect_client(d, /*reattach=*/true);
  Pool p = pool_of(c);
  auto blocks = p.allocate_blocks(3);
  ASSERT_TRUE(blocks) << blocks.status().to_string();
  for (uint8_t k = 0; k < 3; ++k) fill((*blocks)[k], p, static_cast<uint8_t>(10 * (k + 1)));
  commit((*blocks)[0], 1);
  commit((*blocks)[1], 100);
  commit((*blocks)[2], 200);
  MutableBlock mut = std::move((*blocks)[2]);
  std::vector<MutableBlock> to_register;
  to_register.push_back(std::move((*blocks)[0]));
  to_register.push_back(std::move((*blocks)[1]));
  auto imm = p.register_blocks(std::move(to_register));
  ASSERT_TRUE(imm) << imm.status().to_string();
  // A second reference on the first block: the client holds it twice.
  std::vector<SequenceHash> first{(*imm)[0].sequence_hash()};
  auto again = p.match_sequence_hashes(first);
  ASSERT_TRUE(again && again->size() == 1);
  const std::byte* before = *(*imm)[0].address(0, 0);
  wait_counts(v, Want{61, 1, 2, 0});

  const uint64_t old = kill_daemon(v);
  auto nv = next_daemon(d, old);
  // Kept for this process (it still runs) until it reattaches.
  const uint32_t keeper = nv.header().max_clients;
  EXPECT_TRUE(counts_match(nv.counts(), Want{61, 1, 2, 0})) << nv.describe();
  EXPECT_EQ(nv.pool().holds_of(keeper, (*imm)[0].block_id()), 1u);
  EXPECT_EQ(nv.pool().block(mut.block_id()).owner, keeper);

  // The next call after the death was noticed reattaches.
  wait_until([&] { return !c.daemon_alive(); }, 10s, "the client to notice the kill");
  Status ping = c.ping();
  ASSERT_TRUE(ping.is_ok()) << ping.to_string() << "\n" << d.stderr_text();
  EXPECT_TRUE(c.daemon_alive());
  const uint32_t slot = c.slot();
  wait_until(
      [&] { return contains(d.stderr_text(), "reattached in slot " + std::to_string(slot)); }, 10s,
      "the log of the reattach", [&] { return d.stderr_text(); });

  // Same handles, same bytes, same address (the pool's mapping from before is kept).
  EXPECT_EQ(*(*imm)[0].address(0, 0), before);
  EXPECT_TRUE(
      holds_pattern([&](uint32_t l, uint32_t o) { return (*imm)[0].address(l, o); }, p, 10));
  EXPECT_TRUE(
      holds_pattern([&](uint32_t l, uint32_t o) { return (*imm)[1].address(l, o); }, p, 20));
  EXPECT_TRUE(holds_pattern([&](uint32_t l, uint32_t o) { return mut.address(l, o); }, p, 30));
  // The new daemon holds them for our new slot as we held them (one reference per block,
  // however many handles: the library counts those); the keeper none.
  auto look = nv.pool();
  EXPECT_EQ(look.holds_of(slot, (*imm)[0].block_id()), 1u);
  EXPECT_EQ(look.holds_of(slot, (*imm)[1].block_id()), 1u);
  EXPECT_EQ(look.holds_of(keeper, (*imm)[0].block_id()), 0u);
  EXPECT_EQ(look.block(mut.block_id()).owner, slot);
  EXPECT_EQ(look.block(mut.block_id()).state, code(BlockStateCode::kMutable));
  expect_invariants(nv);

  // The mutable block is still ours to register; everything releases as usual.
  std::vector<MutableBlock> last;
  last.push_back(std::move(mut));
  auto r = p.register_blocks(std::move(last));
  ASSERT_TRUE(r) << r.status().to_string();
  imm->clear();
  again->clear();
  r->clear();
  c.flush();
  wait_counts(nv, Want{61, 0, 0, 3});
  EXPECT_EQ(stat_of(nv.pool().stats().rejected_handles), 0u);
  expect_invariants(nv);
  auto [st, out] = d.run_ctl({"check"});
  EXPECT_TRUE(st.exited() && st.code() == 0) << out;
}

// A restart without a supervisor: the new daemon's pool is new memory. The old handles
// fail on use with a clear error and are never released to the new daemon; calls made
// while no daemon runs wait for the bound, then say kvpoold is gone.
TEST(Reattach, HandlesOfAPoolTheNewDaemonDidNotKeepFailOnUse) {
  DaemonProcess d;
  d.start();
  Client c = connect_client(d, /*reattach=*/true, 300ms);
  Pool p = pool_of(c);
  auto blocks = p.allocate_blocks(2);
  ASSERT_TRUE(blocks);
  commit((*blocks)[0], 1);
  std::vector<MutableBlock> one;
  one.push_back(std::move((*blocks)[0]));
  auto imm = p.register_blocks(std::move(one));
  ASSERT_TRUE(imm);
  MutableBlock mut = std::move((*blocks)[1]);
  commit(mut, 50);

  d.kill(SIGKILL);
  ASSERT_TRUE(d.wait_exit(10s));
  wait_until([&] { return !c.daemon_alive(); }, 10s, "the client to notice the kill");
  Status gone = c.ping();
  EXPECT_EQ(gone.code(), ErrorCode::kDaemonGone) << gone.to_string();
  EXPECT_TRUE(contains(gone.message(), "no kvpoold came back")) << gone.to_string();

  d.restart();
  Status ping = c.ping();
  ASSERT_TRUE(ping.is_ok()) << ping.to_string();
  auto a = mut.address(0, 0);
  EXPECT_EQ(a.status().code(), ErrorCode::kInvalidHandle);
  EXPECT_TRUE(contains(a.status().message(), "did not keep the pool")) << a.status().to_string();
  auto b = (*imm)[0].address(0, 0);
  EXPECT_EQ(b.status().code(), ErrorCode::kInvalidHandle) << b.status().to_string();
  std::vector<MutableBlock> late;
  late.push_back(std::move(mut));
  auto r = p.register_blocks(std::move(late));
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidHandle) << r.status().to_string();
  EXPECT_TRUE(contains(r.status().message(), "did not keep the pool")) << r.status().to_string();
  // Dropping them sends nothing: the new daemon refuses no handle of ours.
  imm->clear();
  r = Status::ok();
  c.flush();
  ASSERT_TRUE(c.ping().is_ok());
  auto v = d.view();
  EXPECT_EQ(stat_of(v.pool().stats().rejected_handles), 0u);
  // The pool works as new.
  auto fresh = p.allocate_blocks(2);
  ASSERT_TRUE(fresh) << fresh.status().to_string();
  EXPECT_TRUE((*fresh)[0].address(0, 0)) << "a new block has an address";
  fresh->clear();
  c.flush();
  wait_counts(v, Want{64, 0, 0, 0});
}

// No kvpoold runs (issue 27, item 8): the supervisor holds the next one back (its hook
// waits on a FIFO). With the default options, a call waits at most the in-flight bound
// once, then every call fails at once with kDaemonGone; handles stay valid, one dropped
// meanwhile is not claimed back, and the first call after a daemon is back reattaches.
TEST(Reattach, CallsWhileNoDaemonRunsFailFastAndHandlesSurvive) {
  TempDir tmp;
  const std::string gate = tmp.path() + "/gate";
  ASSERT_EQ(::mkfifo(gate.c_str(), 0600), 0);
  DaemonProcess d;
  start_supervised(d, {"--supervise-hook", "cat " + gate});
  // However the test ends, the hook is not left waiting on the FIFO.
  struct OpenGate {
    std::string path;
    ~OpenGate() { shm::UniqueFd(::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC)); }
  } open_gate{gate};
  auto v = d.view();
  ConnectOptions o;  // the defaults: reattach on, its bound as shipped
  o.runtime_dir = d.runtime_dir();
  o.connect_timeout = 10s;
  auto connected = Client::connect(d.instance(), o);
  ASSERT_TRUE(connected) << connected.status().to_string();
  Client c = std::move(connected.value());
  Pool p = pool_of(c);
  auto blocks = p.allocate_blocks(3);
  ASSERT_TRUE(blocks) << blocks.status().to_string();
  commit((*blocks)[0], 1);
  commit((*blocks)[1], 100);
  fill((*blocks)[2], p, 30);
  MutableBlock mut = std::move((*blocks)[2]);
  std::vector<MutableBlock> to_register;
  to_register.push_back(std::move((*blocks)[0]));
  to_register.push_back(std::move((*blocks)[1]));
  auto imm = p.register_blocks(std::move(to_register));
  ASSERT_TRUE(imm && imm->size() == 2) << imm.status().to_string();
  const SequenceHash h0 = (*imm)[0].sequence_hash();
  const uint32_t dropped_id = (*imm)[1].block_id();
  wait_counts(v, Want{61, 1, 2, 0});

  const uint64_t old = kill_daemon(v);
  wait_until([&] { return !c.daemon_alive(); }, 10s, "the client to notice the kill");
  // Dropped while no daemon runs: counted here, never claimed back.
  imm->pop_back();
  constexpr int kCalls = 50;
  std::vector<double> us;
  const auto all = std::chrono::steady_clock::now();
  for (int i = 0; i < kCalls; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    Status st;
    if (i % 3 == 0) {
      st = c.ping();
    } else if (i % 3 == 1) {
      st = p.match_sequence_hashes(std::vector<SequenceHash>{h0}).status();
    } else {
      st = p.allocate_blocks(1).status();
    }
    us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    ASSERT_EQ(st.code(), ErrorCode::kDaemonGone) << "call " << i << ": " << st.to_string();
    EXPECT_TRUE(contains(st.message(), "no kvpoold came back")) << st.to_string();
  }
  const double total_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - all).count();
  // A hang guard, not a speed check: before issue 27 every call waited 15 s.
  EXPECT_LT(total_ms, 10'000.0);
  std::vector<double> later(us.begin() + 1, us.end());
  std::sort(later.begin(), later.end());
  std::cout << "[ figures ] no kvpoold: first call " << us[0] << " us (waits the bound once), "
            << "the next " << later.size() << ": p50 " << later[later.size() / 2] << " us, max "
            << later.back() << " us; all " << kCalls << " in " << total_ms << " ms\n";
  // Still valid while the daemon is down: the memory is ours.
  EXPECT_TRUE(holds_pattern([&](uint32_t l, uint32_t o2) { return mut.address(l, o2); }, p, 30));

  {  // Let the supervisor start the next kvpoold (it adopts the pool).
    shm::UniqueFd w(::open(gate.c_str(), O_WRONLY | O_CLOEXEC));
    ASSERT_TRUE(w) << "open the hook's FIFO";
  }
  auto nv = next_daemon(d, old);
  Status ping = c.ping();
  ASSERT_TRUE(ping.is_ok()) << ping.to_string() << "\n" << d.stderr_text();
  const uint32_t slot = c.slot();
  auto look = nv.pool();
  EXPECT_EQ(look.holds_of(slot, (*imm)[0].block_id()), 1u);
  EXPECT_EQ(look.holds_of(slot, dropped_id), 0u) << "dropped while down: not claimed";
  EXPECT_EQ(look.block(mut.block_id()).owner, slot);
  EXPECT_TRUE(holds_pattern([&](uint32_t l, uint32_t o2) { return mut.address(l, o2); }, p, 30));
  auto again = p.match_sequence_hashes(std::vector<SequenceHash>{h0});
  ASSERT_TRUE(again && again->size() == 1) << again.status().to_string();
  commit(mut, 500);
  std::vector<MutableBlock> last;
  last.push_back(std::move(mut));
  auto r = p.register_blocks(std::move(last));
  ASSERT_TRUE(r) << r.status().to_string();
  imm->clear();
  again->clear();
  r->clear();
  c.flush();
  wait_counts(nv, Want{61, 0, 0, 3});
  EXPECT_EQ(stat_of(nv.pool().stats().rejected_handles), 0u);
  expect_invariants(nv);
}

// Issue 27, item 4: a worker idle across three quick restarts never reattaches; each
// daemon keeps what it held for it (it may still read the blocks) and names it to the next
// one (pid, uid, start time), so once the process exits, however many restarts later, the
// daemon of the moment puts its blocks back into circulation.
TEST(Reattach, BlocksKeptForAProcessThatMissedRestartsGoBackWhenItExits) {
  DaemonProcess d;
  start_supervised(d);
  auto v = std::make_optional(d.view());
  WorkerProcess w(d, "holder", {"--mutable", "16", "--register", "16"});
  w.expect_line("READY");
  w.expect_line("HOLDING");
  wait_counts(*v, Want{32, 16, 16, 0});
  for (int restart = 1; restart <= 3; ++restart) {
    SCOPED_TRACE("restart " + std::to_string(restart));
    const uint64_t old = kill_daemon(*v);
    v.emplace(next_daemon(d, old));
    // Still kept: the process runs and may read (and write its mutable) blocks.
    EXPECT_TRUE(counts_match(v->counts(), Want{32, 16, 16, 0})) << v->describe();
    EXPECT_FALSE(w.wait_exit(0ms)) << "the idle worker exited";
  }
  w.kill9();
  ASSERT_TRUE(w.wait_exit(10s));
  // Its registered blocks stay cached (inactive), its mutable ones are free.
  wait_counts(*v, Want{48, 0, 0, 16}, 10s);
  // The daemon logs it after it moved the counts waited for above.
  EXPECT_TRUE(d.stderr_gets("process " + std::to_string(w.pid()) +
                            " that missed a restart has "
                            "exited: 32 block(s) kept for it are back in circulation"))
      << d.stderr_text();
  expect_invariants(*v);
}

// The daemon gives back only what the claiming process itself held, and only as it held
// it: another process naming our previous slot gets nothing; a claim of more than we held
// is answered "lost"; what we did not claim goes back into circulation.
TEST(Reattach, OnlyTheProcessThatHeldASlotTakesBackOnlyWhatItHeld) {
  DaemonProcess d;
  start_supervised(d);
  auto v = d.view();
  auto c1 = open_connection(d);
  auto a = must_call(*c1, Opcode::kAllocate, 0, 3, nullptr, 0);
  ASSERT_EQ(a.code, ErrorCode::kOk) << a.message;
  const uint64_t epoch = c1->epoch();
  const uint32_t slot = c1->slot(), slot_gen = c1->generation();
  wait_counts(v, Want{61, 3, 0, 0});
  const uint64_t old = kill_daemon(v);
  auto nv = next_daemon(d, old);
  const uint32_t keeper = nv.header().max_clients;

  // Another process: refused, nothing moves.
  WorkerProcess thief(
      KVPOOL_ATTACKER_PATH, d, "reclaim",
      {"--epoch", std::to_string(epoch), "--slot", std::to_string(slot), "--slot-generation",
       std::to_string(slot_gen), "--block", std::to_string(a.refs[0].id), "--generation",
       std::to_string(a.refs[0].generation)});
  EXPECT_EQ(thief.expect_line("RECLAIM"), "RECLAIM code=PermissionDenied lost=0");
  ASSERT_TRUE(thief.wait_exit(10s));
  EXPECT_EQ(nv.pool().block(a.refs[0].id).owner, keeper);

  // This process: block 0 as the mutable block it was; block 1 claimed as a reference
  // (it was mutable): lost; block 2 not claimed: freed by the final claim.
  auto c2 = open_connection(d);
  struct {
    proto::ReclaimHeader h;
    proto::ReclaimItem items[2];
  } rq{{epoch, slot, slot_gen + 1, 0, 0}, {{a.refs[0], 0, 0}, {a.refs[1], 1, 0}}};
  auto wrong = must_call(*c2, Opcode::kReclaim, 0, 2, &rq, sizeof(rq));
  EXPECT_EQ(wrong.code, ErrorCode::kPermissionDenied)
      << "another slot generation: " << wrong.message;
  EXPECT_TRUE(contains(wrong.message, "held under generation " + std::to_string(slot_gen)))
      << wrong.message;
  rq.h.previous_slot_generation = slot_gen;
  // Reserved fields and unknown flags are refused, and move nothing.
  rq.h.flags = 2;
  auto flags = must_call(*c2, Opcode::kReclaim, 0, 2, &rq, sizeof(rq));
  EXPECT_EQ(flags.code, ErrorCode::kProtocolError) << flags.message;
  EXPECT_TRUE(contains(flags.message, "only kReclaimFinal = 1 is known")) << flags.message;
  rq.h.flags = 0;
  rq.items[1].reserved = 7;
  auto reserved = must_call(*c2, Opcode::kReclaim, 0, 2, &rq, sizeof(rq));
  EXPECT_EQ(reserved.code, ErrorCode::kProtocolError) << reserved.message;
  EXPECT_TRUE(contains(reserved.message, "nonzero reserved field")) << reserved.message;
  rq.items[1].reserved = 0;
  EXPECT_EQ(nv.pool().block(a.refs[0].id).owner, keeper);
  rq.h.flags = proto::kReclaimFinal;
  auto r = must_call(*c2, Opcode::kReclaim, 0, 2, &rq, sizeof(rq));
  ASSERT_EQ(r.code, ErrorCode::kOk) << r.message;
  ASSERT_EQ(r.refs.size(), 1u);
  EXPECT_EQ(r.refs[0], a.refs[1]);
  auto look = nv.pool();
  EXPECT_EQ(look.block(a.refs[0].id).owner, c2->slot());
  EXPECT_EQ(look.block(a.refs[0].id).state, code(BlockStateCode::kMutable));
  // The lost block stays out of circulation while this process (which may still write
  // it) runs; the unclaimed one is free.
  EXPECT_EQ(look.block(a.refs[1].id).owner, keeper);
  EXPECT_EQ(look.block(a.refs[2].id).state, code(BlockStateCode::kFree));
  EXPECT_TRUE(counts_match(nv.counts(), Want{62, 2, 0, 0})) << nv.describe();
  // Once finished, the slot cannot be claimed again.
  auto twice = must_call(*c2, Opcode::kReclaim, 0, 0, &rq.h, sizeof(rq.h));
  EXPECT_EQ(twice.code, ErrorCode::kInvalidState) << twice.message;
  expect_invariants(nv);
}

// Whether the worker with `pid` is attached to the daemon of `v` and has sent it requests.
bool works_on(const DaemonView& v, pid_t pid) {
  for (uint32_t i = 0; i < v.header().max_clients; ++i)
    if (v.slot(i).pid.load(std::memory_order_relaxed) == pid &&
        v.slot(i).state.load(std::memory_order_acquire) ==
            static_cast<uint32_t>(shm::SlotState::kAttached) &&
        v.slot(i).requests.load(std::memory_order_relaxed) > 0)
      return true;
  return false;
}

// kill -9 of kvpoold at random points under two busy workers that reattach: they keep
// working on every next daemon (never restarted), the blocks they kept across each restart
// still hold their bytes (the workers check, exit 1 otherwise), and once they are gone
// everything they held is back: no block leaked, none both free and registered.
TEST(Reattach, BusyWorkersRideThroughKill9sWithTheirBlocksIntact) {
  const char* env = std::getenv("KVPOOL_RESTART_ROUNDS");
  const int rounds = env ? std::atoi(env) : 8;
  DaemonProcess d(test_config(nlohmann::json::array({host_pool("g", 128)})));
  start_supervised(d);
  std::mt19937_64 rng(std::random_device{}());
  auto v = std::make_optional(d.view());
  std::vector<std::unique_ptr<WorkerProcess>> workers;
  for (int w = 0; w < 2; ++w) {
    workers.push_back(std::make_unique<WorkerProcess>(
        d, "busy",
        std::vector<std::string>{"--threads", "2", "--pattern", "1", "--reattach", "1"}));
    workers.back()->expect_line("READY");
  }
  for (auto& w : workers) w->expect_line("WORKING");
  for (int round = 0; round < rounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const uint64_t at = stat_of(v->stats().requests) + rng() % 400;
    wait_until([&] { return stat_of(v->stats().requests) >= at; }, 10s, "requests to flow");
    const uint64_t old = kill_daemon(*v);
    v.emplace(next_daemon(d, old));
    for (auto& w : workers)
      wait_until([&] { return works_on(*v, w->pid()); }, 20s,
                 "worker " + std::to_string(w->pid()) + " to work on the next kvpoold",
                 [&] { return v->describe() + "\n" + d.stderr_text(); });
    EXPECT_GE(v->header().restart.adopted_pools, 1u) << d.stderr_text();
    if (::testing::Test::HasFailure()) break;
  }
  // Never restarted: the same two processes, still running (a corrupt block would have
  // made one exit 1, an unexpected error 4).
  for (auto& w : workers) {
    EXPECT_FALSE(w->wait_exit(0ms)) << "worker " << w->pid() << " exited";
    w->kill9();
    ASSERT_TRUE(w->wait_exit(10s));
  }
  // What they held comes back; what is registered matches with its writer's bytes.
  wait_counts(*v, Want{-1, 0, 0, -1});
  expect_invariants(*v);
  auto look = v->pool();
  std::vector<std::string> hashes;
  for (uint32_t id = 0; id < 128; ++id)
    if (look.block(id).state == code(BlockStateCode::kInactive))
      hashes.push_back(std::to_string(look.block(id).sequence_hash));
  if (!hashes.empty()) {
    WorkerProcess reader(d, "reader", hashes);
    reader.expect_line("READY");
    const std::string m = reader.expect_line("MATCHED");
    EXPECT_EQ(field(m, "n"), std::to_string(hashes.size())) << m;
    reader.expect_line("VERIFIED");
  }
  auto [st, out] = d.run_ctl({"check"});
  EXPECT_TRUE(st.exited() && st.code() == 0) << out;
}

}  // namespace
}  // namespace kvpool::mptest
