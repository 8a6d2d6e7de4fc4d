// Test support for the operations tests (tests/systemd, tests/cli): temporary directories,
// unique instance names, a running daemon's memfds, whether its socket accepts. The daemon
// itself is daemon_process.hpp's (its notifications in order: next_notification), processes
// and commands child_process.hpp's, as for every suite.
#pragma once

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
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

}  // namespace kvpool::testsupport
