// A kvpoold of the replay's own (--kvpoold PATH): a fresh instance in a temp directory with
// one host pool of the capacity asked for, started and waited for (bounded), stopped with
// SIGTERM at the end (or killed and started cold again in the middle: --cold-restart-at).
// Without --kvpoold the replay uses a kvpoold that is already running.
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
  // kill -9, then a start over the same configuration and disk file. The daemon runs
  // without a supervisor, so its host pool's memory died with it: the new one starts with
  // an empty host pool and rebuilds its disk index from the file (a cold start).
  Status kill_and_restart_cold();

 private:
  PrivateDaemon() = default;
  Status launch();  // starts kvpoold and waits (bounded) until a client can attach
  std::string dir_, instance_, disk_dir_, config_, kvpoold_;
  pid_t pid_ = -1;
};

}  // namespace kvpool::replay
