#include "kvpool/service/notify.hpp"

#include <unistd.h>

#include <cstdlib>

#ifdef KVPOOL_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "kvpool/core/clock.hpp"
#include "kvpool/service/notify_socket.hpp"

namespace kvpool::service {
namespace {

// One notification: libsystemd's sd_notify when built with it, else the protocol itself.
void send_notify(const std::string& message) {
#ifdef KVPOOL_HAVE_SYSTEMD
  sd_notify(0, message.c_str());
#else
  (void)send_notify_datagram(notify_socket(), message);
#endif
}

// WatchdogSec= of the unit, as systemd passes it: $WATCHDOG_USEC, for $WATCHDOG_PID (when
// set) being us. 0 when there is no watchdog.
uint64_t watchdog_usec() {
  const char* usec = std::getenv("WATCHDOG_USEC");
  if (usec == nullptr) return 0;
  if (const char* pid = std::getenv("WATCHDOG_PID");
      pid && std::strtoll(pid, nullptr, 10) != getpid())
    return 0;
  return std::strtoull(usec, nullptr, 10);
}

}  // namespace

void notify_ready() { send_notify("READY=1"); }
void notify_stopping() { send_notify("STOPPING=1"); }
void notify_status(const std::string& status) { send_notify("STATUS=" + status); }

void notify_extend_timeout(uint64_t usec) {
  send_notify("EXTEND_TIMEOUT_USEC=" + std::to_string(usec));
}

// kvpoold's engine calls this every ~50 ms while its loop runs. systemd wants a ping at
// least every half WatchdogSec=; one every quarter leaves room for a slow loop. Without a
// watchdog the ping goes out once a second (harmless, and shows the loop is alive).
void notify_watchdog() {
  static const uint64_t period_ns = [] {
    uint64_t usec = watchdog_usec();
    return usec != 0 ? usec * 1000 / 4 : 1'000'000'000ull;
  }();
  static uint64_t last_ns = 0;
  uint64_t now = now_ns(CLOCK_MONOTONIC);
  if (last_ns != 0 && now - last_ns < period_ns) return;
  last_ns = now;
  send_notify("WATCHDOG=1");
}

}  // namespace kvpool::service
