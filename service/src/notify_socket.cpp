#include "kvpool/service/notify_socket.hpp"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <sstream>

namespace kvpool::service {

std::string notify_socket() {
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (path == nullptr || (path[0] != '/' && path[0] != '@')) return "";
  return path;
}

bool notify_address(const std::string& address, sockaddr_un* out, socklen_t* len) {
  if (address.empty() || (address[0] != '/' && address[0] != '@')) return false;
  *out = sockaddr_un{};
  out->sun_family = AF_UNIX;
  if (address.size() >= sizeof(out->sun_path)) return false;
  std::memcpy(out->sun_path, address.data(), address.size());
  if (address[0] == '@') out->sun_path[0] = '\0';  // the abstract namespace
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + address.size());
  return true;
}

bool send_notify_datagram(const std::string& address, const std::string& message, const int* fds,
                          size_t nfds) {
  sockaddr_un addr{};
  socklen_t addr_len = 0;
  if (!notify_address(address, &addr, &addr_len) || nfds > kMaxNotifyFds) return false;
  shm::UniqueFd sock(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!sock) return false;
  iovec iov{const_cast<char*>(message.data()), message.size()};
  msghdr msg{};
  msg.msg_name = &addr;
  msg.msg_namelen = addr_len;
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxNotifyFds)];
  if (nfds > 0) {
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

bool receive_notify(int sock, NotifyMessage* out) {
  char data[4096];
  alignas(
      cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxNotifyFds) + CMSG_SPACE(sizeof(ucred))];
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

}  // namespace kvpool::service
