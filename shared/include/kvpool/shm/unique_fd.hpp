// An owned file descriptor: closed exactly once, when its owner goes away. Segments,
// sockets and pidfds travel between functions as UniqueFd so that every error path
// closes what it opened.
#pragma once

#include <unistd.h>

#include <cerrno>

namespace kvpool::shm {

class UniqueFd {
 public:
  UniqueFd() noexcept = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  ~UniqueFd() { reset(); }

  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const noexcept { return fd_; }
  bool valid() const noexcept { return fd_ >= 0; }
  explicit operator bool() const noexcept { return valid(); }

  // Gives up ownership; the caller now closes the descriptor.
  [[nodiscard]] int release() noexcept {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

  // Closes the current descriptor (if any) and owns `fd` instead. errno is preserved so
  // that an error path can still report the errno of the call that failed.
  void reset(int fd = -1) noexcept {
    if (fd_ >= 0 && fd_ != fd) {
      int saved = errno;
      // No retry on EINTR: Linux has already released the descriptor, and retrying
      // could close one another thread just opened.
      ::close(fd_);
      errno = saved;
    }
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace kvpool::shm
