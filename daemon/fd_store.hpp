// What kvpoold keeps in its supervisor's file descriptor store while it restarts, and under
// which names: its control segment and its host pools' segments, so a killed or upgraded
// daemon's successor can adopt them (daemon/adoption.hpp). The store's protocol, both
// sides, is the service library's (kvpool/service/fd_store.hpp, notify_socket.hpp); the
// supervisor is systemd or `kvpoold --supervise` (daemon/supervise.hpp).
#pragma once

#include <cstdint>
#include <string>

#include "kvpool/service/fd_store.hpp"
#include "kvpool/service/notify_socket.hpp"

namespace kvpool::daemon {

// Names kvpoold gives what it stores (FDNAME= allows printable ASCII but ':'):
//   "kvpool-ctl-<epoch, 16 hex>"  the control segment of the daemon of that epoch. A new
//                                  one is stored before the previous one is removed, so a
//                                  crash in between leaves two (adoption takes the newest);
//   "kvpool-reg-<epoch, 16 hex>-<pool name>"  the registry segment of that pool (its arena,
//                                  events and client table) made by the daemon of that
//                                  epoch: stored and dropped with its control segment;
//   "kvpool-pool-<pool name>"      a host pool's data segment. An adopted one is the same
//                                  file as the stored one, which systemd (and --supervise)
//                                  then keep once, under the name it already has.
inline constexpr const char* kFdNameControlPrefix = "kvpool-ctl-";
inline constexpr const char* kFdNamePoolPrefix = "kvpool-pool-";
inline constexpr const char* kFdNameRegistryPrefix = "kvpool-reg-";
std::string fd_name_control(uint64_t epoch);
std::string fd_name_registry(uint64_t epoch, const std::string& pool_name);
std::string fd_name_pool(const std::string& pool_name);

// The store's protocol, as kvpoold's files call it.
using service::fd_store_available;
using service::fd_store_put;
using service::fd_store_remove;
using service::InheritedFd;
using service::notify_field;
using service::NotifyMessage;
using service::receive_notify;
using service::take_inherited_fds;

}  // namespace kvpool::daemon
