// Multi-process test harness: the real kvpoold and real worker processes (fork + exec),
// real shared memory, real signals. Nothing is mocked and nothing waits by sleeping:
// every wait is on a condition (a pipe, a socket, a pidfd, or daemon state read from its
// control segment) with a deadline, and a missed deadline is a test failure that says what
// was awaited and what was seen instead.
//
// The daemon, child processes and waits are tests/support's (one library for every suite);
// what is here is the multi-process suite's own: workers speaking a line protocol.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvpool/core/layout.hpp"
#include "kvpool/shm/unique_fd.hpp"
#include "support/child_process.hpp"
#include "support/daemon_process.hpp"
#include "support/wait.hpp"

namespace kvpool::mptest {

// TestError, wait_until, ChildProcess, DaemonProcess, DaemonView, test_config, ...
using namespace testsupport;
// This suite's name for the one test-support error type.
using HarnessError = testsupport::TestError;

// The uid and gid "nobody": a caller outside every allow-list the tests configure.
inline constexpr uint32_t kNobody = 65534;

// Bytes of one (layer, outer) region of a block of a pool with layout `l`.
inline uint64_t region_bytes(const LayoutConfig& l) {
  return uint64_t{l.page_size} * l.inner_dim * l.dtype_bytes;
}

// A test worker process (tests/multiproc/test_worker.cpp): line protocol on its stdin and
// stdout; its stderr is the test's stderr.
class WorkerProcess {
 public:
  // Runs: test_worker --instance I --runtime-dir D <scenario> <args...>
  WorkerProcess(const DaemonProcess& daemon, const std::string& scenario,
                const std::vector<std::string>& args = {});
  // The same, with another program that speaks the same protocol (the attacker).
  WorkerProcess(const std::string& program, const DaemonProcess& daemon,
                const std::string& scenario, const std::vector<std::string>& args = {});
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  // The next line of stdout without its newline; nullopt on timeout or EOF.
  std::optional<std::string> read_line(std::chrono::milliseconds timeout);
  // The next line, which must start with `prefix`; throws (with the line, or timeout / EOF
  // and the exit status) otherwise.
  std::string expect_line(const std::string& prefix, std::chrono::milliseconds timeout = 20s);
  void send_line(const std::string& line);
  // Sends a command and expects its answer to start with `prefix` (default "OK").
  std::string command(const std::string& line, const std::string& prefix = "OK",
                      std::chrono::milliseconds timeout = 20s);
  void close_stdin();

  void kill9() { proc_.kill(SIGKILL); }
  void kill(int sig) { proc_.kill(sig); }
  std::optional<ExitStatus> wait_exit(std::chrono::milliseconds timeout) {
    return proc_.wait_exit(timeout);
  }
  pid_t pid() const { return proc_.pid(); }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  ChildProcess proc_;
  shm::UniqueFd in_;   // our end of the worker's stdin
  shm::UniqueFd out_;  // our end of the worker's stdout
  std::string buf_;
  bool eof_ = false;
};

// ---- line protocol helpers -------------------------------------------------------------------

std::vector<std::string> split_words(const std::string& line);
// The value of "key=value" in a worker line ("" when absent).
std::string field(const std::string& line, const std::string& key);
// "1,2,3" -> {1,2,3} ("" -> {}).
std::vector<uint64_t> parse_list(const std::string& csv);
std::string join_list(const std::vector<uint64_t>& v);

}  // namespace kvpool::mptest
