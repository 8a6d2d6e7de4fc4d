// A mapped shared-memory object. Plain shm_open/memfd_create + mmap rather than
// Boost.Interprocess: segments travel between processes as file descriptors (SCM_RIGHTS),
// and Boost cannot map a descriptor it did not open by name.
//
// Every constructor backs the whole object with posix_fallocate before mapping it, so a
// full /dev/shm (or memory limit) is reported as an error here instead of a SIGBUS on
// first touch, possibly in another process, much later.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <utility>

#include "kvpool/core/status.hpp"
#include "kvpool/shm/unique_fd.hpp"

namespace kvpool::shm {

class Segment {
 public:
  Segment() = default;  // empty: data() == nullptr, size() == 0
  ~Segment();
  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  // Creates the named object ("/kvpool.default.ctl") of exactly `bytes` zero bytes, mapped
  // read-write. An object of that name left by a killed daemon is unlinked first. `mode`
  // is applied exactly (not filtered by the umask) so group-readable modes work.
  // kResourceExhausted when /dev/shm cannot hold `bytes`.
  static Result<Segment> create(const std::string& name, size_t bytes, mode_t mode = 0600);

  // Creates an unnamed object (memfd) of `bytes` zero bytes, mapped read-write, mode 0600.
  // Nothing to clean up after a crash, no name anyone can open or squat. The size is sealed
  // (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) so a peer that receives the descriptor
  // cannot truncate it under anyone's mapping (which would make their next access SIGBUS).
  static Result<Segment> create_anonymous(const std::string& debug_name, size_t bytes);

  // Maps an object received as a descriptor, whole (size from fstat). A read-only mapping
  // is really read-only: a write through it faults, and it cannot be mprotect-ed writable.
  // A writable mapping needs a descriptor opened read-write (else kPermissionDenied).
  static Result<Segment> map_fd(UniqueFd fd, bool writable);

  // Opens and maps an existing named object. kNotFound when it does not exist.
  static Result<Segment> open(const std::string& name, bool writable);

  // Removes a named object; mappings already made stay valid. A missing object is ok.
  static Status unlink(const std::string& name);

  void* data() const { return data_; }
  size_t size() const { return size_; }
  int fd() const { return fd_.get(); }
  bool writable() const { return writable_; }
  // The name given to create/open, or the debug name; empty for map_fd.
  const std::string& name() const { return name_; }

  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }

  // A second descriptor for the same object with the same access mode (close-on-exec).
  Result<UniqueFd> dup_fd() const;

  // A new descriptor for the same object opened O_RDONLY (through /proc/self/fd), so a
  // process that receives it can map the object read-only and never writable.
  Result<UniqueFd> open_readonly_fd() const;

 private:
  Segment(UniqueFd fd, void* data, size_t size, bool writable, std::string name)
      : fd_(std::move(fd)), data_(data), size_(size), writable_(writable), name_(std::move(name)) {}
  void release_mapping() noexcept;

  UniqueFd fd_;
  void* data_ = nullptr;
  size_t size_ = 0;
  bool writable_ = false;
  std::string name_;
};

}  // namespace kvpool::shm
