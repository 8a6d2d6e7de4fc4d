// Where an instance's socket and segments live; one answer for daemon, client and tools.
#pragma once

#include <string>
#include <string_view>

#include "kvpool/core/status.hpp"

namespace kvpool {

// $RUNTIME_DIRECTORY (systemd), else /run/kvpool when writable, else
// $XDG_RUNTIME_DIR/kvpool, else /tmp/kvpool-<uid>.
std::string default_runtime_dir();
// Instance names become file and shm names: [A-Za-z0-9_.-], 1..48 characters.
Status validate_instance_name(std::string_view instance);
std::string socket_path(std::string_view runtime_dir, std::string_view instance);
std::string control_segment_name(std::string_view instance);
std::string pool_segment_name(std::string_view instance, std::string_view pool);

}  // namespace kvpool
