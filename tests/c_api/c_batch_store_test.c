#define _POSIX_C_SOURCE 200809L
/* The batch store through the C ABI (kvpool.h, since 1.2), in plain C11, against a real
 * kvpoold: set, exists, get (exact bytes), delete, the eventfd, and a dead daemon's
 * completion (an error code, never a hang). */
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include "kvpool/kvpool.h"
#include "c_check.h"
#include "test_daemon.h"

enum { kValue = 1024, kKeys = 3 };

static const char* keys[kKeys] = {"sglang-page-0", "sglang-page-1", "never-stored"};
static size_t key_sizes[kKeys];

static kvpool_batch_completion* run(kvpool_batch_store* s, kvpool_batch_op op, size_t n,
                                    void* const* bufs, const size_t* sizes) {
  uint64_t id = 0;
  kvpool_batch_completion* c = NULL;
  OK(kvpool_batch_store_submit(s, op, n, (const void* const*)keys, key_sizes, bufs, sizes, &id));
  OK(kvpool_batch_store_wait(s, id, 20000, &c));
  if (c) CHECK(kvpool_batch_completion_id(c) == id);
  return c;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s <kvpoold>\n", argv[0]);
    return 2;
  }
  test_daemon d;
  /* Blocks of 2048 bytes: 576 of header and key room, 1472 of value. */
  const char* pools =
      "[{\"name\": \"kv\", \"num_blocks\": 8, \"layout\": {\"num_layers\": 1, \"outer_dim\": 1,"
      " \"page_size\": 1, \"inner_dim\": 2048, \"dtype_bytes\": 1, \"alignment\": 64}}]";
  if (test_daemon_start(&d, argv[1], pools) != 0) return 1;
  for (int i = 0; i < kKeys; ++i) key_sizes[i] = strlen(keys[i]);

  kvpool_connect_options co;
  kvpool_connect_options_init(&co);
  co.runtime_dir = d.dir;
  co.reattach = 0;
  kvpool_client* c = NULL;
  OK(kvpool_connect(d.instance, &co, &c));
  kvpool_batch_store_options o;
  kvpool_batch_store_options_init(&o);
  CHECK(o.struct_size == sizeof(o) && o.max_key_bytes == 448 && o.index_bits == 64);
  kvpool_batch_store* s = NULL;
  if (c) OK(kvpool_batch_store_open(c, "kv", &o, &s));
  if (!s) {
    test_daemon_stop(&d);
    return 1;
  }
  CHECK(kvpool_batch_store_value_capacity(s) == 1472);
  CHECK(kvpool_batch_store_open(c, "nope", &o, &s) == KVPOOL_ERR_NOT_FOUND);

  static unsigned char in[2][kValue], out[3][kValue];
  for (int k = 0; k < 2; ++k)
    for (int i = 0; i < kValue; ++i) in[k][i] = (unsigned char)(i * 7 + k * 13);
  void* inb[2] = {in[0], in[1]};
  size_t ins[2] = {kValue, kValue};
  kvpool_batch_completion* r = run(s, KVPOOL_BATCH_SET, 2, inb, ins);
  if (r) {
    CHECK(kvpool_batch_completion_status(r) == KVPOOL_OK);
    CHECK(kvpool_batch_completion_count(r) == 2);
    CHECK(kvpool_batch_completion_results(r)[0] == KVPOOL_KEY_OK);
    CHECK(kvpool_batch_completion_results(r)[1] == KVPOOL_KEY_OK);
    kvpool_batch_completion_release(r);
  }
  r = run(s, KVPOOL_BATCH_EXISTS_PREFIX, 3, NULL, NULL);
  if (r) {
    CHECK(kvpool_batch_completion_prefix(r) == 2);
    kvpool_batch_completion_release(r);
  }
  void* outb[3] = {out[0], out[1], out[2]};
  size_t outs[3] = {kValue, kValue, kValue};
  r = run(s, KVPOOL_BATCH_GET, 3, outb, outs);
  if (r) {
    const uint8_t* res = kvpool_batch_completion_results(r);
    const uint64_t* sz = kvpool_batch_completion_value_sizes(r);
    CHECK(res[0] == KVPOOL_KEY_OK && res[1] == KVPOOL_KEY_OK && res[2] == KVPOOL_KEY_MISS);
    CHECK(sz[0] == kValue && sz[1] == kValue && sz[2] == 0);
    CHECK(memcmp(out[0], in[0], kValue) == 0 && memcmp(out[1], in[1], kValue) == 0);
    kvpool_batch_completion_release(r);
  }
  r = run(s, KVPOOL_BATCH_DELETE, 1, NULL, NULL);
  if (r) {
    CHECK(kvpool_batch_completion_results(r)[0] == KVPOOL_KEY_OK);
    kvpool_batch_completion_release(r);
  }
  /* The eventfd: a submitted batch makes it readable; next() takes it, then nothing. */
  uint64_t id = 0;
  OK(kvpool_batch_store_submit(s, KVPOOL_BATCH_EXISTS, 3, (const void* const*)keys, key_sizes, NULL,
                               NULL, &id));
  /* Readable may come before next() has something (a completion taken by wait() first):
   * poll, take, and poll again, up to 100 times 200 ms. */
  r = NULL;
  for (int tries = 0; r == NULL && tries < 100; ++tries) {
    struct pollfd p = {kvpool_batch_store_event_fd(s), POLLIN, 0};
    CHECK(poll(&p, 1, 200) >= 0);
    r = kvpool_batch_store_next(s);
  }
  CHECK(r != NULL);
  if (r) {
    const uint8_t* res = kvpool_batch_completion_results(r);
    CHECK(kvpool_batch_completion_id(r) == id);
    CHECK(res[0] == KVPOOL_KEY_MISS && res[1] == KVPOOL_KEY_OK && res[2] == KVPOOL_KEY_MISS);
    kvpool_batch_completion_release(r);
  }
  CHECK(kvpool_batch_store_next(s) == NULL);

  /* kvpoold gone: the batch completes with DaemonGone, every key FAILED. */
  test_daemon_kill(&d);
  r = run(s, KVPOOL_BATCH_EXISTS, 2, NULL, NULL);
  if (r) {
    CHECK(kvpool_batch_completion_status(r) == KVPOOL_ERR_DAEMON_GONE);
    CHECK(kvpool_batch_completion_results(r)[0] == KVPOOL_KEY_FAILED);
    CHECK(strlen(kvpool_batch_completion_message(r)) > 0);
    kvpool_batch_completion_release(r);
  }
  kvpool_batch_store_release(s);
  kvpool_client_release(c);
  test_daemon_stop(&d);
  if (failures == 0) printf("c_batch_store_test: OK\n");
  return failures == 0 ? 0 : 1;
}
