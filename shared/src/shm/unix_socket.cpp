#include "kvpool/shm/unix_socket.hpp"

#include <grp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <tuple>
#include <utility>

namespace kvpool::shm {
namespace {

Status make_address(const std::string& path, sockaddr_un* addr, socklen_t* len) {
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  // sun_path needs room for the terminating NUL.
  if (path.empty() || path.size() >= sizeof(addr->sun_path) ||
      path.find('\0') != std::string::npos) {
    return {ErrorCode::kInvalidArgument,
            "socket path '" + path + "' is " + std::to_string(path.size()) +
                " bytes; a Unix socket path must be non-empty and at most " +
                std::to_string(sizeof(addr->sun_path) - 1) + " bytes (choose a shorter one)"};
  }
  std::memcpy(addr->sun_path, path.data(), path.size());
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + 1);
  return {};
}

Result<UniqueFd> new_socket(int extra_flags) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | extra_flags, 0));
  if (!fd) return io_error("socket(AF_UNIX, SOCK_SEQPACKET)", errno);
  return fd;
}

// Removes a socket file whose listener is gone; refuses to touch a live listener or a
// file that is not a socket.
Status remove_stale_socket(const std::string& path, const sockaddr_un& addr, socklen_t len) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return {};
    return io_error("lstat " + path, errno);
  }
  if (!S_ISSOCK(st.st_mode)) {
    return {ErrorCode::kInvalidArgument, path + " exists and is not a socket; not removing it"};
  }
  // Non-blocking probe: a live listener with a full backlog answers EAGAIN instead of
  // blocking us.
  Result<UniqueFd> probe = new_socket(SOCK_NONBLOCK);
  if (!probe) return probe.status();
  if (::connect(probe->get(), reinterpret_cast<const sockaddr*>(&addr), len) == 0 ||
      errno == EAGAIN || errno == EINPROGRESS) {
    return {ErrorCode::kInvalidState, "another process is already listening on " + path};
  }
  if (errno != ECONNREFUSED) return io_error("probe connect " + path, errno);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return io_error("unlink stale socket " + path, errno);
  }
  return {};
}

// EACCES on connect: say which group grants access (the socket's, or, when its directory
// cannot be searched, the directory's), so the fix is one command, not a guess.
Status permission_denied(const std::string& path) {
  auto describe = [](const std::string& what, const struct stat& st) {
    const group* g = getgrgid(st.st_gid);
    std::string name = g != nullptr ? g->gr_name : std::to_string(st.st_gid);
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return std::make_pair(name, what + " is group '" + name + "', mode " + mode);
  };
  struct stat st {};
  std::string where, group_name;
  if (::stat(path.c_str(), &st) == 0) {
    std::tie(group_name, where) = describe("the socket", st);
  } else {
    const std::string dir =
        path.substr(0, path.rfind('/') == std::string::npos ? 0 : path.rfind('/'));
    if (!dir.empty() && ::stat(dir.c_str(), &st) == 0)
      std::tie(group_name, where) = describe("its directory " + dir, st);
  }
  std::string msg = "permission denied connecting to " + path;
  if (group_name.empty()) return Status(ErrorCode::kPermissionDenied, msg);
  return Status(ErrorCode::kPermissionDenied,
                msg + ": " + where + "; join that group (sudo usermod -aG " + group_name +
                    " $USER, then log in again) or run the worker as a member of it");
}

}  // namespace

Result<UniqueFd> listen_unix(const std::string& path) {
  sockaddr_un addr;
  socklen_t len;
  KVPOOL_RETURN_IF_ERROR(make_address(path, &addr, &len));
  KVPOOL_RETURN_IF_ERROR(remove_stale_socket(path, addr, len));
  Result<UniqueFd> fd = new_socket(SOCK_NONBLOCK);
  if (!fd) return fd;
  if (::bind(fd->get(), reinterpret_cast<const sockaddr*>(&addr), len) != 0) {
    return io_error("bind " + path, errno);
  }
  if (::listen(fd->get(), SOMAXCONN) != 0) return io_error("listen " + path, errno);
  return fd;
}

Result<UniqueFd> connect_unix(const std::string& path) {
  sockaddr_un addr;
  socklen_t len;
  KVPOOL_RETURN_IF_ERROR(make_address(path, &addr, &len));
  Result<UniqueFd> fd = new_socket(0);
  if (!fd) return fd;
  int rc;
  do {
    rc = ::connect(fd->get(), reinterpret_cast<const sockaddr*>(&addr), len);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    if (errno == ENOENT || errno == ECONNREFUSED) {
      return Status(ErrorCode::kNotFound, "no daemon listening on " + path);
    }
    if (errno == EACCES) return permission_denied(path);
    return io_error("connect " + path, errno);
  }
  return fd;
}

Result<UniqueFd> accept_unix(int listen_fd) {
  for (;;) {
    int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) return UniqueFd(fd);
    // ECONNABORTED: the peer left before we accepted; nothing to do with it.
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED) return UniqueFd();
    if (errno != EINTR) return io_error("accept4", errno);
  }
}

Status send_message(int fd, std::span<const std::byte> bytes, std::span<const int> fds) {
  if (bytes.empty()) {
    return {ErrorCode::kInvalidArgument, "empty messages are reserved (they read as hang-up)"};
  }
  if (fds.size() > kMaxFdsPerMessage) {
    return {ErrorCode::kInvalidArgument, std::to_string(fds.size()) +
                                             " descriptors in one message; at most " +
                                             std::to_string(kMaxFdsPerMessage)};
  }
  iovec iov{const_cast<std::byte*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)];
  if (!fds.empty()) {
    std::memset(control, 0, sizeof(control));
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(cmsg), fds.data(), sizeof(int) * fds.size());
  }
  for (;;) {
    // MSG_NOSIGNAL: a peer that died must be an error here, not SIGPIPE killing us.
    ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n >= 0) {
      // SOCK_SEQPACKET sends a message whole or not at all.
      if (static_cast<size_t>(n) != bytes.size()) {
        return {ErrorCode::kInternal, "partial send on a SOCK_SEQPACKET socket"};
      }
      return {};
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return {ErrorCode::kResourceExhausted, "peer socket buffer is full (peer is not reading)"};
    }
    if (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN) {
      return {ErrorCode::kDisconnected, "peer hung up"};
    }
    return io_error("sendmsg", errno);
  }
}

Result<size_t> recv_message(int fd, std::span<std::byte> buf, std::vector<UniqueFd>* fds_out,
                            int timeout_ms) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms);
  for (;;) {
    int wait_ms = -1;
    if (timeout_ms >= 0) {
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      wait_ms = left > 0 ? static_cast<int>(left) : 0;
    }
    pollfd p{fd, POLLIN, 0};
    int rc = ::poll(&p, 1, wait_ms);
    if (rc < 0) {
      if (errno == EINTR) continue;
      return io_error("poll", errno);
    }
    if (rc == 0) {
      return Status(ErrorCode::kTimeout, "no message within " + std::to_string(timeout_ms) + " ms");
    }
    if (p.revents & POLLNVAL) return Status(ErrorCode::kInvalidArgument, "socket is not open");

    iovec iov{buf.data(), buf.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)];
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      if (errno == ECONNRESET) return size_t{0};  // the peer died: a hang-up too
      return io_error("recvmsg", errno);
    }
    // Own every received descriptor first, so each error path below closes them.
    std::vector<UniqueFd> received;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int received_fd;
        std::memcpy(&received_fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        received.emplace_back(received_fd);
      }
    }
    if (msg.msg_flags & MSG_CTRUNC) {
      return Status(
          ErrorCode::kProtocolError,
          "message carried more than " + std::to_string(kMaxFdsPerMessage) + " descriptors");
    }
    if (msg.msg_flags & MSG_TRUNC) {
      return Status(
          ErrorCode::kProtocolError,
          "message longer than the " + std::to_string(buf.size()) + "-byte receive buffer");
    }
    if (n == 0) {
      if (!received.empty()) {
        return Status(ErrorCode::kProtocolError, "empty message carrying descriptors");
      }
      return size_t{0};
    }
    if (!received.empty()) {
      if (fds_out == nullptr) {
        return Status(ErrorCode::kProtocolError, "peer sent " + std::to_string(received.size()) +
                                                     " descriptors where none were expected");
      }
      for (UniqueFd& r : received) fds_out->push_back(std::move(r));
    }
    return static_cast<size_t>(n);
  }
}

Result<PeerCred> peer_credentials(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return io_error("getsockopt SO_PEERCRED", errno);
  }
  // 0: the peer's PID namespace is not visible from ours; there is no pid to watch.
  if (cred.pid <= 0) {
    return Status(ErrorCode::kUnsupported,
                  "peer process is in a PID namespace this process cannot see");
  }
  PeerCred out{cred.pid, cred.uid, cred.gid, {}};
  // Its supplementary groups as the kernel recorded them at connect time (SO_PEERGROUPS,
  // Linux 4.13): a worker added to a group with `usermod -aG` has it here, not as its gid.
  // ERANGE: the buffer was short, and len now says how long it must be.
  std::vector<gid_t> groups(64);
  for (int attempt = 0; attempt < 4; ++attempt) {
    socklen_t glen = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &glen) == 0) {
      groups.resize(glen / sizeof(gid_t));
      out.groups = std::move(groups);
      return out;
    }
    if (errno != ERANGE) return io_error("getsockopt SO_PEERGROUPS", errno);
    groups.resize(glen / sizeof(gid_t) + 1);
  }
  return Status(ErrorCode::kInternal, "getsockopt SO_PEERGROUPS: the group list keeps growing");
}

bool PeerCred::in_group(gid_t g) const {
  return gid == g || std::find(groups.begin(), groups.end(), g) != groups.end();
}

Result<UniqueFd> pidfd_open(pid_t pid) {
  if (pid <= 0) return Status(ErrorCode::kInvalidArgument, "pidfd_open: bad pid");
  // Always close-on-exec; glibc 2.36's wrapper is not in every toolchain, the syscall is.
  long fd = ::syscall(SYS_pidfd_open, pid, 0);
  if (fd < 0) {
    if (errno == ESRCH) {
      return Status(ErrorCode::kNotFound, "process " + std::to_string(pid) + " does not exist");
    }
    return io_error("pidfd_open " + std::to_string(pid), errno);
  }
  return UniqueFd(static_cast<int>(fd));
}

}  // namespace kvpool::shm
