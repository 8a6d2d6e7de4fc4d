// BatchStore (kvpool/batch_store.hpp) against a real kvpoold: opaque keys set, found, copied
// out exactly, removed and evicted; a forced collision of the 64-bit index never serves
// another key's bytes; a dead daemon completes batches with an error, never a hang.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>

#include <cstring>
#include <string>
#include <vector>

#include "client_helpers.hpp"
#include "harness.hpp"
#include "kvpool/batch_store.hpp"

namespace kvpool::mptest {
namespace {

constexpr uint32_t kValue = 4096;

// A byte pool: each block is block_bytes of one region (page 1, inner = bytes, dtype 1).
nlohmann::json byte_pool(const std::string& name, uint32_t blocks, uint64_t block_bytes) {
  return {{"name", name},
          {"num_blocks", blocks},
          {"layout",
           {{"num_layers", 1},
            {"outer_dim", 1},
            {"page_size", 1},
            {"inner_dim", block_bytes},
            {"dtype_bytes", 1},
            {"alignment", 64}}}};
}

std::vector<std::byte> value_of(const std::string& key, size_t n = kValue) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<std::byte>((key.empty() ? 0 : key[i % key.size()]) * 31 + i * 7);
  return v;
}

struct Keys {
  std::vector<std::string> text;
  std::vector<KeyBytes> bytes;
  explicit Keys(std::vector<std::string> t) : text(std::move(t)) {
    for (const auto& s : text) bytes.push_back(key_bytes(s));
  }
};

BatchCompletion submit_and_wait(BatchStore& s, BatchOp op, const Keys& k,
                                std::vector<IoBuffer> bufs = {}) {
  auto id = s.submit(op, k.bytes, bufs);
  if (!id) throw HarnessError(id.status().to_string());
  auto c = s.wait(*id, 20s);
  if (!c) throw HarnessError(c.status().to_string());
  return std::move(c.value());
}

std::vector<KeyResult> results(std::initializer_list<KeyResult> r) { return r; }
constexpr KeyResult kOk = KeyResult::kOk;
constexpr KeyResult kMiss = KeyResult::kMiss;

class BatchStoreTest : public ::testing::Test {
 protected:
  uint64_t block_bytes = batch_store_block_bytes(448, kValue);
  DaemonProcess d{test_config(nlohmann::json::array({byte_pool("kv", 16, block_bytes)}))};
  void SetUp() override { d.start(); }
};

TEST_F(BatchStoreTest, SetGetExistsDeleteByOpaqueKeys) {
  Client c = connect_client(d);
  auto s = BatchStore::open(c, "kv");
  ASSERT_TRUE(s) << s.status().to_string();
  EXPECT_EQ(s->value_capacity(), kValue);
  Keys k({"model@00000000@0@a1b2", "model@00000000@0@c3d4", std::string(448, 'x')});
  std::vector<std::vector<std::byte>> vals;
  std::vector<IoBuffer> in;
  for (const auto& t : k.text) vals.push_back(value_of(t));
  for (auto& v : vals) in.push_back({v.data(), v.size()});
  EXPECT_EQ(submit_and_wait(*s, BatchOp::kSet, k, in).results, results({kOk, kOk, kOk}));

  Keys ask({k.text[0], "never stored", k.text[2], k.text[1]});
  EXPECT_EQ(submit_and_wait(*s, BatchOp::kExists, ask).results, results({kOk, kMiss, kOk, kOk}));

  std::vector<std::vector<std::byte>> out(4, std::vector<std::byte>(kValue));
  std::vector<IoBuffer> bufs;
  for (auto& o : out) bufs.push_back({o.data(), o.size()});
  auto got = submit_and_wait(*s, BatchOp::kGet, ask, bufs);
  ASSERT_TRUE(got.status.is_ok()) << got.status.to_string();
  EXPECT_EQ(got.results, results({kOk, kMiss, kOk, kOk}));
  EXPECT_EQ(got.value_sizes, (std::vector<uint64_t>{kValue, 0, kValue, kValue}));
  EXPECT_EQ(out[0], vals[0]);
  EXPECT_EQ(out[2], vals[2]);
  EXPECT_EQ(out[3], vals[1]);

  // A shorter buffer gets nothing; a longer one gets the stored bytes.
  std::vector<std::byte> small(kValue - 1), big(kValue + 100);
  Keys two({k.text[0], k.text[1]});
  auto sized = submit_and_wait(*s, BatchOp::kGet, two,
                               {{small.data(), small.size()}, {big.data(), big.size()}});
  EXPECT_EQ(sized.results, results({KeyResult::kTooLarge, kOk}));
  EXPECT_TRUE(std::equal(vals[1].begin(), vals[1].end(), big.begin()));

  // Delete: removed now (not when evicted); a second delete finds nothing.
  Keys one({k.text[1]});
  EXPECT_EQ(submit_and_wait(*s, BatchOp::kDelete, one).results, results({kOk}));
  EXPECT_EQ(submit_and_wait(*s, BatchOp::kDelete, one).results, results({kMiss}));
  EXPECT_EQ(submit_and_wait(*s, BatchOp::kExists, ask).results, results({kOk, kMiss, kOk, kMiss}));

  // Too long a key is refused at submit; too large a value is a per-key result.
  Keys longer({std::string(449, 'y')});
  EXPECT_EQ(s->submit(BatchOp::kExists, longer.bytes).status().code(), ErrorCode::kInvalidArgument);
  std::vector<std::byte> huge(kValue + 1);
  EXPECT_EQ(submit_and_wait(*s, BatchOp::kSet, one, {{huge.data(), huge.size()}}).results,
            results({KeyResult::kTooLarge}));
  auto v = d.view();
  EXPECT_EQ(stat_of(v.pool().stats().registrations), 3u);
}

TEST_F(BatchStoreTest, ExistsPrefixStopsAtTheFirstMissingKey) {
  Client c = connect_client(d);
  auto s = BatchStore::open(c, "kv");
  ASSERT_TRUE(s) << s.status().to_string();
  Keys stored({"p0", "p1", "p3"});
  std::vector<std::vector<std::byte>> vals;
  std::vector<IoBuffer> in;
  for (const auto& t : stored.text) vals.push_back(value_of(t, 100));
  for (auto& v : vals) in.push_back({v.data(), v.size()});
  ASSERT_EQ(submit_and_wait(*s, BatchOp::kSet, stored, in).results, results({kOk, kOk, kOk}));
  auto p = submit_and_wait(*s, BatchOp::kExistsPrefix, Keys({"p0", "p1", "p2", "p3"}));
  EXPECT_EQ(p.prefix, 2u);
  EXPECT_EQ(p.results, results({kOk, kOk, kMiss, kMiss}));
  EXPECT_EQ(submit_and_wait(*s, BatchOp::kExistsPrefix, Keys({"p2", "p0"})).prefix, 0u);
  EXPECT_EQ(submit_and_wait(*s, BatchOp::kExistsPrefix, Keys({"p0", "p1"})).prefix, 2u);
}

// The narrow index forced to one bit: keys collide in kvpoold's registry, and the full key
// check in the block turns every collision into a miss, never another key's bytes.
TEST_F(BatchStoreTest, ForcedIndexCollisionIsAMissNeverAFalseHit) {
  Client c = connect_client(d);
  BatchStoreOptions o;
  o.index_bits = 1;
  auto s = BatchStore::open(c, "kv", o);
  ASSERT_TRUE(s) << s.status().to_string();
  // Two keys with the same (one-bit) index hash.
  std::string a = "key-0", b;
  for (int i = 1; b.empty(); ++i) {
    std::string t = "key-" + std::to_string(i);
    if (s->index_hash(key_bytes(t)) == s->index_hash(key_bytes(a))) b = t;
  }
  auto va = value_of(a);
  ASSERT_EQ(submit_and_wait(*s, BatchOp::kSet, Keys({a}), {{va.data(), va.size()}}).results,
            results({kOk}));

  std::vector<std::byte> out(kValue, std::byte{0x5a});
  auto g = submit_and_wait(*s, BatchOp::kGet, Keys({b}), {{out.data(), out.size()}});
  EXPECT_EQ(g.results, results({kMiss}));
  EXPECT_EQ(out, std::vector<std::byte>(kValue, std::byte{0x5a}));  // untouched
  EXPECT_EQ(submit_and_wait(*s, BatchOp::kExists, Keys({b})).results, results({kMiss}));
  EXPECT_EQ(submit_and_wait(*s, BatchOp::kExistsPrefix, Keys({a, b})).prefix, 1u);
  EXPECT_EQ(submit_and_wait(*s, BatchOp::kDelete, Keys({b})).results, results({kMiss}));
  // b cannot be stored while a holds the index hash: a miss for b, a intact.
  auto vb = value_of(b);
  EXPECT_EQ(submit_and_wait(*s, BatchOp::kSet, Keys({b}), {{vb.data(), vb.size()}}).results,
            results({kMiss}));
  EXPECT_EQ(submit_and_wait(*s, BatchOp::kGet, Keys({a}), {{out.data(), out.size()}}).results,
            results({kOk}));
  EXPECT_EQ(out, va);
  EXPECT_GE(s->stats().key_mismatches, 4u);

  // A namespace is part of the key: the same key text in another namespace is another key.
  BatchStoreOptions other = o;
  other.key_namespace = "tenant-2";
  auto s2 = BatchStore::open(c, "kv", other);
  ASSERT_TRUE(s2) << s2.status().to_string();
  EXPECT_EQ(submit_and_wait(*s2, BatchOp::kGet, Keys({a}), {{out.data(), out.size()}}).results,
            results({kMiss}));
}

TEST_F(BatchStoreTest, TwoClientsShareBlocksAndFullPoolsEvictTheOldest) {
  Client c1 = connect_client(d);
  Client c2 = connect_client(d);
  auto s1 = BatchStore::open(c1, "kv");
  auto s2 = BatchStore::open(c2, "kv");
  ASSERT_TRUE(s1 && s2);
  // 40 keys through a pool of 16 blocks, in batches of 8.
  std::vector<std::string> names;
  for (int i = 0; i < 40; ++i) names.push_back("seq-" + std::to_string(i));
  for (int b = 0; b < 5; ++b) {
    Keys k(std::vector<std::string>(names.begin() + b * 8, names.begin() + b * 8 + 8));
    std::vector<std::vector<std::byte>> vals;
    std::vector<IoBuffer> in;
    for (const auto& t : k.text) vals.push_back(value_of(t));
    for (auto& v : vals) in.push_back({v.data(), v.size()});
    auto r = submit_and_wait(*s1, BatchOp::kSet, k, in);
    ASSERT_TRUE(r.status.is_ok()) << r.status.to_string();
    EXPECT_EQ(r.results, std::vector<KeyResult>(8, kOk)) << "batch " << b;
  }
  // The other client reads the newest 16 exactly; the oldest were evicted (misses).
  Keys newest(std::vector<std::string>(names.begin() + 24, names.end()));
  std::vector<std::vector<std::byte>> out(16, std::vector<std::byte>(kValue));
  std::vector<IoBuffer> bufs;
  for (auto& o : out) bufs.push_back({o.data(), o.size()});
  auto g = submit_and_wait(*s2, BatchOp::kGet, newest, bufs);
  EXPECT_EQ(g.results, std::vector<KeyResult>(16, kOk));
  for (int i = 0; i < 16; ++i) EXPECT_EQ(out[i], value_of(newest.text[i])) << newest.text[i];
  Keys oldest(std::vector<std::string>(names.begin(), names.begin() + 8));
  EXPECT_EQ(submit_and_wait(*s2, BatchOp::kExists, oldest).results,
            std::vector<KeyResult>(8, kMiss));
}

TEST_F(BatchStoreTest, EventFdWakesAndDrainReturnsEveryCompletionInOrder) {
  Client c = connect_client(d);
  auto s = BatchStore::open(c, "kv");
  ASSERT_TRUE(s);
  Keys k({"e0", "e1"});
  std::vector<uint64_t> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(*s->submit(BatchOp::kExists, k.bytes));
  std::vector<BatchCompletion> got;
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (got.size() < 3 && std::chrono::steady_clock::now() < deadline) {
    pollfd p{s->event_fd(), POLLIN, 0};
    ASSERT_GE(::poll(&p, 1, 20000), 0);
    for (auto& c1 : s->drain()) got.push_back(std::move(c1));
  }
  ASSERT_EQ(got.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(got[i].id, ids[i]);
    EXPECT_EQ(got[i].results, results({kMiss, kMiss}));
  }
}

TEST_F(BatchStoreTest, DeadDaemonCompletesBatchesWithAnErrorNotAHang) {
  Client c = connect_client(d, /*reattach=*/false);
  auto s = BatchStore::open(c, "kv");
  ASSERT_TRUE(s);
  Keys k({"x0", "x1"});
  ASSERT_TRUE(submit_and_wait(*s, BatchOp::kExists, k).status.is_ok());
  d.kill(SIGKILL);
  ASSERT_TRUE(d.wait_exit(10s));
  std::vector<std::byte> buf(kValue);
  auto g =
      submit_and_wait(*s, BatchOp::kGet, k, {{buf.data(), buf.size()}, {buf.data(), buf.size()}});
  EXPECT_EQ(g.status.code(), ErrorCode::kDaemonGone) << g.status.to_string();
  EXPECT_EQ(g.results, results({KeyResult::kFailed, KeyResult::kFailed}));
  s->close();
  EXPECT_EQ(s->submit(BatchOp::kExists, k.bytes).status().code(), ErrorCode::kInvalidState);
}

TEST_F(BatchStoreTest, RefusesPoolsItCannotKeepKeysIn) {
  Client c = connect_client(d);
  BatchStoreOptions o;
  o.max_key_bytes = static_cast<uint32_t>(block_bytes);  // no room left for a value
  auto s = BatchStore::open(c, "kv", o);
  EXPECT_EQ(s.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(s.status().message(), "no room for a value")) << s.status().message();
  EXPECT_EQ(BatchStore::open(c, "nope").status().code(), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace kvpool::mptest
