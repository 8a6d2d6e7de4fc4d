// Test support: child processes. One launcher (fork + exec, waited on through a pidfd), the
// one environment a child gets (the test's, scrubbed), and commands run to completion with
// their output captured. A child gets PR_SET_PDEATHSIG SIGKILL, so a test process that dies
// leaves no orphans behind.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "kvpool/shm/unique_fd.hpp"
#include "support/wait.hpp"

namespace kvpool::testsupport {

// A wait status of waitpid.
struct ExitStatus {
  int raw = 0;
  bool exited() const;
  int code() const;  // exit code; -1 unless exited()
  bool signaled() const;
  int signal() const;            // terminating signal; 0 unless signaled()
  std::string describe() const;  // "exit code 0", "killed by signal 9 (Killed)"
};

// The test process's environment minus what would confuse a child (a systemd notify
// socket, watchdog, socket activation or runtime directory of whoever runs the tests), then
// `extra` ("K=V", replacing an inherited K). A value "$PID" becomes the child's own pid
// (WATCHDOG_PID=$PID, as systemd passes it).
std::vector<std::string> child_environment(const std::vector<std::string>& extra = {});

// One child process started with fork + exec. The destructor SIGKILLs it (if still running)
// and reaps it.
class ChildProcess {
 public:
  ChildProcess() = default;
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // argv[0] is the program path. `env` is the whole environment ("K=V"; see
  // child_environment). Each fd is dup2-ed onto 0/1/2 in the child (-1: /dev/null). Throws
  // when exec fails.
  void spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
             int stdin_fd, int stdout_fd, int stderr_fd);
  // The common case: child_environment(extra_env), no stdin, stdout and stderr appended to
  // `log_path`.
  void spawn_logged(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env,
                    const std::string& log_path);

  pid_t pid() const { return pid_; }
  bool started() const { return pid_ > 0; }
  // True until the child has exited (reaped or not).
  bool running();
  void kill(int sig);
  // Waits (on a pidfd) until the child exits, then reaps it. nullopt on timeout.
  std::optional<ExitStatus> wait_exit(std::chrono::milliseconds timeout);
  // The status of a reaped child.
  const std::optional<ExitStatus>& exit_status() const { return exit_; }
  // SIGKILL + reap (no-op when already reaped).
  void kill_and_reap();

 private:
  pid_t pid_ = -1;
  shm::UniqueFd pidfd_;
  std::optional<ExitStatus> exit_;
};

// Reads `fd` until EOF; throws TestError at the deadline.
std::string read_all(int fd, std::chrono::milliseconds timeout, const std::string& what);

struct RunResult {
  int exit_code = -1;  // -1: killed by a signal or timed out
  std::string out;
  std::string err;
  std::string describe() const {
    return "exit " + std::to_string(exit_code) + "\n--- stdout:\n" + out + "--- stderr:\n" + err;
  }
};

// Runs a command to completion, capturing stdout and stderr; kills it at the deadline.
RunResult run(const std::vector<std::string>& argv, std::chrono::milliseconds timeout = 30s);

}  // namespace kvpool::testsupport
