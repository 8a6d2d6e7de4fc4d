// Quotas (owner_quota.hpp): each refusal names its config field; the cap on references per
// block keeps every refcount within 32 bits.
#include "kvpool/pool/owner_quota.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "formatted_arena.hpp"

namespace kvpool::pool {
namespace {

void expect_refused(const Status& s, const char* field) {
  EXPECT_EQ(s.code(), ErrorCode::kQuotaExceeded) << s.to_string();
  EXPECT_NE(s.message().find(field), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("pool 'g'"), std::string::npos) << s.to_string();
}

TEST(OwnerQuota, RefcountWrapIsRefusedAtConfiguration) {
  EXPECT_TRUE(check_quota_fits(OwnerQuota{}, 1024).is_ok());
  OwnerQuota q;
  q.max_refs_per_block = 0;
  EXPECT_EQ(check_quota_fits(q, 4).code(), ErrorCode::kInvalidArgument);
  q.max_refs_per_block = 1u << 12;
  EXPECT_TRUE(check_quota_fits(q, (1u << 20) - 1).is_ok());
  EXPECT_EQ(check_quota_fits(q, 1u << 20).code(), ErrorCode::kInvalidArgument);
}

TEST(OwnerQuota, MutableBlocksAndReferencesInTotal) {
  FormattedArena a(8);
  OwnerHolds holds(a.regions());
  Registry reg(a.regions(), 0);
  const std::string pool = "g";
  OwnerQuota q;
  q.max_mutable_blocks = 4;
  q.max_references = 10;
  QuotaGate gate(q, pool, holds, reg);
  EXPECT_TRUE(gate.mutable_blocks(3, 1).is_ok());
  expect_refused(gate.mutable_blocks(3, 2), "max_mutable_blocks");
  EXPECT_TRUE(gate.references(8, 2, "match").is_ok());
  Status s = gate.references(8, 3, "lookup");
  expect_refused(s, "max_references");
  EXPECT_NE(s.message().find("a lookup of 3"), std::string::npos) << s.to_string();
  QuotaGate unlimited(OwnerQuota{}, pool, holds, reg);
  EXPECT_TRUE(unlimited.mutable_blocks(1u << 30, 1u << 30).is_ok());
}

TEST(OwnerQuota, PerBlockCountsWhatTheOwnerHoldsThere) {
  FormattedArena a(8);
  OwnerHolds holds(a.regions());
  Registry reg(a.regions(), 0);
  const std::string pool = "g";
  OwnerQuota q;
  q.max_refs_per_block = 2;
  QuotaGate gate(q, pool, holds, reg);
  ASSERT_TRUE(holds.add(1, 5));
  EXPECT_TRUE(gate.per_block(1, 5, 1).is_ok());
  ASSERT_TRUE(holds.add(1, 5));
  expect_refused(gate.per_block(1, 5, 1), "max_refs_per_block");
  EXPECT_TRUE(gate.per_block(0, 5, 2).is_ok());      // another owner holds none there
  EXPECT_TRUE(gate.per_block(1, kNone, 2).is_ok());  // not registered yet
}

TEST(OwnerQuota, RegisterChecksPriorityTotalsAndRepeatedHashes) {
  FormattedArena a(8);
  OwnerHolds holds(a.regions());
  Registry reg(a.regions(), 0);
  const std::string pool = "g";
  OwnerQuota q;
  q.max_priority = 10;
  q.max_references = 4;
  q.max_refs_per_block = 2;
  QuotaGate gate(q, pool, holds, reg);
  auto item = [](uint64_t hash, uint32_t prio) {
    return proto::RegisterItem{{0, 0}, hash, 0, 0, prio, 0, 0};
  };
  std::vector<proto::RegisterItem> ok{item(1, 10), item(2, 0)};
  EXPECT_TRUE(gate.register_items(0, 0, ok).is_ok());
  expect_refused(gate.register_items(0, 0, std::vector{item(1, 11)}), "max_priority");
  expect_refused(gate.register_items(0, 3, ok), "max_references");
  // Three items of one hash: the first registers, two more share it: 3 > 2 on one block.
  std::vector<proto::RegisterItem> same{item(9, 0), item(9, 0), item(9, 0)};
  expect_refused(gate.register_items(0, 0, same), "max_refs_per_block");
  // A hash registered already, held twice by this owner: one more is over.
  reg.insert(77, 3);
  ASSERT_TRUE(holds.add(0, 3));
  ASSERT_TRUE(holds.add(0, 3));
  expect_refused(gate.register_items(0, 2, std::vector{item(77, 0)}), "max_refs_per_block");
  EXPECT_TRUE(gate.register_items(1, 0, std::vector{item(77, 0)}).is_ok());
}

}  // namespace
}  // namespace kvpool::pool
