#include "harness.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

namespace kvpool::mptest {

// ---- workers ---------------------------------------------------------------------------------

WorkerProcess::WorkerProcess(const DaemonProcess& daemon, const std::string& scenario,
                             const std::vector<std::string>& args)
    : WorkerProcess(KVPOOL_TEST_WORKER_PATH, daemon, scenario, args) {}

WorkerProcess::WorkerProcess(const std::string& program, const DaemonProcess& daemon,
                             const std::string& scenario, const std::vector<std::string>& args)
    : name_(scenario) {
  ::signal(SIGPIPE, SIG_IGN);  // a worker that died must fail send_line, not kill the test
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0)
    throw HarnessError(errno_text("pipe2"));
  shm::UniqueFd child_in(in[0]), child_out(out[1]);
  in_ = shm::UniqueFd(in[1]);
  out_ = shm::UniqueFd(out[0]);
  std::vector<std::string> argv{program,         "--instance",         daemon.instance(),
                                "--runtime-dir", daemon.runtime_dir(), scenario};
  argv.insert(argv.end(), args.begin(), args.end());
  proc_.spawn(argv, child_environment(), child_in.get(), child_out.get(), 2);
  name_ = scenario + " (pid " + std::to_string(proc_.pid()) + ")";
}

WorkerProcess::~WorkerProcess() { proc_.kill_and_reap(); }

std::optional<std::string> WorkerProcess::read_line(std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (true) {
    if (auto nl = buf_.find('\n'); nl != std::string::npos) {
      std::string line = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      return line;
    }
    if (eof_) return std::nullopt;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd p{out_.get(), POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw HarnessError(errno_text("poll"));
    if (n == 0) continue;
    char b[4096];
    ssize_t r = ::read(out_.get(), b, sizeof(b));
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r <= 0) {
      eof_ = true;
      continue;
    }
    buf_.append(b, static_cast<size_t>(r));
  }
}

std::string WorkerProcess::expect_line(const std::string& prefix,
                                       std::chrono::milliseconds timeout) {
  auto line = read_line(timeout);
  if (!line) {
    std::string why = eof_ ? "its stdout closed" : "timed out";
    if (eof_) {
      if (auto st = proc_.wait_exit(5s)) why += ", " + st->describe();
    }
    throw HarnessError("worker " + name_ + ": expected a line starting with '" + prefix + "', " +
                       why + " after " + std::to_string(timeout.count()) + " ms");
  }
  if (!line->starts_with(prefix))
    throw HarnessError("worker " + name_ + ": expected a line starting with '" + prefix +
                       "', got '" + *line + "'");
  return *line;
}

void WorkerProcess::send_line(const std::string& line) {
  std::string s = line + "\n";
  size_t off = 0;
  while (off < s.size()) {
    ssize_t w = ::write(in_.get(), s.data() + off, s.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0)
      throw HarnessError("worker " + name_ + ": cannot send '" + line +
                         "': " + std::strerror(errno));
    off += static_cast<size_t>(w);
  }
}

std::string WorkerProcess::command(const std::string& line, const std::string& prefix,
                                   std::chrono::milliseconds timeout) {
  send_line(line);
  return expect_line(prefix, timeout);
}

void WorkerProcess::close_stdin() { in_.reset(); }

// ---- line helpers ----------------------------------------------------------------------------

std::vector<std::string> split_words(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

std::string field(const std::string& line, const std::string& key) {
  for (auto& w : split_words(line))
    if (w.starts_with(key + "=")) return w.substr(key.size() + 1);
  return {};
}

std::vector<uint64_t> parse_list(const std::string& csv) {
  std::vector<uint64_t> out;
  std::istringstream in(csv);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(std::stoull(item));
  return out;
}

std::string join_list(const std::vector<uint64_t>& v) {
  std::string s;
  // Two appends, not `"," + std::to_string(...)`: g++ 12 -O3 (Release) reports a false
  // -Wrestrict inside that operator+ (GCC bug 105329).
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}

}  // namespace kvpool::mptest
