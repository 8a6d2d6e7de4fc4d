// Test support: the real kvpoold, started from a config file on a unique instance and a
// fresh runtime dir, up once it said READY=1 on the notify socket the support library
// drains; and a read-only view of its control segment (shm::observe, as kvpoolctl does).
// Used by the multi-process, events, gpu, cli, systemd and benchmark suites.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kvpool/pool/pool_core.hpp"
#include "kvpool/shm/control_segment.hpp"
#include "kvpool/shm/unique_fd.hpp"
#include "support/child_process.hpp"

namespace kvpool::testsupport {

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
// machine may have two cores), info logging, no per-uid share (uid_share_percent 100: one
// uid may take whole pools). instance and runtime_dir are filled in by
// DaemonProcess.
nlohmann::json test_config(nlohmann::json pools = nullptr);

// The real kvpoold, on a unique instance ("t<pid>-<n>") and a fresh runtime dir under /tmp.
// The config is written to <dir>/kvpoold.json; stderr goes to <dir>/kvpoold.<k>.stderr for
// the k-th start. NOTIFY_SOCKET points at a datagram socket the harness drains from a
// thread (sd_notify blocks once a receiver's queue is full), recording what each pid said.
class DaemonProcess {
 public:
  // `config`: a config document; "instance" and "runtime_dir" are set unless present (a
  // second daemon for another's instance names both).
  // `kvpoold`: the program (benchmarks may run another build's).
  explicit DaemonProcess(nlohmann::json config = test_config(), std::string kvpoold = KVPOOLD_PATH);
  ~DaemonProcess();
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  // Spawns kvpoold and waits for READY=1 from it; throws with its stderr otherwise.
  void start(std::chrono::milliseconds ready_timeout = 10s);
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
  // SIGTERM, then waits for the exit; throws (with its stderr) at the deadline.
  ExitStatus stop(std::chrono::milliseconds timeout = 10s);
  std::optional<ExitStatus> wait_exit(std::chrono::milliseconds timeout) {
    if (!proc_) throw TestError("kvpoold was never started");
    return proc_->wait_exit(timeout);
  }
  pid_t pid() const { return proc_ ? proc_->pid() : -1; }
  bool running() { return proc_ && proc_->running(); }
  // Whether the current process sent this notify line ("READY=1", "STOPPING=1").
  bool notified(const std::string& line);

  // Every notify datagram any process of this DaemonProcess sent, in order, with when it
  // came (systemd's view: what a Type=notify unit's manager would read).
  struct Notification {
    pid_t pid = -1;
    std::string text;  // one datagram; several assignments are newline-separated
    Clock::time_point at;
  };
  // The next one not yet taken; nullopt at the deadline.
  std::optional<Notification> next_notification(Clock::time_point deadline);
  // Takes notifications until one contains `needle` and returns it; throws at the deadline
  // with the daemon's stderr.
  std::string await(const std::string& needle, std::chrono::milliseconds timeout);
  // Variables the next spawns add to the scrubbed environment ("K=V"; "$PID": the
  // daemon's own pid, as systemd passes WATCHDOG_PID).
  void set_environment(std::vector<std::string> extra_env) { extra_env_ = std::move(extra_env); }

  const std::string& instance() const { return instance_; }
  const std::string& runtime_dir() const { return runtime_dir_; }
  const std::string& dir() const { return dir_; }
  std::string socket_path() const;
  const std::string& config_path() const { return config_path_; }
  // stderr of the current (last started) process.
  std::string stderr_text() const;
  // Whether that stderr comes to contain `needle` within `timeout`. For a line the daemon
  // logs after a change the test waited for (its counts move before it writes the line).
  bool stderr_gets(const std::string& needle, std::chrono::milliseconds timeout = 10s) const;
  // /dev/shm entries of this instance ("kvpool.<instance>.ctl", ...).
  std::vector<std::string> shm_files() const;

  DaemonView view() const { return DaemonView::open(instance_, runtime_dir_); }
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

  std::string kvpoold_;
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
  std::deque<Notification> stream_;                  // not yet taken by next_notification
  std::vector<std::string> extra_env_;
};

}  // namespace kvpool::testsupport
