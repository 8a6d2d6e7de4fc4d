#include "kvpool/service/fd_store.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include "kvpool/service/notify_socket.hpp"

namespace kvpool::service {
namespace {

constexpr int kListenFdsStart = 3;  // SD_LISTEN_FDS_START

}  // namespace

std::vector<InheritedFd> take_inherited_fds() {
  std::vector<InheritedFd> out;
  const char* pid = std::getenv("LISTEN_PID");
  const char* count = std::getenv("LISTEN_FDS");
  const char* names = std::getenv("LISTEN_FDNAMES");
  const bool ours = pid != nullptr && std::strtoll(pid, nullptr, 10) == ::getpid();
  const long n = ours && count != nullptr ? std::strtol(count, nullptr, 10) : 0;
  std::vector<std::string> split;
  if (names != nullptr) {
    std::stringstream ss(names);
    for (std::string part; std::getline(ss, part, ':');) split.push_back(part);
  }
  for (long i = 0; i < n && i < 4096; ++i) {
    const int fd = kListenFdsStart + static_cast<int>(i);
    if (::fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) continue;  // not open: nothing to take
    out.push_back({i < static_cast<long>(split.size()) ? split[i] : std::string("unknown"),
                   shm::UniqueFd(fd)});
  }
  ::unsetenv("LISTEN_PID");
  ::unsetenv("LISTEN_FDS");
  ::unsetenv("LISTEN_FDNAMES");
  return out;
}

bool fd_store_available() { return std::getenv("NOTIFY_SOCKET") != nullptr; }

// One datagram with the descriptor: libsystemd's sd_pid_notify_with_fds does the same;
// speaking it here keeps one code path for systemd and for `kvpoold --supervise` whether or
// not libsystemd is there.
bool fd_store_put(const std::string& name, int fd) {
  // FDPOLL=0: a memfd never signals POLLHUP anyway, but systemd need not watch it at all.
  return send_notify_datagram(notify_socket(), "FDSTORE=1\nFDNAME=" + name + "\nFDPOLL=0", &fd, 1);
}

bool fd_store_remove(const std::string& name) {
  return send_notify_datagram(notify_socket(), "FDSTOREREMOVE=1\nFDNAME=" + name);
}

}  // namespace kvpool::service
