#include "events_testbed.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace kvpool::evtest {

int free_loopback_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw HarnessError(std::string("socket: ") + std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    throw HarnessError(std::string("bind: ") + std::strerror(errno));
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

bool accepts_tcp(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

shm::UniqueFd open_log(const std::string& path) {
  shm::UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd) throw HarnessError("open " + path + ": " + std::strerror(errno));
  return fd;
}

std::string nats_server_binary() {
  for (const char* p :
       {"/usr/sbin/nats-server", "/usr/bin/nats-server", "/usr/local/bin/nats-server"})
    if (::access(p, X_OK) == 0) return p;
  if (const char* path = std::getenv("PATH")) {
    std::stringstream ss(path);
    for (std::string dir; std::getline(ss, dir, ':');) {
      std::string p = dir + "/nats-server";
      if (!dir.empty() && ::access(p.c_str(), X_OK) == 0) return p;
    }
  }
  return "";
}

// ---- nats-server -----------------------------------------------------------------------------

NatsServer::NatsServer(std::string dir) : dir_(std::move(dir)), port_(free_loopback_port()) {}

NatsServer::~NatsServer() {
  if (proc_) proc_->kill_and_reap();
}

void NatsServer::start() {
  const std::string bin = nats_server_binary();
  if (bin.empty()) throw HarnessError("nats-server is not installed");
  if (proc_) proc_->kill_and_reap();
  const std::string log = dir_ + "/nats-server." + std::to_string(++starts_) + ".log";
  auto fd = open_log(log);
  proc_ = std::make_unique<ChildProcess>();
  proc_->spawn({bin, "-a", "127.0.0.1", "-p", std::to_string(port_)}, child_environment(), -1,
               fd.get(), fd.get());
  wait_until([&] { return accepts_tcp(port_) || !proc_->running(); }, 10s,
             "nats-server to accept connections on port " + std::to_string(port_));
  if (!proc_->running())
    throw HarnessError("nats-server exited at start; its log:\n" + read_file(log));
}

void NatsServer::kill9() {
  if (proc_) proc_->kill_and_reap();
  wait_until([&] { return !accepts_tcp(port_); }, 5s, "the killed nats-server's port to close");
}

// ---- forwarder -------------------------------------------------------------------------------

ForwarderProcess::ForwarderProcess(const DaemonProcess& daemon, std::string nats_url,
                                   Subject subject, int64_t worker_id)
    : instance_(daemon.instance()),
      runtime_dir_(daemon.runtime_dir()),
      dir_(daemon.dir()),
      url_(std::move(nats_url)),
      subject_(std::move(subject)),
      worker_id_(worker_id) {}

void ForwarderProcess::start() {
  if (proc_) proc_->kill_and_reap();
  stderr_path_ = dir_ + "/events." + std::to_string(++starts_) + ".stderr";
  auto fd = open_log(stderr_path_);
  proc_ = std::make_unique<ChildProcess>();
  std::vector<std::string> argv;
  if (uid_ != 0)
    argv = {"/usr/bin/setpriv", "--reuid=" + std::to_string(uid_),
            "--regid=" + std::to_string(uid_), "--clear-groups"};
  for (std::string a : {std::string(KVPOOL_EVENTS_PATH), std::string("--instance"), instance_,
                        std::string("--runtime-dir"), runtime_dir_, std::string("--nats-url"), url_,
                        std::string("--namespace"), subject_.ns, std::string("--component"),
                        subject_.component, std::string("--worker-id"), std::to_string(worker_id_)})
    argv.push_back(a);
  argv.insert(argv.end(), extra_args_.begin(), extra_args_.end());
  proc_->spawn(argv, child_environment(), -1, fd.get(), fd.get());
}

void ForwarderProcess::kill(int sig) {
  if (proc_) proc_->kill(sig);
}

void ForwarderProcess::kill9_and_reap() {
  if (proc_) proc_->kill_and_reap();
}

void ForwarderProcess::stop() {
  if (!proc_) return;
  proc_->kill(SIGTERM);
  if (!proc_->wait_exit(10s))
    throw HarnessError("kvpool-events did not exit within 10 s of SIGTERM");
}

std::string ForwarderProcess::stderr_text() const {
  return stderr_path_.empty() ? "" : read_file(stderr_path_);
}

// ---- router demo -----------------------------------------------------------------------------

RouterProcess::RouterProcess(std::string nats_url, Subject subject, uint32_t page_size,
                             uint64_t salt, std::string stderr_path)
    : stderr_path_(std::move(stderr_path)) {
  ::signal(SIGPIPE, SIG_IGN);
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0)
    throw HarnessError(std::string("pipe2: ") + std::strerror(errno));
  auto err = open_log(stderr_path_);
  proc_.spawn({KVPOOL_ROUTER_DEMO_PATH, "--nats-url", nats_url, "--namespace", subject.ns,
               "--component", subject.component, "--page-size", std::to_string(page_size), "--salt",
               std::to_string(salt), "--log-level", "info"},
              child_environment(), in[0], out[1], err.get());
  ::close(in[0]);
  ::close(out[1]);
  in_ = in[1];
  out_ = out[0];
}

RouterProcess::~RouterProcess() {
  proc_.kill_and_reap();
  if (in_ >= 0) ::close(in_);
  if (out_ >= 0) ::close(out_);
}

std::optional<std::string> RouterProcess::read_line(std::chrono::milliseconds timeout) {
  auto deadline = mptest::Clock::now() + timeout;
  while (true) {
    if (auto nl = buf_.find('\n'); nl != std::string::npos) {
      std::string line = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      return line;
    }
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - mptest::Clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd p{out_, POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    char b[4096];
    ssize_t r = ::read(out_, b, sizeof(b));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return std::nullopt;
    buf_.append(b, static_cast<size_t>(r));
  }
}

nlohmann::json RouterProcess::command(const std::string& line, std::chrono::milliseconds timeout) {
  std::string l = line + "\n";
  if (::write(in_, l.data(), l.size()) != static_cast<ssize_t>(l.size()))
    throw HarnessError("kvpool-router-demo: cannot send '" + line + "' (" + std::strerror(errno) +
                       "); its stderr:\n" + read_file(stderr_path_));
  auto answer = read_line(timeout);
  if (!answer)
    throw HarnessError("kvpool-router-demo: no answer to '" + line + "'; its stderr:\n" +
                       read_file(stderr_path_));
  auto j = nlohmann::json::parse(*answer, nullptr, false);
  if (j.is_discarded() || j.contains("error"))
    throw HarnessError("kvpool-router-demo: bad answer to '" + line + "': " + *answer);
  return j;
}

std::map<std::string, uint32_t> RouterProcess::overlap(const std::vector<Token>& tokens) {
  std::string line = "overlap";
  for (Token t : tokens) {
    line += ' ';  // not `" " + std::to_string(t)`: a false -Wrestrict at -O3 (GCC bug 105329)
    line += std::to_string(t);
  }
  auto j = command(line);
  std::map<std::string, uint32_t> out;
  for (auto& [w, n] : j["overlap"].items()) out[w] = n.get<uint32_t>();
  return out;
}

// ---- daemons and blocks ----------------------------------------------------------------------

nlohmann::json events_config(uint32_t blocks, uint32_t event_ring_slots) {
  auto c = mptest::test_config(nlohmann::json::array({mptest::host_pool("g", blocks, 4)}));
  c["event_ring_slots"] = event_ring_slots;
  return c;
}

std::vector<ImmutableBlock> register_tokens(Pool& pool, const std::vector<Token>& tokens, Salt salt,
                                            const RegisterOptions& options) {
  auto seq = TokenBlockSequence::create(tokens, pool.page_size(), salt);
  if (!seq) throw HarnessError(seq.status().to_string());
  const auto& tbs = seq->blocks();
  auto blocks = pool.allocate_blocks(static_cast<uint32_t>(tbs.size()));
  if (!blocks) throw HarnessError("allocate: " + blocks.status().to_string());
  for (size_t i = 0; i < tbs.size(); ++i) {
    MutableBlock& b = (*blocks)[i];
    if (!b.init_sequence(salt, tbs[i].parent_sequence_hash).is_ok() ||
        !b.add_tokens(tbs[i].tokens).is_ok() || !b.commit().is_ok())
      throw HarnessError("cannot fill block " + std::to_string(i));
  }
  auto reg = pool.register_blocks(std::move(*blocks), options);
  if (!reg) throw HarnessError("register: " + reg.status().to_string());
  return std::move(reg.value());
}

void evict_all(Pool& pool, uint32_t num_blocks) {
  auto all = pool.allocate_blocks(num_blocks);
  if (!all) throw HarnessError("allocate all: " + all.status().to_string());
}

std::vector<Token> token_range(Token base, uint32_t n) {
  std::vector<Token> t(n);
  for (uint32_t i = 0; i < n; ++i) t[i] = base + i;
  return t;
}

}  // namespace kvpool::evtest
