// Per-block checksums (docs/security.md, cache poisoning): a client registers blocks
// with RegisterOptions::checksum, a hostile process overwrites one of them through its own
// read-write mapping of the host pool, and kvpoold (scrubbing, or verifying on a reader's
// request) finds it, evicts it and counts it, while every good block stays served. All with
// real processes: kvpoold, the attacker, kvpoolctl.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "client_helpers.hpp"
#include "harness.hpp"
#include "kvpool/core/checksum.hpp"

namespace kvpool::mptest {
namespace {

constexpr uint32_t kBlocks = 16;

DaemonProcess checksum_daemon() {
  return DaemonProcess(test_config(nlohmann::json::array({host_pool("g", kBlocks)})));
}

// `n` committed blocks (tokens from `token_base`, no parents), each region filled with a
// byte pattern of its own.
std::vector<MutableBlock> filled(Pool& p, uint32_t n, Token token_base) {
  auto blocks = p.allocate_blocks(n);
  if (!blocks) throw HarnessError(blocks.status().to_string());
  const LayoutConfig& l = p.layout();
  const auto layout = Layout::create(l);
  for (uint32_t i = 0; i < n; ++i) {
    MutableBlock& b = (*blocks)[i];
    std::vector<Token> tokens;
    for (uint32_t t = 0; t < l.page_size; ++t) tokens.push_back(token_base + i * l.page_size + t);
    Status st = b.init_sequence(1337);
    if (st.is_ok()) st = b.add_tokens(tokens).status();
    if (st.is_ok()) st = b.commit();
    if (!st.is_ok()) throw HarnessError(st.to_string());
    for (uint32_t layer = 0; layer < l.num_layers; ++layer) {
      for (uint32_t outer = 0; outer < l.outer_dim; ++outer) {
        auto a = b.address(layer, outer);
        if (!a) throw HarnessError(a.status().to_string());
        std::memset(*a, static_cast<int>(token_base + i * 7 + layer * 3 + outer),
                    layout->region_bytes());
      }
    }
  }
  return std::move(blocks.value());
}

std::vector<SequenceHash> hashes_of(const std::vector<ImmutableBlock>& blocks) {
  std::vector<SequenceHash> out;
  for (const auto& b : blocks) out.push_back(b.sequence_hash());
  return out;
}

bool matches(Pool& p, SequenceHash h) {
  auto m = p.match_sequence_hashes(std::span(&h, 1));
  if (!m) throw HarnessError(m.status().to_string());
  return m->size() == 1;
}

// The attacker overwrites one region byte range of block `id` through its own mapping.
void scribble(const DaemonProcess& d, uint32_t id) {
  WorkerProcess attacker(KVPOOL_ATTACKER_PATH, d, "scribble", {"--block", std::to_string(id)});
  attacker.expect_line("SCRIBBLED block=" + std::to_string(id));
  attacker.close_stdin();
  auto st = attacker.wait_exit(10s);
  ASSERT_TRUE(st && st->exited() && st->code() == 0) << (st ? st->describe() : "no exit");
}

TEST(Checksum, ScrubEvictsTheScribbledBlockNamesItAndSparesTheOthers) {
  DaemonProcess d = checksum_daemon();
  d.start();
  DaemonView v = d.view();
  Client c = connect_client(d);
  Pool p = pool_of(c);
  auto checked = p.register_blocks(filled(p, 4, 100), RegisterOptions{.checksum = true});
  ASSERT_TRUE(checked.is_ok()) << checked.status().to_string();
  auto plain = p.register_blocks(filled(p, 2, 500));  // without the option: unaffected
  ASSERT_TRUE(plain.is_ok()) << plain.status().to_string();
  const auto good = hashes_of(*checked);
  const auto unchecked = hashes_of(*plain);
  const uint32_t victim = (*checked)[1].block_id();
  checked->clear();
  plain->clear();
  c.flush();
  wait_counts(v, {.free = kBlocks - 6, .mut = 0, .active = 0, .inactive = 6});

  // A clean scrub first: nothing changes.
  {
    auto [st, out] = d.run_ctl({"scrub", "--json"});
    ASSERT_TRUE(st.exited() && st.code() == 0) << st.describe() << "\n" << out;
    auto j = nlohmann::json::parse(out);
    EXPECT_EQ(j["mismatches"], 0);
    EXPECT_EQ(j["pools"][0]["checked"], 4);
    EXPECT_EQ(j["pools"][0]["without_checksum"], 2);
    EXPECT_EQ(stat_of(v.pool().stats().checksum_verified), 4u);
    EXPECT_TRUE(counts_match(v.counts(), {.inactive = 6})) << v.describe();
  }

  scribble(d, victim);
  {
    auto [st, out] = d.run_ctl({"scrub"});
    EXPECT_TRUE(st.exited() && st.code() == 1) << st.describe() << "\n" << out;
    EXPECT_TRUE(contains(out, "block " + std::to_string(victim) + " ")) << out;
    EXPECT_TRUE(contains(out, "1 mismatch")) << out;
  }
  // Evicted at once: free, unmatchable, counted, and announced; the others still match.
  EXPECT_EQ(stat_of(v.pool().stats().checksum_mismatches), 1u);
  EXPECT_EQ(state_of(v, victim), code(BlockStateCode::kFree));
  EXPECT_FALSE(matches(p, good[1]));
  for (SequenceHash h : {good[0], good[2], good[3], unchecked[0], unchecked[1]})
    EXPECT_TRUE(matches(p, h)) << h;
  c.flush();
  expect_invariants(v);
  {
    auto [st, out] = d.run_ctl({"metrics"});
    ASSERT_TRUE(st.exited() && st.code() == 0) << st.describe();
    EXPECT_TRUE(contains(out, "kvpool_checksum_mismatches_total{pool=\"g\"} 1")) << out;
    EXPECT_TRUE(contains(out, "kvpool_checksum_verified_total{pool=\"g\"} 8")) << out;
  }
  // Served never again: the next scrub finds the three good blocks, nothing else.
  {
    auto [st, out] = d.run_ctl({"scrub", "--json", "--pool", "g"});
    ASSERT_TRUE(st.exited() && st.code() == 0) << st.describe() << "\n" << out;
    auto j = nlohmann::json::parse(out);
    EXPECT_EQ(j["pools"][0]["checked"], 3);
    EXPECT_EQ(j["pools"][0]["corrupt"].size(), 0u);
  }
}

TEST(Checksum, AReaderAsksAndLearnsOfTheMismatchGoodBlocksStay) {
  DaemonProcess d = checksum_daemon();
  d.start();
  DaemonView v = d.view();
  Client writer = connect_client(d);
  Pool wp = pool_of(writer);
  auto reg = wp.register_blocks(filled(wp, 3, 200), RegisterOptions{.checksum = true});
  ASSERT_TRUE(reg.is_ok()) << reg.status().to_string();
  auto plain = wp.register_blocks(filled(wp, 1, 700));
  ASSERT_TRUE(plain.is_ok()) << plain.status().to_string();
  const auto hashes = hashes_of(*reg);
  reg->clear();

  Client reader = connect_client(d);
  Pool rp = pool_of(reader);
  auto held = rp.match_sequence_hashes(hashes);
  ASSERT_TRUE(held.is_ok() && held->size() == 3);

  // Verifying good blocks changes nothing but the count.
  auto ok = rp.verify_blocks(*held);
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  EXPECT_EQ(*ok, std::vector<ChecksumResult>(3, ChecksumResult::kOk));
  EXPECT_TRUE(rp.check_blocks(*held).is_ok());
  EXPECT_EQ(stat_of(v.pool().stats().checksum_verified), 6u);
  EXPECT_EQ(stat_of(v.pool().stats().checksum_mismatches), 0u);
  EXPECT_EQ(wp.match_sequence_hashes(hashes)->size(), 3u);
  // A block registered without a checksum has nothing to compare.
  auto none = wp.verify_blocks(*plain);
  ASSERT_TRUE(none.is_ok()) << none.status().to_string();
  EXPECT_EQ(*none, std::vector<ChecksumResult>{ChecksumResult::kNoChecksum});

  const uint32_t victim = (*held)[2].block_id();
  scribble(d, victim);
  auto bad = rp.verify_blocks(*held);
  ASSERT_TRUE(bad.is_ok()) << bad.status().to_string();
  EXPECT_EQ(*bad, (std::vector<ChecksumResult>{ChecksumResult::kOk, ChecksumResult::kOk,
                                               ChecksumResult::kMismatch}));
  EXPECT_EQ(stat_of(v.pool().stats().checksum_mismatches), 1u);
  // Asked again, still reported, not counted twice.
  Status st = rp.check_blocks(*held);
  EXPECT_EQ(st.code(), ErrorCode::kChecksumMismatch) << st.to_string();
  EXPECT_TRUE(contains(st.message(), "block " + std::to_string(victim))) << st.message();
  EXPECT_EQ(stat_of(v.pool().stats().checksum_mismatches), 1u);
  // Nobody matches it any more; the reader still holds it until it lets go, and then it
  // goes free, not back to the cache.
  EXPECT_EQ(wp.match_sequence_hashes(hashes)->size(), 2u);
  EXPECT_EQ(state_of(v, victim), code(BlockStateCode::kActive));
  held->clear();
  reader.flush();
  wait_until([&] { return state_of(v, victim) == code(BlockStateCode::kFree); }, 10s,
             "the poisoned block to go free", [&] { return v.describe(); });
  expect_invariants(v);
}

TEST(Checksum, OnlyTheDaemonDecidesAndOnlyForBlocksTheCallerHolds) {
  DaemonProcess d = checksum_daemon();
  d.start();
  DaemonView v = d.view();
  Client owner = connect_client(d);
  Pool p = pool_of(owner);
  auto reg = p.register_blocks(filled(p, 1, 300), RegisterOptions{.checksum = true});
  ASSERT_TRUE(reg.is_ok());
  // Another client names the block without holding it: refused, nothing hashed.
  auto other = open_connection(d);
  const BlockRef ref{(*reg)[0].block_id(), (*reg)[0].generation()};
  auto r = must_call(*other, Opcode::kVerify, 0, 1, &ref, sizeof(ref));
  EXPECT_EQ(r.code, ErrorCode::kInvalidHandle) << r.message;
  // A malformed scrub (two requests in one record) is a protocol error.
  proto::ScrubRequest two[2]{};
  auto s = raw_call(*other, static_cast<uint32_t>(Opcode::kScrub), 77, 0, 2, two, sizeof(two));
  EXPECT_EQ(s.code, ErrorCode::kProtocolError) << s.message;
  EXPECT_EQ(stat_of(v.pool().stats().checksum_verified), 0u);
  EXPECT_EQ(state_of(v, ref.id), code(BlockStateCode::kActive));
}

// What kvpool-peer relies on: a held block's registered checksum can be read without a
// request (Pool::registered_checksum) and is the hash of the bytes registered; checksums
// known already (RegisterOptions::checksums) are stored as given, and kvpoold still judges
// them by hashing the bytes itself.
TEST(Checksum, RegisteredChecksumsAreReadBackAndKnownOnesStoredAsGiven) {
  DaemonProcess d = checksum_daemon();
  d.start();
  Client c = connect_client(d);
  Pool p = pool_of(c);
  const auto layout = *Layout::create(p.layout());
  // The hash of a block's bytes as this process sees them.
  auto hash_of = [&](auto& b) {
    const std::byte* base = *b.address(0, 0) - layout.offset_unchecked(b.block_id(), 0, 0);
    return block_checksum(base, layout, b.block_id());
  };
  auto hashed = p.register_blocks(filled(p, 2, 100), RegisterOptions{.checksum = true});
  ASSERT_TRUE(hashed.is_ok()) << hashed.status().to_string();
  for (const ImmutableBlock& b : *hashed) {
    auto sum = p.registered_checksum(b);
    ASSERT_TRUE(sum.is_ok()) << sum.status().to_string();
    EXPECT_NE(*sum, kNoChecksum);
    EXPECT_EQ(*sum, hash_of(b));
  }
  auto plain = p.register_blocks(filled(p, 1, 200));
  ASSERT_TRUE(plain.is_ok());
  auto none = p.registered_checksum((*plain)[0]);
  ASSERT_TRUE(none.is_ok()) << none.status().to_string();
  EXPECT_EQ(*none, kNoChecksum);
  EXPECT_EQ(p.registered_checksum(ImmutableBlock()).status().code(), ErrorCode::kInvalidArgument);

  // Known checksums: the right one for block 0, a wrong one for block 1.
  auto fresh = filled(p, 2, 300);
  const std::vector<uint64_t> known{hash_of(fresh[0]), hash_of(fresh[1]) ^ 1};
  auto one_short = p.register_blocks(
      filled(p, 2, 400), RegisterOptions{.checksum = true, .checksums = {known.data(), 1}});
  EXPECT_EQ(one_short.status().code(), ErrorCode::kInvalidArgument);
  auto given =
      p.register_blocks(std::move(fresh), RegisterOptions{.checksum = true, .checksums = known});
  ASSERT_TRUE(given.is_ok()) << given.status().to_string();
  for (size_t i = 0; i < 2; ++i) {
    auto sum = p.registered_checksum((*given)[i]);
    ASSERT_TRUE(sum.is_ok()) << sum.status().to_string();
    EXPECT_EQ(*sum, known[i]);
  }
  auto judged = p.verify_blocks(*given);
  ASSERT_TRUE(judged.is_ok()) << judged.status().to_string();
  EXPECT_EQ(*judged, (std::vector<ChecksumResult>{ChecksumResult::kOk, ChecksumResult::kMismatch}));
}

}  // namespace
}  // namespace kvpool::mptest
