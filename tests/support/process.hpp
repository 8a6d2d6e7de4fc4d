// Test support for the operations tests (tests/systemd, tests/cli): temporary directories,
// a running daemon's memfds, a systemd-style notify socket, and kvpoold started with
// NOTIFY_SOCKET pointing at one the test reads itself, in order (start_daemon). Processes,
// commands and waits are child_process.hpp's and wait.hpp's, as for every suite.
//
// Nothing here synchronises by sleeping: every wait is poll() on a descriptor (a datagram
// socket, a pidfd) with a deadline, and a missed deadline throws TestError saying what was
// awaited.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "support/child_process.hpp"
#include "support/wait.hpp"

namespace kvpool::testsupport {

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "kvpool-test") {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/" + prefix + ".XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr) throw TestError("mkdtemp " + tmpl + " failed");
    path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A descriptor for one of a running process's memfds, found by its name through
// /proc/<pid>/fd (link "/memfd:<name> (deleted)") and re-opened with `flags`: how a test
// (root, like a debugger) reaches the daemon's segments, which have no name in /dev/shm.
// -1 when there is none.
inline int open_memfd_of(pid_t pid, const std::string& name, int flags) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  const std::string want = "/memfd:" + name + " (deleted)";
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    char buf[512];
    ssize_t n = ::readlink(e.path().c_str(), buf, sizeof(buf) - 1);
    if (n <= 0) continue;
    if (std::string(buf, static_cast<size_t>(n)) == want)
      return ::open(e.path().c_str(), flags | O_CLOEXEC);
  }
  return -1;
}

// A unique instance name per test process and call: tests run in parallel under ctest -j,
// and instance names become socket and memfd names.
inline std::string unique_instance(const std::string& prefix) {
  static int counter = 0;
  return prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

// The receiving end of systemd's notify protocol: a datagram socket at a path. Give its
// path to a child as NOTIFY_SOCKET; each datagram is one notification ("READY=1", ...).
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof(addr.sun_path)) throw TestError("socket path too long: " + path);
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
      throw TestError("cannot bind a datagram socket at " + path);
  }
  ~NotifySocket() {
    if (fd_ >= 0) ::close(fd_);
    ::unlink(path_.c_str());
  }
  NotifySocket(const NotifySocket&) = delete;
  NotifySocket& operator=(const NotifySocket&) = delete;
  const std::string& path() const { return path_; }

  // The next datagram, or nullopt at the deadline. A datagram may hold several
  // newline-separated assignments; they come back as one string.
  std::optional<std::string> receive(Clock::time_point deadline) {
    pollfd p{fd_, POLLIN, 0};
    while (true) {
      int n = ::poll(&p, 1, ms_left(deadline));
      if (n == 0) return std::nullopt;
      if (n < 0) {
        if (errno == EINTR) continue;
        throw TestError("poll on the notify socket failed");
      }
      char buf[4096];
      ssize_t got = ::recv(fd_, buf, sizeof(buf), 0);
      if (got < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        throw TestError("recv on the notify socket failed");
      }
      return std::string(buf, static_cast<size_t>(got));
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
};

// A unix-stream connect, to see whether kvpoold's socket accepts.
inline bool socket_connectable(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), std::min(path.size() + 1, sizeof(addr.sun_path) - 1));
  bool ok = fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  if (fd >= 0) ::close(fd);
  return ok;
}

// kvpoold started with NOTIFY_SOCKET set, up once READY=1 arrived. Every notification
// received on the way is kept in `messages` (in order).
struct Daemon {
  std::string instance;
  std::string runtime_dir;
  std::string log_path;
  std::unique_ptr<NotifySocket> notify;
  std::unique_ptr<ChildProcess> child;
  std::vector<std::string> messages;

  std::string log() const { return read_file(log_path); }
  std::string socket_path() const { return runtime_dir + "/" + instance + ".sock"; }

  // Receives until a notification containing `needle` arrives; throws at the deadline.
  std::string await(const std::string& needle, std::chrono::milliseconds timeout) {
    auto deadline = Clock::now() + timeout;
    while (true) {
      auto m = notify->receive(deadline);
      if (!m)
        throw TestError("no '" + needle + "' from kvpoold within " +
                        std::to_string(timeout.count()) + " ms; daemon log:\n" + log());
      messages.push_back(*m);
      if (m->find(needle) != std::string::npos) return *m;
    }
  }

  // SIGTERM, then waits for the exit; returns the wait status.
  ExitStatus stop(std::chrono::milliseconds timeout = 10s) {
    child->kill(SIGTERM);
    auto st = child->wait_exit(timeout);
    if (!st) throw TestError("kvpoold did not exit within 10 s of SIGTERM; log:\n" + log());
    return *st;
  }
};

// Starts `kvpoold` in `dir` (its runtime dir and log), with `config_path` when not empty,
// and waits for READY=1.
inline std::unique_ptr<Daemon> start_daemon(const std::string& kvpoold, const std::string& dir,
                                            const std::string& instance,
                                            const std::string& config_path = "",
                                            std::vector<std::string> extra_env = {},
                                            std::chrono::milliseconds ready_timeout = 20s) {
  auto d = std::make_unique<Daemon>();
  d->instance = instance;
  d->runtime_dir = dir;
  d->log_path = dir + "/kvpoold." + instance + ".log";
  d->notify = std::make_unique<NotifySocket>(dir + "/notify." + instance);
  std::vector<std::string> argv{kvpoold, "--instance", instance, "--runtime-dir", dir};
  if (!config_path.empty()) {
    argv.push_back("--config");
    argv.push_back(config_path);
  }
  extra_env.push_back("NOTIFY_SOCKET=" + d->notify->path());
  d->child = std::make_unique<ChildProcess>();
  d->child->spawn_logged(argv, extra_env, d->log_path);
  d->await("READY=1", ready_timeout);
  return d;
}

}  // namespace kvpool::testsupport
