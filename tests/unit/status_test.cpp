#include "kvpool/core/status.hpp"

#include <gtest/gtest.h>

#include <cerrno>

namespace kvpool {
namespace {

TEST(Status, OkAndErrorCarryCodeAndMessage) {
  Status ok;
  EXPECT_TRUE(ok.is_ok());
  EXPECT_EQ(ok.to_string(), "Ok");
  Status err(ErrorCode::kNotEnoughBlocks, "pool 'g2' has 12 free blocks, 64 requested");
  EXPECT_FALSE(err.is_ok());
  EXPECT_EQ(err.to_string(), "NotEnoughBlocks: pool 'g2' has 12 free blocks, 64 requested");
}

TEST(Status, ResultHoldsValueOrStatus) {
  Result<int> v = 7;
  ASSERT_TRUE(v.is_ok());
  EXPECT_EQ(*v, 7);
  Result<int> e(ErrorCode::kInvalidHandle, "stale");
  ASSERT_FALSE(e.is_ok());
  EXPECT_EQ(e.status().code(), ErrorCode::kInvalidHandle);
}

TEST(Status, IoErrorNamesErrno) {
  Status s = io_error("shm_open /x", ENOSPC);
  EXPECT_EQ(s.code(), ErrorCode::kIoError);
  EXPECT_NE(s.message().find("No space left"), std::string::npos);
  EXPECT_EQ(io_error("open", EACCES).code(), ErrorCode::kPermissionDenied);
}

}  // namespace
}  // namespace kvpool
