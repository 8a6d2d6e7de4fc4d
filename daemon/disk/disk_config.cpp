#include "daemon/disk/disk_config.hpp"

#include <cstdlib>

namespace kvpool::daemon {

std::string default_disk_dir() {
  // systemd sets $STATE_DIRECTORY from StateDirectory= (several, ':'-separated: the first).
  if (const char* d = std::getenv("STATE_DIRECTORY"); d != nullptr && d[0] == '/') {
    std::string s(d);
    return s.substr(0, s.find(':'));
  }
  return "/var/lib/kvpool";
}

std::string default_disk_path(const std::string& instance, const std::string& pool) {
  return default_disk_dir() + "/" + instance + "-" + pool + ".slots";
}

}  // namespace kvpool::daemon
