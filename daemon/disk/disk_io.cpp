#include "daemon/disk/disk_io.hpp"

#include <liburing.h>
#include <pthread.h>
#include <semaphore.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "kvpool/shm/unique_fd.hpp"

namespace kvpool::daemon::disk {
namespace {

void drain_eventfd(int fd) {
  uint64_t v;
  while (::read(fd, &v, sizeof(v)) == sizeof(v)) {
  }
}

class UringIo final : public DiskIo {
 public:
  ~UringIo() override {
    if (ready_) ::io_uring_queue_exit(&ring_);
  }
  Status init(uint32_t depth) {
    efd_ = shm::UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!efd_) return io_error("eventfd", errno);
    int r = ::io_uring_queue_init(std::max<uint32_t>(depth, 8), &ring_, 0);
    if (r < 0) return io_error("io_uring_queue_init", -r);
    ready_ = true;
    r = ::io_uring_register_eventfd(&ring_, efd_.get());
    if (r < 0) return io_error("io_uring_register_eventfd", -r);
    return Status::ok();
  }
  int event_fd() const override { return efd_.get(); }
  Status submit(const IoOp& op) override {
    io_uring_sqe* sqe = ::io_uring_get_sqe(&ring_);
    if (sqe == nullptr) return Status(ErrorCode::kResourceExhausted, "io_uring queue full");
    if (op.write) {
      ::io_uring_prep_writev(sqe, op.fd, op.iov, op.iov_count, op.offset);
      sqe->rw_flags = RWF_DSYNC;
    } else {
      ::io_uring_prep_readv(sqe, op.fd, op.iov, op.iov_count, op.offset);
    }
    ::io_uring_sqe_set_data64(sqe, op.tag);
    int r = ::io_uring_submit(&ring_);
    if (r < 0) return io_error("io_uring_submit", -r);
    return Status::ok();
  }
  void reap(std::vector<IoDone>& out) override {
    drain_eventfd(efd_.get());
    io_uring_cqe* cqe = nullptr;
    while (::io_uring_peek_cqe(&ring_, &cqe) == 0 && cqe != nullptr) {
      out.push_back({::io_uring_cqe_get_data64(cqe), cqe->res});
      ::io_uring_cqe_seen(&ring_, cqe);
    }
  }
  const char* name() const override { return "io_uring"; }

 private:
  io_uring ring_{};
  bool ready_ = false;
  shm::UniqueFd efd_;
};

// The fallback: a few threads each doing one blocking preadv/pwritev2 at a time. They wait
// for work on a POSIX semaphore (sem_post is an atomic add and a futex wake), not a
// condition variable: the engine's submit then never waits for them (glibc's
// pthread_cond_signal can wait for descheduled waiters of an older group to leave, and
// std::counting_semaphore of this width waits through a condition variable too), and the
// mutex is held only to move an op in or out of a queue.
class ThreadIo final : public DiskIo {
 public:
  ~ThreadIo() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    for (size_t i = 0; i < threads_.size(); ++i) ::sem_post(&work_);
    for (auto& t : threads_) t.join();
    ::sem_destroy(&work_);
  }
  Status init(uint32_t threads) {
    efd_ = shm::UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!efd_) return io_error("eventfd", errno);
    if (::sem_init(&work_, 0, 0) != 0) return io_error("sem_init", errno);
    for (uint32_t i = 0; i < threads; ++i) threads_.emplace_back([this] { work(); });
    return Status::ok();
  }
  int event_fd() const override { return efd_.get(); }
  Status submit(const IoOp& op) override {
    {
      std::lock_guard lock(mu_);
      queue_.push_back(op);
    }
    ::sem_post(&work_);
    return Status::ok();
  }
  void reap(std::vector<IoDone>& out) override {
    drain_eventfd(efd_.get());
    std::lock_guard lock(mu_);
    out.insert(out.end(), done_.begin(), done_.end());
    done_.clear();
  }
  const char* name() const override { return "threads"; }

 private:
  void work() {
    // Named so that an operator (top -H) and the tests (which stop these threads to hold
    // reads in flight) can tell them from the engine thread.
    pthread_setname_np(pthread_self(), "kvpool-disk-io");
    for (;;) {
      IoOp op;
      // One post per op queued (and one per thread at a stop).
      while (::sem_wait(&work_) != 0 && errno == EINTR) {
      }
      {
        std::lock_guard lock(mu_);
        if (stop_ || queue_.empty()) return;
        op = queue_.front();
        queue_.pop_front();
      }
      ssize_t r = op.write ? ::pwritev2(op.fd, op.iov, static_cast<int>(op.iov_count),
                                        static_cast<off_t>(op.offset), RWF_DSYNC)
                           : ::preadv(op.fd, op.iov, static_cast<int>(op.iov_count),
                                      static_cast<off_t>(op.offset));
      {
        std::lock_guard lock(mu_);
        done_.push_back({op.tag, r < 0 ? -int64_t{errno} : int64_t{r}});
      }
      uint64_t one = 1;
      ssize_t w = ::write(efd_.get(), &one, sizeof(one));
      (void)w;
    }
  }

  shm::UniqueFd efd_;
  std::mutex mu_;
  sem_t work_{};
  std::deque<IoOp> queue_;
  std::vector<IoDone> done_;
  std::vector<std::thread> threads_;
  bool stop_ = false;
};

constexpr uint32_t kFallbackThreads = 4;

}  // namespace

Result<std::unique_ptr<DiskIo>> DiskIo::create(IoBackend backend, uint32_t depth,
                                               const std::string& pool) {
  if (backend != IoBackend::kThreads) {
    auto u = std::make_unique<UringIo>();
    Status s = u->init(depth);
    if (s.is_ok()) return std::unique_ptr<DiskIo>(std::move(u));
    if (backend == IoBackend::kUring) return s;
    spdlog::warn("disk tier of pool '{}': io_uring refused ({}); using {} I/O threads instead",
                 pool, s.message(), kFallbackThreads);
  }
  auto t = std::make_unique<ThreadIo>();
  KVPOOL_RETURN_IF_ERROR(t->init(kFallbackThreads));
  return std::unique_ptr<DiskIo>(std::move(t));
}

}  // namespace kvpool::daemon::disk
