#include "support/child_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

extern char** environ;

namespace kvpool::testsupport {
namespace {

// An environment value the child replaces with its own pid ("WATCHDOG_PID=$PID").
constexpr std::string_view kOwnPid = "$PID";
constexpr std::string_view kOwnPidValue = "=$PID";

// Writes `v` in decimal at `dst` with a terminating NUL; async-signal-safe (after fork).
void write_decimal(char* dst, long v) {
  char tmp[24];
  int n = 0;
  do {
    tmp[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v > 0);
  for (int i = 0; i < n; ++i) dst[i] = tmp[n - 1 - i];
  dst[n] = '\0';
}

}  // namespace

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

// ---- environment -----------------------------------------------------------------------------

std::vector<std::string> child_environment(const std::vector<std::string>& extra) {
  auto key_of = [](std::string_view kv) { return kv.substr(0, kv.find('=') + 1); };
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    if (kv.starts_with("NOTIFY_SOCKET=") || kv.starts_with("RUNTIME_DIRECTORY=") ||
        kv.starts_with("WATCHDOG_") || kv.starts_with("LISTEN_"))
      continue;
    const bool replaced = std::any_of(
        extra.begin(), extra.end(), [&](const std::string& x) { return key_of(x) == key_of(kv); });
    if (!replaced) env.emplace_back(kv);
  }
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

// ---- child processes -------------------------------------------------------------------------

ChildProcess::~ChildProcess() { kill_and_reap(); }

void ChildProcess::spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                         int stdin_fd, int stdout_fd, int stderr_fd) {
  if (pid_ > 0) throw TestError("ChildProcess::spawn called twice");
  // Everything the child needs is prepared before fork: after it, only async-signal-safe
  // calls (this process has threads). A "$PID" value gets room for the digits now and
  // the child's pid in the child.
  std::vector<std::string> envs = env;
  std::vector<char*> av, ev, own_pid;
  for (auto& a : argv) av.push_back(const_cast<char*>(a.c_str()));
  av.push_back(nullptr);
  for (auto& e : envs) {
    if (e.ends_with(kOwnPidValue)) {
      const size_t at = e.size() - kOwnPid.size();
      e.resize(at + 24, '\0');  // room for the digits
      own_pid.push_back(e.data() + at);
    }
    ev.push_back(e.data());
  }
  ev.push_back(nullptr);
  int errpipe[2];
  if (::pipe2(errpipe, O_CLOEXEC) != 0) throw TestError(errno_text("pipe2"));
  int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devnull < 0) throw TestError(errno_text("open /dev/null"));
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(errpipe[0]);
    ::close(errpipe[1]);
    ::close(devnull);
    throw TestError(errno_text("fork"));
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(126);
    for (char* p : own_pid) write_decimal(p, static_cast<long>(::getpid()));
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
    throw TestError("cannot exec " + argv[0] + ": " + std::strerror(e));
  }
  if (!pidfd_) throw TestError(errno_text("pidfd_open"));
}

void ChildProcess::spawn_logged(const std::vector<std::string>& argv,
                                const std::vector<std::string>& extra_env,
                                const std::string& log_path) {
  shm::UniqueFd log(::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  if (!log) throw TestError(errno_text("open " + log_path));
  spawn(argv, child_environment(extra_env), -1, log.get(), log.get());
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
  if (pid_ <= 0) throw TestError("wait_exit on a process never started");
  auto deadline = Clock::now() + timeout;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{pidfd_.get(), POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw TestError(errno_text("poll pidfd"));
    if (n == 1) break;
    if (left.count() <= 0) return std::nullopt;
  }
  int st = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &st, 0);
  } while (r < 0 && errno == EINTR);
  if (r != pid_) throw TestError(errno_text("waitpid"));
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

// ---- commands --------------------------------------------------------------------------------

std::string read_all(int fd, std::chrono::milliseconds timeout, const std::string& what) {
  std::string out;
  auto deadline = Clock::now() + timeout;
  char buf[4096];
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) throw TestError("timed out reading the output of " + what);
    pollfd p{fd, POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw TestError(errno_text("poll"));
    if (n == 0) continue;
    ssize_t r = ::read(fd, buf, sizeof(buf));
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r < 0) throw TestError(errno_text("read"));
    if (r == 0) return out;
    out.append(buf, static_cast<size_t>(r));
  }
}

RunResult run(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0)
    throw TestError(errno_text("pipe2"));
  shm::UniqueFd out_rd(out_pipe[0]), out_wr(out_pipe[1]), err_rd(err_pipe[0]), err_wr(err_pipe[1]);
  ChildProcess child;
  child.spawn(argv, child_environment(), -1, out_wr.get(), err_wr.get());
  out_wr.reset();
  err_wr.reset();
  RunResult r;
  auto deadline = Clock::now() + timeout;
  pollfd fds[2] = {{out_rd.get(), POLLIN, 0}, {err_rd.get(), POLLIN, 0}};
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
        fds[i].fd = -1;  // EOF; closed with its UniqueFd
        --open_fds;
      }
    }
  }
  std::optional<ExitStatus> st;
  if (!timed_out) st = child.wait_exit(std::chrono::milliseconds(ms_left(deadline)));
  if (!st) {
    timed_out = true;
    child.kill_and_reap();
  }
  r.exit_code = !timed_out && st->exited() ? st->code() : -1;
  if (timed_out) r.err += "\n(timed out after " + std::to_string(timeout.count()) + " ms)\n";
  return r;
}

}  // namespace kvpool::testsupport
