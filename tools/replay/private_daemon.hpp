// A kvpoold of the replay's own (--kvpoold PATH): a fresh instance in a temp directory with
// one host pool of the capacity asked for, started and waited for (bounded), stopped with
// SIGTERM at the end. Without --kvpoold the replay uses a kvpoold that is already running.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "kvpool/core/status.hpp"

namespace kvpool::replay {

struct DaemonSpec {
  std::string kvpoold;
  uint32_t blocks = 0;
  uint32_t page_size = 16;
  uint32_t inner_dim = 64;
  // > 0: a disk tier of this many slots below the pool, its file in a temp dir under
  // /var/tmp (a real file system where /tmp is a tmpfs), removed with the daemon.
  uint64_t disk_blocks = 0;
};

class PrivateDaemon {
 public:
  static Result<std::unique_ptr<PrivateDaemon>> start(const DaemonSpec& spec);
  ~PrivateDaemon();
  const std::string& instance() const { return instance_; }
  const std::string& runtime_dir() const { return dir_; }
  static constexpr const char* kPool = "replay";

 private:
  PrivateDaemon() = default;
  std::string dir_, instance_, disk_dir_;
  pid_t pid_ = -1;
};

}  // namespace kvpool::replay
