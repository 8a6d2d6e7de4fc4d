// Test support for the operations tests (tests/systemd, tests/cli): temporary directories,
// child processes (fork + exec, waited on through a pidfd), commands whose output is
// captured, and a systemd-style notify socket. Header-only.
//
// Nothing here synchronises by sleeping: every wait is poll() on a descriptor (a pipe, a
// datagram socket, a pidfd) with a deadline, and a missed deadline throws TestError saying
// what was awaited.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace kvpool::testsupport {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

class TestError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Milliseconds left until `deadline` (0 when past), for poll().
inline int ms_left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() < 0 ? 0 : static_cast<int>(left.count());
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

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

// A child started with fork + exec. stdout and stderr go to `log_path` (appended). The
// destructor SIGKILLs and reaps it if it still runs; PR_SET_PDEATHSIG kills it if the test
// process dies first.
class Child {
 public:
  Child() = default;
  Child(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env,
        const std::string& log_path) {
    int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log < 0) throw TestError("cannot open " + log_path);
    pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ < 0) throw TestError("fork failed");
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      ::dup2(log, 1);
      ::dup2(log, 2);
      // What the test's own environment may carry must not leak into the daemon under test.
      ::unsetenv("NOTIFY_SOCKET");
      ::unsetenv("WATCHDOG_USEC");
      ::unsetenv("WATCHDOG_PID");
      for (const auto& kv : extra_env) {
        auto eq = kv.find('=');
        std::string k = kv.substr(0, eq), v = eq == std::string::npos ? "" : kv.substr(eq + 1);
        if (v == "$PID") v = std::to_string(::getpid());  // e.g. WATCHDOG_PID
        ::setenv(k.c_str(), v.c_str(), 1);
      }
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::dprintf(2, "exec %s: %s\n", args[0], std::strerror(errno));
      ::_exit(127);
    }
    ::close(log);
    pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
    if (pidfd_ < 0) throw TestError("pidfd_open failed");
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      int st;
      ::waitpid(pid_, &st, 0);
    }
    if (pidfd_ >= 0) ::close(pidfd_);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  void signal(int sig) const { ::kill(pid_, sig); }

  // Waits (poll on the pidfd) for the child to exit; its wait status, or nullopt at the
  // deadline.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout) {
    if (reaped_) return status_;
    pollfd p{pidfd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) != 1) return std::nullopt;
    ::waitpid(pid_, &status_, 0);
    reaped_ = true;
    return status_;
  }

 private:
  pid_t pid_ = -1;
  int pidfd_ = -1;
  bool reaped_ = false;
  int status_ = 0;
};

struct RunResult {
  int exit_code = -1;  // -1: killed by a signal or timed out
  std::string out;
  std::string err;
  std::string describe() const {
    return "exit " + std::to_string(exit_code) + "\n--- stdout:\n" + out + "--- stderr:\n" + err;
  }
};

// Runs a command to completion, capturing stdout and stderr; kills it at the deadline.
inline RunResult run(const std::vector<std::string>& argv,
                     std::chrono::milliseconds timeout = 30s) {
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0)
    throw TestError("pipe failed");
  pid_t pid = ::fork();
  if (pid < 0) throw TestError("fork failed");
  if (pid == 0) {
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::dprintf(2, "exec %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  RunResult r;
  auto deadline = Clock::now() + timeout;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open_fds = 2;
  bool timed_out = false;
  while (open_fds > 0) {
    int n = ::poll(fds, 2, ms_left(deadline));
    if (n == 0) {
      timed_out = true;
      break;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      ssize_t got = ::read(fds[i].fd, buf, sizeof(buf));
      if (got > 0) {
        sinks[i]->append(buf, static_cast<size_t>(got));
      } else {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) ::close(f.fd);
  if (timed_out) ::kill(pid, SIGKILL);
  int st = 0;
  ::waitpid(pid, &st, 0);
  r.exit_code = !timed_out && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  if (timed_out) r.err += "\n(timed out after " + std::to_string(timeout.count()) + " ms)\n";
  return r;
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
  std::unique_ptr<Child> child;
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
  int stop(std::chrono::milliseconds timeout = 10s) {
    child->signal(SIGTERM);
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
  d->child = std::make_unique<Child>(argv, extra_env, d->log_path);
  d->await("READY=1", ready_timeout);
  return d;
}

}  // namespace kvpool::testsupport
