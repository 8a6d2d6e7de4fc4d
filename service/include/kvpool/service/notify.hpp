// systemd's sd_notify messages (Type=notify, WatchdogSec=, STATUS=). No-ops when not under a
// supervisor ($NOTIFY_SOCKET unset). Uses libsystemd when built with it, else speaks the
// protocol itself (notify_socket.hpp). Called from one thread at a time.
#pragma once

#include <cstdint>
#include <string>

namespace kvpool::service {

void notify_ready();
void notify_stopping();
void notify_watchdog();
void notify_status(const std::string& status);
// EXTEND_TIMEOUT_USEC=: "still starting, give me `usec` more from now" (a large pool being
// pre-faulted must not run into TimeoutStartSec= while it makes progress).
void notify_extend_timeout(uint64_t usec);

}  // namespace kvpool::service
