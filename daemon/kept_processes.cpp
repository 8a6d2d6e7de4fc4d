#include "daemon/kept_processes.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "kvpool/shm/unix_socket.hpp"

namespace kvpool::daemon {
namespace {

constexpr uint64_t kKeptMagic = 0x4B56504B45505431ull;  // "KVPKEPT1"

struct KeptHeader {
  uint64_t magic;
  uint64_t epoch;
  uint32_t count;
  uint32_t reserved;
};
static_assert(sizeof(KeptHeader) == 24);

}  // namespace

std::string fd_name_kept(uint64_t epoch) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(epoch));
  return std::string(kFdNameKeptPrefix) + hex;
}

std::optional<uint64_t> process_start_ticks(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  // The command name (field 2) may hold spaces and parentheses: fields count from the last ')'.
  const auto close = s.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  const char* p = s.c_str() + close + 1;
  for (int field = 3; field < 22; ++field) {  // skip fields 3..21
    while (*p == ' ') ++p;
    while (*p != ' ' && *p != '\0') ++p;
  }
  char* end = nullptr;
  const unsigned long long v = std::strtoull(p, &end, 10);
  if (end == p) return std::nullopt;
  return static_cast<uint64_t>(v);
}

std::optional<shm::UniqueFd> open_if_same_process(const KeptProcess& p) {
  if (p.pid <= 0) return std::nullopt;
  auto fd = shm::pidfd_open(p.pid);
  if (!fd) return std::nullopt;
  const auto ticks = process_start_ticks(p.pid);
  if (!ticks || *ticks != p.start_ticks) return std::nullopt;
  struct stat st {};
  if (::stat(("/proc/" + std::to_string(p.pid)).c_str(), &st) != 0 || st.st_uid != p.uid)
    return std::nullopt;
  return std::move(fd.value());
}

Result<shm::UniqueFd> write_kept(uint64_t epoch, std::span<const KeptProcess> processes) {
  shm::UniqueFd fd(::memfd_create("kvpool-kept", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) return io_error("memfd_create kvpool-kept", errno);
  const KeptHeader h{kKeptMagic, epoch, static_cast<uint32_t>(processes.size()), 0};
  std::string bytes(reinterpret_cast<const char*>(&h), sizeof(h));
  bytes.append(reinterpret_cast<const char*>(processes.data()), processes.size_bytes());
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return io_error("write kvpool-kept", errno);
    done += static_cast<size_t>(n);
  }
  // Sealed: what the next daemon reads is what we wrote.
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) != 0)
    return io_error("seal kvpool-kept", errno);
  return fd;
}

Result<std::vector<KeptProcess>> read_kept(int fd, uint64_t epoch) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return io_error("fstat kvpool-kept", errno);
  KeptHeader h{};
  if (static_cast<uint64_t>(st.st_size) < sizeof(h) || ::pread(fd, &h, sizeof(h), 0) != sizeof(h))
    return Status(ErrorCode::kProtocolError, "the kept-process list is shorter than its header");
  if (h.magic != kKeptMagic || h.epoch != epoch)
    return Status(ErrorCode::kProtocolError, "the kept-process list is not that daemon's");
  if (h.count > kMaxKept ||
      static_cast<uint64_t>(st.st_size) != sizeof(h) + uint64_t{h.count} * sizeof(KeptProcess))
    return Status(ErrorCode::kProtocolError, "the kept-process list says " +
                                                 std::to_string(h.count) + " entries in " +
                                                 std::to_string(st.st_size) + " bytes");
  std::vector<KeptProcess> out(h.count);
  const size_t want = out.size() * sizeof(KeptProcess);
  if (want != 0 && ::pread(fd, out.data(), want, sizeof(h)) != static_cast<ssize_t>(want))
    return io_error("read kvpool-kept", errno);
  return out;
}

}  // namespace kvpool::daemon
