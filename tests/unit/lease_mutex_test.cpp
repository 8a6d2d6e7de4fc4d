#include "kvpool/shm/lease_mutex.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <new>
#include <thread>

#include "kvpool/shm/segment.hpp"

namespace kvpool::shm {
namespace {

struct Pipe {
  UniqueFd read_end, write_end;
  Pipe() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) std::abort();
    read_end.reset(fds[0]);
    write_end.reset(fds[1]);
  }
};

// Reads one byte, waiting at most timeout_ms. false on timeout or end of file.
bool read_byte(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) != 1) return false;
  char c;
  return ::read(fd, &c, 1) == 1;
}

// A lease mutex in shared memory, visible to forked children.
class SharedLease {
 public:
  SharedLease() {
    Result<Segment> seg = Segment::create_anonymous("kvpool-lease-test", sizeof(LeaseMutex));
    if (!seg) std::abort();
    seg_ = std::move(*seg);
    mutex_ = new (seg_.data()) LeaseMutex;
    if (!init(*mutex_)) std::abort();
  }
  LeaseMutex& operator*() { return *mutex_; }

 private:
  Segment seg_;
  LeaseMutex* mutex_ = nullptr;
};

// A child that locks the lease, reports "locked" on a pipe, then blocks until the test
// releases or kills it. Killed and reaped at scope exit if still there.
class HolderChild {
 public:
  explicit HolderChild(LeaseMutex& m) {
    pid_ = ::fork();
    if (pid_ < 0) std::abort();
    if (pid_ == 0) {
      locked_.read_end.reset();
      release_.write_end.reset();  // so a dead parent means EOF here, not a hang
      if (lock(m) != LockResult::kAcquired) ::_exit(2);
      if (::write(locked_.write_end.get(), "L", 1) != 1) ::_exit(3);
      char c;
      [[maybe_unused]] ssize_t n = ::read(release_.read_end.get(), &c, 1);
      ::_exit(0);  // exits still holding the lock
    }
    locked_.write_end.reset();
    release_.read_end.reset();
  }
  ~HolderChild() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      reap();
    }
  }
  bool wait_locked() { return read_byte(locked_.read_end.get(), 10000); }
  void kill_and_reap() {
    ::kill(pid_, SIGKILL);
    reap();
  }
  int release_and_reap() {
    release_.write_end.reset();
    return reap();
  }
  pid_t pid() const { return pid_; }

 private:
  int reap() {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return status;
  }
  pid_t pid_ = -1;
  Pipe locked_, release_;
};

void expect_usable(LeaseMutex& m) {
  EXPECT_EQ(lock(m), LockResult::kAcquired);
  EXPECT_TRUE(unlock(m).is_ok());
  EXPECT_EQ(try_lock(m), LockResult::kAcquired);
  EXPECT_TRUE(unlock(m).is_ok());
}

TEST(LeaseMutex, KilledHolderIsBusyWhileAliveThenOwnerDied) {
  SharedLease m;
  HolderChild child(*m);
  ASSERT_TRUE(child.wait_locked());
  EXPECT_EQ(try_lock(*m), LockResult::kBusy) << "a live holder keeps its lease";
  EXPECT_EQ(try_lock(*m), LockResult::kBusy);
  child.kill_and_reap();
  EXPECT_EQ(try_lock(*m), LockResult::kOwnerDied);
  EXPECT_TRUE(unlock(*m).is_ok());
  expect_usable(*m);
}

TEST(LeaseMutex, HolderExitingNormallyWithoutUnlockIsOwnerDied) {
  SharedLease m;
  HolderChild child(*m);
  ASSERT_TRUE(child.wait_locked());
  int status = child.release_and_reap();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  EXPECT_EQ(try_lock(*m), LockResult::kOwnerDied);
  EXPECT_TRUE(unlock(*m).is_ok());
  expect_usable(*m);
}

TEST(LeaseMutex, ThreadExitingWhileHoldingOrphansIt) {
  SharedLease m;
  LockResult in_thread = LockResult::kError;
  std::thread t([&] { in_thread = lock(*m); });  // and exits holding it
  t.join();
  ASSERT_EQ(in_thread, LockResult::kAcquired);
  EXPECT_EQ(try_lock(*m), LockResult::kOwnerDied) << "a robust mutex belongs to a thread";
  EXPECT_TRUE(unlock(*m).is_ok());
  expect_usable(*m);
}

TEST(LeaseMutex, BlockedLockerGetsOwnerDiedWhenHolderIsKilled) {
  SharedLease m;
  HolderChild child(*m);
  ASSERT_TRUE(child.wait_locked());
  LockResult got = LockResult::kError;
  bool unlocked = false;
  std::thread waiter([&] {
    got = lock(*m);  // blocks until the holder dies
    unlocked = unlock(*m).is_ok();
  });
  child.kill_and_reap();
  waiter.join();
  EXPECT_EQ(got, LockResult::kOwnerDied);
  EXPECT_TRUE(unlocked);
  expect_usable(*m);
}

TEST(LeaseMutex, UnrepairedOwnerDeathIsNotRecoverableUntilInit) {
  SharedLease m;
  {
    HolderChild child(*m);
    ASSERT_TRUE(child.wait_locked());
    child.kill_and_reap();
  }
  // What Boost 1.78+ does: take EOWNERDEAD and unlock without pthread_mutex_consistent.
  ASSERT_EQ(::pthread_mutex_lock(&(*m).m), EOWNERDEAD);
  ASSERT_EQ(::pthread_mutex_unlock(&(*m).m), 0);
  EXPECT_EQ(try_lock(*m), LockResult::kNotRecoverable);
  EXPECT_EQ(lock(*m), LockResult::kNotRecoverable) << "fails instead of hanging";
  EXPECT_EQ(try_lock(*m), LockResult::kNotRecoverable);
  // Another process too: glibc's trylock leaves the lock word set on this path, which
  // would make every other locker block forever.
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) ::_exit(lock(*m) == LockResult::kNotRecoverable ? 0 : 1);
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  ASSERT_GE(pidfd, 0);
  pollfd p{pidfd, POLLIN, 0};
  bool exited = ::poll(&p, 1, 10000) == 1;
  ::close(pidfd);
  if (!exited) ::kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(exited) << "lock() hung on a not-recoverable mutex";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  ASSERT_TRUE(init(*m).is_ok());
  expect_usable(*m);
}

TEST(LeaseMutex, MisuseIsAnErrorNotAHang) {
  SharedLease m;
  ASSERT_EQ(lock(*m), LockResult::kAcquired);
  EXPECT_EQ(lock(*m), LockResult::kError) << "relock by the owner (EDEADLK)";
  Status from_other;
  std::thread other([&] { from_other = unlock(*m); });
  other.join();
  EXPECT_FALSE(from_other.is_ok()) << "only the owner may unlock";
  EXPECT_TRUE(unlock(*m).is_ok());
  EXPECT_FALSE(unlock(*m).is_ok()) << "not locked";
  EXPECT_EQ(lock_result_name(LockResult::kOwnerDied), "OwnerDied");
  EXPECT_TRUE(destroy(*m).is_ok());
}

}  // namespace
}  // namespace kvpool::shm
