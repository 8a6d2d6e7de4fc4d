// A supervisor's file descriptor store, the client side: systemd's (FDSTORE=1 over
// $NOTIFY_SOCKET, given back as $LISTEN_FDS on the next start) or `kvpoold --supervise`'s,
// which speaks the same protocol. What kvpoold stores there, and under which names, is the
// daemon's (daemon/fd_store.hpp).
#pragma once

#include <string>
#include <vector>

#include "kvpool/shm/unique_fd.hpp"

namespace kvpool::service {

struct InheritedFd {
  std::string name;
  shm::UniqueFd fd;
};

// What the supervisor passed at start: $LISTEN_FDS descriptors from fd 3, named by
// $LISTEN_FDNAMES, when $LISTEN_PID is this process. They are made close-on-exec and the
// three variables are removed (a child must not take them for its own). Empty when none.
std::vector<InheritedFd> take_inherited_fds();

// Whether a supervisor listens ($NOTIFY_SOCKET set).
bool fd_store_available();
// Hands a duplicate of `fd` to the supervisor's store under `name` (FDSTORE=1; FDNAME=
// allows printable ASCII but ':'). systemd accepts it only with FileDescriptorStoreMax= > 0
// in the unit, and says nothing when it refuses: false here only when the message could
// not be sent.
bool fd_store_put(const std::string& name, int fd);
// Closes every stored descriptor named `name` (FDSTOREREMOVE=1).
bool fd_store_remove(const std::string& name);

}  // namespace kvpool::service
