// Descriptors a supervisor keeps for kvpoold while it restarts: systemd's file descriptor
// store (FDSTORE=1 over $NOTIFY_SOCKET, given back as $LISTEN_FDS on the next start), or
// `kvpoold --supervise` (daemon/supervise.hpp), which speaks the same protocol. kvpoold
// stores its control segment and its host pools' segments there, so a killed or upgraded
// daemon's successor can adopt them (daemon/adoption.hpp). Both sides are here.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kvpool/shm/unique_fd.hpp"

namespace kvpool::daemon {

// Names kvpoold gives what it stores (FDNAME= allows printable ASCII but ':'):
//   "kvpool-ctl-<epoch, 16 hex>"  the control segment of the daemon of that epoch. A new
//                                  one is stored before the previous one is removed, so a
//                                  crash in between leaves two (adoption takes the newest);
//   "kvpool-pool-<pool name>"      a host pool's data segment. An adopted one is the same
//                                  file as the stored one, which systemd (and --supervise)
//                                  then keep once, under the name it already has.
inline constexpr const char* kFdNameControlPrefix = "kvpool-ctl-";
inline constexpr const char* kFdNamePoolPrefix = "kvpool-pool-";
std::string fd_name_control(uint64_t epoch);
std::string fd_name_pool(const std::string& pool_name);

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
// Hands a duplicate of `fd` to the supervisor's store under `name` (FDSTORE=1). systemd
// accepts it only with FileDescriptorStoreMax= > 0 in the unit, and says nothing when it
// refuses: false here only when the message could not be sent.
bool fd_store_put(const std::string& name, int fd);
// Closes every stored descriptor named `name` (FDSTOREREMOVE=1).
bool fd_store_remove(const std::string& name);

// ---- the supervisor's side -------------------------------------------------------------------

// One notify datagram as a supervisor receives it: its text and the descriptors it carried.
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

}  // namespace kvpool::daemon
