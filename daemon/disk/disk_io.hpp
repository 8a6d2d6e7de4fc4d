// The disk tier's I/O engine: vectored reads and writes at file offsets, completed off the
// engine thread and reported through an eventfd the engine's epoll set watches (the engine
// never blocks on the disk). io_uring (liburing) where the kernel allows it; where it is
// refused (a seccomp profile, an old kernel) a small pool of threads doing preadv/pwritev2,
// said once in the log. Writes are durable when they complete (RWF_DSYNC), so an entry
// published on completion survives a power cut.
//
// The iovecs and the memory they name belong to the caller until the op completes.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvpool/core/status.hpp"

namespace kvpool::daemon::disk {

enum class IoBackend : uint8_t { kAuto, kUring, kThreads };

struct IoOp {
  bool write = false;
  int fd = -1;
  uint64_t offset = 0;
  const iovec* iov = nullptr;
  uint32_t iov_count = 0;
  uint64_t tag = 0;  // returned with the completion
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
  // Starts an op (the caller keeps in flight at most `depth`).
  virtual Status submit(const IoOp& op) = 0;
  // Appends every completion that arrived.
  virtual void reap(std::vector<IoDone>& out) = 0;
  virtual const char* name() const = 0;
};

}  // namespace kvpool::daemon::disk
