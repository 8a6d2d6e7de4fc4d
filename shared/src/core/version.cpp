// The only file that includes the generated kvpool_version.h, so a new commit recompiles
// this one file (cmake/KvpoolVersion.cmake rewrites the header only when it changes).
#include "kvpool/core/version.hpp"

#include "kvpool_version.h"

namespace kvpool {

const char* version() { return KVPOOL_VERSION; }
const char* git_commit() { return KVPOOL_GIT_COMMIT; }
std::string version_string() {
  return std::string(KVPOOL_VERSION) + " (git " + KVPOOL_GIT_COMMIT + ")";
}
uint32_t version_packed() {
  return pack_version(KVPOOL_VERSION_MAJOR, KVPOOL_VERSION_MINOR, KVPOOL_VERSION_PATCH);
}
std::string unpack_version(uint32_t v) {
  if (v == 0) return "unknown";
  return std::to_string(v >> 16) + "." + std::to_string((v >> 8) & 0xFFu) + "." +
         std::to_string(v & 0xFFu);
}

}  // namespace kvpool
