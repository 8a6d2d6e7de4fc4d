// The async forms against a real kvpoold: a thread that issues thousands of calls before
// reading any answer, and futures dropped unread (what their answers carry must go back).
#include <gtest/gtest.h>

#include <future>
#include <vector>

#include "client_helpers.hpp"
#include "harness.hpp"

namespace kvpool::mptest {
namespace {

// The response ring fills while nobody reads, the daemon then stops taking requests, and
// the request ring fills: a sender that only waited for room waited forever.
TEST(Async, TenThousandCallsBeforeReadingAnyAnswerComplete) {
  DaemonProcess d;
  d.start();
  Client c = connect_client(d);
  Pool p = pool_of(c);
  std::vector<std::future<Result<std::vector<MutableBlock>>>> futures;
  futures.reserve(10000);
  for (int i = 0; i < 10000; ++i) futures.push_back(p.allocate_blocks_async(0));
  size_t ok = 0;
  for (auto& f : futures) {
    auto r = f.get();
    ASSERT_TRUE(r) << r.status().to_string();
    ok += r->empty();
  }
  EXPECT_EQ(ok, 10000u);
  EXPECT_TRUE(c.ping().is_ok());
}

TEST(Async, DroppedAllocateFutureReturnsItsBlocks) {
  DaemonProcess d;
  d.start();
  auto v = d.view();
  Client c = connect_client(d);
  Pool p = pool_of(c);
  { auto f = p.allocate_blocks_async(3); }
  // Requests are served in order: once the ping is answered, the allocate was too (three
  // blocks went out); then they come back, though nobody read the answer.
  ASSERT_TRUE(c.ping().is_ok());
  EXPECT_EQ(stat_of(v.pool().stats().allocations), 3u);
  wait_counts(v, Want{64, 0, 0, 0});
  EXPECT_TRUE(c.ping().is_ok());
  expect_invariants(v);
}

TEST(Async, DroppedMatchAndRegisterFuturesLeaveNoBlockActive) {
  DaemonProcess d;
  d.start();
  auto v = d.view();
  WorkerProcess writer(d, "writer", {"--blocks", "2"});
  writer.expect_line("READY");
  std::string reg = writer.expect_line("REGISTERED");
  const std::string csv =
      reg.substr(reg.find("hashes=") + 7, reg.find(" ids=") - reg.find("hashes=") - 7);
  std::vector<SequenceHash> hashes{std::stoull(csv.substr(0, csv.find(','))),
                                   std::stoull(csv.substr(csv.find(',') + 1))};
  writer.command("release");
  wait_counts(v, Want{62, 0, 0, 2});

  Client c = connect_client(d);
  Pool p = pool_of(c);
  { auto f = p.match_sequence_hashes_async(hashes); }
  ASSERT_TRUE(c.ping().is_ok());  // the match was served: both blocks went active
  EXPECT_EQ(stat_of(v.pool().stats().match_hits), 2u);
  // A dropped match no longer pins its blocks active (never evictable) for good.
  wait_counts(v, Want{62, 0, 0, 2});

  auto blocks = p.allocate_blocks(2);
  ASSERT_TRUE(blocks);
  std::optional<SequenceHash> parent;
  for (uint32_t i = 0; i < 2; ++i) {
    MutableBlock& b = (*blocks)[i];
    ASSERT_TRUE(b.init_sequence(4242, parent).is_ok());
    std::vector<Token> t{100 + i * 4, 101 + i * 4, 102 + i * 4, 103 + i * 4};
    ASSERT_TRUE(b.add_tokens(t));
    ASSERT_TRUE(b.commit().is_ok());
    parent = *b.sequence_hash();
  }
  { auto f = p.register_blocks_async(std::move(*blocks)); }
  ASSERT_TRUE(c.ping().is_ok());  // the register was served
  // Registered, then released: four inactive blocks, nothing held.
  wait_counts(v, Want{60, 0, 0, 4});
  EXPECT_TRUE(c.ping().is_ok());
  expect_invariants(v);
}

}  // namespace
}  // namespace kvpool::mptest
