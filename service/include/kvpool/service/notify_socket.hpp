// systemd's notify protocol on the wire (sd_notify(3)), both ends: one datagram of
// "KEY=value" lines to a Unix socket named by $NOTIFY_SOCKET, a path or '@name' in the
// abstract namespace, optionally with descriptors (the fd store). kvpoold sends on it;
// `kvpoold --supervise` also receives on one and passes messages on to its own supervisor.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include <cstddef>
#include <string>
#include <vector>

#include "kvpool/shm/unique_fd.hpp"

namespace kvpool::service {

inline constexpr size_t kMaxNotifyFds = 16;  // descriptors one datagram carries at most

// $NOTIFY_SOCKET when it names a socket ('/path' or '@name'); "" when unset or not one.
std::string notify_socket();

// The socket address `address` ('/path' or '@name') names, and its length; false when it
// names none or does not fit a sockaddr_un.
bool notify_address(const std::string& address, sockaddr_un* out, socklen_t* len);

// One datagram to `address`, with `nfds` descriptors (at most kMaxNotifyFds). False when it
// could not be sent (no such address, a full queue, too many descriptors).
bool send_notify_datagram(const std::string& address, const std::string& message,
                          const int* fds = nullptr, size_t nfds = 0);

// One datagram as a receiver (a supervisor) gets it: its text and the descriptors it carried.
struct NotifyMessage {
  std::string text;
  std::vector<shm::UniqueFd> fds;
  pid_t sender = -1;
};
// Receives one datagram from a bound notify socket, without blocking: false when there is
// none. Needs SO_PASSCRED on the socket for `sender`.
bool receive_notify(int sock, NotifyMessage* out);
// The value of `key` ("FDNAME") among the message's lines, "" when absent.
std::string notify_field(const std::string& text, const std::string& key);

}  // namespace kvpool::service
