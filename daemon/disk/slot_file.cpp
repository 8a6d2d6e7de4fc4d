#include "daemon/disk/slot_file.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

namespace kvpool::daemon::disk {
namespace {

Status make_parent(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) return Status::ok();
  std::error_code ec;
  if (std::filesystem::exists(parent, ec)) return Status::ok();
  std::filesystem::create_directories(parent, ec);
  if (ec)
    return Status(ErrorCode::kIoError,
                  "cannot create the directory of disk tier file " + path + ": " + ec.message());
  ::chmod(parent.c_str(), 0700);  // the slots hold other users' KV data
  return Status::ok();
}

// Why the file's header does not describe the file we want ("" when it does).
std::string mismatch(const FileHeader& h, const SlotFileOptions& o, uint64_t file_bytes) {
  if (file_bytes == 0) return "new file";
  if (!sealed(h)) return "no valid kvpool disk header";
  if (h.version != kFormatVersion)
    return "format version " + std::to_string(h.version) + ", this kvpoold writes " +
           std::to_string(kFormatVersion);
  if (h.layout_fingerprint != o.layout_fingerprint)
    return "it holds blocks of another layout or dtype";
  if (h.hash_scheme != o.hash_scheme) return "it holds blocks of another hash scheme";
  if (h.slot_bytes != o.slot_bytes) return "its slots are of another size";
  if (h.num_slots != o.num_slots)
    return "it has " + std::to_string(h.num_slots) + " slots, the config asks for " +
           std::to_string(o.num_slots);
  return "";
}

Status reserve(int fd, const SlotFileOptions& o, uint64_t bytes) {
  const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (err == 0) return Status::ok();
  std::string free_text;
  if (struct statvfs vfs{}; ::fstatvfs(fd, &vfs) == 0)
    free_text = " (" + std::to_string(uint64_t{vfs.f_bavail} * vfs.f_frsize) + " bytes free there)";
  return Status(err == ENOSPC ? ErrorCode::kResourceExhausted : ErrorCode::kIoError,
                "disk tier of pool '" + o.pool + "': cannot reserve " + std::to_string(bytes) +
                    " bytes for " + o.path + ": " + std::strerror(err) + free_text +
                    "; free space or lower disk.num_blocks / disk.bytes");
}

// Reads every slot header; keeps those that prove themselves (slot_format.hpp).
void scan(int fd, const SlotFileOptions& o, uint64_t generation, std::vector<FoundSlot>* found) {
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
  SlotHeader h{};
  uint64_t dropped = 0;
  for (uint64_t s = 0; s < o.num_slots; ++s) {
    ssize_t n = ::pread(fd, &h, sizeof(h), static_cast<off_t>(slot_offset(o.slot_bytes, s)));
    if (n != static_cast<ssize_t>(sizeof(h))) continue;
    if (h.magic == 0) continue;  // never written
    if (!sealed(h) || h.generation != generation || h.slot != s ||
        h.layout_fingerprint != o.layout_fingerprint || h.hash_scheme != o.hash_scheme) {
      ++dropped;
      continue;
    }
    found->push_back({s, h});
  }
  if (dropped != 0)
    spdlog::warn("disk tier of pool '{}': {} slot(s) of {} dropped at start (torn or stale header)",
                 o.pool, dropped, o.path);
}

// O_DIRECT on this file system, for this pool's memory; false (logged once) falls back.
Result<bool> probe_direct(const SlotFileOptions& o, shm::UniqueFd* direct_fd) {
  if (o.direct_io == DirectIo::kOff) return false;
  std::string why;
  if (!o.memory_aligned) {
    why = "the pool's block regions are not 4 KiB aligned in address and size";
  } else {
    shm::UniqueFd fd(::open(o.path.c_str(), O_RDWR | O_DIRECT | O_CLOEXEC));
    if (!fd) {
      why = std::string("the file system refuses O_DIRECT: ") + std::strerror(errno);
    } else {
      SectorBuffer buf = sector_buffer();
      if (::pread(fd.get(), buf.get(), kSectorBytes, 0) != static_cast<ssize_t>(kSectorBytes)) {
        why = std::string("an O_DIRECT read fails: ") + std::strerror(errno);
      } else {
        *direct_fd = std::move(fd);
        return true;
      }
    }
  }
  if (o.direct_io == DirectIo::kOn)
    return Status(ErrorCode::kConfigError, "pools." + o.pool + ".disk.direct_io is \"on\" but " +
                                               why + " (" + o.path + "); set it to \"auto\"");
  spdlog::warn("disk tier of pool '{}': buffered I/O on {}: {}", o.pool, o.path, why);
  return false;
}

}  // namespace

Result<SlotFile> SlotFile::open(const SlotFileOptions& o, std::vector<FoundSlot>* found) {
  KVPOOL_RETURN_IF_ERROR(make_parent(o.path));
  shm::UniqueFd fd(::open(o.path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!fd) return io_error("disk tier of pool '" + o.pool + "': cannot open " + o.path, errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return io_error("fstat " + o.path, errno);
  if (!S_ISREG(st.st_mode))
    return Status(ErrorCode::kConfigError,
                  "disk tier of pool '" + o.pool + "': " + o.path + " is not a regular file");
  if (st.st_uid != ::geteuid())
    return Status(ErrorCode::kPermissionDenied, "disk tier of pool '" + o.pool + "': " + o.path +
                                                    " belongs to uid " + std::to_string(st.st_uid) +
                                                    ", not to kvpoold's uid " +
                                                    std::to_string(::geteuid()));
  ::fchmod(fd.get(), 0600);  // clients never read the file: it holds every pool user's data

  SlotFile f;
  f.path_ = o.path;
  f.slot_bytes_ = o.slot_bytes;
  FileHeader h{};
  if (st.st_size >= static_cast<off_t>(sizeof(h)) && ::pread(fd.get(), &h, sizeof(h), 0) < 0)
    return io_error("read " + o.path, errno);
  const uint64_t bytes = file_bytes_for(o.slot_bytes, o.num_slots);
  f.reinit_reason_ = mismatch(h, o, static_cast<uint64_t>(st.st_size));
  if (!f.reinit_reason_.empty() && static_cast<uint64_t>(st.st_size) > bytes &&
      ::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0)
    return io_error("truncate " + o.path, errno);
  KVPOOL_RETURN_IF_ERROR(reserve(fd.get(), o, bytes));

  if (f.reinit_reason_.empty()) {
    f.generation_ = h.generation;
    scan(fd.get(), o, f.generation_, found);
  } else {
    if (f.reinit_reason_ != "new file")
      spdlog::warn("disk tier of pool '{}': reinitialising {}: {}", o.pool, o.path,
                   f.reinit_reason_);
    // A new generation: whatever slots the file held never count again.
    while (::getrandom(&f.generation_, sizeof(f.generation_), 0) != sizeof(f.generation_)) {
    }
    SectorBuffer buf = sector_buffer();
    std::memset(buf.get(), 0, kSectorBytes);
    FileHeader nh{kFileMagic,  kFormatVersion,       o.hash_scheme, o.slot_bytes,
                  o.num_slots, o.layout_fingerprint, f.generation_, 0};
    seal(nh);
    std::memcpy(buf.get(), &nh, sizeof(nh));
    if (::pwrite(fd.get(), buf.get(), kSectorBytes, 0) != static_cast<ssize_t>(kSectorBytes) ||
        ::fdatasync(fd.get()) != 0)
      return io_error("disk tier of pool '" + o.pool + "': cannot write the header of " + o.path,
                      errno);
  }
  shm::UniqueFd direct_fd;
  auto direct = probe_direct(o, &direct_fd);
  if (!direct) return direct.status();
  f.direct_ = *direct;
  f.fd_ = f.direct_ ? std::move(direct_fd) : std::move(fd);
  return f;
}

}  // namespace kvpool::daemon::disk
