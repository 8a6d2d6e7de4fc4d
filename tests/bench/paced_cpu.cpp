#include "paced_cpu.hpp"

#include <dirent.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace kvpool::bench {

namespace {

cpu_set_t g_allowed;
bool g_allowed_known = false;

cpu_set_t mask_for(int cpu) {
  if (!g_allowed_known) die("remember_allowed_cpus() first");
  if (cpu < 0) return g_allowed;
  cpu_set_t m;
  CPU_ZERO(&m);
  CPU_SET(cpu, &m);
  return m;
}

}  // namespace

void remember_allowed_cpus() {
  if (sched_getaffinity(0, sizeof(g_allowed), &g_allowed) != 0)
    die(std::string("sched_getaffinity: ") + std::strerror(errno));
  g_allowed_known = true;
}

std::vector<int> allowed_cpus() {
  const cpu_set_t m = mask_for(-1);
  std::vector<int> out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &m)) out.push_back(c);
  return out;
}

void pin_process(pid_t pid, int cpu) {
  const cpu_set_t m = mask_for(cpu);
  for (pid_t tid : list_tasks(pid))
    if (sched_setaffinity(tid, sizeof(m), &m) != 0 && errno != ESRCH)  // ESRCH: it just ended
      die("sched_setaffinity on /proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) +
          ": " + std::strerror(errno));
}

void pin_this_thread(int cpu) {
  const cpu_set_t m = mask_for(cpu);
  if (sched_setaffinity(0, sizeof(m), &m) != 0)
    die(std::string("sched_setaffinity on the calling thread: ") + std::strerror(errno));
}

std::vector<pid_t> list_tasks(pid_t pid) {
  std::vector<pid_t> out;
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') out.push_back(static_cast<pid_t>(std::atoi(e->d_name)));
  closedir(d);
  return out;
}

uint64_t cpu_ticks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) die("cannot read /proc/" + std::to_string(pid) + "/stat");
  // The command name (field 2) may hold spaces and parentheses: fields restart after the
  // last ')'. Field 3 is the first after it, so utime (14) and stime (15) are the 12th, 13th.
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  std::string field;
  uint64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return utime + stime;
}

IdleCpu measure_idle_cpu(const KvpooldServer& server, double seconds) {
  int ready[2], hold[2];
  if (pipe(ready) != 0 || pipe(hold) != 0) die("pipe");
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) die("fork idle client");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(0);
    close(ready[0]);
    close(hold[1]);
    {
      DaemonBackend client(server);
      const char one = 1;
      if (write(ready[1], &one, 1) != 1) _exit(1);
      char c;
      while (read(hold[0], &c, 1) > 0) {  // quiet until the coordinator closes the pipe
      }
    }
    _exit(0);
  }
  close(ready[1]);
  close(hold[0]);
  char c;
  if (read(ready[0], &c, 1) != 1) die("the idle client could not attach (see above)");
  // Not synchronisation: the attach itself is work; the window starts once it is over.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const uint64_t d0 = cpu_ticks(server.pid()), c0 = cpu_ticks(pid);
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const uint64_t d1 = cpu_ticks(server.pid()), c1 = cpu_ticks(pid);
  const double elapsed = us_since(t0) / 1e6;
  close(hold[1]);
  close(ready[0]);
  waitpid(pid, nullptr, 0);
  const double tick = 1.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
  return {static_cast<double>(d1 - d0) * tick / elapsed * 100,
          static_cast<double>(c1 - c0) * tick / elapsed * 100, tick * 1000};
}

}  // namespace kvpool::bench
