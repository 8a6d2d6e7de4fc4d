#include "daemon/liveness.hpp"

#include <dirent.h>
#include <poll.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

namespace kvpool::daemon {

bool process_exited(int pidfd) {
  pollfd p{pidfd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

namespace {

// The innermost pid-namespace id of a task ("NSpid:\t812\t5" -> 5; one field when the task
// lives in our namespace). 0 when the file cannot be read (the task is gone).
uint32_t innermost_tid(const std::string& status_path) {
  std::ifstream in(status_path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("NSpid:", 0) != 0) continue;
    const size_t last = line.find_last_of(" \t");
    if (last == std::string::npos) return 0;
    return static_cast<uint32_t>(std::strtoul(line.c_str() + last + 1, nullptr, 10));
  }
  return 0;
}

}  // namespace

bool is_thread_of(pid_t pid, uint32_t tid) {
  if (tid == 0) return false;
  const std::string task_dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = ::opendir(task_dir.c_str());
  if (d == nullptr) return false;
  bool found = false;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    if (innermost_tid(task_dir + "/" + e->d_name + "/status") == tid) {
      found = true;
      break;
    }
  }
  ::closedir(d);
  return found;
}

Judgement judge(int pidfd, pid_t pid, shm::LeaseWord lease) {
  const std::string word = lease.owner_died ? "owner-died"
                           : lease.tid == 0 ? "free"
                                            : "tid " + std::to_string(lease.tid);
  if (process_exited(pidfd)) {
    // A clean detach gives the lease back before exiting; anything else is a crash.
    if (lease.tid == 0 && !lease.owner_died) return {Verdict::kDetached, "process exited"};
    return {Verdict::kDied, "process exited (lease " + word + ")"};
  }
  if (lease.owner_died) return {Verdict::kDied, "its lease thread died"};
  if (lease.tid == 0) return {Verdict::kDetached, "it gave its lease back"};
  // The word names a thread: believe it only if it is one of the client's own, and only if
  // the pidfd still says the same process runs after the look at /proc (no pid reuse).
  const bool ours = is_thread_of(pid, lease.tid);
  if (process_exited(pidfd)) return {Verdict::kDied, "process exited (lease " + word + ")"};
  if (ours) return {Verdict::kAlive, "lease held by " + word};
  // A lease word no thread of the client owns: broken or lying. Either way the client has
  // hung up and proves nothing: reclaim it, and count it with the crashes.
  return {Verdict::kDied,
          "its lease names " + word + ", not a thread of pid " + std::to_string(pid)};
}

}  // namespace kvpool::daemon
