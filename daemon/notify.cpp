#include "daemon/notify.hpp"

#ifdef KVPOOL_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

namespace kvpool::daemon {

#ifdef KVPOOL_HAVE_SYSTEMD
void notify_ready() { sd_notify(0, "READY=1"); }
void notify_stopping() { sd_notify(0, "STOPPING=1"); }
void notify_watchdog() { sd_notify(0, "WATCHDOG=1"); }
void notify_status(const std::string& status) { sd_notify(0, ("STATUS=" + status).c_str()); }
#else
void notify_ready() {}
void notify_stopping() {}
void notify_watchdog() {}
void notify_status(const std::string&) {}
#endif

}  // namespace kvpool::daemon
