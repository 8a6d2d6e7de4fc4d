// Multi-process test harness: the real kvpoold and real worker processes (fork + exec),
// real shared memory, real signals. Nothing is mocked and nothing waits by sleeping:
// every wait is on a condition (a pipe, a socket, a pidfd, or daemon state read from its
// control segment) with a deadline, and a missed deadline is a test failure that says what
// was awaited and what was seen instead.
//
// Harness failures throw HarnessError; GoogleTest reports an exception thrown in a test body
// as a failure of that test, with the message.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "connection.hpp"
#include "kvpool/pool/pool_core.hpp"
#include "kvpool/shm/control_segment.hpp"
#include "kvpool/shm/handshake.hpp"
#include "kvpool/shm/segment.hpp"
#include "kvpool/shm/segment_layout.hpp"
#include "kvpool/shm/unique_fd.hpp"

namespace kvpool::mptest {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

class HarnessError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Polls `pred` (with a short pause between polls) until it holds; at the deadline throws
// HarnessError "timed out after N ms waiting for <what>" plus `detail()` when given (say
// what was seen instead).
void wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout,
                const std::string& what, const std::function<std::string()>& detail = {});

double ms_since(Clock::time_point t);

// A wait status of waitpid.
struct ExitStatus {
  int raw = 0;
  bool exited() const;
  int code() const;  // exit code; -1 unless exited()
  bool signaled() const;
  int signal() const;            // terminating signal; 0 unless signaled()
  std::string describe() const;  // "exit code 0", "killed by signal 9 (Killed)"
};

// One child process started with fork + exec. The destructor SIGKILLs it (if still running)
// and reaps it. The child also gets PR_SET_PDEATHSIG SIGKILL, so a test process that dies
// leaves no orphans behind.
class ChildProcess {
 public:
  ChildProcess() = default;
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // argv[0] is the program path. `env` is the whole environment ("K=V"). Each fd is dup2-ed
  // onto 0/1/2 in the child (-1: /dev/null). Throws when exec fails.
  void spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
             int stdin_fd, int stdout_fd, int stderr_fd);

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

// A read-only view of a running daemon's control segment (what `kvpoolctl status` shows),
// obtained like kvpoolctl does: shm::observe over the socket, nothing attached.
// Values are live: every call reads the current state.
// One pool of a DaemonView: stats() are the live counters (atomics); block(), holds_of() and
// owner_record() read a private copy of the arena taken under its seqlock when pool() was
// called (kept until the next pool() of that pool).
class PoolLook {
 public:
  PoolLook(const pool::ArenaView* live, const pool::PoolCore* copy) : live_(live), copy_(copy) {}
  const pool::PoolStats& stats() const { return live_->stats(); }
  const pool::BlockMeta& block(uint32_t id) const { return copy_->block(id); }
  uint32_t holds_of(uint32_t owner, uint32_t id) const { return copy_->holds_of(owner, id); }
  Status check_invariants() const { return copy_->check_invariants(); }
  const pool::OwnerRecord& owner_record(uint32_t owner) const { return copy_->owner_record(owner); }

 private:
  const pool::ArenaView* live_;
  const pool::PoolCore* copy_;
};

class DaemonView {
 public:
  static DaemonView open(const std::string& instance, const std::string& runtime_dir);

  const shm::ControlHeader& header() const { return control_.header(); }
  const shm::ControlStats& stats() const { return control_.header().stats; }
  const shm::SlotInfo& slot(uint32_t i) const { return control_.slot(i); }
  PoolLook pool(uint32_t i = 0) const;
  pool::PoolCounts counts(uint32_t i = 0) const { return control_.arena(i).counts(); }
  // Attached (or attaching / suspect) clients.
  uint32_t clients() const;
  // "pool 'g': total 7 free 6 mutable 1 active 0 inactive 0; clients 1, reclaimed 0 ..."
  std::string describe() const;

 private:
  struct Snapshot {
    std::shared_ptr<std::byte> bytes;  // a private copy of the arena (64-byte aligned)
    pool::PoolCore core;               // attached to it
  };
  shm::ControlReader control_;
  mutable std::vector<Snapshot> snapshots_;  // one per pool, refreshed by pool()
};

// A small host pool: `blocks` blocks of 2 layers x 2 (K,V) x page_size tokens x 16 x 2 B.
nlohmann::json host_pool(const std::string& name, uint32_t blocks, uint32_t page_size = 4);
// A daemon config for tests: one pool "g" (64 blocks, page 4), little spinning (the test
// machine may have two cores), info logging. instance and runtime_dir are filled in by
// DaemonProcess.
nlohmann::json test_config(nlohmann::json pools = nullptr);

// The real kvpoold, on a unique instance ("t<pid>-<n>") and a fresh runtime dir under /tmp.
// The config is written to <dir>/kvpoold.json; stderr goes to <dir>/kvpoold.<k>.stderr for
// the k-th start. NOTIFY_SOCKET points at a datagram socket the harness drains from a
// thread (sd_notify blocks once a receiver's queue is full), recording what each pid said.
class DaemonProcess {
 public:
  // `config`: a config document; "instance" and "runtime_dir" are set unless present.
  explicit DaemonProcess(nlohmann::json config = test_config());
  ~DaemonProcess();
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  // Spawns kvpoold and waits for READY=1 from it (10 s); throws with its stderr otherwise.
  void start();
  // Spawns kvpoold and returns at once (for daemons expected to fail).
  void spawn(const std::vector<std::string>& extra_args = {});
  // Waits until this pid said READY=1; false when it exited first or the time ran out.
  bool wait_ready(std::chrono::milliseconds timeout);
  // Starts it again on the same instance and runtime dir (the previous process must have
  // exited) and waits for READY=1.
  void restart();

  void kill(int sig) {
    if (proc_) proc_->kill(sig);
  }
  std::optional<ExitStatus> wait_exit(std::chrono::milliseconds timeout) {
    if (!proc_) throw HarnessError("kvpoold was never started");
    return proc_->wait_exit(timeout);
  }
  pid_t pid() const { return proc_ ? proc_->pid() : -1; }
  bool running() { return proc_ && proc_->running(); }
  // Whether the current process sent this notify line ("READY=1", "STOPPING=1").
  bool notified(const std::string& line);

  const std::string& instance() const { return instance_; }
  const std::string& runtime_dir() const { return runtime_dir_; }
  const std::string& dir() const { return dir_; }
  std::string socket_path() const;
  const std::string& config_path() const { return config_path_; }
  // stderr of the current (last started) process.
  std::string stderr_text() const;
  // /dev/shm entries of this instance ("kvpool.<instance>.ctl", ...).
  std::vector<std::string> shm_files() const;

  DaemonView view() const { return DaemonView::open(instance_, runtime_dir_); }
  // Options for a libkvpool connection to this daemon.
  detail::ConnectionOptions connection_options() const;

  // Runs another kvpoold with these arguments to completion (timeout: failure) and returns
  // its exit status and stderr. No NOTIFY_SOCKET.
  std::pair<ExitStatus, std::string> run_other(const std::vector<std::string>& args,
                                               std::chrono::milliseconds timeout = 15s);
  // `kvpoolctl status --json` of this daemon, parsed.
  nlohmann::json ctl_status();
  // `kvpoolctl <args> --instance I --runtime-dir D` run to completion: its exit status and
  // stdout (its stderr is the test's).
  std::pair<ExitStatus, std::string> run_ctl(const std::vector<std::string>& args,
                                             std::chrono::milliseconds timeout = 20s);

 private:
  void notify_main();

  std::string dir_;
  std::string instance_;
  std::string runtime_dir_;
  std::string config_path_;
  std::string notify_path_;
  std::string stderr_path_;
  int starts_ = 0;
  std::unique_ptr<ChildProcess> proc_;

  shm::UniqueFd notify_fd_;
  shm::UniqueFd notify_stop_;
  std::thread notify_thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<pid_t, std::vector<std::string>> notes_;  // pid -> lines it sent
};

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
