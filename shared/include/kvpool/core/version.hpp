// Which kvpool this is: the release version (CMake's project version) and the git commit
// it was built from, for --version, kvpool.__version__, kvpool_build_info and the handshake.
#pragma once

#include <cstdint>
#include <string>

namespace kvpool {

// "0.1.0"
const char* version();
// The commit the build came from ("3f0eb92", "+dirty" when the tree had changes), or
// "unknown" when built outside a git checkout.
const char* git_commit();
// "0.1.0 (git 3f0eb92)": what --version prints after the program's name.
std::string version_string();

// major << 16 | minor << 8 | patch: how a version travels in fixed-size fields (Hello).
inline constexpr uint32_t pack_version(uint32_t major, uint32_t minor, uint32_t patch) {
  return (major & 0xFFFFu) << 16 | (minor & 0xFFu) << 8 | (patch & 0xFFu);
}
uint32_t version_packed();
// "0.1.0" from a packed version; "unknown" for 0 (a peer that predates the field).
std::string unpack_version(uint32_t packed);

}  // namespace kvpool
