#include "daemon/disk/disk_io.hpp"

#include <liburing.h>
#include <pthread.h>
#include <semaphore.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "daemon/disk/op_queue.hpp"
#include "kvpool/shm/unique_fd.hpp"

namespace kvpool::daemon::disk {
namespace {

void drain_eventfd(int fd) {
  uint64_t v;
  while (::read(fd, &v, sizeof(v)) == sizeof(v)) {
  }
}

void post_eventfd(int fd) {
  const uint64_t one = 1;
  ssize_t w = ::write(fd, &one, sizeof(one));
  (void)w;  // the counter only saturates after 2^64 - 2 posts
}

// What both backends share: ops in through one lock-free queue, completions out through
// another, and the eventfd the engine's epoll set watches.
class QueuedIo : public DiskIo {
 public:
  explicit QueuedIo(uint32_t depth) : in_(depth), done_(depth) {}
  int event_fd() const override { return efd_.get(); }
  void reap(std::vector<IoDone>& out) override {
    drain_eventfd(efd_.get());
    IoDone d{};
    while (done_.pop(d)) out.push_back(d);
  }

 protected:
  Status init_eventfd() {
    efd_ = shm::UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!efd_) return io_error("eventfd", errno);
    return Status::ok();
  }
  // On an I/O thread: the op's after-hook, then its completion to the engine (without the
  // eventfd post when `post` is false: the caller posts once for a batch).
  void complete(const IoOp& op, int64_t result, bool post) {
    if (op.after != nullptr) op.after(op.ctx, result);
    // The engine keeps at most `depth` ops in flight, so there is always room; a failed
    // push would mean that promise was broken, and yielding lets the engine drain.
    while (!done_.push({op.tag, result})) std::this_thread::yield();
    if (post) post_eventfd(efd_.get());
  }
  void signal_engine() { post_eventfd(efd_.get()); }

  OpQueue<IoOp> in_;

 private:
  OpQueue<IoDone> done_;
  shm::UniqueFd efd_;
};

// One I/O thread owns the ring: it takes ops from the queue, runs their before-hooks,
// submits them (io_uring_submit may issue an O_DIRECT op inline and wait for the device:
// here that costs this thread, not the engine), reaps completions, runs their after-hooks
// and hands them back. It sleeps in io_uring_submit_and_wait; the engine wakes it through
// an eventfd whose read is itself an op in the ring, so one wait covers both new work and
// finished I/O.
class UringIo final : public QueuedIo {
 public:
  explicit UringIo(uint32_t depth) : QueuedIo(depth), ops_(depth) {}
  ~UringIo() override {
    if (thread_.joinable()) {
      stop_.store(true, std::memory_order_release);
      post_eventfd(wake_.get());
      thread_.join();
    }
    if (ready_) ::io_uring_queue_exit(&ring_);
  }
  Status init(uint32_t depth) {
    KVPOOL_RETURN_IF_ERROR(init_eventfd());
    // Blocking: the ring's read of it waits for a post rather than failing with EAGAIN.
    wake_ = shm::UniqueFd(::eventfd(0, EFD_CLOEXEC));
    if (!wake_) return io_error("eventfd", errno);
    // Every op the engine may have in flight, plus the wake-up read.
    int r = ::io_uring_queue_init(std::max<uint32_t>(depth + 1, 8), &ring_, 0);
    if (r < 0) return io_error("io_uring_queue_init", -r);
    ready_ = true;
    arm_wake();
    // Probe once here, on the caller's thread, so a refused io_uring_enter (seccomp) is an
    // error at open and the fallback takes over, not a dead I/O thread later.
    r = ::io_uring_submit(&ring_);
    if (r < 0) return io_error("io_uring_submit", -r);
    thread_ = std::thread([this] { run(); });
    return Status::ok();
  }
  Status submit(const IoOp& op) override {
    if (op.tag >= ops_.size())
      return Status(ErrorCode::kInvalidArgument, "disk I/O tag out of range");
    if (!in_.push(op)) return Status(ErrorCode::kResourceExhausted, "disk I/O queue full");
    // Post only to a thread that is (about to be) asleep: a write-behind burst of hundreds
    // of ops then costs the engine one eventfd write, not one each. Dekker with take_ops():
    // the push, a full fence, the load; there the store, a full fence, the last pop. One of
    // the two sees the other.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (asleep_.load(std::memory_order_relaxed) &&
        asleep_.exchange(false, std::memory_order_relaxed))
      post_eventfd(wake_.get());
    return Status::ok();
  }
  const char* name() const override { return "io_uring"; }

 private:
  static constexpr uint64_t kWakeTag = ~uint64_t{0};

  void arm_wake() {
    io_uring_sqe* sqe = ::io_uring_get_sqe(&ring_);  // room: see init
    ::io_uring_prep_read(sqe, wake_.get(), &wake_buf_, sizeof(wake_buf_), 0);
    ::io_uring_sqe_set_data64(sqe, kWakeTag);
  }

  void run() {
    pthread_setname_np(pthread_self(), "kvpool-disk-io");
    for (;;) {
      take_ops();
      const int r = ::io_uring_submit_and_wait(&ring_, 1);
      asleep_.store(false, std::memory_order_relaxed);
      if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY && !logged_) {
        logged_ = true;
        spdlog::error("disk I/O thread: io_uring_submit_and_wait: {}", std::strerror(-r));
      }
      io_uring_cqe* cqe = nullptr;
      unsigned head = 0;
      unsigned seen = 0;
      unsigned finished = 0;
      bool woken = false;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        ++seen;
        const uint64_t tag = ::io_uring_cqe_get_data64(cqe);
        if (tag == kWakeTag) {
          woken = true;
          continue;
        }
        complete(ops_[tag], cqe->res, false);
        ++finished;
      }
      ::io_uring_cq_advance(&ring_, seen);
      if (finished > 0) signal_engine();
      if (woken) {
        if (stop_.load(std::memory_order_acquire)) return;
        arm_wake();  // before taking ops: a post after the last pop completes this read
      }
    }
  }

  // Issues every queued op, then says it is going to sleep and looks once more: an op
  // pushed after that look finds asleep_ set and posts the wake-up (see submit()).
  void take_ops() {
    IoOp op;
    for (;;) {
      while (in_.pop(op)) issue(op);
      asleep_.store(true, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (!in_.pop(op)) return;
      asleep_.store(false, std::memory_order_relaxed);
      issue(op);
    }
  }

  void issue(const IoOp& op) {
    if (op.before != nullptr) op.before(op.ctx, 0);
    io_uring_sqe* sqe = ::io_uring_get_sqe(&ring_);
    if (sqe == nullptr) {  // not with at most `depth` ops in flight; never lose one
      complete(op, -EBUSY, true);
      return;
    }
    ops_[op.tag] = op;
    if (op.write) {
      ::io_uring_prep_writev(sqe, op.fd, op.iov, op.iov_count, op.offset);
      sqe->rw_flags = RWF_DSYNC;
    } else {
      ::io_uring_prep_readv(sqe, op.fd, op.iov, op.iov_count, op.offset);
    }
    ::io_uring_sqe_set_data64(sqe, op.tag);
  }

  io_uring ring_{};
  bool ready_ = false;
  shm::UniqueFd wake_;
  uint64_t wake_buf_ = 0;
  std::vector<IoOp> ops_;  // by tag, the ops in the ring (the I/O thread's alone)
  std::atomic<bool> stop_{false};
  std::atomic<bool> asleep_{false};  // the I/O thread waits (or is about to) in the ring
  bool logged_ = false;
  std::thread thread_;
};

// The fallback: a few threads each doing one blocking preadv/pwritev2 at a time. They wait
// for work on a POSIX semaphore (sem_post is an atomic add and a futex wake, never a wait
// for a lock an I/O thread holds).
class ThreadIo final : public QueuedIo {
 public:
  explicit ThreadIo(uint32_t depth) : QueuedIo(depth) {}
  ~ThreadIo() override {
    stop_.store(true, std::memory_order_release);
    for (size_t i = 0; i < threads_.size(); ++i) ::sem_post(&work_);
    for (auto& t : threads_) t.join();
    if (sem_ready_) ::sem_destroy(&work_);
  }
  Status init(uint32_t threads) {
    KVPOOL_RETURN_IF_ERROR(init_eventfd());
    if (::sem_init(&work_, 0, 0) != 0) return io_error("sem_init", errno);
    sem_ready_ = true;
    for (uint32_t i = 0; i < threads; ++i) threads_.emplace_back([this] { work(); });
    return Status::ok();
  }
  Status submit(const IoOp& op) override {
    if (!in_.push(op)) return Status(ErrorCode::kResourceExhausted, "disk I/O queue full");
    ::sem_post(&work_);
    return Status::ok();
  }
  const char* name() const override { return "threads"; }

 private:
  void work() {
    // Named so that an operator (top -H) and the tests (which stop these threads to hold
    // reads in flight) can tell them from the engine thread.
    pthread_setname_np(pthread_self(), "kvpool-disk-io");
    for (;;) {
      // One post per op queued (and one per thread at a stop).
      while (::sem_wait(&work_) != 0 && errno == EINTR) {
      }
      if (stop_.load(std::memory_order_acquire)) return;
      IoOp op;
      // Each post follows a finished push, so an op is there; only a push still in
      // progress ahead of it (none: the engine is the one producer) could hide it.
      while (!in_.pop(op)) std::this_thread::yield();
      if (op.before != nullptr) op.before(op.ctx, 0);
      ssize_t r = op.write ? ::pwritev2(op.fd, op.iov, static_cast<int>(op.iov_count),
                                        static_cast<off_t>(op.offset), RWF_DSYNC)
                           : ::preadv(op.fd, op.iov, static_cast<int>(op.iov_count),
                                      static_cast<off_t>(op.offset));
      complete(op, r < 0 ? -int64_t{errno} : int64_t{r}, true);
    }
  }

  sem_t work_{};
  bool sem_ready_ = false;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
};

constexpr uint32_t kFallbackThreads = 4;

}  // namespace

Result<std::unique_ptr<DiskIo>> DiskIo::create(IoBackend backend, uint32_t depth,
                                               const std::string& pool) {
  if (backend != IoBackend::kThreads) {
    auto u = std::make_unique<UringIo>(depth);
    Status s = u->init(depth);
    if (s.is_ok()) return std::unique_ptr<DiskIo>(std::move(u));
    if (backend == IoBackend::kUring) return s;
    spdlog::warn("disk tier of pool '{}': io_uring refused ({}); using {} I/O threads instead",
                 pool, s.message(), kFallbackThreads);
  }
  auto t = std::make_unique<ThreadIo>(depth);
  KVPOOL_RETURN_IF_ERROR(t->init(kFallbackThreads));
  return std::unique_ptr<DiskIo>(std::move(t));
}

}  // namespace kvpool::daemon::disk
