#include "paced_floors.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "bench_backends.hpp"

namespace kvpool::bench {

namespace {

// Process-shared futexes (no FUTEX_PRIVATE_FLAG): the words live in a MAP_SHARED mapping.
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, nullptr, nullptr, 0);
}
void futex_wake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

void write_one(int fd) {
  const uint64_t one = 1;
  while (write(fd, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
}
void read_counter(int fd) {
  uint64_t v;
  while (read(fd, &v, sizeof(v)) < 0 && errno == EINTR) {
  }
}
void write_byte(int fd) {
  const char one = 1;
  while (write(fd, &one, 1) < 0 && errno == EINTR) {
  }
}
// Reads what is there (up to 64 bytes: every ring since the last read), blocking for one.
void read_bytes(int fd) {
  char buf[64];
  while (read(fd, buf, sizeof(buf)) < 0 && errno == EINTR) {
  }
}
void make_pipe(int* rd, int* wr) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) die("floor pipe: " + std::string(std::strerror(errno)));
  *rd = p[0];
  *wr = p[1];
}

}  // namespace

struct FloorServer::Shared {
  // Each word on its own cache line, as kvpool's ring indices are.
  struct alignas(64) Word {
    std::atomic<uint32_t> v{0};
  };
  Word doorbell;              // futex: bumped by every request
  Word request[kMaxClients];  // written by client i: its last request number
  Word answer[kMaxClients];   // written by the server: client i's last answered request
};

FloorServer::FloorServer(Kind kind) : kind_(kind), owner_(getpid()) {
  answer_fd_.fill(-1);
  answer_wr_.fill(-1);
  void* m =
      mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) die(std::string("floor mmap: ") + std::strerror(errno));
  shared_ = new (m) Shared();
  if (kind_ == Kind::kEventfd) {
    doorbell_fd_ = eventfd(0, EFD_CLOEXEC);
    for (int& fd : answer_fd_) fd = eventfd(0, EFD_CLOEXEC);
    if (doorbell_fd_ < 0 || answer_fd_.back() < 0)
      die("floor eventfd: " + std::string(std::strerror(errno)));
  }
  if (kind_ == Kind::kPipe) {
    make_pipe(&doorbell_fd_, &doorbell_wr_);
    for (int i = 0; i < kMaxClients; ++i) make_pipe(&answer_fd_[i], &answer_wr_[i]);
  }
  pid_ = fork();
  if (pid_ < 0) die("fork floor server");
  if (pid_ == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives the benchmark
    if (getppid() != owner_) _exit(0);
    serve();
  }
}

FloorServer::~FloorServer() {
  if (getpid() != owner_) return;  // a forked client's copy
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (doorbell_fd_ >= 0) close(doorbell_fd_);
  if (doorbell_wr_ >= 0) close(doorbell_wr_);
  for (int fd : answer_fd_)
    if (fd >= 0) close(fd);
  for (int fd : answer_wr_)
    if (fd >= 0) close(fd);
  munmap(shared_, sizeof(Shared));
}

void FloorServer::serve() {
  uint32_t seen[kMaxClients] = {};
  for (;;) {
    // Read the doorbell before scanning: a request that lands after the scan changes it,
    // so the wait below returns at once instead of missing the request.
    const uint32_t bell = shared_->doorbell.v.load(std::memory_order_acquire);
    bool answered = false;
    for (int i = 0; i < kMaxClients; ++i) {
      const uint32_t r = shared_->request[i].v.load(std::memory_order_acquire);
      if (r == seen[i]) continue;
      seen[i] = r;
      shared_->answer[i].v.store(r, std::memory_order_release);
      if (kind_ == Kind::kFutex)
        futex_wake(&shared_->answer[i].v);
      else if (kind_ == Kind::kEventfd)
        write_one(answer_fd_[i]);
      else
        write_byte(answer_wr_[i]);
      answered = true;
    }
    if (answered) continue;
    if (kind_ == Kind::kFutex)
      futex_wait(&shared_->doorbell.v, bell);
    else if (kind_ == Kind::kEventfd)
      read_counter(doorbell_fd_);  // blocks until a client rings; resets the count
    else
      read_bytes(doorbell_fd_);  // blocks until a client rings; takes every ring there is
  }
}

void FloorServer::round_trip(int slot) {
  auto& request = shared_->request[slot].v;
  auto& answer = shared_->answer[slot].v;
  const uint32_t r = request.load(std::memory_order_relaxed) + 1;
  request.store(r, std::memory_order_release);
  if (kind_ == Kind::kFutex) {
    shared_->doorbell.v.fetch_add(1, std::memory_order_acq_rel);
    futex_wake(&shared_->doorbell.v);
    for (uint32_t a; (a = answer.load(std::memory_order_acquire)) != r;) futex_wait(&answer, a);
  } else if (kind_ == Kind::kEventfd) {
    write_one(doorbell_fd_);
    // One answer write per request, so one read per round trip; loop only on a spurious
    // count left from an earlier round.
    do read_counter(answer_fd_[slot]);
    while (answer.load(std::memory_order_acquire) != r);
  } else {
    write_byte(doorbell_wr_);
    do read_bytes(answer_fd_[slot]);
    while (answer.load(std::memory_order_acquire) != r);
  }
}

}  // namespace kvpool::bench
