// A cluster on one host for the KV-event tests and the benchmark: a real nats-server on a
// free loopback port, real kvpoold instances (tests/multiproc's harness) standing for
// workers, their kvpool-events forwarders, and kvpool-router-demo in line mode as the
// router. Every wait is on a condition with a deadline.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness.hpp"
#include "kvpool/client.hpp"
#include "kvpool/core/token_block.hpp"

namespace kvpool::evtest {

using namespace std::chrono_literals;
using mptest::ChildProcess;
using mptest::DaemonProcess;
using mptest::HarnessError;
using mptest::wait_until;

using testsupport::child_environment;
using testsupport::read_file;
// A loopback TCP port that was free when it was picked.
int free_loopback_port();
bool accepts_tcp(int port);
// Truncates and opens `path` for a child's stdout or stderr.
shm::UniqueFd open_log(const std::string& path);

// The nats-server binary ("" when it is not installed).
std::string nats_server_binary();

// nats-server -a 127.0.0.1 -p PORT, on a port that was free when it was picked.
class NatsServer {
 public:
  explicit NatsServer(std::string dir);
  ~NatsServer();
  // Starts it (again on the same port) and waits until it accepts TCP connections.
  void start();
  void kill9();
  std::string url() const { return "nats://127.0.0.1:" + std::to_string(port_); }
  bool running() { return proc_ && proc_->running(); }

 private:
  std::string dir_;
  int port_ = 0;
  int starts_ = 0;
  std::unique_ptr<ChildProcess> proc_;
};

struct Subject {
  std::string ns;
  std::string component;
};

// kvpool-events for one daemon; its stderr goes to <daemon dir>/events.<k>.stderr.
class ForwarderProcess {
 public:
  ForwarderProcess(const DaemonProcess& daemon, std::string nats_url, Subject subject,
                   int64_t worker_id);
  // The next start() runs it as this uid (and gid, no supplementary groups), through
  // setpriv; the test runs as root. 0: as the test.
  void run_as(uid_t uid) { uid_ = uid; }
  // Arguments the next start() adds (e.g. --metrics-listen 127.0.0.1:0).
  void add_args(std::vector<std::string> args) { extra_args_ = std::move(args); }
  void start();
  void kill(int sig);
  void kill9_and_reap();
  // SIGTERM, then waits for the exit (it logs its counters on the way out).
  void stop();
  std::string stderr_text() const;
  int64_t worker_id() const { return worker_id_; }

 private:
  std::string instance_, runtime_dir_, dir_, url_;
  Subject subject_;
  int64_t worker_id_;
  uid_t uid_ = 0;
  std::vector<std::string> extra_args_;
  int starts_ = 0;
  std::string stderr_path_;
  std::unique_ptr<ChildProcess> proc_;
};

// kvpool-router-demo in line mode.
class RouterProcess {
 public:
  RouterProcess(std::string nats_url, Subject subject, uint32_t page_size, uint64_t salt,
                std::string stderr_path);
  ~RouterProcess();
  nlohmann::json command(const std::string& line, std::chrono::milliseconds timeout = 10s);
  // Worker -> leading blocks of `tokens` it holds ("worker id" -> n).
  std::map<std::string, uint32_t> overlap(const std::vector<Token>& tokens);
  nlohmann::json size() { return command("size"); }

 private:
  std::optional<std::string> read_line(std::chrono::milliseconds timeout);
  ChildProcess proc_;
  mptest::Clock::time_point started_;
  int in_ = -1, out_ = -1;
  std::string buf_;
  std::string stderr_path_;
};

// A daemon config for these tests: one host pool "g" of `blocks` blocks, page 4.
nlohmann::json events_config(uint32_t blocks = 64, uint32_t event_ring_slots = 65536);

// Registers `tokens` (whole blocks only) as one register call; returns the immutable blocks
// (hold them to keep the blocks active). `options`: e.g. send_tokens.
std::vector<ImmutableBlock> register_tokens(Pool& pool, const std::vector<Token>& tokens, Salt salt,
                                            const RegisterOptions& options = {});
// Drops nothing itself: allocates every block of the pool once (evicting every inactive
// block), then returns them.
void evict_all(Pool& pool, uint32_t num_blocks);
// tokens [base, base + n)
std::vector<Token> token_range(Token base, uint32_t n);

}  // namespace kvpool::evtest
