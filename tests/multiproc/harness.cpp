#include "harness.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "kvpool/core/paths.hpp"

extern char** environ;

namespace kvpool::mptest {
namespace {

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

// The test process's environment minus what would confuse a child (a systemd notify socket
// or runtime directory of whoever runs the tests).
std::vector<std::string> child_environment() {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    if (kv.starts_with("NOTIFY_SOCKET=") || kv.starts_with("RUNTIME_DIRECTORY=") ||
        kv.starts_with("WATCHDOG_") || kv.starts_with("LISTEN_"))
      continue;
    env.emplace_back(kv);
  }
  return env;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Reads `fd` until EOF; throws at the deadline.
std::string read_all(int fd, std::chrono::milliseconds timeout, const std::string& what) {
  std::string out;
  auto deadline = Clock::now() + timeout;
  char buf[4096];
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) throw HarnessError("timed out reading the output of " + what);
    pollfd p{fd, POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw HarnessError(errno_text("poll"));
    if (n == 0) continue;
    ssize_t r = ::read(fd, buf, sizeof(buf));
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r < 0) throw HarnessError(errno_text("read"));
    if (r == 0) return out;
    out.append(buf, static_cast<size_t>(r));
  }
}

std::atomic<int> g_instance_counter{0};

}  // namespace

// ---- waiting ---------------------------------------------------------------------------------

void wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout,
                const std::string& what, const std::function<std::string()>& detail) {
  auto start = Clock::now();
  auto deadline = start + timeout;
  while (true) {
    if (pred()) return;
    if (Clock::now() >= deadline) {
      std::string msg =
          "timed out after " + std::to_string(timeout.count()) + " ms waiting for " + what;
      if (detail) msg += "; seen: " + detail();
      throw HarnessError(msg);
    }
    std::this_thread::sleep_for(1ms);  // a poll interval, not a synchronisation
  }
}

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// ---- exit status -----------------------------------------------------------------------------

bool ExitStatus::exited() const { return WIFEXITED(raw); }
int ExitStatus::code() const { return WIFEXITED(raw) ? WEXITSTATUS(raw) : -1; }
bool ExitStatus::signaled() const { return WIFSIGNALED(raw); }
int ExitStatus::signal() const { return WIFSIGNALED(raw) ? WTERMSIG(raw) : 0; }
std::string ExitStatus::describe() const {
  if (exited()) return "exit code " + std::to_string(code());
  if (signaled())
    return "killed by signal " + std::to_string(signal()) + " (" + strsignal(signal()) + ")";
  return "wait status " + std::to_string(raw);
}

// ---- child processes -------------------------------------------------------------------------

ChildProcess::~ChildProcess() { kill_and_reap(); }

void ChildProcess::spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                         int stdin_fd, int stdout_fd, int stderr_fd) {
  if (pid_ > 0) throw HarnessError("ChildProcess::spawn called twice");
  // Everything the child needs is prepared before fork: after it, only async-signal-safe
  // calls (this process has threads).
  std::vector<char*> av, ev;
  for (auto& a : argv) av.push_back(const_cast<char*>(a.c_str()));
  av.push_back(nullptr);
  for (auto& e : env) ev.push_back(const_cast<char*>(e.c_str()));
  ev.push_back(nullptr);
  int errpipe[2];
  if (::pipe2(errpipe, O_CLOEXEC) != 0) throw HarnessError(errno_text("pipe2"));
  int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devnull < 0) throw HarnessError(errno_text("open /dev/null"));
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(errpipe[0]);
    ::close(errpipe[1]);
    ::close(devnull);
    throw HarnessError(errno_text("fork"));
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(126);
    // Move the three descriptors out of 0..2 first, so dup2 cannot clobber one of them.
    int src[3] = {stdin_fd < 0 ? devnull : stdin_fd, stdout_fd < 0 ? devnull : stdout_fd,
                  stderr_fd < 0 ? devnull : stderr_fd};
    int high[3];
    for (int i = 0; i < 3; ++i) high[i] = ::fcntl(src[i], F_DUPFD_CLOEXEC, 10);
    for (int i = 0; i < 3; ++i) ::dup2(high[i], i);  // dup2 clears close-on-exec on 0..2
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(SIGPIPE, &dfl, nullptr);
    ::execve(av[0], av.data(), ev.data());
    int e = errno;
    ssize_t w = ::write(errpipe[1], &e, sizeof(e));
    (void)w;
    ::_exit(127);
  }
  ::close(errpipe[1]);
  ::close(devnull);
  pid_ = pid;
  // The pid cannot be reused before we reap it, so this pidfd names our child.
  pidfd_ = shm::UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  int e = 0;
  ssize_t r;
  do {
    r = ::read(errpipe[0], &e, sizeof(e));  // EOF: exec succeeded
  } while (r < 0 && errno == EINTR);
  ::close(errpipe[0]);
  if (r == sizeof(e)) {
    wait_exit(5s);
    throw HarnessError("cannot exec " + argv[0] + ": " + std::strerror(e));
  }
  if (!pidfd_) throw HarnessError(errno_text("pidfd_open"));
}

bool ChildProcess::running() {
  if (pid_ <= 0 || exit_) return false;
  pollfd p{pidfd_.get(), POLLIN, 0};
  return ::poll(&p, 1, 0) == 0;
}

void ChildProcess::kill(int sig) {
  if (pid_ <= 0 || exit_) return;  // reaped: the pid may belong to someone else now
  ::kill(pid_, sig);
}

std::optional<ExitStatus> ChildProcess::wait_exit(std::chrono::milliseconds timeout) {
  if (exit_) return exit_;
  if (pid_ <= 0) throw HarnessError("wait_exit on a process never started");
  auto deadline = Clock::now() + timeout;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{pidfd_.get(), POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw HarnessError(errno_text("poll pidfd"));
    if (n == 1) break;
    if (left.count() <= 0) return std::nullopt;
  }
  int st = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &st, 0);
  } while (r < 0 && errno == EINTR);
  if (r != pid_) throw HarnessError(errno_text("waitpid"));
  exit_ = ExitStatus{st};
  return exit_;
}

void ChildProcess::kill_and_reap() {
  if (pid_ <= 0 || exit_) return;
  ::kill(pid_, SIGKILL);
  ::kill(pid_, SIGCONT);  // a stopped process dies of SIGKILL too, but be sure
  int st = 0;
  while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
  }
  exit_ = ExitStatus{st};
}

// ---- daemon view -----------------------------------------------------------------------------

DaemonView DaemonView::open(const std::string& instance, const std::string& runtime_dir) {
  // Validated once, completely (offsets, lengths, arenas): see shm/control_segment.hpp.
  auto control = shm::observe(instance, runtime_dir);
  if (!control)
    throw HarnessError("cannot observe kvpoold instance '" + instance +
                       "': " + control.status().to_string());
  DaemonView v;
  v.control_ = std::move(control.value());
  v.snapshots_.resize(v.control_.num_pools());
  return v;
}

PoolLook DaemonView::pool(uint32_t i) const {
  const pool::ArenaView& live = control_.arena(i);
  Snapshot& s = snapshots_.at(i);
  if (!s.bytes)
    s.bytes.reset(static_cast<std::byte*>(std::aligned_alloc(64, (live.bytes() + 63) / 64 * 64)),
                  std::free);
  // The engine may be mid-call: retry until the arena's seqlock says the copy is whole.
  auto deadline = Clock::now() + 5s;
  while (!live.copy_to(s.bytes.get())) {
    if (Clock::now() > deadline) throw HarnessError("no consistent copy of the pool arena in 5 s");
    std::this_thread::yield();
  }
  auto core = pool::PoolCore::attach(s.bytes.get(), live.bytes(), i, live.name());
  if (!core) throw HarnessError("pool arena: " + core.status().to_string());
  s.core = std::move(core.value());
  return PoolLook(&live, &s.core);
}

uint32_t DaemonView::clients() const {
  uint32_t n = 0;
  for (const shm::SlotInfo& s : control_.slots())
    n += s.state.load(std::memory_order_acquire) != static_cast<uint32_t>(shm::SlotState::kFree);
  return n;
}

std::string DaemonView::describe() const {
  auto rl = [](const auto& a) { return std::to_string(a.load(std::memory_order_relaxed)); };
  std::string s;
  for (const pool::ArenaView& p : control_.arenas()) {
    auto c = p.counts();
    s += "pool '" + p.name() + "': total " + std::to_string(c.total) + " free " +
         std::to_string(c.free) + " mutable " + std::to_string(c.mutable_blocks) + " active " +
         std::to_string(c.active) + " inactive " + std::to_string(c.inactive) +
         ", rejected_handles " + rl(p.stats().rejected_handles) + "; ";
  }
  s += "clients " + std::to_string(clients()) + ", reclaimed_clients " +
       rl(stats().reclaimed_clients) + ", reclaimed_blocks " + rl(stats().reclaimed_blocks) +
       ", protocol_errors " + rl(stats().protocol_errors) + ", disconnects " +
       rl(stats().disconnects) + ", refused_attaches " + rl(stats().refused_attaches);
  return s;
}

// ---- configs ---------------------------------------------------------------------------------

nlohmann::json host_pool(const std::string& name, uint32_t blocks, uint32_t page_size) {
  return {{"name", name},
          {"num_blocks", blocks},
          {"layout",
           {{"num_layers", 2},
            {"outer_dim", 2},
            {"page_size", page_size},
            {"inner_dim", 16},
            {"dtype_bytes", 2},
            {"alignment", 64}}}};
}

nlohmann::json test_config(nlohmann::json pools) {
  if (pools.is_null()) pools = nlohmann::json::array({host_pool("g", 64)});
  return {{"max_clients", 16}, {"poll_us", 20}, {"log_level", "info"}, {"pools", pools}};
}

// ---- daemon ----------------------------------------------------------------------------------

DaemonProcess::DaemonProcess(nlohmann::json config) {
  char tmpl[] = "/tmp/kvpool-mp-XXXXXX";
  if (!::mkdtemp(tmpl)) throw HarnessError(errno_text("mkdtemp"));
  dir_ = tmpl;
  instance_ = "t" + std::to_string(::getpid()) + "-" + std::to_string(++g_instance_counter);
  runtime_dir_ = dir_;
  if (!config.contains("instance")) config["instance"] = instance_;
  if (!config.contains("runtime_dir")) config["runtime_dir"] = runtime_dir_;
  if (config["instance"].is_string()) instance_ = config["instance"].get<std::string>();
  config_path_ = dir_ + "/kvpoold.json";
  std::ofstream(config_path_) << config.dump(2) << "\n";

  notify_path_ = dir_ + "/notify";
  notify_fd_ = shm::UniqueFd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!notify_fd_) throw HarnessError(errno_text("socket"));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, notify_path_.c_str(), sizeof(addr.sun_path) - 1);
  if (::bind(notify_fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
    throw HarnessError(errno_text("bind " + notify_path_));
  int one = 1;
  ::setsockopt(notify_fd_.get(), SOL_SOCKET, SO_PASSCRED, &one, sizeof(one));
  notify_stop_ = shm::UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!notify_stop_) throw HarnessError(errno_text("eventfd"));
  notify_thread_ = std::thread([this] { notify_main(); });
}

DaemonProcess::~DaemonProcess() {
  if (proc_) proc_->kill_and_reap();
  // A failed test shows what the daemon said, from every start.
  if (::testing::Test::HasFailure()) {
    for (int k = 1; k <= starts_; ++k) {
      std::string path = dir_ + "/kvpoold." + std::to_string(k) + ".stderr";
      std::cerr << "---- kvpoold stderr (instance " << instance_ << ", start " << k << ") ----\n"
                << read_file(path) << "---- end ----\n";
    }
  }
  if (notify_thread_.joinable()) {
    uint64_t one = 1;
    ssize_t w = ::write(notify_stop_.get(), &one, sizeof(one));
    (void)w;
    notify_thread_.join();
  }
  // A daemon killed by the test leaves its segments behind: remove them.
  for (const auto& f : shm_files()) ::shm_unlink(("/" + f).c_str());
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

void DaemonProcess::notify_main() {
  pollfd fds[2] = {{notify_fd_.get(), POLLIN, 0}, {notify_stop_.get(), POLLIN, 0}};
  while (true) {
    int n = ::poll(fds, 2, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || (fds[1].revents & POLLIN)) return;
    while (true) {
      char data[4096];
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred))];
      iovec iov{data, sizeof(data) - 1};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      ssize_t r = ::recvmsg(notify_fd_.get(), &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
      if (r < 0) break;  // EAGAIN: drained
      pid_t sender = -1;
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
          ucred cred;
          std::memcpy(&cred, CMSG_DATA(c), sizeof(cred));
          sender = cred.pid;
        }
      }
      std::string text(data, static_cast<size_t>(r));
      std::lock_guard lk(mu_);
      std::istringstream lines(text);
      for (std::string line; std::getline(lines, line);)
        if (!line.empty()) notes_[sender].push_back(line);
      cv_.notify_all();
    }
  }
}

bool DaemonProcess::notified(const std::string& line) {
  std::lock_guard lk(mu_);
  auto it = notes_.find(pid());
  if (it == notes_.end()) return false;
  for (auto& l : it->second)
    if (l == line) return true;
  return false;
}

std::string DaemonProcess::socket_path() const {
  return kvpool::socket_path(runtime_dir_, instance_);
}

std::string DaemonProcess::stderr_text() const {
  return stderr_path_.empty() ? std::string() : read_file(stderr_path_);
}

std::vector<std::string> DaemonProcess::shm_files() const {
  std::vector<std::string> out;
  const std::string prefix = "kvpool." + instance_ + ".";
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    std::string name = e.path().filename().string();
    if (name.starts_with(prefix)) out.push_back(name);
  }
  return out;
}

detail::ConnectionOptions DaemonProcess::connection_options() const {
  detail::ConnectionOptions o;
  o.runtime_dir = runtime_dir_;
  o.connect_timeout = 10s;
  o.poll_us = 20;
  return o;
}

void DaemonProcess::spawn(const std::vector<std::string>& extra_args) {
  if (proc_ && proc_->running())
    throw HarnessError("kvpoold pid " + std::to_string(proc_->pid()) + " is still running");
  ++starts_;
  stderr_path_ = dir_ + "/kvpoold." + std::to_string(starts_) + ".stderr";
  shm::UniqueFd err(::open(stderr_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!err) throw HarnessError(errno_text("open " + stderr_path_));
  std::vector<std::string> argv{KVPOOLD_PATH, "--config", config_path_};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  auto env = child_environment();
  env.push_back("NOTIFY_SOCKET=" + notify_path_);
  if (proc_) proc_->kill_and_reap();
  proc_ = std::make_unique<ChildProcess>();
  proc_->spawn(argv, env, -1, err.get(), err.get());
}

bool DaemonProcess::wait_ready(std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  const pid_t p = pid();
  std::unique_lock lk(mu_);
  auto ready = [&] {
    auto it = notes_.find(p);
    if (it == notes_.end()) return false;
    for (auto& l : it->second)
      if (l == "READY=1") return true;
    return false;
  };
  while (!ready()) {
    auto now = Clock::now();
    if (now >= deadline) return false;
    lk.unlock();
    bool alive = running();
    lk.lock();
    if (!alive) return ready();
    // Wakes on every notify datagram; the bound only re-checks whether the daemon exited.
    cv_.wait_for(lk, std::min<Clock::duration>(deadline - now, 20ms));
  }
  return true;
}

void DaemonProcess::start() {
  spawn();
  if (!wait_ready(10s)) {
    std::string how = running() ? "still running" : proc_->wait_exit(1s)->describe();
    proc_->kill_and_reap();
    throw HarnessError("kvpoold (instance '" + instance_ + "') did not send READY=1 within 10 s (" +
                       how + "); its stderr:\n" + stderr_text());
  }
}

void DaemonProcess::restart() {
  if (proc_ && !proc_->wait_exit(10s))
    throw HarnessError("restart: the previous kvpoold pid " + std::to_string(proc_->pid()) +
                       " has not exited");
  start();
}

std::pair<ExitStatus, std::string> DaemonProcess::run_other(const std::vector<std::string>& args,
                                                            std::chrono::milliseconds timeout) {
  static std::atomic<int> n{0};
  std::string path = dir_ + "/other." + std::to_string(++n) + ".stderr";
  shm::UniqueFd err(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!err) throw HarnessError(errno_text("open " + path));
  std::vector<std::string> argv{KVPOOLD_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  ChildProcess c;
  c.spawn(argv, child_environment(), -1, err.get(), err.get());
  auto st = c.wait_exit(timeout);
  if (!st) {
    c.kill_and_reap();
    throw HarnessError("a second kvpoold did not exit within " + std::to_string(timeout.count()) +
                       " ms; its stderr:\n" + read_file(path));
  }
  return {*st, read_file(path)};
}

std::pair<ExitStatus, std::string> DaemonProcess::run_ctl(const std::vector<std::string>& args,
                                                          std::chrono::milliseconds timeout) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw HarnessError(errno_text("pipe2"));
  shm::UniqueFd rd(out[0]), wr(out[1]);
  std::vector<std::string> argv{KVPOOLCTL_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  for (const char* a : {"--instance", instance_.c_str(), "--runtime-dir", runtime_dir_.c_str()})
    argv.emplace_back(a);
  ChildProcess c;
  c.spawn(argv, child_environment(), -1, wr.get(), 2);
  wr.reset();
  const std::string what = "kvpoolctl " + (args.empty() ? std::string() : args.front());
  std::string text = read_all(rd.get(), timeout, what);
  auto st = c.wait_exit(timeout);
  if (!st)
    throw HarnessError(what + " did not exit within " + std::to_string(timeout.count()) +
                       " ms; its output: " + text);
  return {*st, text};
}

nlohmann::json DaemonProcess::ctl_status() {
  auto [st, text] = run_ctl({"status", "--json"});
  if (!st.exited() || st.code() != 0)
    throw HarnessError("kvpoolctl status failed (" + st.describe() + "): " + text);
  return nlohmann::json::parse(text);
}

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
