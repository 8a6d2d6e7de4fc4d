#include "daemon/fd_store.hpp"

#include <cstdio>

namespace kvpool::daemon {

std::string fd_name_control(uint64_t epoch) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(epoch));
  return kFdNameControlPrefix + std::string(hex);
}

std::string fd_name_pool(const std::string& pool_name) { return kFdNamePoolPrefix + pool_name; }

std::string fd_name_registry(uint64_t epoch, const std::string& pool_name) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(epoch));
  return kFdNameRegistryPrefix + std::string(hex) + "-" + pool_name;
}

}  // namespace kvpool::daemon
