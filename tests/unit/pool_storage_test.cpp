// PoolStorage: host pools are a sealed memfd whose fd goes to clients; device pools are
// a CUDA slab that travels as an IPC handle, and fail at creation (no device, no CUDA in
// the build) with the pool, the device and the bytes in the message.
#include "daemon/pool_storage.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "daemon/config.hpp"
#include "kvpool/core/paths.hpp"
#include "kvpool/shm/protocol.hpp"

namespace kvpool::daemon {
namespace {

PoolConfig pool_config(shm::StorageKind storage, int32_t device) {
  PoolConfig pc = default_config().pools.front();
  // Formatted apart and moved in: g++ 12 at -O3 (Release) reports a false -Wrestrict
  // overlap when this string is edited in place (`"p" + std::to_string(...)` or +=;
  // GCC bug 105329).
  char name[32];
  std::snprintf(name, sizeof(name), "p%d", static_cast<int>(getpid()));
  pc.name = std::string(name);
  pc.storage = storage;
  pc.device = device;
  pc.layout.num_blocks = 8;
  return pc;
}

TEST(PoolStorage, HostPoolsAreSealedMemfdsThatClientsGetAsAnFd) {
  PoolConfig pc = pool_config(shm::StorageKind::kHost, -1);
  Layout layout = Layout::create(pc.layout).value();
  const std::string instance = "storage-test";
  auto s = PoolStorage::create(instance, pc, layout);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  shm::PoolInfo info{};
  std::memset(info.ipc_handle, 0x5A, sizeof(info.ipc_handle));
  s->publish(info);
  // The name is the memfd's debug name, for /proc/<pid>/fd and logs: nothing opens it.
  EXPECT_STREQ(info.shm_name, pool_segment_name(instance, pc.name).c_str());
  // (std::string::insert, not "/" + name: g++ 12 -O3 warns falsely of an overlapping
  // memcpy inside operator+, -Werror=restrict.)
  std::string opened_by_name = pool_segment_name(instance, pc.name);
  opened_by_name.insert(opened_by_name.begin(), '/');
  EXPECT_FALSE(shm::Segment::open(opened_by_name, false).is_ok());
  EXPECT_EQ(info.storage, static_cast<uint32_t>(shm::StorageKind::kHost));
  EXPECT_EQ(info.device, -1);
  EXPECT_EQ(info.data_bytes, layout.total_bytes());
  EXPECT_EQ(info.ipc_handle[0], 0);  // cleared: a host pool has no handle
  EXPECT_TRUE(proto::welcome_carries_fd(s->kind()));
  auto fd = s->client_fd();
  ASSERT_TRUE(fd.is_ok());
  EXPECT_TRUE(fd->valid());
  // A client holding the descriptor can neither shrink nor grow the pool under everyone
  // else's mappings (which would make their next access SIGBUS).
  struct stat st {};
  ASSERT_EQ(::fstat(fd->get(), &st), 0);
  EXPECT_EQ(::ftruncate(fd->get(), 0), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(::ftruncate(fd->get(), st.st_size + 4096), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "not re-openable read-write by other users";
}

TEST(PoolStorage, ACudaPoolWithoutItsDeviceFailsNamingPoolDeviceAndBytes) {
  const int missing = cuda::device_count();  // no such ordinal on any machine
  PoolConfig pc = pool_config(shm::StorageKind::kCuda, missing);
  Layout layout = Layout::create(pc.layout).value();
  auto s = PoolStorage::create("storage-test", pc, layout);
  ASSERT_FALSE(s.is_ok());
  const Status st = s.status();  // status() returns a copy: keep it alive
  const std::string& msg = st.message();
  EXPECT_NE(msg.find("pool '" + pc.name + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cuda device " + std::to_string(missing)), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(layout.total_bytes()) + " bytes"), std::string::npos) << msg;
  EXPECT_EQ(st.code(), cuda::built_with_cuda() ? ErrorCode::kDeviceError : ErrorCode::kUnsupported);
  EXPECT_FALSE(proto::welcome_carries_fd(shm::StorageKind::kCuda));
}

TEST(PoolStorage, ACudaPoolOnAVisibleDeviceTravelsAsAnIpcHandle) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  PoolConfig pc = pool_config(shm::StorageKind::kCuda, 0);
  Layout layout = Layout::create(pc.layout).value();
  auto s = PoolStorage::create("storage-test", pc, layout);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  shm::PoolInfo info{};
  s->publish(info);
  EXPECT_EQ(info.shm_name[0], '\0');
  EXPECT_EQ(info.storage, static_cast<uint32_t>(shm::StorageKind::kCuda));
  EXPECT_EQ(info.device, 0);
  EXPECT_EQ(info.data_bytes, layout.total_bytes());
  cuda::DeviceUuid uuid;
  std::memcpy(uuid.data(), info.device_uuid, uuid.size());
  EXPECT_EQ(uuid, cuda::device_uuid(0).value());
  uint8_t zero[sizeof(info.ipc_handle)] = {};
  EXPECT_NE(std::memcmp(info.ipc_handle, zero, sizeof(zero)), 0);
  auto fd = s->client_fd();
  ASSERT_TRUE(fd.is_ok());
  EXPECT_FALSE(fd->valid());
}

TEST(PoolStorage, ConfigRefusesCudaAlignmentAboveCudaMallocsGuarantee) {
  Config c = default_config();
  c.pools[0].storage = shm::StorageKind::kCuda;
  c.pools[0].device = 0;
  c.pools[0].layout.alignment = 256;
  EXPECT_TRUE(validate_config(c).is_ok());
  c.pools[0].layout.alignment = 4096;
  Status st = validate_config(c);
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(st.code(), ErrorCode::kConfigError);
  EXPECT_NE(st.message().find("pools[0].layout.alignment"), std::string::npos) << st.message();
  c.pools[0].storage = shm::StorageKind::kHost;  // host pools may align as they like
  c.pools[0].device = -1;
  EXPECT_TRUE(validate_config(c).is_ok());
}

}  // namespace
}  // namespace kvpool::daemon
