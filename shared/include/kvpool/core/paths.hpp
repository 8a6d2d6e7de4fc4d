// Where an instance's socket and segments live; one answer for daemon, client and tools.
#pragma once

#include <string>
#include <string_view>

#include "kvpool/core/status.hpp"

namespace kvpool {

// Where kvpoold puts its socket when the config names no runtime_dir: $RUNTIME_DIRECTORY
// (systemd), else /run/kvpool when writable, else $XDG_RUNTIME_DIR/kvpool, else
// /tmp/kvpool-<uid> (created 0700; refused when it exists with another owner or mode).
std::string default_runtime_dir();

// Where a client looks for instance `instance`'s socket when it is given no runtime_dir,
// in this order: $KVPOOL_RUNTIME_DIR, $RUNTIME_DIRECTORY, /run/kvpool,
// $XDG_RUNTIME_DIR/kvpool, /tmp/kvpool-<uid>. The first directory whose socket exists and
// that this user can reach (search the directory, write the socket) wins: a member of the
// unit's group finds /run/kvpool (mode 0750) without being able to write it. A directory
// in shared /tmp counts only when it is owned by this user (or root) and writable by no
// one else, so another local user cannot plant a fake daemon there first. Returns the
// directory, or kNotFound listing every place looked at and why each was passed over.
Result<std::string> find_runtime_dir(std::string_view instance);

// Whether a daemon that answered on `socket_file` may be trusted: its uid (SO_PEERCRED) must
// be root, this user, or the owner of the socket's directory. kPermissionDenied otherwise.
Status check_daemon_uid(const std::string& socket_file, uint32_t daemon_uid);
// Instance names become file and memfd names: [A-Za-z0-9_.-], 1..48 characters.
Status validate_instance_name(std::string_view instance);
std::string socket_path(std::string_view runtime_dir, std::string_view instance);
// Debug names of the memfds (they show as /memfd:<name> in /proc/<pid>/fd and maps);
// nothing can open them by name.
std::string control_segment_name(std::string_view instance);
std::string pool_segment_name(std::string_view instance, std::string_view pool);

}  // namespace kvpool
