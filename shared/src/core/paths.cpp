#include "kvpool/core/paths.hpp"

#include <unistd.h>

#include <cstdlib>

namespace kvpool {

std::string default_runtime_dir() {
  if (const char* d = std::getenv("RUNTIME_DIRECTORY"); d && *d) {
    std::string s(d);
    // systemd may list several directories separated by ':'; ours is the first.
    return s.substr(0, s.find(':'));
  }
  if (access("/run/kvpool", W_OK | X_OK) == 0) return "/run/kvpool";
  if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x && *x) return std::string(x) + "/kvpool";
  return "/tmp/kvpool-" + std::to_string(getuid());
}

Status validate_instance_name(std::string_view instance) {
  if (instance.empty() || instance.size() > 48)
    return Status(ErrorCode::kInvalidArgument,
                  "instance name must be 1 to 48 characters, got " +
                      std::to_string(instance.size()));
  for (char c : instance) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.';
    if (!ok)
      return Status(ErrorCode::kInvalidArgument, "instance name '" + std::string(instance) +
                                                     "' may only use [A-Za-z0-9_.-]");
  }
  return Status::ok();
}

std::string socket_path(std::string_view runtime_dir, std::string_view instance) {
  return std::string(runtime_dir) + "/" + std::string(instance) + ".sock";
}

std::string control_segment_name(std::string_view instance) {
  return "/kvpool." + std::string(instance) + ".ctl";
}

std::string pool_segment_name(std::string_view instance, std::string_view pool) {
  return "/kvpool." + std::string(instance) + ".pool." + std::string(pool);
}

}  // namespace kvpool
