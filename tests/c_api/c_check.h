/* The C tests' assertions: each failed one prints where and what, and counts in
 * `failures` (the test's exit status). Plain C11. */
#ifndef KVPOOL_TESTS_C_CHECK_H
#define KVPOOL_TESTS_C_CHECK_H

#include <stdio.h>

#include "kvpool/kvpool.h"

static int failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

/* A call that must succeed; on failure prints the code and the thread's message. */
#define OK(call)                                                          \
  do {                                                                    \
    kvpool_error_code ok_rc_ = (call);                                    \
    if (ok_rc_ != KVPOOL_OK) {                                            \
      fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call, \
              kvpool_error_name(ok_rc_), kvpool_last_error_message());    \
      ++failures;                                                         \
    }                                                                     \
  } while (0)

#endif
