#include "daemon/fd_store.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace kvpool::daemon {
namespace {

constexpr int kListenFdsStart = 3;  // SD_LISTEN_FDS_START
constexpr size_t kMaxFdsPerMessage = 16;

// One datagram to $NOTIFY_SOCKET (a path, or '@name' in the abstract namespace), with
// descriptors. libsystemd's sd_pid_notify_with_fds does the same; speaking it here keeps one
// code path for systemd and for `kvpoold --supervise` whether or not libsystemd is there.
bool send_with_fds(const std::string& message, const int* fds, size_t nfds) {
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (path == nullptr || (path[0] != '/' && path[0] != '@')) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const size_t len = std::strlen(path);
  if (len >= sizeof(addr.sun_path)) return false;
  std::memcpy(addr.sun_path, path, len);
  if (path[0] == '@') addr.sun_path[0] = '\0';
  shm::UniqueFd sock(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!sock) return false;
  iovec iov{const_cast<char*>(message.data()), message.size()};
  msghdr msg{};
  msg.msg_name = &addr;
  msg.msg_namelen = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)];
  if (nfds > 0) {
    if (nfds > kMaxFdsPerMessage) return false;
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
  }
  return ::sendmsg(sock.get(), &msg, MSG_NOSIGNAL) == static_cast<ssize_t>(message.size());
}

}  // namespace

std::string fd_name_control(uint64_t epoch) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(epoch));
  return kFdNameControlPrefix + std::string(hex);
}

std::string fd_name_pool(const std::string& pool_name) { return kFdNamePoolPrefix + pool_name; }

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

bool fd_store_put(const std::string& name, int fd) {
  // FDPOLL=0: a memfd never signals POLLHUP anyway, but systemd need not watch it at all.
  return send_with_fds("FDSTORE=1\nFDNAME=" + name + "\nFDPOLL=0", &fd, 1);
}

bool fd_store_remove(const std::string& name) {
  return send_with_fds("FDSTOREREMOVE=1\nFDNAME=" + name, nullptr, 0);
}

bool receive_notify(int sock, NotifyMessage* out) {
  char data[4096];
  alignas(cmsghdr) char
      control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage) + CMSG_SPACE(sizeof(ucred))];
  iovec iov{data, sizeof(data) - 1};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  const ssize_t r = ::recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (r < 0) return false;
  out->text.assign(data, static_cast<size_t>(r));
  out->fds.clear();
  out->sender = -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET) continue;
    if (c->cmsg_type == SCM_RIGHTS) {
      const size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < n; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        out->fds.emplace_back(fd);
      }
    } else if (c->cmsg_type == SCM_CREDENTIALS) {
      ucred cred;
      std::memcpy(&cred, CMSG_DATA(c), sizeof(cred));
      out->sender = cred.pid;
    }
  }
  return true;
}

std::string notify_field(const std::string& text, const std::string& key) {
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);)
    if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 &&
        line[key.size()] == '=')
      return line.substr(key.size() + 1);
  return "";
}

}  // namespace kvpool::daemon
