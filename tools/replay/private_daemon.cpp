#include "private_daemon.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "kvpool/client.hpp"

namespace kvpool::replay {

Result<std::unique_ptr<PrivateDaemon>> PrivateDaemon::start(const DaemonSpec& spec) {
  char tmpl[] = "/tmp/kvpool-replay-XXXXXX";
  if (!::mkdtemp(tmpl)) return Status(ErrorCode::kInternal, "mkdtemp failed");
  std::unique_ptr<PrivateDaemon> d(new PrivateDaemon());
  d->dir_ = tmpl;
  d->instance_ = "replay" + std::to_string(::getpid());
  const std::string cfg = d->dir_ + "/kvpoold.json";
  std::string disk;
  if (spec.disk_blocks > 0) {
    char dtmpl[] = "/var/tmp/kvpool-replay-disk-XXXXXX";
    if (!::mkdtemp(dtmpl)) return Status(ErrorCode::kInternal, "mkdtemp under /var/tmp failed");
    d->disk_dir_ = dtmpl;
    disk = ",\"disk\":{\"path\":\"" + d->disk_dir_ +
           "/replay.slots\",\"num_blocks\":" + std::to_string(spec.disk_blocks) + "}";
  }
  // 4 KiB aligned regions when there is a disk tier: O_DIRECT from the pool's memory.
  const uint32_t alignment = spec.disk_blocks > 0 ? 4096 : 64;
  std::ofstream(cfg) << "{\"instance\":\"" << d->instance_ << "\",\"runtime_dir\":\"" << d->dir_
                     << "\",\"max_clients\":64,\"log_level\":\"warn\",\"allowed_uids\":["
                     << ::getuid()  // a single-tenant host: no per-uid share of the pool
                     << "],\"pools\":[{\"name\":\"" << kPool << "\",\"num_blocks\":" << spec.blocks
                     << ",\"layout\":{\"num_layers\":2,\"outer_dim\":2,\"page_size\":"
                     << spec.page_size << ",\"inner_dim\":" << spec.inner_dim
                     << ",\"dtype_bytes\":2,\"alignment\":" << alignment << "}" << disk << "}]}";
  const std::string log = d->dir_ + "/kvpoold.log";
  d->pid_ = ::fork();
  if (d->pid_ == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
    }
    ::execl(spec.kvpoold.c_str(), spec.kvpoold.c_str(), "--config", cfg.c_str(),
            static_cast<char*>(nullptr));
    _exit(127);
  }
  // Up when a client can attach; bounded, and a daemon that exits says why in its log.
  ConnectOptions co;
  co.runtime_dir = d->dir_;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (Client::connect(d->instance_, co)) return d;
    int st;
    if (::waitpid(d->pid_, &st, WNOHANG) == d->pid_) {
      d->pid_ = -1;
      std::ifstream in(log);
      std::string why((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      return Status(ErrorCode::kInternal, "kvpoold exited at start: " + why);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // poll interval
  }
  return Status(ErrorCode::kTimeout, "kvpoold did not accept clients within 20 s");
}

PrivateDaemon::~PrivateDaemon() {
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
  if (!disk_dir_.empty()) std::filesystem::remove_all(disk_dir_, ec);
}

}  // namespace kvpool::replay
