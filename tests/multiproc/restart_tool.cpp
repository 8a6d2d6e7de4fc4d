// A --supervise-hook for the restart tests: runs between two kvpoold processes with the
// descriptors the supervisor keeps ($LISTEN_FDS / $LISTEN_FDNAMES, as systemd passes them)
// and does to them what a test needs done while no daemon runs.
//   kvpool_restart_tool scribble POOL   writes 0xA5 over the first 16 block records of POOL's
//                                       arena in its stored registry segment (a stray writer)
//   kvpool_restart_tool interrupt POOL  makes POOL's arena look like its daemon died inside a
//                                       registration: the write sequence odd, and the first
//                                       registered block's record naming a hash the table
//                                       does not have (its witness gone)
//   kvpool_restart_tool list            prints the stored names
// Prints "HOOK <what it did>" to stderr (the daemon's log); exits 1 when it could not.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "kvpool/pool/arena.hpp"
#include "kvpool/shm/registry_segment.hpp"

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const char* count = std::getenv("LISTEN_FDS");
  const char* names = std::getenv("LISTEN_FDNAMES");
  const int n = count ? std::atoi(count) : 0;
  std::vector<std::string> split;
  std::stringstream ss(names ? names : "");
  for (std::string part; std::getline(ss, part, ':');) split.push_back(part);
  if (mode == "list") {
    for (int i = 0; i < n && i < static_cast<int>(split.size()); ++i)
      std::fprintf(stderr, "HOOK stored %s\n", split[i].c_str());
    return 0;
  }
  if ((mode != "scribble" && mode != "interrupt") || argc < 3) {
    std::fprintf(stderr, "usage: kvpool_restart_tool scribble POOL | interrupt POOL | list\n");
    return 2;
  }
  const std::string pool = argv[2];
  // "kvpool-reg-<epoch, 16 hex>-<pool>": the pool's registry segment (its arena).
  const std::string suffix = "-" + pool;
  for (int i = 0; i < n && i < static_cast<int>(split.size()); ++i) {
    const std::string& name = split[i];
    if (name.rfind("kvpool-reg-", 0) != 0 || name.size() != 11 + 16 + suffix.size() ||
        name.compare(11 + 16, std::string::npos, suffix) != 0)
      continue;
    // The store keeps a read-only descriptor; the object is ours (same uid): reopen it.
    const std::string path = "/proc/self/fd/" + std::to_string(3 + i);
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    struct stat st {};
    if (fd < 0 || ::fstat(fd, &st) != 0) break;
    void* p =
        ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) break;
    auto* base = static_cast<char*>(p);
    const auto* h = reinterpret_cast<const kvpool::shm::RegistryHeader*>(base);
    auto* arena = reinterpret_cast<kvpool::pool::ArenaHeader*>(base + h->arena_offset);
    if (mode == "interrupt") {
      auto* meta =
          reinterpret_cast<kvpool::pool::BlockMeta*>(base + h->arena_offset + arena->off_blocks);
      for (uint32_t id = 0; id < arena->num_blocks; ++id) {
        const auto bs = static_cast<kvpool::pool::BlockStateCode>(meta[id].state);
        if (bs != kvpool::pool::BlockStateCode::kActive &&
            bs != kvpool::pool::BlockStateCode::kInactive)
          continue;
        meta[id].sequence_hash ^= 0x5A5A5A5A5A5A5A5Aull;
        arena->stats.write_seq.fetch_or(1);
        std::fprintf(stderr, "HOOK interrupted pool '%s': block %u lost its witness\n",
                     pool.c_str(), id);
        return 0;
      }
      break;
    }
    const uint32_t blocks = std::min<uint32_t>(arena->num_blocks, 16);
    std::memset(base + h->arena_offset + arena->off_blocks, 0xA5,
                blocks * sizeof(kvpool::pool::BlockMeta));
    std::fprintf(stderr, "HOOK scribbled %u block records of pool '%s' in %s\n", blocks,
                 pool.c_str(), name.c_str());
    return 0;
  }
  std::fprintf(stderr, "HOOK found no stored registry segment of pool '%s'\n", pool.c_str());
  return 1;
}
