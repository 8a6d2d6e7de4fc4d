// The signal set-up kvpool's programs share (kvpoold and its supervisor, kvpool-events,
// kvpool-exporter, kvpool-replay, kvpoolctl top), written once.
#pragma once

#include <signal.h>

namespace kvpool::service {

// Runs `handler` (async-signal-safe) on SIGTERM and SIGINT, without SA_RESTART: a blocking
// call returns EINTR, so the program's loop sees the stop at once.
void on_stop_signals(void (*handler)(int));

// Blocks SIGTERM and SIGINT in the calling thread and in every thread it starts after this
// (call it before starting any), and returns the set, for sigwait or signalfd.
sigset_t block_stop_signals();

// A peer that hangs up is an error on the write (EPIPE), handled where it happens, never a
// signal that kills a service. Not for programs whose output may go to `head`.
void ignore_sigpipe();

}  // namespace kvpool::service
