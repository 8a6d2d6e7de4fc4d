#include "kvpool/shm/segment.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "unit/unit_fixtures.hpp"

namespace kvpool::shm {
namespace {

std::string segment_name(const char* what) { return unit::shm_test_name("/kvpool.test", what); }

// Removes the named object however the test ends.
struct ShmNameGuard {
  std::string name;
  ~ShmNameGuard() { ::shm_unlink(name.c_str()); }
};

// Waits for a child with a bound: a hung child fails the test instead of hanging it.
int wait_child(pid_t pid, int timeout_ms) {
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    int rc = ::poll(&p, 1, timeout_ms);
    ::close(pidfd);
    if (rc == 0) {
      ::kill(pid, SIGKILL);
      ADD_FAILURE() << "child " << pid << " did not exit within " << timeout_ms << " ms";
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

TEST(Segment, CreateIsZeroFilledAndOpenByNameSharesIt) {
  ShmNameGuard guard{segment_name("create")};
  Result<Segment> seg = Segment::create(guard.name, 8192);
  ASSERT_TRUE(seg) << seg.status().to_string();
  EXPECT_EQ(seg->size(), 8192u);
  EXPECT_TRUE(seg->writable());
  auto* bytes = seg->as<unsigned char>();
  EXPECT_TRUE(std::all_of(bytes, bytes + 8192, [](unsigned char b) { return b == 0; }));
  std::memcpy(bytes + 100, "hello", 5);

  Result<Segment> ro = Segment::open(guard.name, /*writable=*/false);
  ASSERT_TRUE(ro) << ro.status().to_string();
  EXPECT_EQ(ro->size(), 8192u);
  EXPECT_FALSE(ro->writable());
  EXPECT_EQ(std::memcmp(ro->as<char>() + 100, "hello", 5), 0);

  struct stat st;
  ASSERT_EQ(::fstat(seg->fd(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_GE(st.st_blocks * 512, 8192) << "fallocate backs every page";
  EXPECT_NE(::fcntl(seg->fd(), F_GETFD) & FD_CLOEXEC, 0);
}

TEST(Segment, CreateAppliesTheExactMode) {
  ShmNameGuard guard{segment_name("mode")};
  mode_t old = ::umask(077);
  Result<Segment> seg = Segment::create(guard.name, 4096, 0640);
  ::umask(old);
  ASSERT_TRUE(seg) << seg.status().to_string();
  struct stat st;
  ASSERT_EQ(::fstat(seg->fd(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
}

TEST(Segment, MapFdReadWriteAndReadOnlySeeTheSameBytes) {
  Result<Segment> seg = Segment::create_anonymous("kvpool-test", 3 * 4096);
  ASSERT_TRUE(seg) << seg.status().to_string();
  Result<UniqueFd> rw_fd = seg->dup_fd();
  ASSERT_TRUE(rw_fd) << rw_fd.status().to_string();
  Result<Segment> rw = Segment::map_fd(std::move(*rw_fd), /*writable=*/true);
  ASSERT_TRUE(rw) << rw.status().to_string();
  EXPECT_EQ(rw->size(), 3u * 4096);
  std::memcpy(rw->as<char>() + 5000, "abc", 3);
  EXPECT_EQ(std::memcmp(seg->as<char>() + 5000, "abc", 3), 0);

  Result<UniqueFd> ro_fd = seg->open_readonly_fd();
  ASSERT_TRUE(ro_fd) << ro_fd.status().to_string();
  Result<Segment> ro = Segment::map_fd(std::move(*ro_fd), /*writable=*/false);
  ASSERT_TRUE(ro) << ro.status().to_string();
  EXPECT_EQ(std::memcmp(ro->as<char>() + 5000, "abc", 3), 0);
  seg->as<char>()[6000] = 'z';
  EXPECT_EQ(ro->as<char>()[6000], 'z');
}

TEST(Segment, WriteThroughReadOnlyMappingKillsTheWriterOnly) {
  Result<Segment> seg = Segment::create_anonymous("kvpool-test-ro", 4096);
  ASSERT_TRUE(seg) << seg.status().to_string();
  seg->as<char>()[0] = 'a';
  Result<UniqueFd> ro_fd = seg->open_readonly_fd();
  ASSERT_TRUE(ro_fd) << ro_fd.status().to_string();
  Result<Segment> ro = Segment::map_fd(std::move(*ro_fd), /*writable=*/false);
  ASSERT_TRUE(ro) << ro.status().to_string();

  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    rlimit no_core{0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);  // the crash is the expected outcome
    ::signal(SIGSEGV, SIG_DFL);          // a sanitizer's handler would turn the fault into exit(1)
    // The mapping cannot be made writable either.
    if (::mprotect(ro->data(), ro->size(), PROT_READ | PROT_WRITE) == 0) ::_exit(3);
    volatile char* p = ro->as<char>();
    p[0] = 'X';  // must fault
    ::_exit(2);
  }
  int status = wait_child(pid, 30000);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited with " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGSEGV);
  EXPECT_EQ(seg->as<char>()[0], 'a');
  EXPECT_EQ(ro->as<char>()[0], 'a');
}

TEST(Segment, ReadOnlyFdCannotBeMappedWritable) {
  Result<Segment> seg = Segment::create_anonymous("kvpool-test-ro2", 4096);
  ASSERT_TRUE(seg) << seg.status().to_string();
  Result<UniqueFd> ro_fd = seg->open_readonly_fd();
  ASSERT_TRUE(ro_fd) << ro_fd.status().to_string();
  EXPECT_EQ(::fcntl(ro_fd->get(), F_GETFL) & O_ACCMODE, O_RDONLY);
  EXPECT_NE(::fcntl(ro_fd->get(), F_GETFD) & FD_CLOEXEC, 0);
  // Not through our API...
  Result<UniqueFd> again = seg->open_readonly_fd();
  ASSERT_TRUE(again);
  Result<Segment> rw = Segment::map_fd(std::move(*again), /*writable=*/true);
  ASSERT_FALSE(rw);
  EXPECT_EQ(rw.status().code(), ErrorCode::kPermissionDenied);
  // ...and not around it.
  void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, ro_fd->get(), 0);
  EXPECT_EQ(p, MAP_FAILED);
  EXPECT_EQ(errno, EACCES);
  // Nor can the holder grow it writable through ftruncate.
  EXPECT_NE(::ftruncate(ro_fd->get(), 8192), 0);
}

TEST(Segment, AnonymousSegmentSizeIsSealed) {
  Result<Segment> seg = Segment::create_anonymous("kvpool-test-seal", 8192);
  ASSERT_TRUE(seg) << seg.status().to_string();
  Result<UniqueFd> fd = seg->dup_fd();
  ASSERT_TRUE(fd);
  // A peer holding a writable descriptor still cannot shrink it under our mapping.
  EXPECT_NE(::ftruncate(fd->get(), 4096), 0);
  EXPECT_EQ(errno, EPERM);
  struct stat st;
  ASSERT_EQ(::fstat(fd->get(), &st), 0);
  EXPECT_EQ(st.st_size, 8192);
}

TEST(Segment, CreateReplacesAStaleObject) {
  ShmNameGuard guard{segment_name("stale")};
  int fd = ::shm_open(guard.name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 4096), 0);
  ASSERT_EQ(::pwrite(fd, "old", 3, 0), 3);
  ::close(fd);

  Result<Segment> seg = Segment::create(guard.name, 16384);
  ASSERT_TRUE(seg) << seg.status().to_string();
  EXPECT_EQ(seg->size(), 16384u);
  EXPECT_EQ(seg->as<char>()[0], 0) << "a fresh object, not the stale one";
  Result<Segment> reopened = Segment::open(guard.name, false);
  ASSERT_TRUE(reopened);
  EXPECT_EQ(reopened->size(), 16384u);
}

TEST(Segment, AbsurdSizeIsAClearErrorNotSigbus) {
  ShmNameGuard guard{segment_name("absurd")};
  struct statvfs vfs;
  ASSERT_EQ(::statvfs("/dev/shm", &vfs), 0);
  if (vfs.f_blocks == 0) GTEST_SKIP() << "/dev/shm has no size limit here";
  // More than /dev/shm can ever hold: refused before any page is allocated.
  const size_t bytes = static_cast<size_t>(vfs.f_blocks) * vfs.f_frsize + (size_t{1} << 20);
  Result<Segment> seg = Segment::create(guard.name, bytes);
  ASSERT_FALSE(seg);
  EXPECT_EQ(seg.status().code(), ErrorCode::kResourceExhausted);
  const std::string msg = seg.status().message();
  EXPECT_NE(msg.find("/dev/shm"), std::string::npos) << msg;
  EXPECT_NE(msg.find(guard.name), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(bytes)), std::string::npos) << msg;
  EXPECT_NE(msg.find("free space in /dev/shm or lower num_blocks"), std::string::npos) << msg;
  EXPECT_FALSE(unit::shm_exists(guard.name)) << "a failed create leaves nothing behind";

  Result<Segment> anon = Segment::create_anonymous("kvpool-test-absurd", size_t{1} << 50);
  ASSERT_FALSE(anon);
  EXPECT_EQ(anon.status().code(), ErrorCode::kResourceExhausted);
}

TEST(Segment, BadInputsAreErrors) {
  EXPECT_EQ(Segment::create("no-slash", 4096).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(Segment::create("/a/b", 4096).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(Segment::create("/", 4096).status().code(), ErrorCode::kInvalidArgument);
  // "/" then 300 x's, built in place: g++ 12 -O3 reads "/" + std::string(300, 'x') as an
  // out-of-bounds memcpy (a false -Warray-bounds) once this file is in a unity file.
  std::string too_long(301, 'x');
  too_long[0] = '/';
  EXPECT_EQ(Segment::create(too_long, 4096).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(Segment::create(segment_name("zero"), 0).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(Segment::create(segment_name("max"), SIZE_MAX).status().code(),
            ErrorCode::kResourceExhausted);
  Result<Segment> missing = Segment::open(segment_name("missing"), false);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_TRUE(Segment::unlink(segment_name("missing")).is_ok());
  EXPECT_FALSE(Segment::map_fd(UniqueFd(), false));

  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  UniqueFd write_end(fds[1]);
  Result<Segment> pipe_seg = Segment::map_fd(UniqueFd(fds[0]), false);
  ASSERT_FALSE(pipe_seg);
  EXPECT_EQ(pipe_seg.status().code(), ErrorCode::kInvalidArgument);

  Segment empty;
  EXPECT_EQ(empty.data(), nullptr);
  EXPECT_FALSE(empty.dup_fd());
  EXPECT_FALSE(empty.open_readonly_fd());
}

TEST(Segment, MoveTransfersTheMapping) {
  Result<Segment> seg = Segment::create_anonymous("kvpool-test-move", 4096);
  ASSERT_TRUE(seg);
  void* data = seg->data();
  Segment a = std::move(*seg);
  EXPECT_EQ(a.data(), data);
  EXPECT_EQ(seg->data(), nullptr);
  Segment b;
  b = std::move(a);
  EXPECT_EQ(b.data(), data);
  EXPECT_EQ(b.size(), 4096u);
  b.as<char>()[1] = 'q';
  EXPECT_EQ(static_cast<char*>(data)[1], 'q');
}

}  // namespace
}  // namespace kvpool::shm
