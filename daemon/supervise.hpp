// `kvpoold --supervise`: keeps a kvpoold running and keeps its cache across its restarts
// where systemd is not the supervisor (kvpoold run by hand, containers, tests). The
// supervisor process runs kvpoold as its child and is, for it, what systemd is: the child's
// $NOTIFY_SOCKET (READY=1, STATUS=, ... are passed on to the supervisor's own
// $NOTIFY_SOCKET, if any), and a descriptor store (FDSTORE=1 / FDSTOREREMOVE=1 with FDNAME=,
// one copy per file as systemd keeps them) whose descriptors the next child receives as
// $LISTEN_FDS / $LISTEN_FDNAMES. When the child dies (kill -9, a crash, or a --keep-cache
// stop that nobody asked of the supervisor) the next one starts at once and adopts the
// pools (daemon/adoption.hpp). SIGTERM or SIGINT to the supervisor stops the child and then
// the supervisor, with the child's exit code. The child dies with the supervisor
// (PR_SET_PDEATHSIG): nothing would keep its cache after that.
#pragma once

#include <string>
#include <vector>

namespace kvpool::daemon {

// `child_args`: kvpoold's own arguments without --supervise (argv[0] first). `hook`: a
// shell command run before every restart (not before the first start) with the stored
// descriptors passed the same way, waited for; "" for none. For diagnostics and tests
// (a test scribbles on a stored segment between two daemons). Returns the exit code.
int run_supervisor(const std::vector<std::string>& child_args, const std::string& hook);

}  // namespace kvpool::daemon
