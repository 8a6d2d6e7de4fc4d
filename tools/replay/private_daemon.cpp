#include "private_daemon.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

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
  d->config_ = cfg;
  d->kvpoold_ = spec.kvpoold;
  KVPOOL_RETURN_IF_ERROR(d->launch());
  return d;
}

Status PrivateDaemon::launch() {
  const std::string log = dir_ + "/kvpoold.log";
  // No supervisor of ours: kvpoold must not hand its descriptors to one the replay runs
  // under, nor adopt any (so a restart of this daemon is cold for host memory).
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string v = *e;
    if (v.rfind("NOTIFY_SOCKET=", 0) != 0 && v.rfind("LISTEN_", 0) != 0) env.push_back(v);
  }
  std::vector<char*> envp;
  for (auto& v : env) envp.push_back(v.data());
  envp.push_back(nullptr);
  pid_ = ::fork();
  if (pid_ == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
    }
    ::execle(kvpoold_.c_str(), kvpoold_.c_str(), "--config", config_.c_str(),
             static_cast<char*>(nullptr), envp.data());
    _exit(127);
  }
  if (pid_ < 0) return Status(ErrorCode::kInternal, "fork failed");
  // Up when a client can attach; bounded, and a daemon that exits says why in its log.
  ConnectOptions co;
  co.runtime_dir = dir_;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (Client::connect(instance_, co)) return Status::ok();
    int st;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      pid_ = -1;
      std::ifstream in(log);
      std::string why((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      return Status(ErrorCode::kInternal, "kvpoold exited at start: " + why);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // poll interval
  }
  return Status(ErrorCode::kTimeout, "kvpoold did not accept clients within 20 s");
}

Status PrivateDaemon::kill_and_restart_cold() {
  if (pid_ <= 0) return Status(ErrorCode::kInternal, "the private kvpoold is not running");
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
  return launch();
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
