/* The C ABI (kvpool.h) against a real kvpoold, compiled as C11 (-std=c11 -Wall -Werror
 * -pedantic): every function of kvpool.h and its error paths.
 *
 *   kvpool_c_api_test <path to kvpoold>
 */
#define _GNU_SOURCE
#include <kvpool/kvpool.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "c_check.h"
#include "test_daemon.h"

static test_daemon daemon_;

/* A call that must fail with `code`, leaving a message that mentions `needle`. */
#define FAILS(code, needle, call)                                                              \
  do {                                                                                         \
    kvpool_error_code f_rc_ = (call);                                                          \
    if (f_rc_ != (code)) {                                                                     \
      fprintf(stderr, "%s:%d: %s -> %s (%s), expected %s\n", __FILE__, __LINE__, #call,        \
              kvpool_error_name(f_rc_), kvpool_last_error_message(), kvpool_error_name(code)); \
      ++failures;                                                                              \
    } else {                                                                                   \
      CHECK(kvpool_last_error_code() == (code));                                               \
      if (!strstr(kvpool_last_error_message(), (needle))) {                                    \
        fprintf(stderr, "%s:%d: message '%s' does not mention '%s'\n", __FILE__, __LINE__,     \
                kvpool_last_error_message(), (needle));                                        \
        ++failures;                                                                            \
      }                                                                                        \
    }                                                                                          \
  } while (0)

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Waits (bounded) until the pool's counts say `free` free and `inactive` inactive blocks:
 * releases are batched and applied by the daemon a moment later. */
static int wait_counts(kvpool_client* c, kvpool_pool* p, uint32_t free_blocks, uint32_t inactive) {
  kvpool_pool_counts k;
  double deadline = now_s() + 10.0;
  kvpool_client_flush(c);
  for (;;) {
    memset(&k, 0, sizeof(k));
    k.struct_size = sizeof(k);
    if (kvpool_pool_counts_get(p, &k) == KVPOOL_OK && k.free_blocks == free_blocks &&
        k.inactive == inactive)
      return 1;
    if (now_s() > deadline) {
      fprintf(stderr,
              "timed out waiting for free %u inactive %u; seen free %u inactive %u "
              "active %u mutable %u\n",
              free_blocks, inactive, k.free_blocks, k.inactive, k.active, k.mutable_blocks);
      return 0;
    }
    kvpool_client_ping(c); /* a round trip: the daemon has applied what came before */
  }
}

/* ---- async completions: a mutex and condition variable per wait --------------------- */

typedef struct completion {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done;
  kvpool_error_code code;
  char message[256];
  kvpool_mutable_batch* mutable_result;
  kvpool_immutable_batch* immutable_result;
  pthread_t thread;
} completion;

static void completion_init(completion* c) {
  memset(c, 0, sizeof(*c));
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
}

static void finish(completion* c, kvpool_error_code code, const char* message) {
  pthread_mutex_lock(&c->mu);
  c->code = code;
  snprintf(c->message, sizeof(c->message), "%s", message ? message : "(null)");
  c->thread = pthread_self();
  c->done = 1;
  pthread_cond_signal(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

static void on_mutable(void* user, kvpool_error_code code, const char* message,
                       kvpool_mutable_batch* result) {
  completion* c = (completion*)user;
  c->mutable_result = result;
  finish(c, code, message);
}

static void on_immutable(void* user, kvpool_error_code code, const char* message,
                         kvpool_immutable_batch* result) {
  completion* c = (completion*)user;
  c->immutable_result = result;
  finish(c, code, message);
}

/* A callback that releases the last handles of its client: the completion thread must not
 * join itself (it finishes on its own). */
typedef struct last_handles {
  completion done;
  kvpool_client* client;
  kvpool_pool* pool;
} last_handles;

static void on_matched_release_all(void* user, kvpool_error_code code, const char* message,
                                   kvpool_immutable_batch* result) {
  last_handles* h = (last_handles*)user;
  h->done.immutable_result = result;
  kvpool_immutable_batch_release(result);
  kvpool_pool_release(h->pool);
  kvpool_client_release(h->client);
  finish(&h->done, code, message);
}

static int completion_wait(completion* c) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 10;
  pthread_mutex_lock(&c->mu);
  while (!c->done)
    if (pthread_cond_timedwait(&c->cv, &c->mu, &deadline) != 0) break;
  int done = c->done;
  pthread_mutex_unlock(&c->mu);
  if (!done) fprintf(stderr, "async completion did not come within 10 s\n");
  return done;
}

/* ---- the tests ----------------------------------------------------------------------- */

static void test_version_and_errors(void) {
  CHECK(kvpool_abi_version() == KVPOOL_ABI_VERSION);
  CHECK((kvpool_abi_version() >> 16) == KVPOOL_ABI_VERSION_MAJOR);
  CHECK(strcmp(kvpool_error_name(KVPOOL_OK), "Ok") == 0);
  CHECK(strcmp(kvpool_error_name(KVPOOL_ERR_NOT_ENOUGH_BLOCKS), "NotEnoughBlocks") == 0);
  CHECK(strcmp(kvpool_error_name(KVPOOL_ERR_DAEMON_GONE), "DaemonGone") == 0);
  CHECK(strcmp(kvpool_error_name(KVPOOL_ERR_INTERNAL), "Internal") == 0);
  CHECK(strcmp(kvpool_error_name(KVPOOL_ERR_QUOTA_EXCEEDED), "QuotaExceeded") == 0);
  CHECK(strcmp(kvpool_error_name(KVPOOL_ERR_DAEMON_UNRESPONSIVE), "DaemonUnresponsive") == 0);
  CHECK(strcmp(kvpool_error_name(KVPOOL_ERR_CHECKSUM_MISMATCH), "ChecksumMismatch") == 0);
  CHECK(strcmp(kvpool_error_name((kvpool_error_code)999), "Unknown") == 0);
  CHECK(strcmp(kvpool_error_name((kvpool_error_code)-1), "Unknown") == 0);
}

/* Hashing needs no daemon: Dynamo's reference vector (salt 1337, tokens 1..4, page 4). */
static void test_hashing(void) {
  const uint32_t tokens[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  const uint64_t expected = 14643705804678351452ull;
  uint64_t bh = kvpool_block_hash(tokens, 4, 1337);
  CHECK(kvpool_sequence_hash(0, 0, bh, 1337) == expected);
  CHECK(bh == expected); /* a first block's sequence hash is its block hash */
  uint64_t b[2], s[2];
  size_t n = 0;
  OK(kvpool_hash_tokens(tokens, 8, 4, 1337, b, s, 2, &n));
  CHECK(n == 2 && s[0] == expected && b[0] == bh);
  CHECK(s[1] == kvpool_sequence_hash(1, s[0], kvpool_block_hash(tokens + 4, 4, 1337), 1337));
  CHECK(s[1] != s[0]);
  /* A partial tail is not hashed; capacity bounds the writes, not the count. */
  uint64_t b1[1] = {0}, s1[1] = {0};
  OK(kvpool_hash_tokens(tokens, 7, 4, 1337, b1, s1, 1, &n));
  CHECK(n == 1 && s1[0] == expected);
  OK(kvpool_hash_tokens(tokens, 8, 4, 1337, NULL, NULL, 0, &n));
  CHECK(n == 2);
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "page_size", kvpool_hash_tokens(tokens, 8, 0, 0, b, s, 2, &n));
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL", kvpool_hash_tokens(NULL, 8, 4, 0, b, s, 2, &n));
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL", kvpool_hash_tokens(tokens, 8, 4, 0, NULL, s, 2, &n));
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL", kvpool_hash_tokens(tokens, 8, 4, 0, b, s, 2, NULL));
  CHECK(kvpool_block_hash(NULL, 0, 7) == kvpool_block_hash(tokens, 0, 7));
}

static kvpool_client* connect_ok(void) {
  kvpool_connect_options o;
  kvpool_connect_options_init(&o);
  CHECK(o.struct_size == sizeof(o) && o.connect_timeout_ms == 5000 && o.poll_us == 50);
  CHECK(o.reattach == 1 && o.reattach_timeout_ms == 50);
  /* test_daemon_gone: calls wait this long for a kvpoold to come back, then fail. */
  o.reattach_timeout_ms = 300;
  o.runtime_dir = daemon_.dir;
  o.poll_us = 20;
  kvpool_client* c = NULL;
  OK(kvpool_connect(daemon_.instance, &o, &c));
  return c;
}

static void test_connect_errors(void) {
  kvpool_connect_options o;
  kvpool_connect_options_init(&o);
  o.runtime_dir = daemon_.dir;
  kvpool_client* c = (kvpool_client*)&o; /* must stay untouched on failure */
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "out is NULL", kvpool_connect(daemon_.instance, &o, NULL));
  FAILS(KVPOOL_ERR_NOT_FOUND, "nosuch", kvpool_connect("nosuch", &o, &c));
  CHECK(c == (kvpool_client*)&o);
  o.struct_size = 4;
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "struct_size", kvpool_connect(daemon_.instance, &o, &c));
  CHECK(c == (kvpool_client*)&o);
  kvpool_connect_options_init(NULL); /* harmless */
  /* NULL-handle calls fail cleanly or return neutral values. */
  CHECK(kvpool_client_pool_count(NULL) == 0);
  CHECK(kvpool_client_pool_name(NULL, 0) == NULL);
  CHECK(kvpool_client_daemon_alive(NULL) == 0);
  CHECK(kvpool_client_slot(NULL) == 0);
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL", kvpool_client_ping(NULL));
  kvpool_client_flush(NULL);
  kvpool_client_release(NULL);
  kvpool_pool_release(NULL);
  kvpool_mutable_batch_release(NULL);
  kvpool_mutable_block_release(NULL);
  kvpool_immutable_batch_release(NULL);
  kvpool_immutable_block_release(NULL);
  CHECK(kvpool_pool_name(NULL) == NULL && kvpool_pool_page_size(NULL) == 0 &&
        kvpool_pool_index(NULL) == 0 && kvpool_pool_storage(NULL) == KVPOOL_STORAGE_HOST);
}

/* Hashing comes from the pool (issue 27): for each pool, whatever its scheme, the hashes of
 * kvpool_pool_hash_tokens are the ones commit gives blocks initialised with the same salt,
 * so a prompt registered block by block matches whole. On the dynamo-router pool the
 * dynamo-0.2 free function disagrees from the second block on (what broke the examples). */
static void test_pool_hashing(kvpool_client* c, const char* name, kvpool_hash_scheme scheme) {
  kvpool_pool* p = NULL;
  OK(kvpool_client_pool(c, name, &p));
  if (!p) return;
  CHECK(kvpool_pool_hash_scheme(p) == scheme);
  const uint32_t page = kvpool_pool_page_size(p);
  uint32_t tokens[3 * 8];
  for (uint32_t i = 0; i < 3 * page; ++i) tokens[i] = 7000 + i + (uint32_t)scheme * 100;
  const uint64_t salt = 99;
  uint64_t bh[3], sh[3], bh2[3], sh2[3];
  size_t n = 0, n2 = 0;
  OK(kvpool_pool_hash_tokens(p, tokens, 3 * page, salt, bh, sh, 3, &n));
  CHECK(n == 3);
  OK(kvpool_hash_tokens_scheme(scheme, tokens, 3 * page, page, salt, bh2, sh2, 3, &n2));
  CHECK(n2 == 3 && memcmp(sh, sh2, sizeof(sh)) == 0 && memcmp(bh, bh2, sizeof(bh)) == 0);
  OK(kvpool_hash_tokens(tokens, 3 * page, page, salt, bh2, sh2, 3, &n2));
  CHECK(sh2[0] == sh[0]); /* the first block is its block hash in both schemes */
  CHECK((sh2[1] == sh[1]) == (scheme == KVPOOL_HASH_DYNAMO_0_2));
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL",
        kvpool_pool_hash_tokens(NULL, tokens, 3 * page, salt, bh, sh, 3, &n));
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "unknown hash scheme",
        kvpool_hash_tokens_scheme((kvpool_hash_scheme)7, tokens, 4, 4, 0, bh, sh, 1, &n));

  kvpool_mutable_batch* batch = NULL;
  OK(kvpool_pool_allocate(p, 3, &batch));
  for (size_t k = 0; batch && k < 3; ++k) {
    kvpool_mutable_block* b = kvpool_mutable_batch_at(batch, k);
    OK(kvpool_mutable_block_init_sequence(b, salt, k > 0, k > 0 ? sh[k - 1] : 0));
    size_t took = 0;
    OK(kvpool_mutable_block_add_tokens(b, tokens + k * page, page, &took));
    OK(kvpool_mutable_block_commit(b));
    uint64_t committed = 0;
    OK(kvpool_mutable_block_sequence_hash(b, &committed));
    CHECK(committed == sh[k]);
  }
  kvpool_immutable_batch* reg = NULL;
  if (batch) OK(kvpool_pool_register_batch(p, batch, &reg));
  kvpool_immutable_batch* hit = NULL;
  OK(kvpool_pool_match(p, sh, 3, &hit));
  CHECK(hit && kvpool_immutable_batch_size(hit) == 3);
  kvpool_immutable_batch_release(hit);
  kvpool_immutable_batch_release(reg);
  kvpool_pool_release(p);
}

static void test_client_and_pools(kvpool_client* c) {
  CHECK(kvpool_client_daemon_alive(c) == 1);
  OK(kvpool_client_ping(c));
  CHECK(kvpool_client_slot(c) < 16);
  CHECK(kvpool_client_pool_count(c) == 2);
  CHECK(strcmp(kvpool_client_pool_name(c, 0), "g") == 0);
  CHECK(strcmp(kvpool_client_pool_name(c, 1), "h") == 0);
  CHECK(kvpool_client_pool_name(c, 2) == NULL);

  kvpool_pool* p = (kvpool_pool*)c;
  FAILS(KVPOOL_ERR_NOT_FOUND, "'nosuch'", kvpool_client_pool(c, "nosuch", &p));
  /* The message lists the pools the daemon has (issue 27: it listed none). */
  FAILS(KVPOOL_ERR_NOT_FOUND, "(this daemon has: g, h)", kvpool_client_pool(c, "nosuch", &p));
  CHECK(p == (kvpool_pool*)c);
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL", kvpool_client_pool(c, NULL, &p));
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL", kvpool_client_pool(c, "g", NULL));
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL", kvpool_client_pool(NULL, "g", &p));

  kvpool_pool* h = NULL;
  OK(kvpool_client_pool(c, "h", &h));
  CHECK(strcmp(kvpool_pool_name(h), "h") == 0);
  CHECK(kvpool_pool_index(h) == 1);
  CHECK(kvpool_pool_page_size(h) == 8);
  CHECK(kvpool_pool_storage(h) == KVPOOL_STORAGE_HOST);
  kvpool_layout l;
  memset(&l, 0, sizeof(l));
  l.struct_size = sizeof(l);
  OK(kvpool_pool_layout(h, &l));
  CHECK(l.kind == KVPOOL_LAYOUT_LAYER_SEPARATE && l.num_blocks == 8 && l.num_layers == 3 &&
        l.outer_dim == 1 && l.page_size == 8 && l.inner_dim == 4 && l.dtype_bytes == 4 &&
        l.alignment == 128 && l.dtype == KVPOOL_DTYPE_FP32);
  CHECK(l.region_bytes == 8 * 4 * 4 && l.block_bytes == 3 * l.region_bytes);
  CHECK(l.total_bytes >= 8 * l.block_bytes);
  /* An older caller's shorter struct: only its prefix is written. */
  kvpool_layout old;
  memset(&old, 0xAB, sizeof(old));
  old.struct_size = (uint32_t)offsetof(kvpool_layout, region_bytes);
  OK(kvpool_pool_layout(h, &old));
  CHECK(old.num_layers == 3 && old.region_bytes == 0xABABABABABABABABull);
  old.struct_size = 8;
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "struct_size", kvpool_pool_layout(h, &old));
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL", kvpool_pool_layout(NULL, &l));
  int dev = -7;
  FAILS(KVPOOL_ERR_INVALID_STATE, "host pool", kvpool_pool_cuda_device(h, &dev));
  CHECK(dev == -7);
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL", kvpool_pool_cuda_device(h, NULL));
  kvpool_pool_counts k;
  memset(&k, 0, sizeof(k));
  k.struct_size = sizeof(k);
  OK(kvpool_pool_counts_get(h, &k));
  CHECK(k.total == 8 && k.free_blocks == 8 && k.inactive == 0 && k.active == 0 &&
        k.mutable_blocks == 0);
  k.struct_size = 4;
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "struct_size", kvpool_pool_counts_get(h, &k));
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL", kvpool_pool_counts_get(h, NULL));
  /* Pools hash as their config says: g dynamo-0.2 (the default), h dynamo-router. */
  CHECK(kvpool_pool_hash_scheme(h) == KVPOOL_HASH_DYNAMO_ROUTER);
  CHECK(kvpool_pool_hash_scheme(NULL) == KVPOOL_HASH_DYNAMO_0_2);
  kvpool_pool_release(h);
  kvpool_pool* g = NULL;
  OK(kvpool_client_pool(c, "g", &g));
  OK(kvpool_pool_layout(g, &l));
  CHECK(l.dtype == KVPOOL_DTYPE_UNSPECIFIED && l.dtype_bytes == 2); /* dtype_bytes alone */
  kvpool_pool_release(g);
}

/* Fills block `b` with tokens first..first+3 under `parent`, commits it, writes a byte
 * pattern into its memory. */
static void fill_block(kvpool_mutable_block* b, uint32_t first, int has_parent, uint64_t parent,
                       unsigned char pattern) {
  const uint32_t t[4] = {first, first + 1, first + 2, first + 3};
  size_t added = 0;
  OK(kvpool_mutable_block_init_sequence(b, 1337, has_parent, parent));
  OK(kvpool_mutable_block_add_tokens(b, t, 4, &added));
  CHECK(added == 4);
  OK(kvpool_mutable_block_commit(b));
  for (uint32_t layer = 0; layer < 2; ++layer)
    for (uint32_t outer = 0; outer < 2; ++outer) {
      void* p = NULL;
      OK(kvpool_mutable_block_address(b, layer, outer, &p));
      if (p) memset(p, pattern + (int)(layer * 2 + outer), 4 * 16 * 2);
    }
}

static void test_token_api(kvpool_client* c, kvpool_pool* p) {
  kvpool_mutable_batch* batch = NULL;
  OK(kvpool_pool_allocate(p, 2, &batch));
  CHECK(kvpool_mutable_batch_size(batch) == 2);
  CHECK(wait_counts(c, p, 14, 0));
  kvpool_mutable_block* b = kvpool_mutable_batch_at(batch, 0);
  CHECK(b != NULL && kvpool_mutable_batch_at(batch, 2) == NULL);
  CHECK(kvpool_mutable_batch_at(NULL, 0) == NULL && kvpool_mutable_batch_size(NULL) == 0);
  CHECK(kvpool_mutable_block_id(b) != kvpool_mutable_block_id(kvpool_mutable_batch_at(batch, 1)));

  CHECK(kvpool_mutable_block_state(b) == KVPOOL_BLOCK_RESET);
  uint64_t h = 0;
  FAILS(KVPOOL_ERR_INVALID_STATE, "", kvpool_mutable_block_sequence_hash(b, &h));
  FAILS(KVPOOL_ERR_INVALID_STATE, "", kvpool_mutable_block_block_hash(b, &h));
  FAILS(KVPOOL_ERR_INVALID_STATE, "", kvpool_mutable_block_add_token(b, 1)); /* no init yet */
  OK(kvpool_mutable_block_init_sequence(b, 1337, 0, 0));
  FAILS(KVPOOL_ERR_BLOCK_EMPTY, "", kvpool_mutable_block_pop_token(b));
  OK(kvpool_mutable_block_add_token(b, 1));
  CHECK(kvpool_mutable_block_state(b) == KVPOOL_BLOCK_PARTIAL);
  FAILS(KVPOOL_ERR_INCOMPLETE_BLOCK, "", kvpool_mutable_block_commit(b));
  const uint32_t more[5] = {2, 3, 4, 5, 6};
  size_t added = 99;
  OK(kvpool_mutable_block_add_tokens(b, more, 5, &added));
  CHECK(added == 3); /* page 4: three fitted */
  CHECK(kvpool_mutable_block_token_count(b) == 4);
  FAILS(KVPOOL_ERR_BLOCK_FULL, "", kvpool_mutable_block_add_token(b, 5));
  OK(kvpool_mutable_block_pop_tokens(b, 2));
  CHECK(kvpool_mutable_block_token_count(b) == 2);
  FAILS(KVPOOL_ERR_BLOCK_EMPTY, "", kvpool_mutable_block_pop_tokens(b, 3));
  OK(kvpool_mutable_block_pop_token(b));
  OK(kvpool_mutable_block_add_tokens(b, more, 3, NULL));
  CHECK(kvpool_mutable_block_token_count(b) == 4);
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL", kvpool_mutable_block_add_tokens(b, NULL, 2, NULL));
  OK(kvpool_mutable_block_add_tokens(b, NULL, 0, NULL));
  OK(kvpool_mutable_block_commit(b));
  CHECK(kvpool_mutable_block_state(b) == KVPOOL_BLOCK_COMPLETE);
  OK(kvpool_mutable_block_sequence_hash(b, &h));
  CHECK(h == 14643705804678351452ull); /* tokens 1..4, salt 1337: Dynamo's vector */
  uint64_t bh = 0;
  OK(kvpool_mutable_block_block_hash(b, &bh));
  CHECK(bh == h);
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL", kvpool_mutable_block_sequence_hash(b, NULL));
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL", kvpool_mutable_block_block_hash(b, NULL));
  OK(kvpool_mutable_block_reset(b));
  CHECK(kvpool_mutable_block_state(b) == KVPOOL_BLOCK_RESET);
  CHECK(kvpool_mutable_block_token_count(b) == 0);
  OK(kvpool_mutable_block_set_priority(b, 7));
  CHECK(kvpool_mutable_block_priority(b) == 7);

  /* Addresses: in range, distinct per region, out of range refused. */
  void* a00 = NULL;
  void* a11 = NULL;
  OK(kvpool_mutable_block_address(b, 0, 0, &a00));
  OK(kvpool_mutable_block_address(b, 1, 1, &a11));
  CHECK(a00 != NULL && (char*)a11 - (char*)a00 == 3 * 4 * 16 * 2);
  void* untouched = &h;
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "layer", kvpool_mutable_block_address(b, 2, 0, &untouched));
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "outer", kvpool_mutable_block_address(b, 0, 2, &untouched));
  CHECK(untouched == &h);
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL", kvpool_mutable_block_address(b, 0, 0, NULL));

  /* Take: the block moves out; its slot in the batch is empty from then on. */
  kvpool_mutable_block* owned = NULL;
  OK(kvpool_mutable_batch_take(batch, 0, &owned));
  CHECK(owned != NULL && kvpool_mutable_block_priority(owned) == 7);
  CHECK(kvpool_mutable_block_state(b) == KVPOOL_BLOCK_INVALID);
  FAILS(KVPOOL_ERR_INVALID_HANDLE, "taken", kvpool_mutable_batch_take(batch, 0, &owned));
  FAILS(KVPOOL_ERR_INVALID_HANDLE, "taken", kvpool_mutable_block_add_token(b, 1));
  FAILS(KVPOOL_ERR_INVALID_HANDLE, "taken", kvpool_mutable_block_init_sequence(b, 0, 0, 0));
  FAILS(KVPOOL_ERR_INVALID_HANDLE, "taken", kvpool_mutable_block_commit(b));
  FAILS(KVPOOL_ERR_INVALID_HANDLE, "taken", kvpool_mutable_block_reset(b));
  FAILS(KVPOOL_ERR_INVALID_HANDLE, "taken", kvpool_mutable_block_pop_token(b));
  FAILS(KVPOOL_ERR_INVALID_HANDLE, "taken", kvpool_mutable_block_pop_tokens(b, 1));
  FAILS(KVPOOL_ERR_INVALID_HANDLE, "taken", kvpool_mutable_block_set_priority(b, 1));
  FAILS(KVPOOL_ERR_INVALID_HANDLE, "taken", kvpool_mutable_block_address(b, 0, 0, &a00));
  FAILS(KVPOOL_ERR_INVALID_HANDLE, "taken", kvpool_mutable_block_sequence_hash(b, &h));
  FAILS(KVPOOL_ERR_INVALID_HANDLE, "taken", kvpool_mutable_block_add_tokens(b, more, 1, NULL));
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "index 5", kvpool_mutable_batch_take(batch, 5, &owned));
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL", kvpool_mutable_batch_take(NULL, 0, &owned));
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL", kvpool_mutable_block_add_token(NULL, 1));
  CHECK(kvpool_mutable_block_state(NULL) == KVPOOL_BLOCK_INVALID);
  CHECK(kvpool_mutable_block_token_count(NULL) == 0);

  /* Releasing the owned block and the batch returns both blocks. */
  kvpool_mutable_block_release(owned);
  kvpool_mutable_batch_release(batch);
  CHECK(wait_counts(c, p, 16, 0));
}

static void test_allocate_register_match(kvpool_client* c, kvpool_pool* p) {
  kvpool_mutable_batch* batch = (kvpool_mutable_batch*)p;
  FAILS(KVPOOL_ERR_NOT_ENOUGH_BLOCKS, "17", kvpool_pool_allocate(p, 17, &batch));
  CHECK(batch == (kvpool_mutable_batch*)p);
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL", kvpool_pool_allocate(p, 1, NULL));
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL", kvpool_pool_allocate(NULL, 1, &batch));

  /* Register a chain of three blocks as a batch. */
  OK(kvpool_pool_allocate(p, 3, &batch));
  uint64_t hashes[4];
  for (size_t i = 0; i < 3; ++i) {
    kvpool_mutable_block* b = kvpool_mutable_batch_at(batch, i);
    fill_block(b, (uint32_t)(100 + 4 * i), i > 0, i > 0 ? hashes[i - 1] : 0,
               (unsigned char)(16 * i));
    OK(kvpool_mutable_block_sequence_hash(b, &hashes[i]));
  }
  hashes[3] = 12345; /* unknown: the match stops before it */
  kvpool_immutable_batch* reg = NULL;
  OK(kvpool_pool_register_batch(p, batch, &reg));
  CHECK(kvpool_immutable_batch_size(reg) == 3);
  uint64_t got[4] = {0, 0, 0, 0};
  CHECK(kvpool_immutable_batch_sequence_hashes(reg, got, 4) == 3);
  CHECK(got[0] == hashes[0] && got[1] == hashes[1] && got[2] == hashes[2]);
  CHECK(kvpool_immutable_batch_sequence_hashes(reg, got, 1) == 1);
  CHECK(kvpool_immutable_batch_sequence_hashes(NULL, got, 4) == 0);
  uint32_t ids[3] = {0, 0, 0};
  CHECK(kvpool_immutable_batch_block_ids(reg, ids, 3) == 3);
  CHECK(ids[0] != ids[1] && ids[1] != ids[2]);
  CHECK(kvpool_immutable_batch_block_ids(reg, NULL, 3) == 0);
  CHECK(wait_counts(c, p, 13, 0));
  kvpool_pool_counts k;
  k.struct_size = sizeof(k);
  OK(kvpool_pool_counts_get(p, &k));
  CHECK(k.active == 3 && k.mutable_blocks == 0);

  /* Match from another client: the prefix of three, with the bytes the writer wrote. */
  kvpool_client* c2 = connect_ok();
  kvpool_pool* p2 = NULL;
  OK(kvpool_client_pool(c2, "g", &p2));
  kvpool_immutable_batch* hit = NULL;
  OK(kvpool_pool_match(p2, hashes, 4, &hit));
  CHECK(kvpool_immutable_batch_size(hit) == 3);
  for (size_t i = 0; i < 3; ++i) {
    const kvpool_immutable_block* ib = kvpool_immutable_batch_at(hit, i);
    CHECK(kvpool_immutable_block_sequence_hash(ib) == hashes[i]);
    CHECK(kvpool_immutable_block_id(ib) == ids[i]);
    const void* a = NULL;
    OK(kvpool_immutable_block_address(ib, 1, 0, &a));
    CHECK(a != NULL && ((const unsigned char*)a)[0] == (unsigned char)(16 * i + 2));
    const void* a2 = NULL;
    OK(kvpool_immutable_batch_address(hit, i, 1, 1, &a2));
    CHECK(a2 != NULL && ((const unsigned char*)a2)[4 * 16 * 2 - 1] == (unsigned char)(16 * i + 3));
  }
  const void* none = NULL;
  CHECK(kvpool_immutable_batch_at(hit, 3) == NULL && kvpool_immutable_batch_at(NULL, 0) == NULL);
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "index 3",
        kvpool_immutable_batch_address(hit, 3, 0, 0, &none));
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "layer", kvpool_immutable_batch_address(hit, 0, 9, 0, &none));
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL", kvpool_immutable_batch_address(hit, 0, 0, 0, NULL));
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL", kvpool_immutable_block_address(NULL, 0, 0, &none));
  CHECK(none == NULL);
  CHECK(kvpool_immutable_block_sequence_hash(NULL) == 0 && kvpool_immutable_block_id(NULL) == 0);

  /* Clone keeps a reference past the batch. */
  kvpool_immutable_block* keep = NULL;
  OK(kvpool_immutable_block_clone(kvpool_immutable_batch_at(hit, 0), &keep));
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL", kvpool_immutable_block_clone(NULL, &keep));
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL",
        kvpool_immutable_block_clone(kvpool_immutable_batch_at(hit, 0), NULL));
  kvpool_immutable_batch_release(hit);
  kvpool_immutable_batch_release(reg);
  /* Block 0 is still referenced through `keep`; blocks 1 and 2 become inactive. */
  kvpool_client_flush(c2);
  CHECK(wait_counts(c, p, 13, 2));
  CHECK(kvpool_immutable_block_sequence_hash(keep) == hashes[0]);
  const void* ka = NULL;
  OK(kvpool_immutable_block_address(keep, 0, 0, &ka));
  CHECK(ka != NULL && ((const unsigned char*)ka)[0] == 0);
  kvpool_immutable_block_release(keep);
  kvpool_client_flush(c2);
  CHECK(wait_counts(c, p, 13, 3));

  /* Empty match, and a match of nothing. */
  uint64_t unknown = 42;
  OK(kvpool_pool_match(p2, &unknown, 1, &hit));
  CHECK(kvpool_immutable_batch_size(hit) == 0);
  kvpool_immutable_batch_release(hit);
  OK(kvpool_pool_match(p2, NULL, 0, &hit));
  CHECK(kvpool_immutable_batch_size(hit) == 0);
  kvpool_immutable_batch_release(hit);
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL", kvpool_pool_match(p2, NULL, 3, &hit));
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL", kvpool_pool_match(p2, hashes, 3, NULL));

  /* Since ABI 1.3: a match with options. onboard on a pool without a disk tier is a plain
   * match (tests/multiproc/disk_onboard_test.cpp runs it against a disk tier). */
  kvpool_match_options mo;
  kvpool_match_options_init(&mo);
  CHECK(mo.struct_size == sizeof(mo) && mo.onboard == 0);
  mo.onboard = 1;
  OK(kvpool_pool_match_with(p2, hashes, 4, &mo, &hit));
  CHECK(kvpool_immutable_batch_size(hit) == 3);
  CHECK(kvpool_immutable_block_sequence_hash(kvpool_immutable_batch_at(hit, 2)) == hashes[2]);
  kvpool_immutable_batch_release(hit);
  OK(kvpool_pool_match_with(p2, hashes, 4, NULL, &hit));
  CHECK(kvpool_immutable_batch_size(hit) == 3);
  kvpool_immutable_batch_release(hit);
  mo.struct_size = 2;
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "struct_size",
        kvpool_pool_match_with(p2, hashes, 4, &mo, &hit));
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL", kvpool_pool_match_with(p2, NULL, 3, NULL, &hit));
  kvpool_match_options_init(NULL);

  /* Release order is free: the client handle first, its pool still works. */
  kvpool_client_release(c2);
  OK(kvpool_pool_match(p2, hashes, 3, &hit));
  CHECK(kvpool_immutable_batch_size(hit) == 3);
  kvpool_immutable_batch_release(hit);
  kvpool_pool_release(p2);

  /* register_blocks with separately owned blocks, deduplicated onto the registered chain. */
  OK(kvpool_pool_allocate(p, 2, &batch));
  kvpool_mutable_block* own[2] = {NULL, NULL};
  OK(kvpool_mutable_batch_take(batch, 0, &own[0]));
  OK(kvpool_mutable_batch_take(batch, 1, &own[1]));
  kvpool_mutable_batch_release(batch); /* empty now: returns nothing */
  fill_block(own[0], 100, 0, 0, 200);
  fill_block(own[1], 500, 1, hashes[0], 201);
  OK(kvpool_pool_register_blocks(p, own, 2, &reg));
  CHECK(kvpool_immutable_batch_size(reg) == 2);
  CHECK(kvpool_immutable_block_id(kvpool_immutable_batch_at(reg, 0)) == ids[0]); /* dedup */
  CHECK(kvpool_immutable_block_id(kvpool_immutable_batch_at(reg, 1)) != ids[1]);
  kvpool_immutable_batch_release(reg);
  CHECK(wait_counts(c, p, 12, 4)); /* the duplicate went back to free */

  /* Register failures consume what they are given. */
  OK(kvpool_pool_allocate(p, 1, &batch));
  FAILS(KVPOOL_ERR_INVALID_STATE, "committed", kvpool_pool_register_batch(p, batch, &reg));
  CHECK(wait_counts(c, p, 12, 4));
  OK(kvpool_pool_allocate(p, 1, &batch));
  OK(kvpool_mutable_batch_take(batch, 0, &own[0]));
  kvpool_mutable_batch_release(batch);
  own[1] = NULL;
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "blocks[1] is NULL",
        kvpool_pool_register_blocks(p, own, 2, &reg));
  CHECK(wait_counts(c, p, 12, 4));
  OK(kvpool_pool_allocate(p, 1, &batch));
  OK(kvpool_mutable_batch_take(batch, 0, &own[0]));
  kvpool_mutable_batch_release(batch);
  own[1] = own[0];
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "twice", kvpool_pool_register_blocks(p, own, 2, &reg));
  CHECK(wait_counts(c, p, 12, 4));
  OK(kvpool_pool_allocate(p, 1, &batch));
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL", kvpool_pool_register_batch(p, batch, NULL));
  CHECK(wait_counts(c, p, 12, 4));
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL", kvpool_pool_register_batch(p, NULL, &reg));
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL", kvpool_pool_register_blocks(p, NULL, 1, &reg));
  OK(kvpool_pool_register_blocks(p, NULL, 0, &reg));
  CHECK(kvpool_immutable_batch_size(reg) == 0);
  kvpool_immutable_batch_release(reg);
}

static void test_async(kvpool_client* c, kvpool_pool* p) {
  completion a;
  completion_init(&a);
  OK(kvpool_pool_allocate_async(p, 2, on_mutable, &a));
  CHECK(completion_wait(&a));
  CHECK(a.code == KVPOOL_OK && kvpool_mutable_batch_size(a.mutable_result) == 2);
  CHECK(!pthread_equal(a.thread, pthread_self())); /* on the completion thread */
  kvpool_mutable_batch* batch = a.mutable_result;
  fill_block(kvpool_mutable_batch_at(batch, 0), 900, 0, 0, 50);
  fill_block(kvpool_mutable_batch_at(batch, 1), 904, 0, 0, 60);
  uint64_t hashes[2];
  OK(kvpool_mutable_block_sequence_hash(kvpool_mutable_batch_at(batch, 0), &hashes[0]));
  OK(kvpool_mutable_block_sequence_hash(kvpool_mutable_batch_at(batch, 1), &hashes[1]));

  completion r;
  completion_init(&r);
  OK(kvpool_pool_register_batch_async(p, batch, on_immutable, &r));
  CHECK(completion_wait(&r));
  CHECK(r.code == KVPOOL_OK && kvpool_immutable_batch_size(r.immutable_result) == 2);
  CHECK(pthread_equal(r.thread, a.thread)); /* one completion thread per client */

  completion m;
  completion_init(&m);
  OK(kvpool_pool_match_async(p, hashes, 1, on_immutable, &m));
  CHECK(completion_wait(&m));
  CHECK(m.code == KVPOOL_OK && kvpool_immutable_batch_size(m.immutable_result) == 1);
  CHECK(kvpool_immutable_block_sequence_hash(kvpool_immutable_batch_at(m.immutable_result, 0)) ==
        hashes[0]);
  kvpool_immutable_batch_release(m.immutable_result);
  kvpool_match_options amo;
  kvpool_match_options_init(&amo);
  amo.onboard = 1;
  completion mw;
  completion_init(&mw);
  OK(kvpool_pool_match_with_async(p, hashes, 2, &amo, on_immutable, &mw));
  CHECK(completion_wait(&mw));
  CHECK(mw.code == KVPOOL_OK && kvpool_immutable_batch_size(mw.immutable_result) == 2);
  kvpool_immutable_batch_release(mw.immutable_result);
  kvpool_immutable_batch_release(r.immutable_result);

  /* Handles released while a request is in flight: the release waits for the callback. */
  kvpool_client* c3 = connect_ok();
  kvpool_pool* p3 = NULL;
  OK(kvpool_client_pool(c3, "g", &p3));
  completion late;
  completion_init(&late);
  OK(kvpool_pool_match_async(p3, hashes, 2, on_immutable, &late));
  kvpool_pool_release(p3);
  kvpool_client_release(c3);
  CHECK(late.done == 1 && late.code == KVPOOL_OK); /* ran before the release returned */
  CHECK(kvpool_immutable_batch_size(late.immutable_result) == 2);
  kvpool_immutable_batch_release(late.immutable_result);

  /* The callback releases the client's last handles, on the completion thread itself. */
  last_handles lh;
  completion_init(&lh.done);
  lh.client = connect_ok();
  lh.pool = NULL;
  OK(kvpool_client_pool(lh.client, "g", &lh.pool));
  OK(kvpool_pool_match_async(lh.pool, hashes, 2, on_matched_release_all, &lh));
  CHECK(completion_wait(&lh.done));
  CHECK(lh.done.code == KVPOOL_OK);

  /* Errors arrive through the callback, with the message. */
  completion e;
  completion_init(&e);
  OK(kvpool_pool_allocate_async(p, 1000, on_mutable, &e));
  CHECK(completion_wait(&e));
  CHECK(e.code == KVPOOL_ERR_NOT_ENOUGH_BLOCKS && e.mutable_result == NULL);
  CHECK(strstr(e.message, "1000") != NULL);
  completion e2;
  completion_init(&e2);
  OK(kvpool_pool_allocate(p, 1, &batch));
  OK(kvpool_pool_register_batch_async(p, batch, on_immutable, &e2)); /* uncommitted */
  CHECK(completion_wait(&e2));
  CHECK(e2.code == KVPOOL_ERR_INVALID_STATE && e2.immutable_result == NULL);

  /* Argument errors: returned, and the callback never runs. */
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL", kvpool_pool_allocate_async(p, 1, NULL, NULL));
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL", kvpool_pool_allocate_async(NULL, 1, on_mutable, &e));
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL", kvpool_pool_match_async(p, NULL, 1, on_immutable, &e));
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL", kvpool_pool_match_async(p, hashes, 1, NULL, NULL));
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL",
        kvpool_pool_register_batch_async(p, NULL, on_immutable, &e));
  OK(kvpool_pool_allocate(p, 1, &batch));
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL",
        kvpool_pool_register_batch_async(p, batch, NULL, NULL));
  (void)c;
}

/* kvpoold dies under the client: every call says DaemonGone, nothing hangs. */
/* ABI 1.1: register with options (send_tokens: the blocks' token ids go into kvpoold's KV
 * events; checksum). The blocks register as with the plain call. */
static void test_register_options(kvpool_pool* p) {
  kvpool_register_options o;
  memset(&o, 0xFF, sizeof(o));
  kvpool_register_options_init(&o);
  CHECK(o.struct_size == sizeof(kvpool_register_options));
  CHECK(o.checksum == 0 && o.send_tokens == 0);
  o.send_tokens = 1;

  kvpool_mutable_batch* batch = NULL;
  OK(kvpool_pool_allocate(p, 2, &batch));
  uint64_t hashes[2] = {0, 0};
  for (size_t i = 0; i < 2; ++i) {
    kvpool_mutable_block* b = kvpool_mutable_batch_at(batch, i);
    fill_block(b, (uint32_t)(7000 + 4 * i), i > 0, i > 0 ? hashes[0] : 0, 1);
    OK(kvpool_mutable_block_sequence_hash(b, &hashes[i]));
  }
  kvpool_immutable_batch* reg = NULL;
  OK(kvpool_pool_register_batch_with(p, batch, &o, &reg));
  uint64_t got[2] = {0, 0};
  CHECK(kvpool_immutable_batch_sequence_hashes(reg, got, 2) == 2);
  CHECK(got[0] == hashes[0] && got[1] == hashes[1]);
  kvpool_immutable_batch_release(reg);

  /* Separately owned blocks, tokens and a checksum. */
  o.checksum = 1;
  OK(kvpool_pool_allocate(p, 1, &batch));
  kvpool_mutable_block* one = NULL;
  OK(kvpool_mutable_batch_take(batch, 0, &one));
  kvpool_mutable_batch_release(batch);
  fill_block(one, 7100, 0, 0, 2);
  OK(kvpool_pool_register_blocks_with(p, &one, 1, &o, &reg));
  CHECK(kvpool_immutable_batch_size(reg) == 1);
  kvpool_immutable_batch_release(reg);

  /* NULL options: the defaults. A struct too small to hold a field: refused (and the batch
   * consumed, as always). */
  OK(kvpool_pool_allocate(p, 1, &batch));
  fill_block(kvpool_mutable_batch_at(batch, 0), 7200, 0, 0, 3);
  OK(kvpool_pool_register_batch_with(p, batch, NULL, &reg));
  kvpool_immutable_batch_release(reg);
  OK(kvpool_pool_allocate(p, 1, &batch));
  fill_block(kvpool_mutable_batch_at(batch, 0), 7300, 0, 0, 4);
  o.struct_size = 2;
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "struct_size",
        kvpool_pool_register_batch_with(p, batch, &o, &reg));
  FAILS(KVPOOL_ERR_INVALID_ARGUMENT, "NULL", kvpool_pool_register_batch_with(p, NULL, NULL, &reg));
}

static void test_daemon_gone(kvpool_client* c, kvpool_pool* p) {
  uint64_t h = 1;
  kvpool_mutable_batch* keep = NULL;
  OK(kvpool_pool_allocate(p, 1, &keep));
  test_daemon_kill(&daemon_);
  double deadline = now_s() + 10.0;
  while (kvpool_client_daemon_alive(c) && now_s() < deadline) kvpool_client_ping(c);
  CHECK(kvpool_client_daemon_alive(c) == 0);
  FAILS(KVPOOL_ERR_DAEMON_GONE, "", kvpool_client_ping(c));
  kvpool_immutable_batch* hit = NULL;
  FAILS(KVPOOL_ERR_DAEMON_GONE, "", kvpool_pool_match(p, &h, 1, &hit));
  kvpool_mutable_batch* b = NULL;
  FAILS(KVPOOL_ERR_DAEMON_GONE, "", kvpool_pool_allocate(p, 1, &b));
  completion m;
  completion_init(&m);
  OK(kvpool_pool_match_async(p, &h, 1, on_immutable, &m));
  CHECK(completion_wait(&m));
  CHECK(m.code == KVPOOL_ERR_DAEMON_GONE && m.immutable_result == NULL);
  /* Handles of a dead daemon still release cleanly. */
  kvpool_mutable_batch_release(keep);
  kvpool_client_flush(c);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s <kvpoold>\n", argv[0]);
    return 2;
  }
  test_version_and_errors();
  test_hashing();
  const char* pools =
      "[{\"name\": \"g\", \"num_blocks\": 16, \"layout\": {\"num_layers\": 2, \"outer_dim\": 2,"
      " \"page_size\": 4, \"inner_dim\": 16, \"dtype_bytes\": 2, \"alignment\": 64}},"
      " {\"name\": \"h\", \"num_blocks\": 8, \"hash_scheme\": \"dynamo-router\","
      " \"layout\": {\"num_layers\": 3, \"outer_dim\": 1,"
      " \"page_size\": 8, \"inner_dim\": 4, \"dtype_bytes\": 4, \"dtype\": \"fp32\", "
      "\"alignment\": 128,"
      " \"kind\": \"layer_separate\"}}]";
  if (test_daemon_start(&daemon_, argv[1], pools) != 0) return 1;
  test_connect_errors();
  kvpool_client* c = connect_ok();
  kvpool_pool* p = NULL;
  if (c) OK(kvpool_client_pool(c, "g", &p));
  if (c && p) {
    test_client_and_pools(c);
    test_token_api(c, p);
    test_allocate_register_match(c, p);
    test_async(c, p);
    test_register_options(p);
    test_pool_hashing(c, "g", KVPOOL_HASH_DYNAMO_0_2);
    test_pool_hashing(c, "h", KVPOOL_HASH_DYNAMO_ROUTER);
    test_daemon_gone(c, p);
  }
  kvpool_pool_release(p);
  kvpool_client_release(c);
  test_daemon_stop(&daemon_);
  if (failures) {
    fprintf(stderr, "c_api_test: %d failure(s)\n", failures);
    return 1;
  }
  printf("c_api_test: OK\n");
  return 0;
}
