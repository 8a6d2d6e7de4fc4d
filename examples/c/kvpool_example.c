/* A worker in C: reuse the prefix other workers computed, add the rest, share it. */
#include <kvpool/kvpool.h>
#include <stdio.h>
#include <string.h>

#define FAIL(call) return fprintf(stderr, "%s: %s\n", #call, kvpool_last_error_message()), 1

int main(int argc, char** argv) {
  kvpool_connect_options o;
  kvpool_connect_options_init(&o);
  o.runtime_dir = argc > 2 ? argv[2] : NULL; /* NULL: where kvpoold puts it */
  kvpool_client* client;
  kvpool_pool* pool;
  if (kvpool_connect(argc > 1 ? argv[1] : "default", &o, &client)) FAIL(kvpool_connect);
  if (kvpool_client_pool(client, "g2", &pool)) FAIL(kvpool_client_pool);
  uint32_t page = kvpool_pool_page_size(pool);

  uint32_t tokens[4 * 64]; /* the prompt: 4 pages of at most 64 tokens */
  for (uint32_t i = 0; i < 4 * page; ++i) tokens[i] = 1000 + i;
  uint64_t block_hashes[4], hashes[4];
  size_t n;
  /* hashed as the pool hashes (its page size and scheme), as commit will hash the blocks */
  if (kvpool_pool_hash_tokens(pool, tokens, 4 * page, 0, block_hashes, hashes, 4, &n)) FAIL(hash);

  kvpool_immutable_batch* hit; /* the longest prefix already here: one handle */
  if (kvpool_pool_match(pool, hashes, n, &hit)) FAIL(kvpool_pool_match);
  size_t have = kvpool_immutable_batch_size(hit);

  kvpool_mutable_batch* fresh; /* the rest: all or nothing */
  if (kvpool_pool_allocate(pool, (uint32_t)(n - have), &fresh)) FAIL(kvpool_pool_allocate);
  for (size_t k = have; k < n; ++k) {
    kvpool_mutable_block* b = kvpool_mutable_batch_at(fresh, k - have);
    if (kvpool_mutable_block_init_sequence(b, 0, k > 0, k > 0 ? hashes[k - 1] : 0) ||
        kvpool_mutable_block_add_tokens(b, tokens + k * page, page, NULL) ||
        kvpool_mutable_block_commit(b))
      FAIL(token_api);
    void* kv; /* region (layer 0, outer 0): write this block's KV here */
    if (kvpool_mutable_block_address(b, 0, 0, &kv)) FAIL(kvpool_mutable_block_address);
    memset(kv, (int)k, 16);
  }
  kvpool_immutable_batch* shared; /* now others match them too */
  if (kvpool_pool_register_batch(pool, fresh, &shared)) FAIL(kvpool_pool_register_batch);
  printf("matched %zu of %zu blocks, registered %zu\n", have, n,
         kvpool_immutable_batch_size(shared));

  kvpool_immutable_batch_release(shared);
  kvpool_immutable_batch_release(hit);
  kvpool_pool_release(pool);
  kvpool_client_release(client);
  return 0;
}
