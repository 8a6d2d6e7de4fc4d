// Daemon restarts (issue 15). Real kvpoold processes, real kill -9.
//  - Epochs: handles know the daemon that issued them; raw ring records where the library
//    would refuse first (it does: Handles.ABlockIsRegisteredOnlyThroughTheClientThat-
//    AllocatedIt), so that the daemon's own check is what is tested.
//  - Adoption: `kvpoold --supervise` keeps the segments across a kill -9 of its child (the
//    same descriptor-store protocol as systemd's); the next child adopts the host pools.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "client_helpers.hpp"
#include "harness.hpp"
#include "restart_helpers.hpp"

namespace kvpool::mptest {
namespace {

uint32_t tag_of(const DaemonView& v) { return v.header().restart.generation_tag; }

// Restarts `d` (killed first) until its generation tag differs from `other`. Unrelated
// daemons draw the same tag 1 time in 255 (daemon/epoch.hpp): then their handles are told
// apart only as stale, and this property is not what such a pair can show.
void restart_until_tag_differs(DaemonProcess& d, uint32_t other) {
  for (int k = 0; k < 16 && tag_of(d.view()) == other; ++k) {
    d.kill(SIGKILL);
    d.restart();
  }
  ASSERT_NE(tag_of(d.view()), other) << "16 restarts drew the same generation tag";
}

TEST(Epochs, EveryDaemonPublishesANewNonzeroEpochAndTag) {
  DaemonProcess d;
  d.start();
  const uint64_t e1 = d.view().header().restart.epoch;
  const uint32_t t1 = tag_of(d.view());
  EXPECT_NE(e1, 0u);
  EXPECT_GE(t1, 1u);
  EXPECT_LE(t1, 255u);
  auto st = d.ctl_status();
  char hex[24];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(e1));
  EXPECT_EQ(st["epoch"], hex) << st.dump();
  EXPECT_EQ(st["generation_tag"], t1) << st.dump();
  EXPECT_TRUE(st["previous_epoch"].is_null()) << st.dump();

  d.kill(SIGKILL);
  d.restart();
  EXPECT_NE(d.view().header().restart.epoch, e1) << "a restarted daemon has a new epoch";
  // Every block handed out carries the tag.
  auto c = open_connection(d);
  auto a = must_call(*c, Opcode::kAllocate, 0, 2, nullptr, 0);
  ASSERT_EQ(a.code, ErrorCode::kOk) << a.message;
  for (const BlockRef& r : a.refs)
    EXPECT_EQ(pool::generation_tag_of(r.generation), tag_of(d.view())) << r.generation;
}

// Two daemons whose pools share a name and a layout number their blocks alike: A's block
// names B's own block 0, still writable by B's client. kvpoold refuses it by its tag.
TEST(Epochs, ADaemonRefusesAHandleAnotherDaemonIssued) {
  DaemonProcess da, db;
  da.start();
  db.start();
  restart_until_tag_differs(db, tag_of(da.view()));
  auto va = da.view(), vb = db.view();
  auto ca = open_connection(da), cb = open_connection(db);
  auto a = must_call(*ca, Opcode::kAllocate, 0, 1, nullptr, 0);
  auto b = must_call(*cb, Opcode::kAllocate, 0, 1, nullptr, 0);
  ASSERT_EQ(a.code, ErrorCode::kOk) << a.message;
  ASSERT_EQ(b.code, ErrorCode::kOk) << b.message;
  const BlockRef from_a = a.refs.at(0), own = b.refs.at(0);
  ASSERT_EQ(from_a.id, own.id) << "both daemons hand out block 0 first";
  ASSERT_EQ(from_a.generation & pool::kGenerationCountMask,
            own.generation & pool::kGenerationCountMask);

  pool::RegisterItem item{from_a, 888, 888, 0, 0, 0};
  auto r = must_call(*cb, Opcode::kRegister, 0, 1, &item, sizeof(item));
  EXPECT_EQ(r.code, ErrorCode::kInvalidHandle) << r.message;
  EXPECT_TRUE(contains(r.message, "another kvpoold")) << r.message;
  // Its release is refused too, and counted; B's block stays B's client's, unregistered.
  const uint64_t rej = stat_of(vb.pool().stats().rejected_handles);
  ASSERT_TRUE(cb->send(Opcode::kReleaseMutable, 0, 1, &from_a, sizeof(BlockRef)));
  EXPECT_EQ(must_call(*cb, Opcode::kPing, 0, 0, nullptr, 0).code, ErrorCode::kOk);
  EXPECT_EQ(stat_of(vb.pool().stats().rejected_handles), rej + 1);
  EXPECT_EQ(state_of(vb, own.id), code(BlockStateCode::kMutable));
  EXPECT_EQ(stat_of(vb.pool().stats().registrations), 0u);
  std::vector<SequenceHash> q{888};
  EXPECT_TRUE(must_call(*cb, Opcode::kMatch, 0, 1, q.data(), sizeof(uint64_t)).refs.empty())
      << "B's block 0 must not be registered under A's hash";
  // B's own handle still works.
  pool::RegisterItem mine{own, 999, 999, 0, 0, 0};
  auto ok = must_call(*cb, Opcode::kRegister, 0, 1, &mine, sizeof(mine));
  EXPECT_EQ(ok.code, ErrorCode::kOk) << ok.message;
  expect_invariants(vb);
}

// A block allocated before kvpoold was killed: its successor (which adopted nothing here:
// no descriptor holder) numbers the same block alike for its next client, and refuses the
// old handle by its tag instead of taking it for the new client's block.
TEST(Epochs, ARestartedDaemonRefusesItsPredecessorsHandle) {
  DaemonProcess d;
  d.start();
  BlockRef old{};
  uint32_t old_tag = tag_of(d.view());
  {
    auto c = open_connection(d);
    auto a = must_call(*c, Opcode::kAllocate, 0, 1, nullptr, 0);
    ASSERT_EQ(a.code, ErrorCode::kOk) << a.message;
    old = a.refs.at(0);
    d.kill(SIGKILL);
    ASSERT_TRUE(d.wait_exit(10s));
  }
  d.restart();
  restart_until_tag_differs(d, old_tag);
  auto v = d.view();
  auto c = open_connection(d);
  auto a = must_call(*c, Opcode::kAllocate, 0, 1, nullptr, 0);
  ASSERT_EQ(a.code, ErrorCode::kOk) << a.message;
  const BlockRef fresh = a.refs.at(0);
  ASSERT_EQ(fresh.id, old.id);
  pool::RegisterItem item{old, 777, 777, 0, 0, 0};
  auto r = must_call(*c, Opcode::kRegister, 0, 1, &item, sizeof(item));
  EXPECT_EQ(r.code, ErrorCode::kInvalidHandle) << r.message;
  EXPECT_TRUE(contains(r.message, "another kvpoold")) << r.message;
  // The new client's own release of its block is not confused with the old handle's.
  ASSERT_TRUE(c->send(Opcode::kReleaseMutable, 0, 1, &old, sizeof(BlockRef)));
  EXPECT_EQ(must_call(*c, Opcode::kPing, 0, 0, nullptr, 0).code, ErrorCode::kOk);
  EXPECT_EQ(state_of(v, fresh.id), code(BlockStateCode::kMutable)) << "the old handle freed it";
  ASSERT_TRUE(c->send(Opcode::kReleaseMutable, 0, 1, &fresh, sizeof(BlockRef)));
  EXPECT_EQ(must_call(*c, Opcode::kPing, 0, 0, nullptr, 0).code, ErrorCode::kOk);
  EXPECT_EQ(state_of(v, fresh.id), code(BlockStateCode::kFree));
  expect_invariants(v);
}

// ============================================================================================
// Adoption through `kvpoold --supervise`.

void write_config(const DaemonProcess& d, nlohmann::json config) {
  config["instance"] = d.instance();
  config["runtime_dir"] = d.runtime_dir();
  std::ofstream(d.config_path()) << config.dump(2) << "\n";
}

TEST(Adoption, RegisteredBlocksSurviveAKill9WithTheirBytes) {
  DaemonProcess d;
  start_supervised(d);
  auto v = d.view();
  WorkerProcess writer(d, "writer", {"--blocks", "3", "--salt", "1337", "--token-base", "1"});
  writer.expect_line("READY");
  const std::string reg = writer.expect_line("REGISTERED");
  const auto hashes = parse_list(field(reg, "hashes"));
  const auto ids = parse_list(field(reg, "ids"));
  writer.send_line("exit");
  ASSERT_TRUE(writer.wait_exit(10s));
  // A client still attached when the daemon dies: its registered blocks are active, its
  // mutable blocks are its own.
  WorkerProcess holder(d, "holder",
                       {"--mutable", "2", "--register", "2", "--salt", "7", "--token-base", "500"});
  holder.expect_line("READY");
  const std::string held = holder.expect_line("HOLDING");
  const auto held_hashes = parse_list(field(held, "hashes"));
  wait_counts(v, Want{57, 2, 2, 3});
  const uint64_t registrations = stat_of(v.pool().stats().registrations);
  ASSERT_EQ(registrations, 5u);

  const uint64_t old = kill_daemon(v);
  auto nv = next_daemon(d, old);
  const shm::RestartInfo& r = nv.header().restart;
  EXPECT_EQ(r.previous_epoch, old);
  EXPECT_EQ(r.adopted_pools, 1u);
  EXPECT_EQ(r.adopted_blocks, 5u);
  EXPECT_EQ(r.adoption_dropped_blocks, 0u);
  EXPECT_NE(r.generation_tag, 0u);
  // The holder still runs and may still read or write what it held: those 4 blocks stay out
  // of circulation (held by the daemon's keeper) until it exits; the writer's are inactive.
  EXPECT_TRUE(counts_match(nv.counts(), Want{57, 2, 2, 3})) << nv.describe();
  for (uint64_t id : ids)
    EXPECT_EQ(state_of(nv, static_cast<uint32_t>(id)), code(BlockStateCode::kInactive));
  expect_invariants(nv);
  holder.send_line("exit");
  ASSERT_TRUE(holder.wait_exit(10s));
  wait_counts(nv, Want{59, 0, 0, 5});
  // The counts change before the line is logged: wait for it.
  wait_until(
      [&] { return contains(d.stderr_text(), "has exited without reattaching: 4 block(s)"); }, 10s,
      "the log of the holder's exit", [&] { return d.stderr_text(); });
  expect_invariants(nv);
  auto [st, out] = d.run_ctl({"check"});
  EXPECT_TRUE(st.exited() && st.code() == 0) << out;
  auto status = d.ctl_status();
  EXPECT_EQ(status["adopted_blocks"], 5) << status.dump();
  EXPECT_EQ(status["pools"][0]["adopted_blocks"], 5) << status.dump();
  auto [mst, metrics] = d.run_ctl({"metrics"});
  EXPECT_TRUE(contains(metrics, "kvpool_adopted_blocks_total{pool=\"g\"} 5")) << metrics;
  EXPECT_TRUE(contains(metrics, "kvpool_adoption_dropped_blocks_total{pool=\"g\"} 0")) << metrics;

  // Every block still matches, and holds the bytes its writer wrote.
  std::vector<std::string> args;
  for (auto h : hashes) args.push_back(std::to_string(h));
  WorkerProcess reader(d, "reader", args);
  reader.expect_line("READY");
  const std::string m = reader.expect_line("MATCHED");
  EXPECT_EQ(field(m, "n"), "3") << m;
  EXPECT_EQ(parse_list(field(m, "ids")), ids) << m;
  reader.expect_line("VERIFIED");
  std::vector<SequenceHash> q(held_hashes.begin(), held_hashes.end());
  auto c = open_connection(d);
  auto hit = must_call(*c, Opcode::kMatch, 0, static_cast<uint32_t>(q.size()), q.data(),
                       q.size() * sizeof(uint64_t));
  EXPECT_EQ(hit.refs.size(), held_hashes.size()) << "the holder's registered blocks match too";
  // Blocks freed by adoption are allocated again as usual, with this daemon's tag.
  auto a = must_call(*c, Opcode::kAllocate, 0, 59, nullptr, 0);
  ASSERT_EQ(a.code, ErrorCode::kOk) << a.message;
  for (const BlockRef& ref : a.refs)
    EXPECT_EQ(pool::generation_tag_of(ref.generation), r.generation_tag);
  expect_invariants(nv);
}

// Field 22 of /proc/<pid>/stat: the process's start time in clock ticks since boot.
uint64_t start_ticks_of(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::istringstream rest(s.substr(s.rfind(')') + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
  }
  return std::stoull(field);
}

// Now, in the same clock ticks since boot.
uint64_t uptime_ticks() {
  std::ifstream f("/proc/uptime");
  double seconds = 0;
  f >> seconds;
  return static_cast<uint64_t>(seconds * static_cast<double>(::sysconf(_SC_CLK_TCK)));
}

// A child that takes pid `want` (free now) and waits until `hold` is closed; -1 when 500 tries
// lost the pid to the machine's other forks. Through ns_last_pid (root): the kernel hands out
// the pid after the one written there. The child exits when hold[1] is closed.
pid_t fork_with_pid(pid_t want, const int hold[2]) {
  for (int attempt = 0; attempt < 500; ++attempt) {
    {
      std::ofstream last("/proc/sys/kernel/ns_last_pid");
      last << (want - 1);
      if (!last.flush()) return -1;
    }
    const pid_t pid = ::fork();
    if (pid < 0) return -1;
    if (pid == 0) {      // async-signal-safe only
      ::close(hold[1]);  // so that the read sees EOF once the test closes its end
      char b;
      (void)!::read(hold[0], &b, 1);
      ::_exit(0);
    }
    if (pid == want) return pid;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  return -1;
}

// Issue 27 item 6: a client dies while kvpoold is stopped and an unrelated process takes its
// pid before the next daemon adopts the pool. The next daemon tells them apart by the start
// time the slot recorded: the dead client's blocks come back, nothing is pinned for the
// impostor.
TEST(Adoption, APidTakenWhileNoDaemonRanDoesNotPinTheDeadClientsBlocks) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (ns_last_pid)";
  DaemonProcess d;
  start_supervised(d);
  auto v = d.view();
  auto holder = std::make_unique<WorkerProcess>(
      d, "holder", std::vector<std::string>{"--mutable", "2", "--register", "2", "--salt", "9"});
  holder->expect_line("READY");
  holder->expect_line("HOLDING");
  wait_counts(v, Want{60, 2, 2, 0});
  const pid_t victim = holder->pid();
  const uint64_t victim_ticks = start_ticks_of(victim);
  // The daemon stops; the holder dies unseen, and its pid goes to another process, started
  // at another tick than the holder (ticks are 10 ms: wait for the next one).
  const auto daemon_pid = static_cast<pid_t>(v.header().daemon_pid);
  ASSERT_EQ(::kill(daemon_pid, SIGSTOP), 0);
  holder->kill(SIGKILL);
  ASSERT_TRUE(holder->wait_exit(10s));
  wait_until([&] { return uptime_ticks() > victim_ticks + 1; }, 5s,
             "a clock tick after the holder's start");
  int hold[2];
  ASSERT_EQ(::pipe2(hold, O_CLOEXEC), 0);
  pid_t impostor = -1;
  for (int k = 0; k < 20 && impostor < 0; ++k) {
    impostor = fork_with_pid(victim, hold);
    if (impostor > 0 && start_ticks_of(impostor) == victim_ticks) {
      ::kill(impostor, SIGKILL);
      ::waitpid(impostor, nullptr, 0);
      impostor = -1;
    }
  }
  ::close(hold[0]);
  ASSERT_GT(impostor, 0) << "could not give pid " << victim << " to another process";
  ASSERT_NE(start_ticks_of(impostor), victim_ticks);

  // The stopped daemon dies; the supervisor starts the next one, which adopts the pool.
  const uint64_t old = v.header().restart.epoch;
  ASSERT_EQ(::kill(daemon_pid, SIGKILL), 0);
  auto nv = next_daemon(d, old);
  // The holder's mutable blocks are free again and its registered ones inactive (cached).
  wait_counts(nv, Want{62, 0, 0, 2});
  EXPECT_TRUE(d.stderr_gets("now names another process")) << d.stderr_text();
  expect_invariants(nv);
  ::close(hold[1]);  // the impostor exits
  ::waitpid(impostor, nullptr, 0);
}

TEST(Adoption, AChangedPoolShapeStartsEmptyAndSaysWhy) {
  DaemonProcess d;
  start_supervised(d);
  auto v = d.view();
  WorkerProcess writer(d, "writer", {"--blocks", "3", "--salt", "1337", "--token-base", "1"});
  writer.expect_line("READY");
  writer.expect_line("REGISTERED");
  writer.send_line("exit");
  ASSERT_TRUE(writer.wait_exit(10s));
  wait_counts(v, Want{61, 0, 0, 3});

  write_config(d, test_config(nlohmann::json::array({host_pool("g", 32)})));
  auto nv = next_daemon(d, kill_daemon(v));
  EXPECT_TRUE(counts_match(nv.counts(), Want{32, 0, 0, 0})) << nv.describe();
  EXPECT_EQ(nv.header().restart.adopted_pools, 0u);
  EXPECT_EQ(nv.header().restart.adopted_blocks, 0u);
  const std::string log = d.stderr_text();
  EXPECT_TRUE(contains(log, "pool 'g' starts empty")) << log;
  EXPECT_TRUE(contains(log, "layout changed (blocks 64 -> 32")) << log;
  expect_invariants(nv);
}

TEST(Adoption, AScribbledArenaIsDetectedAndThePoolStartsEmpty) {
  DaemonProcess d;
  start_supervised(d, {"--supervise-hook", std::string(KVPOOL_RESTART_TOOL_PATH) + " scribble g"});
  auto v = d.view();
  WorkerProcess writer(d, "writer", {"--blocks", "3", "--salt", "1337", "--token-base", "1"});
  writer.expect_line("READY");
  const auto hashes = parse_list(field(writer.expect_line("REGISTERED"), "hashes"));
  writer.send_line("exit");
  ASSERT_TRUE(writer.wait_exit(10s));
  wait_counts(v, Want{61, 0, 0, 3});

  auto nv = next_daemon(d, kill_daemon(v));
  const std::string log = d.stderr_text();
  ASSERT_TRUE(contains(log, "HOOK scribbled 16 block records of pool 'g'")) << log;
  EXPECT_TRUE(contains(log, "its arena is corrupt")) << log;
  EXPECT_TRUE(counts_match(nv.counts(), Want{64, 0, 0, 0})) << nv.describe();
  EXPECT_EQ(nv.header().restart.adopted_blocks, 0u);
  std::vector<SequenceHash> q(hashes.begin(), hashes.end());
  auto c = open_connection(d);
  EXPECT_TRUE(must_call(*c, Opcode::kMatch, 0, static_cast<uint32_t>(q.size()), q.data(),
                        q.size() * sizeof(uint64_t))
                  .refs.empty())
      << "nothing of a scribbled arena is served";
  expect_invariants(nv);
}

// A daemon killed inside a pool call leaves a half-written arena (its write sequence odd):
// the next one checks each block against the hash table and drops the one whose
// registration it cannot prove, keeps the others with their bytes.
TEST(Adoption, ABlockWhoseRegistrationCannotBeProvenIsDropped) {
  DaemonProcess d;
  start_supervised(d, {"--supervise-hook", std::string(KVPOOL_RESTART_TOOL_PATH) + " interrupt g"});
  auto v = d.view();
  WorkerProcess writer(d, "writer", {"--blocks", "3", "--salt", "1337", "--token-base", "1"});
  writer.expect_line("READY");
  const std::string reg = writer.expect_line("REGISTERED");
  const auto hashes = parse_list(field(reg, "hashes"));
  const auto ids = parse_list(field(reg, "ids"));
  writer.send_line("exit");
  ASSERT_TRUE(writer.wait_exit(10s));
  wait_counts(v, Want{61, 0, 0, 3});

  auto nv = next_daemon(d, kill_daemon(v));
  const std::string log = d.stderr_text();
  ASSERT_TRUE(contains(log, "HOOK interrupted pool 'g': block")) << log;
  EXPECT_TRUE(contains(log, "its daemon died inside a pool call")) << log;
  EXPECT_EQ(nv.header().restart.adopted_blocks, 2u);
  EXPECT_EQ(nv.header().restart.adoption_dropped_blocks, 1u);
  EXPECT_TRUE(counts_match(nv.counts(), Want{62, 0, 0, 2})) << nv.describe();
  expect_invariants(nv);
  // The dropped block is the lowest id registered (the hook takes the first); the others
  // match by their hashes with their bytes.
  const uint64_t lost = *std::min_element(ids.begin(), ids.end());
  std::vector<std::string> kept;
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] != lost) kept.push_back(std::to_string(hashes[i]));
  WorkerProcess reader(d, "reader", kept);
  reader.expect_line("READY");
  EXPECT_EQ(field(reader.expect_line("MATCHED"), "n"), "2");
  reader.expect_line("VERIFIED");
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] == lost) {
      std::vector<SequenceHash> q{hashes[i]};
      auto c = open_connection(d);
      EXPECT_TRUE(must_call(*c, Opcode::kMatch, 0, 1, q.data(), sizeof(uint64_t)).refs.empty())
          << "the unproven block is not served";
    }
}

// SIGTERM without --keep-cache is a real stop: the next start is empty. With it, an upgrade:
// the next start adopts.
TEST(Adoption, AStopKeepsTheCacheOnlyWithKeepCache) {
  for (bool keep : {false, true}) {
    SCOPED_TRACE(keep ? "--keep-cache" : "no --keep-cache");
    DaemonProcess d;
    start_supervised(d,
                     keep ? std::vector<std::string>{"--keep-cache"} : std::vector<std::string>{});
    auto v = d.view();
    WorkerProcess writer(d, "writer", {"--blocks", "2", "--salt", "1337", "--token-base", "1"});
    writer.expect_line("READY");
    writer.expect_line("REGISTERED");
    writer.send_line("exit");
    ASSERT_TRUE(writer.wait_exit(10s));
    wait_counts(v, Want{62, 0, 0, 2});
    // The supervisor was not asked to stop: it starts the next kvpoold.
    auto nv = next_daemon(d, kill_daemon(v, SIGTERM));
    EXPECT_TRUE(counts_match(nv.counts(), keep ? Want{62, 0, 0, 2} : Want{64, 0, 0, 0}))
        << nv.describe();
    EXPECT_EQ(nv.header().restart.adopted_blocks, keep ? 2u : 0u);
  }
}

// kill -9 at random points under a multi-client load, many times: after each restart the
// adopted pool passes its invariants (no block both free and registered, none held twice),
// nobody holds anything, and every registered block matches and holds the bytes its writer
// wrote. KVPOOL_RESTART_ROUNDS sets the rounds (default 16).
TEST(Adoption, Kill9UnderLoadNeverServesAWrongBlock) {
  const char* env = std::getenv("KVPOOL_RESTART_ROUNDS");
  const int rounds = env ? std::atoi(env) : 16;
  DaemonProcess d(test_config(nlohmann::json::array({host_pool("g", 128)})));
  start_supervised(d);
  std::mt19937_64 rng(std::random_device{}());
  uint64_t kept = 0, dropped = 0, registered_before = 0;
  auto v = std::make_optional(d.view());
  for (int round = 0; round < rounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    std::vector<std::unique_ptr<WorkerProcess>> workers;
    for (int w = 0; w < 2; ++w) {
      workers.push_back(std::make_unique<WorkerProcess>(
          d, "busy", std::vector<std::string>{"--threads", "2", "--pattern", "1"}));
      workers.back()->expect_line("READY");
    }
    for (auto& w : workers) w->expect_line("WORKING");
    // A random point: after 0 to 400 more requests.
    const uint64_t at = stat_of(v->stats().requests) + rng() % 400;
    wait_until([&] { return stat_of(v->stats().requests) >= at; }, 10s, "requests to flow");
    const auto counts = v->counts();
    registered_before += counts.active + counts.inactive;
    const uint64_t old = kill_daemon(*v);
    v.emplace(next_daemon(d, old));
    // The workers notice (DaemonGone: exit code 3) before anything is checked, so that no
    // thread of theirs still writes the blocks they had as mutable (now free).
    for (auto& w : workers) {
      auto st = w->wait_exit(10s);
      ASSERT_TRUE(st) << "a busy worker did not notice its daemon's death";
      EXPECT_TRUE(st->exited() && st->code() == 3) << st->describe();
    }
    const shm::RestartInfo& r = v->header().restart;
    kept += r.adopted_blocks;
    dropped += r.adoption_dropped_blocks;
    // What the workers held comes back once the daemon sees they exited.
    wait_counts(*v, Want{-1, 0, 0, static_cast<int64_t>(r.adopted_blocks)});
    expect_invariants(*v);
    // Every registered block, matched by its hash, holds its writer's pattern.
    auto look = v->pool();
    std::vector<std::string> hashes;
    for (uint32_t id = 0; id < 128; ++id)
      if (look.block(id).state == code(BlockStateCode::kInactive))
        hashes.push_back(std::to_string(look.block(id).sequence_hash));
    if (hashes.empty()) continue;
    WorkerProcess reader(d, "reader", hashes);
    reader.expect_line("READY");
    const std::string m = reader.expect_line("MATCHED");
    EXPECT_EQ(field(m, "n"), std::to_string(hashes.size())) << m;
    reader.expect_line("VERIFIED");
    reader.send_line("exit");
    ASSERT_TRUE(reader.wait_exit(10s));
    if (::testing::Test::HasFailure()) break;
  }
  std::printf(
      "%d kill -9 restarts under load: %llu registered blocks before the kills, %llu "
      "adopted (%.1f%%), %llu dropped\n",
      rounds, static_cast<unsigned long long>(registered_before),
      static_cast<unsigned long long>(kept),
      registered_before ? 100.0 * static_cast<double>(kept) / static_cast<double>(registered_before)
                        : 0.0,
      static_cast<unsigned long long>(dropped));
}

}  // namespace
}  // namespace kvpool::mptest
