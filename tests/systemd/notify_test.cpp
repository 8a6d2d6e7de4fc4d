// kvpoold speaks systemd's notify protocol the way kvpoold.service (Type=notify,
// WatchdogSec=) needs: the real daemon runs with NOTIFY_SOCKET pointing at a datagram
// socket this test reads.
//
//  - READY=1 comes only once the daemon serves: when it arrives, the socket accepts and the
//    control segment is valid and marked ready; a daemon that fails to start never sends it.
//  - STATUS= lines report clients and free blocks, and follow an attach.
//  - WATCHDOG=1 arrives again and again, at least every half WATCHDOG_USEC, also while a
//    client keeps the engine busy; without WATCHDOG_USEC it still arrives (once a second).
//  - SIGTERM brings STOPPING=1 and a clean exit.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "kvpool/client.hpp"
#include "kvpool/core/paths.hpp"
#include "kvpool/shm/control_segment.hpp"
#include "kvpool/shm/segment.hpp"
#include "support/daemon_process.hpp"
#include "support/process.hpp"

namespace kvpool {
namespace {

using namespace testsupport;

// What a reader of the control segment sees right now: "" when it is valid and ready,
// else what is wrong. The daemon's own memfd (not a new observer's over its socket), checked
// by the one reader every client uses (shm::ControlReader: magic, layout, ready, sizes).
std::string control_segment_problem(pid_t daemon, const std::string& instance) {
  std::string name = control_segment_name(instance);
  int fd = open_memfd_of(daemon, name, O_RDONLY);
  if (fd < 0) return "no memfd " + name + " in /proc/" + std::to_string(daemon) + "/fd";
  auto segment = shm::Segment::map_fd(shm::UniqueFd(fd), /*writable=*/false);
  if (!segment) return "cannot map it: " + segment.status().to_string();
  auto reader = shm::ControlReader::open(std::move(segment.value()));
  return reader ? "" : reader.status().to_string();
}

// The times of the next `count` WATCHDOG=1 pings (other notifications are taken too).
std::vector<Clock::time_point> collect_pings(DaemonProcess& d, size_t count,
                                             std::chrono::milliseconds timeout) {
  std::vector<Clock::time_point> pings;
  auto deadline = Clock::now() + timeout;
  while (pings.size() < count) {
    auto m = d.next_notification(deadline);
    if (!m)
      throw TestError("only " + std::to_string(pings.size()) + " of " + std::to_string(count) +
                      " WATCHDOG=1 pings within " + std::to_string(timeout.count()) +
                      " ms; log:\n" + d.stderr_text());
    if (m->text == "WATCHDOG=1") pings.push_back(m->at);
  }
  return pings;
}

double max_gap_ms(Clock::time_point start, const std::vector<Clock::time_point>& pings) {
  double worst = 0;
  Clock::time_point prev = start;
  for (auto t : pings) {
    worst = std::max(worst, std::chrono::duration<double, std::milli>(t - prev).count());
    prev = t;
  }
  return worst;
}

// A host pool of 1 GiB or more is pre-faulted with progress: STATUS= lines counting up to
// 100% and EXTEND_TIMEOUT_USEC= (so TimeoutStartSec= does not kill a daemon that makes
// progress), all before READY=1.
TEST(SystemdNotify, LargePoolsReportPrefaultProgressBeforeReady) {
  // 512 blocks of 2 MiB: 1 GiB, four pre-fault steps.
  DaemonProcess d(nlohmann::json::parse(R"({"pools": [{"name": "big", "num_blocks": 512, "layout":
      {"num_layers": 32, "outer_dim": 2, "page_size": 16, "inner_dim": 1024,
       "dtype_bytes": 2, "alignment": 256}}]})"));
  d.spawn();
  std::vector<std::string> before_ready;
  auto deadline = Clock::now() + 120s;
  while (true) {
    auto m = d.next_notification(deadline);
    ASSERT_TRUE(m) << "no READY=1 within 120 s; log:\n" << d.stderr_text();
    if (m->text == "READY=1") break;
    before_ready.push_back(m->text);
  }
  std::vector<std::string> progress;
  bool extended = false;
  for (const auto& m : before_ready) {
    if (m.rfind("STATUS=starting: pool 'big' pre-faulting ", 0) == 0) progress.push_back(m);
    extended |= m.rfind("EXTEND_TIMEOUT_USEC=", 0) == 0;
  }
  ASSERT_GE(progress.size(), 2u) << "messages before READY=1: "
                                 << ::testing::PrintToString(before_ready);
  EXPECT_NE(progress.front().find("0.0 GiB of 1.0 GiB (0%)"), std::string::npos)
      << progress.front();
  EXPECT_NE(progress.back().find("1.0 GiB of 1.0 GiB (100%)"), std::string::npos)
      << progress.back();
  EXPECT_TRUE(extended) << ::testing::PrintToString(before_ready);
  EXPECT_NE(d.stderr_text().find("pool 'big': 1.0 GiB of host memory ready in "), std::string::npos)
      << d.stderr_text();
  // A clean stop removes the 1 GiB object (a SIGKILL would leave it in /dev/shm).
  d.kill(SIGTERM);
  auto st = d.wait_exit(30s);
  ASSERT_TRUE(st) << "kvpoold did not stop on SIGTERM";
  EXPECT_TRUE(st->exited() && st->code() == 0) << d.stderr_text();
}

TEST(SystemdNotify, ReadyStatusWatchdogStopping) {
  DaemonProcess d(nlohmann::json::object());  // the built-in config: pool g2, 1024 blocks
  // WatchdogSec=4s as systemd passes it: to this very process. (kvpoold pings every 1 s;
  // the 2 s bound leaves a second of slack for a loaded test machine.)
  d.set_environment({"WATCHDOG_USEC=4000000", "WATCHDOG_PID=$PID"});
  d.spawn();

  // Everything before READY=1, then READY=1 itself: at that moment the daemon must serve.
  std::vector<std::string> before_ready;
  auto deadline = Clock::now() + 20s;
  Clock::time_point ready_at;
  while (true) {
    auto m = d.next_notification(deadline);
    ASSERT_TRUE(m) << "no READY=1 within 20 s; log:\n" << d.stderr_text();
    if (m->text == "READY=1") {
      ready_at = m->at;
      EXPECT_TRUE(socket_connectable(d.socket_path()))
          << "READY=1 sent before " << d.socket_path() << " accepts";
      EXPECT_EQ(control_segment_problem(d.pid(), d.instance()), "")
          << "READY=1 sent before the control segment was valid";
      break;
    }
    before_ready.push_back(m->text);
  }
  for (const auto& m : before_ready) EXPECT_EQ(m.find("READY"), std::string::npos) << m;

  // The first ping follows READY=1 within half WATCHDOG_USEC.
  {
    auto first = collect_pings(d, 1, 5s);
    EXPECT_LE(max_gap_ms(ready_at, first), 2000.0) << "first WATCHDOG=1 too late";
  }

  // The first STATUS= line: clients and free blocks of the default pool.
  std::string status = d.await("STATUS=", 5s);
  EXPECT_NE(status.find("clients 0"), std::string::npos) << status;
  EXPECT_NE(status.find("free 1024"), std::string::npos) << status;

  // Pings at least every half WATCHDOG_USEC (2 s) while a client keeps the engine busy.
  ConnectOptions opts;
  opts.runtime_dir = d.runtime_dir();
  auto client = Client::connect(d.instance(), opts);
  ASSERT_TRUE(client) << client.status().to_string();
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> ops{0};
  std::thread load([&] {
    auto pool = client->pool("g2");
    while (!stop.load(std::memory_order_relaxed) && pool) {
      auto blocks = pool->allocate_blocks(8);  // returned when `blocks` goes
      if (!blocks) break;
      ops.fetch_add(1, std::memory_order_relaxed);
    }
  });
  std::vector<Clock::time_point> pings;
  const Clock::time_point collect_from = Clock::now();
  try {
    pings = collect_pings(d, 4, 15s);
  } catch (...) {
    stop = true;
    load.join();
    throw;
  }
  stop = true;
  load.join();
  EXPECT_GT(ops.load(), 0u) << "the load thread never got an allocation through";
  EXPECT_LE(max_gap_ms(collect_from, pings), 2000.0)
      << "a WATCHDOG=1 gap exceeded half of WATCHDOG_USEC=4s";

  // An attached client shows in the status line.
  status = d.await("STATUS=clients 1", 5s);
  EXPECT_NE(status.find("free"), std::string::npos) << status;

  // SIGTERM: STOPPING=1, then exit 0 (the client sees DaemonGone, it does not block it).
  d.kill(SIGTERM);
  d.await("STOPPING=1", 10s);
  auto st = d.wait_exit(10s);
  ASSERT_TRUE(st) << "kvpoold did not exit after STOPPING=1; log:\n" << d.stderr_text();
  EXPECT_TRUE(st->exited() && st->code() == 0) << st->describe() << "\n" << d.stderr_text();
}

TEST(SystemdNotify, WatchdogPingsWithoutWatchdogUsec) {
  DaemonProcess d(nlohmann::json::object());
  d.start();
  d.await("READY=1", 1s);  // what came before it
  auto start = Clock::now();
  auto pings = collect_pings(d, 3, 8s);
  // Once a second when systemd set no interval (a little slack for a loaded machine).
  EXPECT_LE(max_gap_ms(start, pings), 2000.0);
  d.kill(SIGTERM);
  auto st = d.wait_exit(10s);
  ASSERT_TRUE(st) << "kvpoold did not exit within 10 s of SIGTERM; log:\n" << d.stderr_text();
  EXPECT_TRUE(st->exited() && st->code() == 0) << d.stderr_text();
  // STOPPING=1 may still be queued on the socket after the exit.
  d.await("STOPPING=1", 2s);
}

TEST(SystemdNotify, FailedStartNeverSendsReady) {
  DaemonProcess first(nlohmann::json::object());
  first.start();

  // A second daemon for the same instance must refuse, say why in STATUS=, and never claim
  // READY=1.
  DaemonProcess second({{"instance", first.instance()}, {"runtime_dir", first.runtime_dir()}});
  second.spawn();
  auto st = second.wait_exit(20s);
  ASSERT_TRUE(st) << "the second kvpoold did not give up; log:\n" << second.stderr_text();
  EXPECT_TRUE(st->exited() && st->code() != 0) << second.stderr_text();
  std::vector<std::string> got;
  while (auto m = second.next_notification(Clock::now() + 200ms)) got.push_back(m->text);
  bool failed_status = false;
  for (const auto& m : got) {
    EXPECT_EQ(m.find("READY=1"), std::string::npos) << "a daemon that failed sent " << m;
    failed_status |= m.rfind("STATUS=failed", 0) == 0 && m.find("already") != std::string::npos;
  }
  EXPECT_TRUE(failed_status) << "no STATUS=failed naming the running daemon; log:\n"
                             << second.stderr_text();
  // The first one is untouched by the attempt.
  EXPECT_TRUE(socket_connectable(first.socket_path()));
  EXPECT_EQ(control_segment_problem(first.pid(), first.instance()), "");
  first.kill(SIGTERM);
  auto fst = first.wait_exit(10s);
  ASSERT_TRUE(fst) << "kvpoold did not exit within 10 s of SIGTERM";
  EXPECT_TRUE(fst->exited() && fst->code() == 0) << first.stderr_text();
}

}  // namespace
}  // namespace kvpool
