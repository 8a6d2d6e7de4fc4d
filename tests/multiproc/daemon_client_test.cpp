// The daemon and its clients as separate processes: the real kvpoold, real worker processes
// (tests/multiproc/test_worker.cpp) and this test process as a client too. Pool state is
// read from the daemon's control segment (what kvpoolctl status shows), never assumed.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <optional>
#include <random>
#include <thread>

#include "client_helpers.hpp"
#include "harness.hpp"
#include "kvpool/client.hpp"

namespace kvpool::mptest {
namespace {

// Dynamo's reference vectors (salt 1337, page size 4).
constexpr SequenceHash kSeq1 = 14643705804678351452ull;     // [1,2,3,4]
constexpr SequenceHash kSeq12 = 4945711292740353085ull;     // [1..4],[5..8]
constexpr SequenceHash kSeq123 = 12583592247330656132ull;   // [1..4],[5..8],[9..12]
constexpr BlockHash kBlock5678 = 16777012769546811212ull;   // block hash of [5..8]
constexpr BlockHash kBlock9101112 = 483935686894639516ull;  // block hash of [9..12]

// A committed block for `tokens` (no parent), ready to register.
MutableBlock committed(Pool& p, std::vector<Token> tokens, Salt salt = 1337) {
  auto v = p.allocate_blocks(1);
  if (!v) throw HarnessError(v.status().to_string());
  MutableBlock b = std::move((*v)[0]);
  Status st = b.init_sequence(salt);
  if (st.is_ok()) st = b.add_tokens(tokens).status();
  if (st.is_ok()) st = b.commit();
  if (!st.is_ok()) throw HarnessError(st.to_string());
  return b;
}

// ============================================================================================
// Two client processes share a registered prefix.

TEST(SharedPrefix, ReaderMatchesWriterBlocksAndReadsItsBytes) {
  DaemonProcess d;
  d.start();
  auto v = d.view();

  WorkerProcess writer(d, "writer", {"--blocks", "3", "--salt", "1337", "--token-base", "1"});
  const uint32_t ws = std::stoul(field(writer.expect_line("READY"), "slot"));
  std::string reg = writer.expect_line("REGISTERED");
  auto hashes = parse_list(field(reg, "hashes"));
  auto ids = parse_list(field(reg, "ids"));
  // Tokens 1..12 in blocks of 4, salt 1337: Dynamo's reference chain.
  ASSERT_EQ(hashes, (std::vector<uint64_t>{kSeq1, kSeq12, kSeq123})) << reg;
  ASSERT_EQ(ids.size(), 3u);

  std::vector<std::string> args;
  for (auto h : hashes) args.push_back(std::to_string(h));
  WorkerProcess reader(d, "reader", args);
  const uint32_t rs = std::stoul(field(reader.expect_line("READY"), "slot"));
  ASSERT_NE(ws, rs);
  std::string m = reader.expect_line("MATCHED");
  EXPECT_EQ(field(m, "n"), "3") << m;
  EXPECT_EQ(parse_list(field(m, "ids")), ids) << "both clients must see the same blocks: " << m;
  EXPECT_EQ(parse_list(field(m, "hashes")), hashes) << m;
  // 3 blocks x 2 layers x 2 (K, V): every byte the writer wrote, read by the other process.
  EXPECT_EQ(reader.expect_line("VERIFIED"), "VERIFIED regions=12");

  // The daemon's view: one physical block per hash, referenced by both clients once.
  for (auto id : ids) {
    const auto& b = v.pool().block(static_cast<uint32_t>(id));
    EXPECT_EQ(b.state, code(BlockStateCode::kActive)) << "block " << id;
    EXPECT_EQ(b.refcount, 2u) << "block " << id;
    EXPECT_EQ(v.pool().holds_of(ws, static_cast<uint32_t>(id)), 1u) << "block " << id;
    EXPECT_EQ(v.pool().holds_of(rs, static_cast<uint32_t>(id)), 1u) << "block " << id;
  }
  EXPECT_TRUE(counts_match(v.counts(), Want{61, 0, 3, 0})) << v.describe();

  // The reader detaches cleanly: its references go, the writer's stay.
  reader.send_line("exit");
  auto st = reader.wait_exit(10s);
  ASSERT_TRUE(st) << "reader did not exit";
  EXPECT_TRUE(st->exited() && st->code() == 0) << st->describe();
  wait_until([&] { return v.clients() == 1; }, 10s, "the reader's slot to be freed",
             [&] { return v.describe(); });
  for (auto id : ids) {
    EXPECT_EQ(v.pool().block(static_cast<uint32_t>(id)).refcount, 1u);
    EXPECT_EQ(v.pool().holds_of(rs, static_cast<uint32_t>(id)), 0u);
    EXPECT_EQ(v.pool().holds_of(ws, static_cast<uint32_t>(id)), 1u);
  }
  EXPECT_EQ(stat_of(v.stats().reclaimed_clients), 0u) << "a clean detach is not a reclaim";

  // The writer goes too: the blocks stay registered (inactive), and a new reader still
  // matches them and reads the writer's bytes.
  writer.send_line("exit");
  ASSERT_TRUE(writer.wait_exit(10s));
  wait_counts(v, Want{61, 0, 0, 3});
  WorkerProcess late(d, "reader", args);
  late.expect_line("READY");
  m = late.expect_line("MATCHED");
  EXPECT_EQ(parse_list(field(m, "ids")), ids) << m;
  EXPECT_EQ(late.expect_line("VERIFIED"), "VERIFIED regions=12");
  expect_invariants(v);
}

// ============================================================================================
// Dynamo's BlockPool tests, through the daemon: a pool of 7 blocks of page size 4.

nlohmann::json dynamo_config() {
  return test_config(nlohmann::json::array({host_pool("g", 7, 4)}));
}

// The most pools a config may list (16): the Welcome carries each one's registry segment and
// memory descriptor in one message, and a client attaches and uses the last of them.
TEST(Attach, AClientOfAnInstanceWithSixteenPoolsGetsEveryPool) {
  nlohmann::json pools = nlohmann::json::array();
  for (int i = 0; i < 16; ++i)
    pools.push_back(host_pool(std::string("p").append(std::to_string(i)), 4));
  DaemonProcess d(test_config(pools));
  // A hang guard, not a speed check: 16 pools' segments take 0.7 s to set up in a
  // RelWithDebInfo build but ~9 s under TSan (its shadow of every mapping) on an idle
  // 2-core VM, past the default 10 s when the machine is loaded.
  d.start(120s);
  Client c = connect_client(d);
  for (int i = 0; i < 16; ++i) {
    Pool p = pool_of(c, std::string("p").append(std::to_string(i)));
    auto v = p.allocate_blocks(4);
    ASSERT_TRUE(v) << "pool p" << i << ": " << v.status().to_string();
  }
}

// The engine's pass looks only at the slots whose clients said Ready (Sessions::live), not
// at every slot: a client that leaves takes its slot out of the pass, and a new one, in the
// slot just freed, is in it from its first call. 4 slots churn for 40 rounds (one client
// leaves, a new one comes) and every client calls each round: a slot left out of the pass
// would leave its client's call unanswered (the ctest timeout is the hang guard).
TEST(Attach, EveryClientIsServedWhileSlotsChurn) {
  auto cfg = dynamo_config();
  cfg["max_clients"] = 4;
  DaemonProcess d(cfg);
  d.start();
  auto v = d.view();
  std::vector<std::optional<Client>> clients;
  for (int i = 0; i < 4; ++i) clients.emplace_back(connect_client(d));
  std::mt19937 rng(29);
  for (int round = 0; round < 40; ++round) {
    clients[rng() % clients.size()].reset();  // detaches; the daemon frees its slot
    wait_until([&] { return v.clients() == 3; }, 10s, "a slot to be freed",
               [&] { return v.describe(); });
    for (auto& c : clients)
      if (!c) c.emplace(connect_client(d));
    for (auto& c : clients) {
      Pool p = pool_of(*c);
      auto b = p.allocate_blocks(1);
      ASSERT_TRUE(b) << "round " << round << ": " << b.status().to_string();
    }
  }
  EXPECT_EQ(v.clients(), 4u);
  expect_invariants(v);
}

TEST(DynamoPool, BlockingApi) {
  DaemonProcess d(dynamo_config());
  d.start();
  auto v = d.view();
  Client c = connect_client(d);
  Pool p = pool_of(c);
  ASSERT_EQ(p.page_size(), 4u);
  ASSERT_TRUE(counts_match(v.counts(), Want{7, 0, 0, 0})) << v.describe();

  auto blocks = p.allocate_blocks(1);
  ASSERT_TRUE(blocks) << blocks.status().to_string();
  ASSERT_EQ(blocks->size(), 1u);
  // Answers are published after the pool changed: no wait needed.
  EXPECT_TRUE(counts_match(v.counts(), Want{6, 1, 0, 0})) << v.describe();
  EXPECT_EQ(v.counts().free + v.counts().inactive, 6u) << "available blocks";

  MutableBlock b = std::move((*blocks)[0]);
  ASSERT_TRUE(b.init_sequence(1337).is_ok());
  for (Token t : {1u, 2u, 3u, 4u}) ASSERT_TRUE(b.add_token(t).is_ok()) << t;
  EXPECT_EQ(b.add_token(5).code(), ErrorCode::kBlockFull);
  ASSERT_TRUE(b.commit().is_ok());
  ASSERT_TRUE(b.state().is_complete());
  ASSERT_TRUE(b.sequence_hash());
  EXPECT_EQ(*b.sequence_hash(), kSeq1);
  const uint32_t id = b.block_id();

  std::vector<MutableBlock> to_register;
  to_register.push_back(std::move(b));
  auto reg = p.register_blocks(std::move(to_register));
  ASSERT_TRUE(reg) << reg.status().to_string();
  ASSERT_EQ(reg->size(), 1u);
  EXPECT_EQ((*reg)[0].block_id(), id);
  EXPECT_EQ((*reg)[0].sequence_hash(), kSeq1);
  // Registered, in use by us once.
  EXPECT_EQ(state_of(v, id), code(BlockStateCode::kActive));
  EXPECT_EQ(v.pool().block(id).sequence_hash, kSeq1);
  EXPECT_EQ(v.pool().block(id).refcount, 1u);
  EXPECT_EQ(v.pool().holds_of(c.slot(), id), 1u);
  EXPECT_TRUE(counts_match(v.counts(), Want{6, 0, 1, 0})) << v.describe();

  // Drop: the block stays registered, unreferenced (inactive), available again.
  reg->clear();
  c.flush();
  wait_counts(v, Want{6, 0, 0, 1});
  EXPECT_EQ(state_of(v, id), code(BlockStateCode::kInactive));
  EXPECT_EQ(v.counts().free + v.counts().inactive, 7u);

  std::vector<SequenceHash> q{kSeq1};
  auto m = p.match_sequence_hashes(q);
  ASSERT_TRUE(m) << m.status().to_string();
  ASSERT_EQ(m->size(), 1u);
  EXPECT_EQ((*m)[0].block_id(), id);
  EXPECT_EQ((*m)[0].sequence_hash(), kSeq1);
  EXPECT_EQ(state_of(v, id), code(BlockStateCode::kActive));
  EXPECT_TRUE(counts_match(v.counts(), Want{6, 0, 1, 0})) << v.describe();

  // All or nothing: 6 available, 7 asked.
  auto too_many = p.allocate_blocks(7);
  ASSERT_FALSE(too_many);
  EXPECT_EQ(too_many.status().code(), ErrorCode::kNotEnoughBlocks);
  EXPECT_TRUE(contains(too_many.status().message(), "6")) << too_many.status().message();
  EXPECT_TRUE(counts_match(v.counts(), Want{6, 0, 1, 0})) << "a refused allocate changes nothing";
  auto six = p.allocate_blocks(6);
  ASSERT_TRUE(six) << six.status().to_string();
  EXPECT_TRUE(counts_match(v.counts(), Want{0, 6, 1, 0})) << v.describe();
  six->clear();
  m->clear();
  c.flush();
  wait_counts(v, Want{6, 0, 0, 1});
  expect_invariants(v);
}

// The handles of one answer share one allocation but not one fate: each block's reference
// goes back when that block's last copy goes, whatever happens to its neighbours.
// Registers the reference sequence [1..4],[5..8],[9..12] (kSeq1, kSeq12, kSeq123), lets
// it go and waits until the daemon caches all three; returns their block ids.
std::vector<uint32_t> register_reference_sequence(Client& c, Pool& p, DaemonView& v) {
  auto blocks = p.allocate_blocks(3);
  EXPECT_TRUE(blocks) << blocks.status().to_string();
  if (!blocks) return {};
  SequenceHash parent = 0;
  for (uint32_t i = 0; i < 3; ++i) {
    MutableBlock& b = (*blocks)[i];
    EXPECT_TRUE(i == 0 ? b.init_sequence(1337).is_ok() : b.init_sequence(1337, parent).is_ok());
    for (Token t = 1; t <= 4; ++t) EXPECT_TRUE(b.add_token(i * 4 + t).is_ok());
    EXPECT_TRUE(b.commit().is_ok());
    parent = *b.sequence_hash();
  }
  auto reg = p.register_blocks(std::move(*blocks));
  EXPECT_TRUE(reg) << reg.status().to_string();
  if (!reg) return {};
  std::vector<uint32_t> ids;
  for (const ImmutableBlock& b : *reg) ids.push_back(b.block_id());
  reg->clear();
  c.flush();
  wait_counts(v, Want{-1, 0, 0, 3});
  return ids;
}

TEST(DynamoPool, EachBlockOfAnAnswerIsReleasedWithItsOwnLastCopy) {
  DaemonProcess d;
  d.start();
  auto v = d.view();
  Client c = connect_client(d);
  Pool p = pool_of(c);
  const std::vector<uint32_t> ids = register_reference_sequence(c, p, v);
  ASSERT_EQ(ids.size(), 3u);
  const uint32_t id0 = ids[0], id1 = ids[1], id2 = ids[2];

  auto m = p.match_sequence_hashes(std::vector<SequenceHash>{kSeq1, kSeq12, kSeq123});
  ASSERT_TRUE(m) << m.status().to_string();
  ASSERT_EQ(m->size(), 3u);
  ImmutableBlock kept = (*m)[1];  // a copy: the same one reference
  ImmutableBlock kept2 = kept;
  EXPECT_EQ(v.pool().block(id1).refcount, 1u) << "copies share one daemon reference";
  m->clear();  // blocks 0 and 2 have no copy left; block 1 has two
  c.flush();
  wait_counts(v, Want{-1, 0, 1, 2});
  EXPECT_EQ(state_of(v, id0), code(BlockStateCode::kInactive));
  EXPECT_EQ(state_of(v, id2), code(BlockStateCode::kInactive));
  EXPECT_EQ(state_of(v, id1), code(BlockStateCode::kActive));
  EXPECT_EQ(kept2.block_id(), id1);
  EXPECT_EQ(kept.sequence_hash(), kSeq12);
  ASSERT_TRUE(kept.address(0, 0)) << "the kept block's bytes are still reachable";
  kept.reset();
  c.flush();
  ASSERT_TRUE(c.ping().is_ok());  // everything sent before it was handled
  EXPECT_EQ(state_of(v, id1), code(BlockStateCode::kActive)) << "one copy is left";
  kept2 = ImmutableBlock();  // the last copy
  c.flush();
  wait_counts(v, Want{-1, 0, 0, 3});
  expect_invariants(v);
}

// A dropped block's reference waits in its answer's slab for the batch (the answer's last
// block, the next request or flush(), or a lease tick). With another block of the answer
// still held and no call after the drop, the lease thread's tick sends it: holding one
// block must not pin the others, even in a client that goes quiet.
TEST(DynamoPool, DroppedBlocksOfAHeldAnswerGoBackWithoutAnotherCall) {
  DaemonProcess d;
  d.start();
  auto v = d.view();
  Client c = connect_client(d);
  Pool p = pool_of(c);
  const std::vector<uint32_t> ids = register_reference_sequence(c, p, v);
  ASSERT_EQ(ids.size(), 3u);
  auto m = p.match_sequence_hashes(std::vector<SequenceHash>{kSeq1, kSeq12, kSeq123});
  ASSERT_TRUE(m) << m.status().to_string();
  ASSERT_EQ(m->size(), 3u);
  ImmutableBlock kept = (*m)[1];
  m->clear();  // no flush, no request from here on
  wait_counts(v, Want{-1, 0, 1, 2});
  EXPECT_EQ(state_of(v, ids[0]), code(BlockStateCode::kInactive));
  EXPECT_EQ(state_of(v, ids[1]), code(BlockStateCode::kActive));
  EXPECT_EQ(state_of(v, ids[2]), code(BlockStateCode::kInactive));
  kept.reset();  // the answer's last block: its reference goes too
  wait_counts(v, Want{-1, 0, 0, 3});
  expect_invariants(v);
}

// Copies of one answer's blocks dropped on several threads at once, while another thread
// sends requests and flushes (each of which gives back what waits in the answer's slab) and
// the lease thread ticks: every reference goes back exactly once. A reference given back
// twice would leave a block free of references while we hold it (or be refused); one
// never given back would stay active. (TSan runs this too.)
TEST(DynamoPool, AnAnswersBlocksDroppedOnManyThreadsEachGoBackOnce) {
  DaemonProcess d;
  d.start();
  auto v = d.view();
  Client c = connect_client(d);
  Pool p = pool_of(c);
  ASSERT_EQ(register_reference_sequence(c, p, v).size(), 3u);
  const std::vector<SequenceHash> seq{kSeq1, kSeq12, kSeq123};
  const uint64_t released_before = stat_of(v.pool().stats().released_refs);
  const uint64_t rejected_before = stat_of(v.pool().stats().rejected_handles);
  constexpr int kRounds = 100;
  std::atomic<bool> done{false};
  std::thread caller([&] {
    while (!done.load(std::memory_order_relaxed)) {
      EXPECT_TRUE(c.ping().is_ok());
      c.flush();
    }
  });
  for (int round = 0; round < kRounds; ++round) {
    auto m = p.match_sequence_hashes(seq);
    ASSERT_TRUE(m) << m.status().to_string();
    ASSERT_EQ(m->size(), 3u);
    std::vector<std::thread> droppers;
    for (int t = 0; t < 3; ++t)
      droppers.emplace_back([copies = *m, t]() mutable {
        // Each thread lets go of its copies in its own order.
        for (int k = 0; k < 3; ++k) copies[(k + t) % 3].reset();
      });
    m->clear();
    for (auto& t : droppers) t.join();
  }
  done.store(true, std::memory_order_relaxed);
  caller.join();
  c.flush();
  wait_counts(v, Want{-1, 0, 0, 3});
  expect_invariants(v);
  // One daemon reference a block a round (the library holds one however many copies).
  EXPECT_EQ(stat_of(v.pool().stats().released_refs) - released_before, 3u * kRounds);
  EXPECT_EQ(stat_of(v.pool().stats().rejected_handles), rejected_before)
      << "a reference went back twice";
}

// Issue 27, item 9: an engine with many sequences on one prefix matches one block far
// more often than the daemon's per-block cap (max_refs_per_block, 1024 by default: its
// bound against a hostile client). The library holds one daemon reference per block and
// counts its own handles, so 3000 matches by one client succeed, and the block is free of
// references once the last handle goes.
TEST(DynamoPool, ThousandsOfMatchesOfOneBlockHoldOneDaemonReference) {
  DaemonProcess d;
  d.start();
  auto v = d.view();
  Client c = connect_client(d);
  Pool p = pool_of(c);
  auto blocks = p.allocate_blocks(1);
  ASSERT_TRUE(blocks) << blocks.status().to_string();
  ASSERT_TRUE((*blocks)[0].init_sequence(1337).is_ok());
  for (Token t = 1; t <= 4; ++t) ASSERT_TRUE((*blocks)[0].add_token(t).is_ok());
  ASSERT_TRUE((*blocks)[0].commit().is_ok());
  auto reg = p.register_blocks(std::move(*blocks));
  ASSERT_TRUE(reg && reg->size() == 1) << reg.status().to_string();
  const uint32_t id = (*reg)[0].block_id();
  const SequenceHash h = (*reg)[0].sequence_hash();
  constexpr int kMatches = 3000;
  std::vector<ImmutableBlock> held;
  held.reserve(kMatches);
  for (int i = 0; i < kMatches; ++i) {
    auto m = i % 2 == 0 ? p.match_sequence_hashes(std::vector<SequenceHash>{h})
                        : p.match_sequence_hashes_async(std::vector<SequenceHash>{h}).get();
    ASSERT_TRUE(m) << "match " << i << ": " << m.status().to_string();
    ASSERT_EQ(m->size(), 1u);
    held.push_back(std::move((*m)[0]));
  }
  // A second block id is never involved: one registered, one active block.
  c.flush();
  ASSERT_TRUE(c.ping().is_ok());  // every release sent before it was handled
  const uint32_t slot = c.slot();
  EXPECT_EQ(v.pool().holds_of(slot, id), 1u) << v.describe();
  EXPECT_EQ(v.pool().block(id).refcount, 1u);
  // Every handle but one goes: the block stays held (the last handle still reads it).
  reg->clear();
  held.resize(1);
  c.flush();
  ASSERT_TRUE(c.ping().is_ok());
  EXPECT_EQ(v.pool().holds_of(slot, id), 1u);
  EXPECT_EQ(state_of(v, id), code(BlockStateCode::kActive));
  ASSERT_TRUE(held[0].address(0, 0)) << "the last handle's bytes are reachable";
  held.clear();  // the last one
  c.flush();
  wait_counts(v, Want{63, 0, 0, 1});
  EXPECT_EQ(v.pool().holds_of(slot, id), 0u);
  EXPECT_EQ(v.pool().block(id).refcount, 0u);
  expect_invariants(v);
}

TEST(DynamoPool, AsyncApi) {
  DaemonProcess d(dynamo_config());
  d.start();
  auto v = d.view();
  Client c = connect_client(d);
  Pool p = pool_of(c);

  // Two requests in flight at once, answered out of the order they are collected.
  auto f1 = p.allocate_blocks_async(1);
  auto f2 = p.allocate_blocks_async(2);
  auto two = f2.get();
  auto one = f1.get();
  ASSERT_TRUE(one) << one.status().to_string();
  ASSERT_TRUE(two) << two.status().to_string();
  EXPECT_EQ(one->size(), 1u);
  EXPECT_EQ(two->size(), 2u);
  EXPECT_TRUE(counts_match(v.counts(), Want{4, 3, 0, 0})) << v.describe();
  two->clear();
  c.flush();
  wait_counts(v, Want{6, 1, 0, 0});
  EXPECT_EQ(v.counts().free + v.counts().inactive, 6u) << "available blocks";

  MutableBlock b = std::move((*one)[0]);
  ASSERT_TRUE(b.init_sequence(1337).is_ok());
  std::vector<Token> toks{1, 2, 3, 4};
  auto added = b.add_tokens(toks);
  ASSERT_TRUE(added);
  EXPECT_EQ(*added, 4u);
  EXPECT_EQ(b.add_token(5).code(), ErrorCode::kBlockFull);
  ASSERT_TRUE(b.commit().is_ok());
  EXPECT_EQ(*b.sequence_hash(), kSeq1);
  const uint32_t id = b.block_id();

  std::vector<MutableBlock> to_register;
  to_register.push_back(std::move(b));
  auto reg = p.register_blocks_async(std::move(to_register)).get();
  ASSERT_TRUE(reg) << reg.status().to_string();
  ASSERT_EQ(reg->size(), 1u);
  EXPECT_EQ((*reg)[0].block_id(), id);
  EXPECT_EQ(state_of(v, id), code(BlockStateCode::kActive));
  EXPECT_EQ(v.pool().block(id).sequence_hash, kSeq1);

  reg->clear();
  c.flush();
  wait_counts(v, Want{6, 0, 0, 1});

  std::vector<SequenceHash> q{kSeq1};
  auto m = p.match_sequence_hashes_async(q).get();
  ASSERT_TRUE(m) << m.status().to_string();
  ASSERT_EQ(m->size(), 1u);
  EXPECT_EQ((*m)[0].block_id(), id);
  EXPECT_EQ((*m)[0].sequence_hash(), kSeq1);
  EXPECT_TRUE(counts_match(v.counts(), Want{6, 0, 1, 0})) << v.describe();

  auto too_many = p.allocate_blocks_async(7).get();
  ASSERT_FALSE(too_many);
  EXPECT_EQ(too_many.status().code(), ErrorCode::kNotEnoughBlocks);
  m->clear();
  c.flush();
  wait_counts(v, Want{6, 0, 0, 1});
  expect_invariants(v);
}

TEST(DynamoPool, ChainedSequenceMatchAndEviction) {
  DaemonProcess d(dynamo_config());
  d.start();
  auto v = d.view();
  Client c = connect_client(d);
  Pool p = pool_of(c);

  auto blocks = p.allocate_blocks(3);
  ASSERT_TRUE(blocks) << blocks.status().to_string();
  std::optional<SequenceHash> parent;
  for (uint32_t i = 0; i < 3; ++i) {
    MutableBlock& b = (*blocks)[i];
    ASSERT_TRUE(b.init_sequence(1337, parent).is_ok());
    for (Token t = 1; t <= 4; ++t) ASSERT_TRUE(b.add_token(i * 4 + t).is_ok());
    ASSERT_TRUE(b.commit().is_ok());
    parent = *b.sequence_hash();
  }
  EXPECT_EQ(*(*blocks)[0].sequence_hash(), kSeq1);
  EXPECT_EQ(*(*blocks)[1].state().block_hash(), kBlock5678);
  EXPECT_EQ(*(*blocks)[1].sequence_hash(), kSeq12);
  EXPECT_EQ(*(*blocks)[2].state().block_hash(), kBlock9101112);
  EXPECT_EQ(*(*blocks)[2].sequence_hash(), kSeq123);
  std::vector<uint64_t> ids;
  for (auto& b : *blocks) ids.push_back(b.block_id());

  auto reg = p.register_blocks(std::move(*blocks));
  ASSERT_TRUE(reg) << reg.status().to_string();
  ASSERT_EQ(reg->size(), 3u);
  EXPECT_EQ(v.pool().block(static_cast<uint32_t>(ids[1])).parent_hash, kSeq1);
  EXPECT_EQ(stat_of(v.pool().stats().registrations), 3u);

  // Registering the same first block again dedups onto the registered one.
  std::vector<MutableBlock> dup;
  dup.push_back(committed(p, {1, 2, 3, 4}));
  const uint32_t dup_id = dup[0].block_id();
  auto again = p.register_blocks(std::move(dup));
  ASSERT_TRUE(again) << again.status().to_string();
  EXPECT_EQ((*again)[0].block_id(), ids[0]);
  EXPECT_EQ(v.pool().block(static_cast<uint32_t>(ids[0])).refcount, 2u);
  EXPECT_EQ(state_of(v, dup_id), code(BlockStateCode::kFree)) << "the duplicate is recycled";
  again->clear();
  reg->clear();
  c.flush();
  wait_counts(v, Want{4, 0, 0, 3});

  // Prefix semantics: the longest known prefix, stopping at the first miss.
  std::vector<SequenceHash> full{kSeq1, kSeq12, kSeq123};
  auto m = p.match_sequence_hashes(full);
  ASSERT_TRUE(m) << m.status().to_string();
  ASSERT_EQ(m->size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ((*m)[i].block_id(), ids[i]);
  std::vector<SequenceHash> gap{kSeq1, 42, kSeq123};
  auto m2 = p.match_sequence_hashes(gap);
  ASSERT_TRUE(m2);
  EXPECT_EQ(m2->size(), 1u);
  std::vector<SequenceHash> miss_first{42, kSeq1};
  auto m3 = p.match_sequence_hashes(miss_first);
  ASSERT_TRUE(m3);
  EXPECT_EQ(m3->size(), 0u);
  // Two handles of this client, one daemon reference (the library counts its own copies).
  EXPECT_EQ(v.pool().block(static_cast<uint32_t>(ids[0])).refcount, 1u);
  m->clear();
  m2->clear();
  c.flush();
  wait_counts(v, Want{4, 0, 0, 3});

  // Allocating every block evicts the inactive ones; their hashes are gone.
  const uint64_t ev0 = stat_of(v.pool().stats().evictions);
  auto all = p.allocate_blocks(7);
  ASSERT_TRUE(all) << all.status().to_string();
  EXPECT_EQ(stat_of(v.pool().stats().evictions), ev0 + 3);
  EXPECT_TRUE(counts_match(v.counts(), Want{0, 7, 0, 0})) << v.describe();
  auto gone = p.match_sequence_hashes(full);
  ASSERT_TRUE(gone);
  EXPECT_EQ(gone->size(), 0u);
  all->clear();
  c.flush();
  wait_counts(v, Want{7, 0, 0, 0});
  expect_invariants(v);
}

// ============================================================================================
// Crash reclamation.

TEST(Reclaim, ClientKilledHoldingMutableAndImmutableBlocks) {
  DaemonProcess d(test_config(nlohmann::json::array({host_pool("g", 32)})));
  d.start();
  auto v = d.view();

  // A: the other client, whose references must survive B's death.
  WorkerProcess a(d, "writer", {"--blocks", "3", "--salt", "1337", "--token-base", "1"});
  const uint32_t sa = std::stoul(field(a.expect_line("READY"), "slot"));
  std::string ra = a.expect_line("REGISTERED");
  auto a_hashes = parse_list(field(ra, "hashes"));
  auto a_ids = parse_list(field(ra, "ids"));

  // B: 3 mutable blocks, 2 of its own registered, and 2 of A's matched.
  WorkerProcess b(d, "holder",
                  {"--mutable", "3", "--register", "2", "--salt", "99", "--token-base", "5000",
                   "--match", std::to_string(a_hashes[0]) + "," + std::to_string(a_hashes[1])});
  const uint32_t sb = std::stoul(field(b.expect_line("READY"), "slot"));
  std::string hb = b.expect_line("HOLDING");
  auto b_mut = parse_list(field(hb, "mutable"));
  auto b_reg = parse_list(field(hb, "registered"));
  auto b_matched = parse_list(field(hb, "matched"));
  ASSERT_EQ(b_mut.size(), 3u) << hb;
  ASSERT_EQ(b_reg.size(), 2u) << hb;
  ASSERT_EQ(b_matched, (std::vector<uint64_t>{a_ids[0], a_ids[1]})) << hb;

  ASSERT_TRUE(counts_match(v.counts(), Want{32 - 8, 3, 5, 0})) << v.describe();
  for (auto id : b_mut) {
    EXPECT_EQ(state_of(v, static_cast<uint32_t>(id)), code(BlockStateCode::kMutable));
    EXPECT_EQ(v.pool().block(static_cast<uint32_t>(id)).owner, sb);
  }
  EXPECT_EQ(v.pool().block(static_cast<uint32_t>(a_ids[0])).refcount, 2u);
  const uint64_t rc0 = stat_of(v.stats().reclaimed_clients);
  const uint64_t rb0 = stat_of(v.stats().reclaimed_blocks);

  b.kill9();
  auto st = b.wait_exit(10s);
  ASSERT_TRUE(st);
  ASSERT_EQ(st->signal(), SIGKILL) << st->describe();

  wait_until(
      [&] {
        return stat_of(v.stats().reclaimed_clients) == rc0 + 1 &&
               v.slot(sb).state.load() == static_cast<uint32_t>(shm::SlotState::kFree);
      },
      10s, "the killed client to be reclaimed", [&] { return v.describe(); });

  // Everything of B came back; A's references are untouched.
  auto c = v.counts();
  EXPECT_EQ(c.mutable_blocks, 0u) << v.describe();
  EXPECT_EQ(c.active, 3u) << "A's three blocks only: " << v.describe();
  EXPECT_EQ(c.inactive, 2u) << "B's registered blocks stay matchable: " << v.describe();
  EXPECT_EQ(c.free + c.inactive + c.active + c.mutable_blocks, c.total);
  EXPECT_EQ(stat_of(v.stats().reclaimed_blocks), rb0 + 3 + 2 + 2);
  for (auto id : b_mut)
    EXPECT_EQ(state_of(v, static_cast<uint32_t>(id)), code(BlockStateCode::kFree));
  for (auto id : b_reg)
    EXPECT_EQ(state_of(v, static_cast<uint32_t>(id)), code(BlockStateCode::kInactive));
  for (auto id : a_ids) {
    const uint32_t i = static_cast<uint32_t>(id);
    EXPECT_EQ(state_of(v, i), code(BlockStateCode::kActive)) << "block " << id;
    EXPECT_EQ(v.pool().block(i).refcount, 1u) << "block " << id;
    EXPECT_EQ(v.pool().holds_of(sa, i), 1u) << "block " << id;
    EXPECT_EQ(v.pool().holds_of(sb, i), 0u) << "block " << id;
  }
  EXPECT_EQ(v.pool().owner_record(sb).hold_entries, 0u);
  EXPECT_EQ(v.pool().owner_record(sb).mutable_count, 0u);
  expect_invariants(v);
  // A still reads its bytes and talks to the daemon.
  EXPECT_EQ(a.command("verify"), "OK regions=12");
  a.command("ping");

  // kvpoolctl sees the same.
  auto j = d.ctl_status();
  EXPECT_EQ(j["reclaimed_clients"].get<uint64_t>(), rc0 + 1) << j.dump();
  EXPECT_EQ(j["pools"][0]["mutable_blocks"].get<uint32_t>(), 0u) << j.dump();
  EXPECT_EQ(j["pools"][0]["active_blocks"].get<uint32_t>(), 3u) << j.dump();

  // With A gone too (cleanly), nobody holds anything.
  a.send_line("exit");
  ASSERT_TRUE(a.wait_exit(10s));
  wait_counts(v, Want{-1, 0, 0, 5});
  expect_counts_add_up(v);
  EXPECT_EQ(stat_of(v.stats().reclaimed_clients), rc0 + 1) << "a clean exit is not a reclaim";
}

TEST(Reclaim, ClientKilledMidRequest) {
  DaemonProcess d(test_config(nlohmann::json::array({host_pool("g", 64)})));
  d.start();
  auto v = d.view();
  WorkerProcess holder(d, "holder", {"--mutable", "2", "--register", "2"});
  const uint32_t sh = std::stoul(field(holder.expect_line("READY"), "slot"));
  auto hh = holder.expect_line("HOLDING");
  auto h_reg = parse_list(field(hh, "registered"));
  Client me = connect_client(d);

  std::random_device rd;
  const uint64_t seed = rd();
  std::mt19937_64 rng(seed);
  RecordProperty("seed", std::to_string(seed));
  const uint64_t rc0 = stat_of(v.stats().reclaimed_clients);
  constexpr int kRounds = 3;
  for (int round = 1; round <= kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round) + " seed " + std::to_string(seed));
    WorkerProcess busy(d, "busy", {"--threads", "2"});
    const uint32_t sb = std::stoul(field(busy.expect_line("READY"), "slot"));
    busy.expect_line("WORKING", 30s);
    // Kill it at a random point of its request stream: after 1..400 more requests.
    const uint64_t target = v.slot(sb).requests.load(std::memory_order_relaxed) + 1 + rng() % 400;
    wait_until([&] { return v.slot(sb).requests.load(std::memory_order_relaxed) >= target; }, 30s,
               "the busy worker to make " + std::to_string(target) + " requests",
               [&] { return v.describe(); });
    busy.kill9();
    auto st = busy.wait_exit(10s);
    ASSERT_TRUE(st);
    ASSERT_EQ(st->signal(), SIGKILL) << "the busy worker ended before the kill: " << st->describe();

    wait_until(
        [&] {
          return stat_of(v.stats().reclaimed_clients) == rc0 + round &&
                 v.slot(sb).state.load() == static_cast<uint32_t>(shm::SlotState::kFree);
        },
        10s, "the killed busy worker to be reclaimed", [&] { return v.describe(); });
    // Only the holder's 2 mutable and 2 registered blocks are still held.
    wait_counts(v, Want{-1, 2, 2, -1});
    expect_counts_add_up(v);
    expect_invariants(v);
    EXPECT_EQ(v.pool().owner_record(sb).hold_entries, 0u);
    EXPECT_EQ(v.pool().owner_record(sb).mutable_count, 0u);
    for (auto id : h_reg) EXPECT_EQ(v.pool().holds_of(sh, static_cast<uint32_t>(id)), 1u);
    ASSERT_TRUE(d.running()) << d.stderr_text();
    EXPECT_TRUE(me.ping().is_ok());
    EXPECT_EQ(holder.command("verify"), "OK regions=8");
  }
  // All of the dead workers' blocks are back: a client can take every free block.
  Pool p = pool_of(me);
  auto c = v.counts();
  auto all = p.allocate_blocks(c.free + c.inactive);
  EXPECT_TRUE(all) << all.status().to_string();
}

// ============================================================================================
// Handles a client does not own, or no longer owns.

TEST(Handles, StaleAndForeignHandlesAreRejected) {
  DaemonProcess d(dynamo_config());
  d.start();
  auto v = d.view();
  WorkerProcess h(d, "holder", {"--mutable", "2", "--register", "1"});
  const uint32_t sh = std::stoul(field(h.expect_line("READY"), "slot"));
  std::string hold = h.expect_line("HOLDING");
  auto h_mut = parse_list(field(hold, "mutable"));
  auto h_reg = parse_list(field(hold, "registered"));
  ASSERT_EQ(h_mut.size(), 2u);
  ASSERT_EQ(h_reg.size(), 1u);
  const uint32_t m0 = static_cast<uint32_t>(h_mut[0]), m1 = static_cast<uint32_t>(h_mut[1]);
  const uint32_t r0 = static_cast<uint32_t>(h_reg[0]);
  auto c = open_connection(d);
  auto& pst = v.pool().stats();
  const Want before{4, 2, 1, 0};
  ASSERT_TRUE(counts_match(v.counts(), before)) << v.describe();

  // Register another client's mutable block (right id and generation: still not ours).
  pool::RegisterItem item{{m0, v.pool().block(m0).generation}, 777, 777, 0, 0, 0};
  uint64_t rej = stat_of(pst.rejected_handles);
  auto r = must_call(*c, Opcode::kRegister, 0, 1, &item, sizeof(item));
  EXPECT_EQ(r.code, ErrorCode::kInvalidHandle) << r.message;
  EXPECT_TRUE(r.refs.empty());
  EXPECT_EQ(stat_of(pst.rejected_handles), rej + 1);
  EXPECT_EQ(state_of(v, m0), code(BlockStateCode::kMutable));
  EXPECT_EQ(v.pool().block(m0).owner, sh);
  EXPECT_TRUE(counts_match(v.counts(), before)) << v.describe();

  // Release another client's mutable block and drop a reference it holds (fire and forget;
  // the ping behind them on the same ring is answered after they were handled).
  BlockRef foreign_mut{m1, v.pool().block(m1).generation};
  BlockRef foreign_imm{r0, v.pool().block(r0).generation};
  ASSERT_TRUE(c->send(Opcode::kReleaseMutable, 0, 1, &foreign_mut, sizeof(BlockRef)));
  ASSERT_TRUE(c->send(Opcode::kReleaseImmutable, 0, 1, &foreign_imm, sizeof(BlockRef)));
  EXPECT_EQ(must_call(*c, Opcode::kPing, 0, 0, nullptr, 0).code, ErrorCode::kOk);
  EXPECT_EQ(stat_of(pst.rejected_handles), rej + 3);
  EXPECT_EQ(state_of(v, m1), code(BlockStateCode::kMutable));
  EXPECT_EQ(v.pool().block(m1).owner, sh);
  EXPECT_EQ(v.pool().block(r0).refcount, 1u);
  EXPECT_EQ(v.pool().holds_of(sh, r0), 1u);
  EXPECT_TRUE(counts_match(v.counts(), before)) << v.describe();

  // Stale: a block we had, released, then handed out again under a new generation.
  auto a = must_call(*c, Opcode::kAllocate, 0, 1, nullptr, 0);
  ASSERT_EQ(a.code, ErrorCode::kOk) << a.message;
  const BlockRef old = a.refs.at(0);
  ASSERT_TRUE(c->send(Opcode::kReleaseMutable, 0, 1, &old, sizeof(BlockRef)));
  auto all = must_call(*c, Opcode::kAllocate, 0, 4, nullptr, 0);  // every free block
  ASSERT_EQ(all.code, ErrorCode::kOk) << all.message;
  BlockRef fresh{};
  for (auto ref : all.refs)
    if (ref.id == old.id) fresh = ref;
  ASSERT_EQ(fresh.id, old.id) << "the released block must be among every free block";
  ASSERT_GT(fresh.generation, old.generation);
  const Want full{0, 6, 1, 0};
  ASSERT_TRUE(counts_match(v.counts(), full)) << v.describe();

  rej = stat_of(pst.rejected_handles);
  pool::RegisterItem stale{old, 888, 888, 0, 0, 0};
  r = must_call(*c, Opcode::kRegister, 0, 1, &stale, sizeof(stale));
  EXPECT_EQ(r.code, ErrorCode::kInvalidHandle) << r.message;
  EXPECT_TRUE(contains(r.message, "stale")) << r.message;
  ASSERT_TRUE(c->send(Opcode::kReleaseMutable, 0, 1, &old, sizeof(BlockRef)));
  ASSERT_TRUE(c->send(Opcode::kReleaseImmutable, 0, 1, &old, sizeof(BlockRef)));
  EXPECT_EQ(must_call(*c, Opcode::kPing, 0, 0, nullptr, 0).code, ErrorCode::kOk);
  EXPECT_EQ(stat_of(pst.rejected_handles), rej + 3);
  EXPECT_EQ(state_of(v, old.id), code(BlockStateCode::kMutable)) << "the stale release freed it";
  EXPECT_EQ(v.pool().block(old.id).generation, fresh.generation);
  EXPECT_TRUE(counts_match(v.counts(), full)) << v.describe();
  std::vector<SequenceHash> q{888};
  auto miss = must_call(*c, Opcode::kMatch, 0, 1, q.data(), sizeof(uint64_t));
  EXPECT_TRUE(miss.refs.empty()) << "the stale register registered nothing";

  // The current handle still works, and the holder never noticed any of it.
  ASSERT_TRUE(c->send(Opcode::kReleaseMutable, 0, static_cast<uint32_t>(all.refs.size()),
                      all.refs.data(), all.refs.size() * sizeof(BlockRef)));
  EXPECT_EQ(must_call(*c, Opcode::kPing, 0, 0, nullptr, 0).code, ErrorCode::kOk);
  EXPECT_TRUE(counts_match(v.counts(), before)) << v.describe();
  EXPECT_EQ(h.command("verify"), "OK regions=4");
  h.command("ping");
  expect_invariants(v);
}

// Two daemons number their blocks alike: a block of daemon A handed to daemon B's pool would
// name B's own block with the same id and use count, still writable by B's client (the
// generations differ only by their daemons' tags, which kvpoold checks: restart_test.cpp).
// The library refuses a handle issued to another Client before anything reaches a daemon;
// the same holds for two Clients of one daemon.
TEST(Handles, ABlockIsRegisteredOnlyThroughTheClientThatAllocatedIt) {
  DaemonProcess da, db;
  da.start();
  db.start();
  auto va = da.view(), vb = db.view();
  Client ca = connect_client(da), cb = connect_client(db), ca2 = connect_client(da);
  Pool pa = pool_of(ca), pb = pool_of(cb), pa2 = pool_of(ca2);

  auto own = pb.allocate_blocks(1);  // B's block: the same (id, generation) as A's
  ASSERT_TRUE(own) << own.status().to_string();
  std::vector<MutableBlock> from_a;
  from_a.push_back(committed(pa, {1, 2, 3, 4}));
  ASSERT_EQ(from_a[0].block_id(), (*own)[0].block_id());
  ASSERT_EQ(from_a[0].generation() & pool::kGenerationCountMask,
            (*own)[0].generation() & pool::kGenerationCountMask);
  const uint32_t id = from_a[0].block_id();

  auto r = pb.register_blocks(std::move(from_a));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument) << r.status().to_string();
  EXPECT_TRUE(contains(r.status().message(), "another kvpool::Client")) << r.status().to_string();
  EXPECT_EQ(state_of(vb, id), code(BlockStateCode::kMutable))
      << "B's block stays B's, unregistered";
  EXPECT_EQ(stat_of(vb.pool().stats().registrations), 0u);
  EXPECT_TRUE(pb.match_sequence_hashes(std::vector<SequenceHash>{kSeq1})->empty());

  // Same daemon, another Client: refused too, and the refused block went back to A's pool
  // when the call consumed it (nothing leaks).
  std::vector<MutableBlock> again;
  again.push_back(committed(pa, {1, 2, 3, 4}));
  auto r2 = pa2.register_blocks(std::move(again));
  ASSERT_FALSE(r2);
  EXPECT_EQ(r2.status().code(), ErrorCode::kInvalidArgument) << r2.status().to_string();
  ca.flush();
  wait_counts(va, Want{64, 0, 0, 0});
  EXPECT_EQ(stat_of(va.pool().stats().registrations), 0u);
}

// ============================================================================================
// Malformed ring records.

TEST(Protocol, MalformedRecordsAreAnsweredWithErrors) {
  DaemonProcess d(test_config(nlohmann::json::array({host_pool("g", 16)})));
  d.start();
  auto v = d.view();
  WorkerProcess h(d, "holder", {"--mutable", "1", "--register", "1"});
  h.expect_line("READY");
  h.expect_line("HOLDING");
  auto c = open_connection(d);
  const Want before{14, 1, 1, 0};
  ASSERT_TRUE(counts_match(v.counts(), before)) << v.describe();
  const uint64_t pe0 = stat_of(v.stats().protocol_errors);
  uint64_t corr = 1'000'000;

  auto check_alive = [&](const std::string& after) {
    SCOPED_TRACE("after " + after);
    ASSERT_TRUE(d.running()) << d.stderr_text();
    h.command("ping");
    EXPECT_TRUE(counts_match(v.counts(), before)) << v.describe();
  };

  for (uint32_t op : {0u, proto::kMaxOpcode + 1, 0xFFFFu, 0x7FFFFFFFu}) {
    auto r = raw_call(*c, op, ++corr, 0, 0, nullptr, 0);
    EXPECT_EQ(r.code, ErrorCode::kProtocolError) << "opcode " << op << ": " << r.message;
    EXPECT_TRUE(contains(r.message, "opcode")) << r.message;
    check_alive("opcode " + std::to_string(op));
  }
  {  // a record shorter than its header: answered with correlation id 0
    uint32_t four = 0;
    ASSERT_TRUE(c->send_raw(static_cast<uint32_t>(Opcode::kPing), &four, sizeof(four)));
    auto r = c->wait(0);
    ASSERT_TRUE(r) << r.status().to_string();
    EXPECT_EQ(r->code, ErrorCode::kProtocolError) << r->message;
    check_alive("a short record");
  }
  {  // count over what one request can carry
    auto r =
        raw_call(*c, static_cast<uint32_t>(Opcode::kAllocate), ++corr, 0, 0x7FFFFFFFu, nullptr, 0);
    EXPECT_EQ(r.code, ErrorCode::kInvalidArgument) << r.message;
    check_alive("a count over capacity");
  }
  {  // payload size not matching the count
    uint64_t two[2] = {kSeq1, kSeq12};
    auto r = raw_call(*c, static_cast<uint32_t>(Opcode::kMatch), ++corr, 0, 3, two, sizeof(two));
    EXPECT_EQ(r.code, ErrorCode::kProtocolError) << r.message;
    pool::RegisterItem item{};
    r = raw_call(*c, static_cast<uint32_t>(Opcode::kRegister), ++corr, 0, 1, &item,
                 sizeof(item) - 1);
    EXPECT_EQ(r.code, ErrorCode::kProtocolError) << r.message;
    r = raw_call(*c, static_cast<uint32_t>(Opcode::kAllocate), ++corr, 0, 1, two, sizeof(two));
    EXPECT_EQ(r.code, ErrorCode::kProtocolError) << "allocate carries no payload: " << r.message;
    check_alive("payload/count mismatches");
  }
  {  // block ids out of range
    pool::RegisterItem item{{1'000'000, 1}, 5, 5, 0, 0, 0};
    auto r =
        raw_call(*c, static_cast<uint32_t>(Opcode::kRegister), ++corr, 0, 1, &item, sizeof(item));
    EXPECT_EQ(r.code, ErrorCode::kInvalidHandle) << r.message;
    const uint64_t rej = stat_of(v.pool().stats().rejected_handles);
    BlockRef bad{0xFFFFFFFFu, 0};
    ASSERT_TRUE(c->send(Opcode::kReleaseMutable, 0, 1, &bad, sizeof(bad)));
    ASSERT_TRUE(c->send(Opcode::kReleaseImmutable, 0, 1, &bad, sizeof(bad)));
    EXPECT_EQ(must_call(*c, Opcode::kPing, 0, 0, nullptr, 0).code, ErrorCode::kOk);
    EXPECT_EQ(stat_of(v.pool().stats().rejected_handles), rej + 2);
    check_alive("out-of-range block ids");
  }
  {  // pool indices out of range
    auto r = raw_call(*c, static_cast<uint32_t>(Opcode::kAllocate), ++corr, 1, 1, nullptr, 0);
    EXPECT_EQ(r.code, ErrorCode::kInvalidArgument) << r.message;
    EXPECT_TRUE(contains(r.message, "pool")) << r.message;
    uint64_t h1 = kSeq1;
    r = raw_call(*c, static_cast<uint32_t>(Opcode::kMatch), ++corr, 0xFFFFFFFFu, 1, &h1,
                 sizeof(h1));
    EXPECT_EQ(r.code, ErrorCode::kInvalidArgument) << r.message;
    check_alive("out-of-range pool indices");
  }
  // 4 bad opcodes, a short record, 3 mismatched payloads.
  EXPECT_EQ(stat_of(v.stats().protocol_errors), pe0 + 8);
  EXPECT_EQ(stat_of(v.stats().disconnects), 0u);
  // The hostile-but-few client is still served, and so is a new one.
  auto a = must_call(*c, Opcode::kAllocate, 0, 2, nullptr, 0);
  EXPECT_EQ(a.code, ErrorCode::kOk) << a.message;
  EXPECT_EQ(a.refs.size(), 2u);
  Client other = connect_client(d);
  EXPECT_TRUE(other.ping().is_ok());
  expect_invariants(v);
}

TEST(Protocol, ClientSendingTooManyMalformedRecordsIsDisconnected) {
  DaemonProcess d(test_config(nlohmann::json::array({host_pool("g", 16)})));
  d.start();
  auto v = d.view();
  WorkerProcess h(d, "holder", {"--mutable", "1", "--register", "1"});
  h.expect_line("READY");
  h.expect_line("HOLDING");
  Client good = connect_client(d);
  auto bad = open_connection(d);
  const uint32_t bad_slot = bad->slot();
  auto a = must_call(*bad, Opcode::kAllocate, 0, 2, nullptr, 0);
  ASSERT_EQ(a.code, ErrorCode::kOk);
  ASSERT_TRUE(counts_match(v.counts(), Want{12, 3, 1, 0})) << v.describe();
  const uint64_t dc0 = stat_of(v.stats().disconnects);

  // 70 records of an unknown opcode, without reading the answers.
  for (uint64_t i = 0; i < 70; ++i) {
    proto::RequestHeader rh{2'000'000 + i, 0, 0};
    Status st = bad->send_raw(77, &rh, sizeof(rh));
    ASSERT_TRUE(st.is_ok()) << "record " << i << ": " << st.to_string();
  }
  wait_until([&] { return stat_of(v.stats().disconnects) == dc0 + 1; }, 10s,
             "the flooding client to be disconnected", [&] { return v.describe(); });
  wait_until(
      [&] { return v.slot(bad_slot).state.load() == static_cast<uint32_t>(shm::SlotState::kFree); },
      5s, "the flooding client's slot to be freed", [&] { return v.describe(); });
  // Its blocks are returned with it.
  wait_counts(v, Want{14, 1, 1, 0});

  // Its next call fails, promptly.
  auto t0 = Clock::now();
  auto r = bad->call(Opcode::kPing, 0, 0, nullptr, 0);
  const double ms = ms_since(t0);
  ASSERT_FALSE(r) << "a disconnected client's call succeeded";
  // The daemon says why before it hangs up: the client reports exactly that.
  EXPECT_EQ(r.status().code(), ErrorCode::kDisconnected) << r.status().to_string();
  EXPECT_TRUE(contains(r.status().message(), "malformed records")) << r.status().message();
  EXPECT_LT(ms, 1000.0);

  // Everyone else is unaffected.
  ASSERT_TRUE(d.running()) << d.stderr_text();
  EXPECT_TRUE(good.ping().is_ok());
  Pool gp = pool_of(good);
  auto blocks = gp.allocate_blocks(3);
  EXPECT_TRUE(blocks) << blocks.status().to_string();
  EXPECT_EQ(h.command("verify"), "OK regions=4");
  EXPECT_EQ(stat_of(v.stats().disconnects), dc0 + 1);
  EXPECT_EQ(stat_of(v.stats().reclaimed_clients), 0u);
}

// ============================================================================================
// Versions.

TEST(Version, ClientOfAnotherLayoutMajorIsRefused) {
  DaemonProcess d;
  d.start();
  auto v = d.view();
  const uint64_t refused0 = stat_of(v.stats().refused_attaches);
  auto o = connection_options(d);
  o.layout_major = static_cast<uint16_t>(shm::kLayoutMajor + 1);
  auto c = RawConnection::open(d.instance(), o);
  ASSERT_FALSE(c) << "a client of layout " << o.layout_major << " was accepted";
  EXPECT_EQ(c.status().code(), ErrorCode::kVersionMismatch) << c.status().to_string();
  const std::string msg = c.status().message();
  EXPECT_TRUE(contains(msg, std::to_string(shm::kLayoutMajor + 1) + ".")) << msg;
  EXPECT_TRUE(contains(msg, std::to_string(shm::kLayoutMajor) + ".")) << msg;
  // The daemon counts the refusal after sending it.
  wait_until([&] { return stat_of(v.stats().refused_attaches) == refused0 + 1; }, 5s,
             "refused_attaches to count the refusal", [&] { return v.describe(); });
  EXPECT_EQ(v.clients(), 0u);
  // The daemon serves a client of its own version.
  Client ok = connect_client(d);
  EXPECT_TRUE(ok.ping().is_ok());
}

// ============================================================================================
// The daemon dies under its clients.

TEST(DaemonDeath, EveryCallFailsWithDaemonGoneWithinOneSecond) {
  DaemonProcess d;
  d.start();
  Client c = connect_client(d);
  Pool p = pool_of(c);
  auto held = p.allocate_blocks(3);
  ASSERT_TRUE(held);
  std::vector<MutableBlock> to_register;
  to_register.push_back(std::move((*held)[0]));
  ASSERT_TRUE(to_register[0].init_sequence(1337).is_ok());
  ASSERT_TRUE(to_register[0].add_tokens(std::vector<Token>{1, 2, 3, 4}));
  ASSERT_TRUE(to_register[0].commit().is_ok());
  auto reg = p.register_blocks(std::move(to_register));
  ASSERT_TRUE(reg);
  MutableBlock pending = std::move((*held)[1]);
  ASSERT_TRUE(pending.init_sequence(1337).is_ok());
  ASSERT_TRUE(pending.add_tokens(std::vector<Token>{9, 9, 9, 9}));
  ASSERT_TRUE(pending.commit().is_ok());
  WorkerProcess w(d, "holder", {"--mutable", "1", "--register", "1"});
  w.expect_line("READY");
  w.expect_line("HOLDING");

  d.kill(SIGKILL);
  const auto killed = Clock::now();
  auto st = d.wait_exit(10s);
  ASSERT_TRUE(st);
  ASSERT_EQ(st->signal(), SIGKILL);

  auto expect_gone = [&](const std::string& what, const Status& s, double ms) {
    EXPECT_EQ(s.code(), ErrorCode::kDaemonGone) << what << ": " << s.to_string();
    EXPECT_LT(ms, 1000.0) << what << " took " << ms << " ms";
  };
  auto t = Clock::now();
  Status s = c.ping();
  expect_gone("ping", s, ms_since(t));
  EXPECT_LT(ms_since(killed), 1000.0) << "from the kill to the first failed call";
  t = Clock::now();
  auto a = p.allocate_blocks(1);
  expect_gone("allocate_blocks", a.status(), ms_since(t));
  t = Clock::now();
  std::vector<SequenceHash> q{kSeq1};
  auto m = p.match_sequence_hashes(q);
  expect_gone("match_sequence_hashes", m.status(), ms_since(t));
  t = Clock::now();
  std::vector<MutableBlock> more;
  more.push_back(std::move(pending));
  auto r = p.register_blocks(std::move(more));
  expect_gone("register_blocks", r.status(), ms_since(t));
  t = Clock::now();
  auto am = p.match_sequence_hashes_async(q).get();
  expect_gone("match_sequence_hashes_async", am.status(), ms_since(t));
  EXPECT_FALSE(c.daemon_alive());

  // Another process's client too (its own measurement of the call).
  std::string pong = w.command("ping", "ERR DaemonGone");
  EXPECT_LT(std::stoull(field(pong, "us")), 1'000'000u) << pong;

  // Dropping handles and the client after the daemon's death returns promptly.
  t = Clock::now();
  reg->clear();
  held->clear();
  c.flush();
  EXPECT_LT(ms_since(t), 1000.0);
}

TEST(DaemonDeath, CallWaitingForAnAnswerReturnsDaemonGone) {
  DaemonProcess d;
  d.start();
  Client c = connect_client(d);
  Pool p = pool_of(c);
  ASSERT_TRUE(c.ping().is_ok());

  // A stopped daemon never answers: the call parks waiting for its answer.
  d.kill(SIGSTOP);
  const std::string stat = "/proc/" + std::to_string(d.pid()) + "/stat";
  wait_until([&] { return proc_state(stat) == 'T'; }, 10s, "kvpoold to be stopped");
  auto fut = p.allocate_blocks_async(1);
  std::atomic<pid_t> tid{0};
  std::atomic<bool> done{false};
  Clock::time_point done_at;
  Status result;
  std::thread waiter([&] {
    tid = static_cast<pid_t>(::syscall(SYS_gettid));
    auto r = fut.get();
    result = r.status();
    done_at = Clock::now();
    done = true;
  });
  // Wait until the waiting thread is asleep in its wait (futex) rather than about to start.
  wait_until(
      [&] {
        return tid != 0 &&
               proc_state("/proc/self/task/" + std::to_string(tid.load()) + "/stat") == 'S';
      },
      10s, "the call to park waiting for its answer");
  EXPECT_FALSE(done) << "a stopped daemon answered";

  d.kill(SIGKILL);
  const auto killed = Clock::now();
  try {
    wait_until([&] { return done.load(); }, 10s, "the waiting call to return");
  } catch (...) {
    waiter.detach();  // never reached unless the client hangs; the test fails either way
    throw;
  }
  waiter.join();
  EXPECT_EQ(result.code(), ErrorCode::kDaemonGone) << result.to_string();
  const double ms = std::chrono::duration<double, std::milli>(done_at - killed).count();
  EXPECT_LT(ms, 1000.0) << "the parked call took " << ms << " ms to notice";
  auto st = d.wait_exit(10s);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->signal(), SIGKILL);
}

// ============================================================================================
// Restarts.

TEST(Restart, NewDaemonReplacesStaleSegmentsAndSocket) {
  DaemonProcess d;
  d.start();
  const pid_t first = d.pid();
  Client old = connect_client(d);
  {
    Pool p = pool_of(old);
    auto b = p.allocate_blocks(2);
    ASSERT_TRUE(b);
    b->clear();
  }
  d.kill(SIGKILL);
  ASSERT_TRUE(d.wait_exit(10s));
  // What a killed daemon leaves behind: its socket file only. The segments were memfds
  // and died with their last descriptor (the old client's mappings keep the memory alive
  // for it, but nothing is left in /dev/shm for anyone to open or squat).
  EXPECT_TRUE(d.shm_files().empty());
  struct stat sb;
  ASSERT_EQ(::stat(d.socket_path().c_str(), &sb), 0) << "the stale socket file";
  // The old client notices the death (its lease thread sees the socket hang up).
  wait_until([&] { return !old.daemon_alive(); }, 1s, "the old client to notice the death");

  d.restart();
  ASSERT_NE(d.pid(), first);
  auto v = d.view();
  EXPECT_EQ(v.header().daemon_pid, d.pid()) << "the control segment is the new daemon's";
  EXPECT_TRUE(counts_match(v.counts(), Want{64, 0, 0, 0})) << v.describe();
  EXPECT_TRUE(contains(d.stderr_text(), "stale")) << d.stderr_text();

  // A new client works end to end.
  Client fresh = connect_client(d);
  Pool p = pool_of(fresh);
  std::vector<MutableBlock> one;
  one.push_back(committed(p, {1, 2, 3, 4}));
  auto reg = p.register_blocks(std::move(one));
  ASSERT_TRUE(reg) << reg.status().to_string();
  std::vector<SequenceHash> q{kSeq1};
  auto m = p.match_sequence_hashes(q);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->size(), 1u);
  // The client of the dead daemon stays failed: it never talks to the new one by accident.
  EXPECT_EQ(old.ping().code(), ErrorCode::kDaemonGone);
  EXPECT_EQ(v.clients(), 1u);
}

TEST(Restart, SecondDaemonOnALiveInstanceIsRefused) {
  DaemonProcess d;
  d.start();
  Client c = connect_client(d);

  auto [st, err] = d.run_other({"--config", d.config_path()});
  EXPECT_TRUE(st.exited() && st.code() != 0) << st.describe() << "\n" << err;
  EXPECT_TRUE(contains(err, "already served")) << err;
  EXPECT_TRUE(contains(err, d.instance())) << err;

  // The first daemon lost nothing: socket, segments and clients. (Its segments are memfds:
  // no name in /dev/shm that a second daemon could collide with.)
  ASSERT_TRUE(d.running()) << d.stderr_text();
  EXPECT_TRUE(d.shm_files().empty());
  struct stat sb;
  EXPECT_EQ(::stat(d.socket_path().c_str(), &sb), 0);
  EXPECT_TRUE(c.ping().is_ok());
  Client c2 = connect_client(d);
  EXPECT_TRUE(c2.ping().is_ok());
}

// ============================================================================================
// Shutdown and configuration.

TEST(Shutdown, SigtermExitsCleanlyAndRemovesEverything) {
  DaemonProcess d;
  d.start();
  Client c = connect_client(d);
  Pool p = pool_of(c);
  auto held = p.allocate_blocks(2);
  ASSERT_TRUE(held);
  WorkerProcess w(d, "holder", {"--mutable", "1", "--register", "1"});
  w.expect_line("READY");
  w.expect_line("HOLDING");
  ASSERT_TRUE(d.shm_files().empty()) << "segments are memfds, never named in /dev/shm";

  d.kill(SIGTERM);
  auto st = d.wait_exit(10s);
  ASSERT_TRUE(st) << "kvpoold did not exit on SIGTERM";
  EXPECT_TRUE(st->exited() && st->code() == 0) << st->describe() << "\n" << d.stderr_text();
  EXPECT_TRUE(d.shm_files().empty()) << "segments left in /dev/shm";
  struct stat sb;
  EXPECT_NE(::stat(d.socket_path().c_str(), &sb), 0) << "socket file left behind";
  // Sent before it exited; the harness's notify thread may still be reading it.
  wait_until([&] { return d.notified("STOPPING=1"); }, 5s, "STOPPING=1 on the notify socket");

  auto t = Clock::now();
  EXPECT_EQ(c.ping().code(), ErrorCode::kDaemonGone);
  EXPECT_LT(ms_since(t), 1000.0);
  w.command("ping", "ERR DaemonGone");
}

TEST(Config, UnknownFieldMakesKvpooldExitNamingIt) {
  {
    auto cfg = test_config();
    cfg["bogus_field"] = 1;
    DaemonProcess d(cfg);
    d.spawn();
    auto st = d.wait_exit(15s);
    ASSERT_TRUE(st) << "kvpoold kept running with a bad config";
    EXPECT_TRUE(st->exited() && st->code() != 0) << st->describe();
    EXPECT_TRUE(contains(d.stderr_text(), "bogus_field")) << d.stderr_text();
    EXPECT_FALSE(d.notified("READY=1"));
    EXPECT_TRUE(d.shm_files().empty());
  }
  {
    auto cfg = test_config();
    cfg["pools"][0]["num_blcoks"] = 7;
    DaemonProcess d(cfg);
    d.spawn();
    auto st = d.wait_exit(15s);
    ASSERT_TRUE(st) << "kvpoold kept running with a bad config";
    EXPECT_TRUE(st->exited() && st->code() != 0) << st->describe();
    EXPECT_TRUE(contains(d.stderr_text(), "pools[0].num_blcoks")) << d.stderr_text();
    EXPECT_FALSE(d.notified("READY=1"));
  }
}

}  // namespace
}  // namespace kvpool::mptest
