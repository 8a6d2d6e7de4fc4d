// What the restart tests share: a kvpoold under `kvpoold --supervise` (which keeps its
// segments across a kill -9 of its child, the descriptor-store protocol systemd speaks),
// waiting for the next daemon, and killing the current one.
#pragma once

#include <signal.h>

#include <optional>
#include <string>
#include <vector>

#include "client_helpers.hpp"
#include "harness.hpp"

namespace kvpool::mptest {

inline void start_supervised(DaemonProcess& d, std::vector<std::string> extra = {}) {
  std::vector<std::string> args{"--supervise"};
  args.insert(args.end(), extra.begin(), extra.end());
  d.spawn(args);
  if (!d.wait_ready(20s))
    throw HarnessError("kvpoold --supervise did not say READY=1; its stderr:\n" + d.stderr_text());
}

// The daemon serving d's instance once one of another epoch than `old` is ready.
inline DaemonView next_daemon(const DaemonProcess& d, uint64_t old) {
  std::optional<DaemonView> v;
  wait_until(
      [&] {
        try {
          auto now = d.view();
          if (now.header().restart.epoch == old) return false;
          v.emplace(std::move(now));
          return true;
        } catch (const HarnessError&) {
          return false;  // between two daemons
        }
      },
      20s, "the next kvpoold", [&] { return d.stderr_text(); });
  return std::move(*v);
}

// kill -9 of the supervised kvpoold itself (not the supervisor).
inline uint64_t kill_daemon(const DaemonView& v, int sig = SIGKILL) {
  const auto pid = static_cast<pid_t>(v.header().daemon_pid);
  EXPECT_EQ(::kill(pid, sig), 0);
  return v.header().restart.epoch;
}

}  // namespace kvpool::mptest
