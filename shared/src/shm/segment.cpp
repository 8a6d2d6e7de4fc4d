#include "kvpool/shm/segment.hpp"

#include <fcntl.h>
#include <limits.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>

namespace kvpool::shm {
namespace {

std::string bytes_text(uint64_t bytes) { return std::to_string(bytes) + " bytes"; }

// shm_open names: one leading slash, no other slash, at most NAME_MAX characters after it.
Status check_name(const std::string& name) {
  if (name.size() < 2 || name[0] != '/' || name.find('/', 1) != std::string::npos ||
      name.size() - 1 > NAME_MAX || name.find('\0') != std::string::npos) {
    return {ErrorCode::kInvalidArgument,
            "shared-memory name '" + name +
                "' must be '/' followed by 1 to 255 characters without '/' (e.g. "
                "'/kvpool.default.ctl')"};
  }
  return {};
}

uint64_t physical_memory_bytes() {
  long pages = ::sysconf(_SC_PHYS_PAGES);
  long page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return std::numeric_limits<uint64_t>::max();
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
}

// `where` names the object for messages; `hint` tells the user what to do when memory
// runs out.
struct Describe {
  std::string where;
  std::string hint;
};

Status exhausted(const Describe& d, size_t bytes, const std::string& why) {
  return {ErrorCode::kResourceExhausted,
          "cannot reserve " + bytes_text(bytes) + " for " + d.where + ": " + why + "; " + d.hint};
}

// Rejects sizes no machine here can back before asking the kernel: on the internal memfd
// mount there is no size limit, and fallocate would push the machine into the OOM killer
// instead of failing.
Status check_size(const Describe& d, size_t bytes) {
  if (bytes == 0) {
    return {ErrorCode::kInvalidArgument,
            "a shared-memory segment needs a non-zero size (" + d.where + ")"};
  }
  if (bytes > static_cast<uint64_t>(std::numeric_limits<off_t>::max())) {
    return exhausted(d, bytes, "larger than any file can be");
  }
  uint64_t ram = physical_memory_bytes();
  if (bytes > ram) {
    return exhausted(d, bytes, "larger than this machine's memory (" + bytes_text(ram) + ")");
  }
  return {};
}

// Sets the size and backs every page now, so running out of shm memory is an error here
// rather than a SIGBUS at first touch.
Status size_and_back(int fd, size_t bytes, const Describe& d) {
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int err = errno;
    if (err == EFBIG || err == EINVAL || err == ENOSPC || err == ENOMEM) {
      return exhausted(d, bytes, std::string("ftruncate: ") + std::strerror(err));
    }
    return io_error("ftruncate " + d.where + " to " + bytes_text(bytes), err);
  }
  int err;
  do {
    // posix_fallocate returns the error instead of setting errno. tmpfs fallocate can be
    // interrupted by a signal when it is large; start again (pages already there stay).
    err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  } while (err == EINTR);
  if (err == 0) return {};
  if (err == ENOSPC || err == ENOMEM || err == EFBIG) {
    std::string why = std::strerror(err);
    struct statvfs vfs;
    if (::fstatvfs(fd, &vfs) == 0 && vfs.f_blocks != 0) {
      why += " (" + bytes_text(static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize) + " free of " +
             bytes_text(static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize) + ")";
    }
    return exhausted(d, bytes, why);
  }
  return io_error("posix_fallocate " + d.where + " (" + bytes_text(bytes) + ")", err);
}

Result<void*> map_whole(int fd, size_t bytes, bool writable, const std::string& where) {
  int prot = writable ? PROT_READ | PROT_WRITE : PROT_READ;
  void* p = ::mmap(nullptr, bytes, prot, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    return io_error("mmap " + where + " (" + bytes_text(bytes) + (writable ? ", rw)" : ", ro)"),
                    errno);
  }
  return p;
}

Describe describe_named(const std::string& name) {
  return {"shared-memory object " + name + " in /dev/shm",
          "free space in /dev/shm or lower num_blocks"};
}

}  // namespace

Segment::~Segment() { release_mapping(); }

Segment::Segment(Segment&& other) noexcept
    : fd_(std::move(other.fd_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      writable_(std::exchange(other.writable_, false)),
      name_(std::move(other.name_)) {}

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    release_mapping();
    fd_ = std::move(other.fd_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    writable_ = std::exchange(other.writable_, false);
    name_ = std::move(other.name_);
  }
  return *this;
}

void Segment::release_mapping() noexcept {
  if (data_ != nullptr) ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

Result<Segment> Segment::create(const std::string& name, size_t bytes, mode_t mode) {
  KVPOOL_RETURN_IF_ERROR(check_name(name));
  Describe d = describe_named(name);
  KVPOOL_RETURN_IF_ERROR(check_size(d, bytes));
  // A daemon killed with SIGKILL leaves its object behind; nobody can be using it once a
  // new daemon owns the socket, so replace it rather than refuse to start.
  if (::shm_unlink(name.c_str()) != 0 && errno != ENOENT) {
    return io_error("shm_unlink stale " + name, errno);
  }
  UniqueFd fd(::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, mode));
  if (!fd) return io_error("shm_open " + name, errno);
  // From here on a failure removes the half-made object so it does not hold memory.
  auto fail = [&name](Status st) {
    ::shm_unlink(name.c_str());
    return st;
  };
  // shm_open filters the mode through the umask; the caller asked for this exact mode.
  if (::fchmod(fd.get(), mode) != 0) return fail(io_error("fchmod " + name, errno));
  if (Status st = size_and_back(fd.get(), bytes, d); !st) return fail(std::move(st));
  Result<void*> p = map_whole(fd.get(), bytes, /*writable=*/true, name);
  if (!p) return fail(p.status());
  return Segment(std::move(fd), *p, bytes, /*writable=*/true, name);
}

Result<Segment> Segment::create_anonymous(const std::string& debug_name, size_t bytes) {
  Describe d{"anonymous shared memory '" + debug_name + "'",
             "free memory or lower the requested size"};
  KVPOOL_RETURN_IF_ERROR(check_size(d, bytes));
  UniqueFd fd(::memfd_create(debug_name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) return io_error("memfd_create '" + debug_name + "'", errno);
  // A memfd is created mode 0777: a peer holding a read-only descriptor could re-open it
  // read-write through /proc/<pid>/fd. 0600 limits that to our own uid (and root).
  if (::fchmod(fd.get(), 0600) != 0) return io_error("fchmod memfd '" + debug_name + "'", errno);
  KVPOOL_RETURN_IF_ERROR(size_and_back(fd.get(), bytes, d));
  // The descriptor is meant to be handed to another process: seal the size so that peer
  // cannot shrink the object under our mapping (our next access would SIGBUS).
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return io_error("seal memfd '" + debug_name + "'", errno);
  }
  Result<void*> p = map_whole(fd.get(), bytes, /*writable=*/true, d.where);
  if (!p) return p.status();
  return Segment(std::move(fd), *p, bytes, /*writable=*/true, debug_name);
}

Result<Segment> Segment::map_fd(UniqueFd fd, bool writable) {
  if (!fd) return Status(ErrorCode::kInvalidArgument, "map_fd: invalid descriptor");
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return io_error("fstat shared-memory descriptor", errno);
  // Only regular (tmpfs/memfd) files map as memory; a pipe or device from a confused or
  // hostile peer is refused here.
  if (!S_ISREG(st.st_mode)) {
    return Status(ErrorCode::kInvalidArgument, "descriptor is not a shared-memory object");
  }
  if (st.st_size <= 0) {
    return Status(ErrorCode::kInvalidArgument, "shared-memory object is empty");
  }
  if (writable) {
    int flags = ::fcntl(fd.get(), F_GETFL);
    if (flags < 0) return io_error("fcntl F_GETFL", errno);
    if ((flags & O_ACCMODE) != O_RDWR) {
      return Status(ErrorCode::kPermissionDenied,
                    "shared-memory descriptor is read-only; cannot map it writable");
    }
  }
  size_t bytes = static_cast<size_t>(st.st_size);
  Result<void*> p = map_whole(fd.get(), bytes, writable, "shared-memory descriptor");
  if (!p) return p.status();
  return Segment(std::move(fd), *p, bytes, writable, std::string());
}

Result<Segment> Segment::open(const std::string& name, bool writable) {
  KVPOOL_RETURN_IF_ERROR(check_name(name));
  UniqueFd fd(::shm_open(name.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC, 0));
  if (!fd) {
    int err = errno;
    if (err == ENOENT) {
      return Status(ErrorCode::kNotFound, "no shared-memory object " + name + " in /dev/shm");
    }
    return io_error("shm_open " + name + (writable ? " (rw)" : " (ro)"), err);
  }
  Result<Segment> seg = map_fd(std::move(fd), writable);
  if (!seg) return Status(seg.status().code(), name + ": " + seg.status().message());
  seg->name_ = name;
  return seg;
}

Status Segment::unlink(const std::string& name) {
  KVPOOL_RETURN_IF_ERROR(check_name(name));
  if (::shm_unlink(name.c_str()) != 0 && errno != ENOENT) {
    return io_error("shm_unlink " + name, errno);
  }
  return {};
}

Result<UniqueFd> Segment::dup_fd() const {
  if (!fd_) return Status(ErrorCode::kInvalidState, "dup_fd on an empty segment");
  UniqueFd fd(::fcntl(fd_.get(), F_DUPFD_CLOEXEC, 0));
  if (!fd) return io_error("dup segment descriptor", errno);
  return fd;
}

Result<UniqueFd> Segment::open_readonly_fd() const {
  if (!fd_) return Status(ErrorCode::kInvalidState, "open_readonly_fd on an empty segment");
  // Re-opening through /proc gives a new open file description with its own access mode;
  // a dup would share ours (read-write) and let the receiver map the object writable.
  std::string path = "/proc/self/fd/" + std::to_string(fd_.get());
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return io_error("open " + path + " read-only", errno);
  return fd;
}

}  // namespace kvpool::shm
