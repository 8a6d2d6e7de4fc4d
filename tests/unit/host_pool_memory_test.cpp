// Host pool memory: created afresh, pre-faulted with progress, placed on a NUMA node or
// huge pages when asked, and every wrong placement refused at start with the reason.
#include "daemon/host_pool_memory.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <string>
#include <vector>

#include "daemon/config.hpp"
#include "unit/unit_fixtures.hpp"

#ifdef KVPOOL_HAVE_NUMA
#include <numa.h>
#include <numaif.h>
#endif

namespace kvpool::daemon {
namespace {

std::string pool_name(const char* what) { return unit::shm_test_name("/kvpool-hpm-test", what); }

TEST(HostPoolMemory, PrefaultsEveryPageWithProgressAndRemovesTheObject) {
  const std::string name = pool_name("plain");
  const uint64_t bytes = (600ull << 20) + 4096;  // three chunks, the last a partial one
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  auto m = create_host_pool_memory(
      name, bytes, {}, [&](uint64_t done, uint64_t total) { calls.emplace_back(done, total); });
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ(m->name, name);
  EXPECT_FALSE(m->hugetlbfs);
  EXPECT_EQ(m->segment.size(), bytes);
  ASSERT_EQ(calls.size(), 4u);  // 0, then after each of the three chunks
  EXPECT_EQ(calls.front(), std::make_pair(uint64_t{0}, bytes));
  EXPECT_EQ(calls.back(), std::make_pair(bytes, bytes));
  for (size_t i = 1; i < calls.size(); ++i) EXPECT_GT(calls[i].first, calls[i - 1].first);
  // Pre-faulted: the object holds all its memory before anyone touched a page (tmpfs
  // counts allocated blocks in st_blocks; a sparse object would show fewer).
  struct stat backed {};
  ASSERT_EQ(::fstat(m->segment.fd(), &backed), 0);
  EXPECT_GE(static_cast<uint64_t>(backed.st_blocks) * 512, bytes);
  // A memfd, 0600 (no other user can re-open a client's descriptor read-write through
  // /proc), with no name in /dev/shm, sealed against resizing.
  struct stat st {};
  ASSERT_EQ(::fstat(m->segment.fd(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_FALSE(unit::shm_exists(name));
  EXPECT_NE(::ftruncate(m->segment.fd(), 0), 0);
  EXPECT_EQ(errno, EPERM);
  remove_host_pool_memory(*m);
}

TEST(HostPoolMemory, ReplacesAnObjectAKilledDaemonLeft) {
  const std::string name = pool_name("stale");
  auto first = create_host_pool_memory(name, 1 << 20, {}, nullptr);
  ASSERT_TRUE(first.is_ok()) << first.status().to_string();
  static_cast<char*>(first->segment.data())[0] = 42;
  auto second = create_host_pool_memory(name, 1 << 20, {}, nullptr);
  ASSERT_TRUE(second.is_ok()) << second.status().to_string();
  EXPECT_EQ(static_cast<char*>(second->segment.data())[0], 0);  // a fresh, zeroed object
  remove_host_pool_memory(*second);
}

TEST(HostPoolMemory, MoreThanTheMachineHasIsRefusedBeforeAnythingIsMade) {
  const std::string name = pool_name("huge");
  auto m = create_host_pool_memory(name, uint64_t{1} << 50, {}, nullptr);
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(m.status().message().find("more than this machine's memory"), std::string::npos)
      << m.status().message();
  EXPECT_FALSE(unit::shm_exists(name));
}

TEST(HostPoolMemory, AHugePagesDirectoryThatIsNotHugetlbfsIsRefused) {
  auto m = create_host_pool_memory(pool_name("nothuge"), 1 << 20, {"/tmp", -1}, nullptr);
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().code(), ErrorCode::kConfigError);
  EXPECT_NE(m.status().message().find("/tmp is not a hugetlbfs mount"), std::string::npos)
      << m.status().message();
}

TEST(HostPoolMemory, TransparentHugePagesFollowTheKernelsShmemSetting) {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
  std::string line;
  if (!std::getline(f, line)) GTEST_SKIP() << "no transparent huge pages in this kernel";
  const std::string name = pool_name("thp");
  auto m = create_host_pool_memory(name, 8 << 20, {"transparent", -1}, nullptr);
  const bool off =
      line.find("[never]") != std::string::npos || line.find("[deny]") != std::string::npos;
  if (off) {
    ASSERT_FALSE(m.is_ok());
    EXPECT_EQ(m.status().code(), ErrorCode::kConfigError);
    EXPECT_NE(m.status().message().find("shmem_enabled"), std::string::npos)
        << m.status().message();
    EXPECT_FALSE(unit::shm_exists(name));
  } else {
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    remove_host_pool_memory(*m);
  }
}

TEST(HostPoolMemory, HugetlbfsPoolsLiveOnTheMount) {
  std::ifstream mounts("/proc/mounts");
  std::string dev, dir, type, rest, mount;
  while (mounts >> dev >> dir >> type && std::getline(mounts, rest))
    if (type == "hugetlbfs") mount = dir;
  std::ifstream f("/proc/sys/vm/nr_hugepages");
  long pages = 0;
  f >> pages;
  if (mount.empty() || pages < 2) GTEST_SKIP() << "no hugetlbfs mount with reserved huge pages";
  auto m = create_host_pool_memory(pool_name("tlb"), 4096, {mount, -1}, nullptr);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_TRUE(m->hugetlbfs);
  EXPECT_EQ(m->name.rfind(mount + "/", 0), 0u) << m->name;
  EXPECT_GE(m->segment.size(), 4096u);  // rounded up to the huge page size
  remove_host_pool_memory(*m);
}

#ifdef KVPOOL_HAVE_NUMA
TEST(HostPoolMemory, NumaNodeBindsEveryPageAndAMissingNodeIsNamed) {
  if (numa_available() < 0) GTEST_SKIP() << "no NUMA on this machine";
  const int last = numa_max_node();
  auto bad = create_host_pool_memory(pool_name("nonode"), 1 << 20, {"", last + 1}, nullptr);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kConfigError);
  EXPECT_NE(bad.status().message().find("NUMA nodes 0.." + std::to_string(last)), std::string::npos)
      << bad.status().message();

  auto m = create_host_pool_memory(pool_name("node"), 4 << 20, {"", last}, nullptr);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  auto* p = static_cast<char*>(m->segment.data());
  for (size_t off = 0; off < m->segment.size(); off += 1 << 20) {
    int node = -1, mode = -1;
    ASSERT_EQ(get_mempolicy(&node, nullptr, 0, p + off, MPOL_F_NODE | MPOL_F_ADDR), 0);
    EXPECT_EQ(node, last) << "page at " << off;
    ASSERT_EQ(get_mempolicy(&mode, nullptr, 0, p + off, MPOL_F_ADDR), 0);
    EXPECT_EQ(mode, MPOL_BIND);
  }
  remove_host_pool_memory(*m);
}
#endif

TEST(HostPoolMemory, ConfigReadsPlacementOnlyForHostPools) {
  auto c = parse_config(R"({"pools": [{"name": "a", "num_blocks": 8, "huge_pages": "transparent",
                                       "numa_node": 0},
                                      {"name": "b", "num_blocks": 8, "huge_pages": "off"}]})");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->pools[0].huge_pages, "transparent");
  EXPECT_EQ(c->pools[0].numa_node, 0);
  EXPECT_EQ(c->pools[1].huge_pages, "");
  EXPECT_EQ(c->pools[1].numa_node, -1);
  auto again = parse_config(config_to_json(*c));  // round trip
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  EXPECT_EQ(*again, *c);
  // The default config prints neither (systemd/kvpoold.json stays as it is).
  EXPECT_EQ(config_to_json(default_config()).find("huge_pages"), std::string::npos);

  auto cuda =
      parse_config(R"({"pools": [{"name": "g", "storage": "cuda", "device": 0, "numa_node": 0}]})");
  ASSERT_FALSE(cuda.is_ok());
  EXPECT_NE(cuda.status().message().find("pools[0].numa_node: applies to host pools only"),
            std::string::npos)
      << cuda.status().message();
  auto rel = parse_config(R"({"pools": [{"name": "g", "huge_pages": "dev/hugepages"}]})");
  ASSERT_FALSE(rel.is_ok());
  EXPECT_NE(rel.status().message().find("pools[0].huge_pages"), std::string::npos)
      << rel.status().message();
}

}  // namespace
}  // namespace kvpool::daemon
