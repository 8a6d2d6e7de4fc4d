// The disk tier's I/O engine: vectored reads and writes at file offsets, run and completed
// off the engine thread and reported through an eventfd the engine's epoll set watches.
// io_uring (liburing) where the kernel allows it; where it is refused (a seccomp profile, an
// old kernel) a small pool of threads doing preadv/pwritev2, said once in the log. Writes
// are durable when they complete (RWF_DSYNC), so an entry published on completion survives
// a power cut.
//
// The engine thread never blocks here: submit() and reap() only move ops through lock-free
// queues (op_queue.hpp) and post a semaphore or read an eventfd. io_uring_submit (which on
// ext4 with O_DIRECT can issue the op inline and wait for the device) and the per-op hooks
// (the XXH3 of a block: a write's before its bytes go out, a read's after they came in) run
// on the I/O side, on threads named kvpool-disk-io.
//
// The iovecs, the memory they name and a hook's context belong to the caller until the op
// completes; reap() is the point after which the caller sees what the hooks wrote.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvpool/core/status.hpp"

namespace kvpool::daemon::disk {

enum class IoBackend : uint8_t { kAuto, kUring, kThreads };

// Runs on an I/O thread: `before` just before the op is issued (result 0), `after` once it
// completed (result: bytes moved, or -errno). Both may be null.
using IoHook = void (*)(void* ctx, int64_t result);

struct IoOp {
  bool write = false;
  int fd = -1;
  uint64_t offset = 0;
  const iovec* iov = nullptr;
  uint32_t iov_count = 0;
  uint64_t tag = 0;  // returned with the completion; below `depth`, one op per tag at a time
  IoHook before = nullptr;
  IoHook after = nullptr;
  void* ctx = nullptr;
};

struct IoDone {
  uint64_t tag;
  int64_t result;  // bytes moved, or -errno
};

class DiskIo {
 public:
  virtual ~DiskIo() = default;
  // kAuto: io_uring, else threads (logged). `depth`: ops in flight at most.
  static Result<std::unique_ptr<DiskIo>> create(IoBackend backend, uint32_t depth,
                                                const std::string& pool);
  // Readable when completions wait; reap() drains it.
  virtual int event_fd() const = 0;
  // Hands an op to the I/O side (the caller keeps in flight at most `depth`). Never waits.
  virtual Status submit(const IoOp& op) = 0;
  // Appends every completion that arrived.
  virtual void reap(std::vector<IoDone>& out) = 0;
  virtual const char* name() const = 0;
};

}  // namespace kvpool::daemon::disk
