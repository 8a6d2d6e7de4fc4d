#include "daemon/supervise.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "daemon/fd_store.hpp"
#include "kvpool/service/notify_socket.hpp"
#include "kvpool/service/signals.hpp"
#include "kvpool/shm/unique_fd.hpp"

namespace kvpool::daemon {
namespace {

using shm::UniqueFd;

// A child that dies before it said READY=1 failed to start; this many in a row and the
// supervisor gives up (a config error would otherwise restart forever).
constexpr int kMaxFailedStarts = 5;

struct Stored {
  std::string name;
  UniqueFd fd;
  dev_t dev;
  ino_t ino;
};

void say(const std::string& line) {
  std::fprintf(stderr, "kvpoold supervisor: %s\n", line.c_str());
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("signal ") + strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

// fork + exec of `argv` with the stored descriptors as $LISTEN_FDS (from fd 3) and
// $NOTIFY_SOCKET set to ours. Runs in the child from fork to exec: only async-signal-safe
// work there, apart from setenv, which is safe in a single-threaded supervisor.
pid_t spawn(const std::vector<std::string>& argv, const std::vector<Stored>& store,
            const std::string& notify_socket, bool exec_self) {
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) _exit(127);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  const int n = static_cast<int>(store.size());
  // Out of the way first (above 3 + n), then into place: dup2 clears close-on-exec.
  std::vector<int> high;
  for (const Stored& s : store) high.push_back(::fcntl(s.fd.get(), F_DUPFD_CLOEXEC, 3 + n));
  std::string names;
  for (int k = 0; k < n; ++k) {
    if (high[k] < 0 || ::dup2(high[k], 3 + k) < 0) _exit(127);
    names += (k ? ":" : "") + store[k].name;
  }
  if (n > 0) {
    setenv("LISTEN_PID", std::to_string(::getpid()).c_str(), 1);
    setenv("LISTEN_FDS", std::to_string(n).c_str(), 1);
    setenv("LISTEN_FDNAMES", names.c_str(), 1);
  } else {
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
  }
  setenv("NOTIFY_SOCKET", notify_socket.c_str(), 1);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execv(exec_self ? "/proc/self/exe" : args[0], args.data());
  _exit(127);
}

// What the child said on its notify socket: descriptors to keep or drop, or a line for
// our own supervisor. Sets *ready at READY=1.
void on_notify(NotifyMessage& m, pid_t child, std::vector<Stored>& store,
               const std::string& upstream, bool* ready) {
  if (m.sender != child) return;  // NotifyAccess=main, as the unit says
  if (notify_field(m.text, "READY") == "1") *ready = true;
  if (notify_field(m.text, "FDSTORE") == "1") {
    std::string name = notify_field(m.text, "FDNAME");
    if (name.empty()) name = "stored";
    for (UniqueFd& fd : m.fds) {
      struct stat st {};
      if (::fstat(fd.get(), &st) != 0) continue;
      bool known = false;  // one copy per file, under the name it was first stored with
      for (const Stored& s : store) known |= s.dev == st.st_dev && s.ino == st.st_ino;
      if (!known) store.push_back({name, std::move(fd), st.st_dev, st.st_ino});
    }
    return;
  }
  if (notify_field(m.text, "FDSTOREREMOVE") == "1") {
    const std::string name = notify_field(m.text, "FDNAME");
    std::erase_if(store, [&](const Stored& s) { return s.name == name; });
    return;
  }
  // READY=1, STATUS=, STOPPING=1, WATCHDOG=1, EXTEND_TIMEOUT_USEC=: ours to pass on.
  if (!upstream.empty()) (void)service::send_notify_datagram(upstream, m.text);
}

}  // namespace

int run_supervisor(const std::vector<std::string>& child_args, const std::string& hook) {
  const std::string upstream = service::notify_socket();
  // Our notify socket, in the abstract namespace: no file to clean up after a kill -9.
  const std::string notify = "@kvpool-supervise-" + std::to_string(::getpid());
  UniqueFd sock(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  sockaddr_un addr{};
  socklen_t addr_len = 0;
  const int one = 1;
  if (!sock || !service::notify_address(notify, &addr, &addr_len) ||
      ::bind(sock.get(), reinterpret_cast<sockaddr*>(&addr), addr_len) != 0 ||
      ::setsockopt(sock.get(), SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) != 0) {
    say(std::string("cannot make its notify socket: ") + std::strerror(errno));
    return 1;
  }
  const sigset_t sigs = service::block_stop_signals();
  UniqueFd sigfd(::signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK));

  std::vector<Stored> store;
  int failed_starts = 0;
  for (int start = 0;; ++start) {
    if (start > 0 && !hook.empty()) {
      const pid_t h = spawn({"/bin/sh", "-c", "exec " + hook}, store, notify, false);
      int hs = 0;
      while (h > 0 && ::waitpid(h, &hs, 0) < 0 && errno == EINTR) {
      }
      say("hook '" + hook + "': " + describe(hs));
    }
    const pid_t child = spawn(child_args, store, notify, true);
    if (child < 0) {
      say(std::string("fork: ") + std::strerror(errno));
      return 1;
    }
    UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, child, 0)));
    bool stopping = false, ready = false;
    int status = 0;
    while (true) {
      pollfd fds[3] = {{sock.get(), POLLIN, 0}, {sigfd.get(), POLLIN, 0}, {pidfd.get(), POLLIN, 0}};
      if (::poll(fds, 3, -1) < 0 && errno != EINTR) return 1;
      NotifyMessage m;
      while (receive_notify(sock.get(), &m)) on_notify(m, child, store, upstream, &ready);
      signalfd_siginfo si{};
      while (::read(sigfd.get(), &si, sizeof(si)) == static_cast<ssize_t>(sizeof(si))) {
        stopping = true;
        ::kill(child, SIGTERM);
      }
      if (fds[2].revents & POLLIN) {
        // Its last notify datagrams (FDSTOREREMOVE of a stop) were sent before it exited.
        while (receive_notify(sock.get(), &m)) on_notify(m, child, store, upstream, &ready);
        while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
        }
        break;
      }
    }
    if (stopping) return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    failed_starts = ready ? 0 : failed_starts + 1;
    if (failed_starts >= kMaxFailedStarts) {
      say("kvpoold failed to start " + std::to_string(failed_starts) +
          " times in a row (it died before READY=1); giving up");
      return 1;
    }
    say("kvpoold pid " + std::to_string(child) + " ended (" + describe(status) +
        "); starting the next one with " + std::to_string(store.size()) + " stored descriptor(s)");
  }
}

}  // namespace kvpool::daemon
