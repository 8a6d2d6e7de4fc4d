/* A real kvpoold for the C ABI tests and bench, in plain C: a JSON config with a unique
 * instance in a fresh runtime dir, NOTIFY_SOCKET to learn READY=1, every wait bounded by a
 * deadline on a condition (never a sleep as synchronisation). */
#ifndef KVPOOL_TEST_DAEMON_H
#define KVPOOL_TEST_DAEMON_H

#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct test_daemon {
  pid_t pid;
  char dir[256]; /* runtime dir (and where the config lives) */
  char instance[64];
} test_daemon;

/* Starts `kvpoold_path` with `pools_json` (the config's "pools" array). Returns 0, or -1
 * with a message on stderr. */
int test_daemon_start(test_daemon* d, const char* kvpoold_path, const char* pools_json);
/* SIGKILLs the daemon and reaps it (bounded). */
void test_daemon_kill(test_daemon* d);
/* SIGTERM, reap, remove the runtime dir and any segment a killed daemon left. */
void test_daemon_stop(test_daemon* d);

#ifdef __cplusplus
}
#endif

#endif
