// kRegisterTokens (RegisterOptions::send_tokens, a BatchStore's keys) against a real kvpoold:
// the daemon checks a request's token ids against the pool (count per block, sizes) and its
// keys (each length bounded, the lengths adding up to the header's total and the payload's
// size) and refuses a malformed one with an error that says what is wrong, changing nothing;
// a well-formed one registers.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "client_helpers.hpp"
#include "harness.hpp"
#include "kvpool/client.hpp"
#include "kvpool/core/token_block.hpp"

namespace kvpool::mptest {
namespace {

constexpr uint32_t kTokensPerBlock = 4;

// A kRegisterTokens payload: header, the items, then `tokens` as they are (`key_bytes`
// in the header, no key section: for the checks of the header against the payload).
std::vector<std::byte> payload(uint32_t per_block, std::span<const pool::RegisterItem> items,
                               std::span<const uint32_t> tokens, uint32_t key_bytes = 0) {
  const proto::RegisterExtrasHeader h{per_block, key_bytes};
  std::vector<std::byte> out(sizeof(h) + items.size_bytes() + tokens.size_bytes());
  std::memcpy(out.data(), &h, sizeof(h));
  std::memcpy(out.data() + sizeof(h), items.data(), items.size_bytes());
  if (!tokens.empty())
    std::memcpy(out.data() + sizeof(h) + items.size_bytes(), tokens.data(), tokens.size_bytes());
  return out;
}

TEST(RegisterTokens, MalformedRequestsAreRefusedSayingWhyAndChangeNothing) {
  DaemonProcess d(test_config(nlohmann::json::array({host_pool("g", 8, kTokensPerBlock)})));
  d.start();
  auto v = d.view();
  auto c = open_connection(d);
  auto a = must_call(*c, Opcode::kAllocate, 0, 1, nullptr, 0);
  ASSERT_EQ(a.code, ErrorCode::kOk) << a.message;
  // A committed-looking item for the block we hold (the daemon cannot tell it from a real one).
  const pool::RegisterItem item{a.refs[0], 0x1234, 0x5678, 0, 0, 0};
  const std::vector<uint32_t> four = {1, 2, 3, 4};
  const uint64_t pe0 = stat_of(v.stats().protocol_errors);
  const uint32_t type = static_cast<uint32_t>(Opcode::kRegisterTokens);
  uint64_t corr = 5'000'000;

  {  // token ids per block other than the pool's page_size
    const std::vector<uint32_t> three = {1, 2, 3};
    const auto p = payload(3, {&item, 1}, three);
    auto r = raw_call(*c, type, ++corr, 0, 1, p.data(), p.size());
    EXPECT_EQ(r.code, ErrorCode::kInvalidArgument) << r.message;
    EXPECT_TRUE(contains(r.message, "3 token ids per block")) << r.message;
    EXPECT_TRUE(contains(r.message, "pool 'g' has 4 tokens per block")) << r.message;
  }
  {  // truncated: the header says 4 per block, the payload ends one token short
    const auto p = payload(kTokensPerBlock, {&item, 1}, std::span(four).first(3));
    auto r = raw_call(*c, type, ++corr, 0, 1, p.data(), p.size());
    EXPECT_EQ(r.code, ErrorCode::kProtocolError) << r.message;
    EXPECT_TRUE(contains(r.message, "does not hold 1 blocks of 4 token ids")) << r.message;
  }
  {  // count larger than the payload's items
    const auto p = payload(kTokensPerBlock, {&item, 1}, four);
    auto r = raw_call(*c, type, ++corr, 0, 2, p.data(), p.size());
    EXPECT_EQ(r.code, ErrorCode::kProtocolError) << r.message;
  }
  {  // shorter than its header
    const uint32_t half = kTokensPerBlock;
    auto r = raw_call(*c, type, ++corr, 0, 0, &half, sizeof(half));
    EXPECT_EQ(r.code, ErrorCode::kProtocolError) << r.message;
    EXPECT_TRUE(contains(r.message, "shorter than its 8-byte header")) << r.message;
  }
  {  // keys announced in the header (what was a reserved 0), none in the payload
    const auto p = payload(kTokensPerBlock, {&item, 1}, four, 7);
    auto r = raw_call(*c, type, ++corr, 0, 1, p.data(), p.size());
    EXPECT_EQ(r.code, ErrorCode::kProtocolError) << r.message;
    EXPECT_TRUE(contains(r.message, "and keys of 7 bytes")) << r.message;
  }
  // Nothing was registered; the daemon lives; the four framing errors were counted.
  EXPECT_EQ(stat_of(v.pool().stats().registrations), 0u);
  EXPECT_EQ(stat_of(v.stats().protocol_errors), pe0 + 4);
  ASSERT_TRUE(d.running()) << d.stderr_text();

  {  // well-formed: registered, the answer is the block
    const auto p = payload(kTokensPerBlock, {&item, 1}, four);
    auto r = raw_call(*c, type, ++corr, 0, 1, p.data(), p.size());
    ASSERT_EQ(r.code, ErrorCode::kOk) << r.message;
    ASSERT_EQ(r.refs.size(), 1u);
    EXPECT_EQ(r.refs[0], a.refs[0]);
    EXPECT_EQ(stat_of(v.pool().stats().registrations), 1u);
  }
  expect_invariants(v);
}

// A register with keys: header {0 token ids, key bytes}, the items, a u32 length per item,
// then the keys' bytes.
std::vector<std::byte> keyed_payload(std::span<const pool::RegisterItem> items,
                                     std::span<const uint32_t> lengths, std::string_view keys,
                                     uint32_t header_key_bytes) {
  const proto::RegisterExtrasHeader h{0, header_key_bytes};
  std::vector<std::byte> out(sizeof(h) + items.size_bytes() + lengths.size_bytes() + keys.size());
  std::byte* at = out.data();
  std::memcpy(at, &h, sizeof(h));
  std::memcpy(at += sizeof(h), items.data(), items.size_bytes());
  at += items.size_bytes();
  if (!lengths.empty()) std::memcpy(at, lengths.data(), lengths.size_bytes());  // null when empty
  if (!keys.empty()) std::memcpy(at + lengths.size_bytes(), keys.data(), keys.size());
  return out;
}

TEST(RegisterTokens, MalformedKeysAreRefusedSayingWhyAndChangeNothing) {
  DaemonProcess d(test_config(nlohmann::json::array({host_pool("g", 8, kTokensPerBlock)})));
  d.start();
  auto v = d.view();
  auto c = open_connection(d);
  auto a = must_call(*c, Opcode::kAllocate, 0, 2, nullptr, 0);
  ASSERT_EQ(a.code, ErrorCode::kOk) << a.message;
  const pool::RegisterItem items[2] = {{a.refs[0], 0x1234, 0x1234, 0, 0, 0},
                                       {a.refs[1], 0x5678, 0x5678, 0, 0, 0}};
  const uint64_t pe0 = stat_of(v.stats().protocol_errors);
  const uint32_t type = static_cast<uint32_t>(Opcode::kRegisterTokens);
  uint64_t corr = 6'000'000;
  const std::string big(proto::kMaxRegisterKeyBytes + 1, 'k');

  {  // a key over 4096 bytes (the total within two blocks' bound): named with its block
    const uint32_t lengths[2] = {0, static_cast<uint32_t>(big.size())};
    const auto p = keyed_payload(items, lengths, big, static_cast<uint32_t>(big.size()));
    auto r = raw_call(*c, type, ++corr, 0, 2, p.data(), p.size());
    EXPECT_EQ(r.code, ErrorCode::kInvalidArgument) << r.message;
    EXPECT_TRUE(contains(r.message, "the key of block 1 has 4097 bytes: at most 4096"))
        << r.message;
  }
  {  // a header total no two keys can reach: refused before any size arithmetic
    const uint32_t lengths[2] = {3, 3};
    const auto p = keyed_payload(items, lengths, "abcdef", 0xFFFFFFFFu);
    auto r = raw_call(*c, type, ++corr, 0, 2, p.data(), p.size());
    EXPECT_EQ(r.code, ErrorCode::kInvalidArgument) << r.message;
    EXPECT_TRUE(contains(r.message, "4294967295 key bytes: a block's key has at most 4096"))
        << r.message;
  }
  {  // lengths that do not add up to the header's total (the payload holds the total)
    const uint32_t lengths[2] = {3, 2};
    const auto p = keyed_payload(items, lengths, "abcdef", 6);
    auto r = raw_call(*c, type, ++corr, 0, 2, p.data(), p.size());
    EXPECT_EQ(r.code, ErrorCode::kProtocolError) << r.message;
    EXPECT_TRUE(contains(r.message, "key lengths add up to 5 bytes, its header says 6"))
        << r.message;
  }
  {  // lengths that claim more than the payload holds: its size is checked first
    const uint32_t lengths[2] = {3, 3};
    const auto p = keyed_payload(items, lengths, "abc", 6);
    auto r = raw_call(*c, type, ++corr, 0, 2, p.data(), p.size());
    EXPECT_EQ(r.code, ErrorCode::kProtocolError) << r.message;
    EXPECT_TRUE(contains(r.message, "does not hold 2 blocks of 0 token ids and keys of 6 bytes"))
        << r.message;
  }
  {  // the key section cut off: no lengths at all
    const auto p = keyed_payload(items, {}, "", 6);
    auto r = raw_call(*c, type, ++corr, 0, 2, p.data(), p.size());
    EXPECT_EQ(r.code, ErrorCode::kProtocolError) << r.message;
  }
  // Nothing was registered; the daemon lives; the framing errors were counted.
  EXPECT_EQ(stat_of(v.pool().stats().registrations), 0u);
  EXPECT_EQ(stat_of(v.stats().protocol_errors), pe0 + 3);
  ASSERT_TRUE(d.running()) << d.stderr_text();

  {  // well-formed, one key and one block without: both register
    const uint32_t lengths[2] = {5, 0};
    const auto p = keyed_payload(items, lengths, "hello", 5);
    auto r = raw_call(*c, type, ++corr, 0, 2, p.data(), p.size());
    ASSERT_EQ(r.code, ErrorCode::kOk) << r.message;
    ASSERT_EQ(r.refs.size(), 2u);
    EXPECT_EQ(stat_of(v.pool().stats().registrations), 2u);
  }
  expect_invariants(v);
}

// The client side: send_tokens registers the same blocks as a plain register (the tokens go
// to the events only), and a block deduplicated onto an existing one still works.
TEST(RegisterTokens, ASendTokensRegisterRegistersLikeAPlainOne) {
  DaemonProcess d(test_config(nlohmann::json::array({host_pool("g", 8, kTokensPerBlock)})));
  d.start();
  Client client = connect_client(d);
  Pool pool = pool_of(client);
  RegisterOptions with_tokens;
  with_tokens.send_tokens = true;
  auto fill = [&](uint32_t base) {
    auto seq =
        TokenBlockSequence::create(std::vector<Token>{base, base + 1, base + 2, base + 3, base + 4,
                                                      base + 5, base + 6, base + 7},
                                   kTokensPerBlock, 0);
    auto blocks = pool.allocate_blocks(2);
    EXPECT_TRUE(blocks.is_ok());
    for (size_t i = 0; i < 2; ++i) {
      auto& b = (*blocks)[i];
      EXPECT_TRUE(b.init_sequence(0, seq->blocks()[i].parent_sequence_hash).is_ok());
      EXPECT_TRUE(b.add_tokens(seq->blocks()[i].tokens).is_ok());
      EXPECT_TRUE(b.commit().is_ok());
    }
    return std::make_pair(std::move(*blocks), seq->sequence_hashes());
  };
  auto [blocks, hashes] = fill(10);
  auto reg = pool.register_blocks(std::move(blocks), with_tokens);
  ASSERT_TRUE(reg.is_ok()) << reg.status().to_string();
  ASSERT_EQ(reg->size(), 2u);
  EXPECT_EQ((*reg)[1].sequence_hash(), hashes[1]);
  auto [again, same] = fill(10);  // the same hashes: deduplicated
  auto dup = pool.register_blocks(std::move(again), with_tokens);
  ASSERT_TRUE(dup.is_ok()) << dup.status().to_string();
  EXPECT_EQ((*dup)[0].block_id(), (*reg)[0].block_id());
  auto m = pool.match_sequence_hashes(hashes);
  ASSERT_TRUE(m.is_ok());
  EXPECT_EQ(m->size(), 2u);
}

}  // namespace
}  // namespace kvpool::mptest
