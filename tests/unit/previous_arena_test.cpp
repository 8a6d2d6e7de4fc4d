// A dead daemon's arena opened for adoption (previous_arena.hpp): a const view that works on
// a read-only mapping (a write through it would fault), and its refusals.
#include "kvpool/pool/previous_arena.hpp"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "kvpool/pool/pool_core.hpp"

namespace kvpool::pool {
namespace {

// A pool with registered blocks, its bytes copied into a memfd mapped PROT_READ only: what
// kvpoold gets of its predecessor's registry segment.
class ReadOnlyArena {
 public:
  ReadOnlyArena() {
    const PoolCoreConfig c{16, 4, 0};
    bytes_ = *PoolCore::arena_bytes(c);
    heap_ = static_cast<char*>(std::aligned_alloc(64, bytes_));
    auto core = PoolCore::create(heap_, bytes_, c, 0, "old");
    EXPECT_TRUE(core);
    BlockRef b[3];
    EXPECT_TRUE(core->allocate(1, 3, b).is_ok());
    RegisterItem items[2] = {{b[0], 11, 1, 0, 0, 0, 0x77}, {b[1], 12, 2, 11, 0, 1}};
    BlockRef out[2];
    EXPECT_TRUE(core->register_blocks(1, items, out).is_ok());
    EXPECT_TRUE(core->release_immutable(1, {&out[1], 1}).is_ok());
  }
  ~ReadOnlyArena() {
    if (ro_) ::munmap(ro_, bytes_);
    std::free(heap_);
  }
  // Maps the heap arena's bytes read-only (after any scribbling the test did).
  const void* map() {
    const int fd = ::memfd_create("previous-arena-test", MFD_CLOEXEC);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::write(fd, heap_, bytes_), static_cast<ssize_t>(bytes_));
    void* m = ::mmap(nullptr, bytes_, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    EXPECT_NE(m, MAP_FAILED);
    ro_ = m;
    return ro_;
  }
  ArenaHeader& header() { return *reinterpret_cast<ArenaHeader*>(heap_); }
  size_t bytes() const { return bytes_; }

 private:
  size_t bytes_ = 0;
  char* heap_ = nullptr;
  void* ro_ = nullptr;
};

TEST(PreviousArena, OpensAndAdoptsFromAReadOnlyMapping) {
  ReadOnlyArena old;
  auto prev = open_previous_arena(old.map(), old.bytes(), "g");
  ASSERT_TRUE(prev) << prev.status().to_string();
  EXPECT_EQ(prev->name(), "g");
  EXPECT_EQ(prev->num_blocks(), 16u);
  EXPECT_FALSE(prev->interrupted());
  EXPECT_EQ(prev->header().registered, 2u);
  const uint32_t id = prev->find(11);
  ASSERT_NE(id, kNone);
  EXPECT_EQ(prev->block(id).sequence_hash, 11u);
  EXPECT_EQ(prev->checksum(id), 0x77u);
  EXPECT_EQ(prev->find(99), kNone);

  const PoolCoreConfig c{16, 4, 0};
  const size_t bytes = *PoolCore::arena_bytes(c);
  char* mem = static_cast<char*>(std::aligned_alloc(64, bytes));
  auto now = PoolCore::create(mem, bytes, c, 0, "g");
  ASSERT_TRUE(now);
  auto counts = now->adopt_registry(*prev);
  ASSERT_TRUE(counts) << counts.status().to_string();
  EXPECT_EQ(counts->adopted, 2u);
  EXPECT_EQ(counts->freed, 1u);  // the mutable block of a client that is gone
  EXPECT_EQ(now->checksum(id), 0x77u);
  EXPECT_TRUE(now->check_invariants().is_ok());
  std::free(mem);
}

TEST(PreviousArena, ACompleteArenaThatBreaksAnInvariantIsRefused) {
  ReadOnlyArena old;
  old.header().registered += 1;
  auto prev = open_previous_arena(old.map(), old.bytes(), "g");
  ASSERT_FALSE(prev);
  EXPECT_EQ(prev.status().code(), ErrorCode::kInternal);
  EXPECT_NE(prev.status().message().find("its arena is corrupt"), std::string::npos)
      << prev.status().to_string();
}

TEST(PreviousArena, AnInterruptedArenaIsOpenedWithoutTheInvariantCheck) {
  ReadOnlyArena old;
  old.header().registered += 1;  // a writer killed mid-call may leave any bookkeeping
  old.header().stats.write_seq.fetch_or(1);
  auto prev = open_previous_arena(old.map(), old.bytes(), "g");
  ASSERT_TRUE(prev) << prev.status().to_string();
  EXPECT_TRUE(prev->interrupted());
}

TEST(PreviousArena, ABadHeaderIsRefusedNamingTheField) {
  ReadOnlyArena old;
  old.header().off_table += 64;
  auto prev = open_previous_arena(old.map(), old.bytes(), "g");
  ASSERT_FALSE(prev);
  EXPECT_EQ(prev.status().code(), ErrorCode::kVersionMismatch);
  EXPECT_NE(prev.status().message().find("off_table"), std::string::npos);
}

TEST(PreviousArena, ATooSmallMappingIsRefused) {
  ReadOnlyArena old;
  auto prev = open_previous_arena(old.map(), old.bytes() - 64, "g");
  ASSERT_FALSE(prev);
  EXPECT_NE(prev.status().message().find("smaller than its total_bytes"), std::string::npos);
}

}  // namespace
}  // namespace kvpool::pool
