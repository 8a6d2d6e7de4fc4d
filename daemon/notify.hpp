// systemd's sd_notify protocol (Type=notify, WatchdogSec=). No-ops when not under systemd
// (NOTIFY_SOCKET unset) or when built without libsystemd.
#pragma once

#include <string>

namespace kvpool::daemon {

void notify_ready();
void notify_stopping();
void notify_watchdog();
void notify_status(const std::string& status);

}  // namespace kvpool::daemon
