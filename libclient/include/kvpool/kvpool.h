/* kvpool.h: the stable C ABI of libkvpool (library libkvpool_c.so.1).
 *
 * Plain C11, usable from C, C++11 and later, Rust, Go, Python ctypes/cffi. Every type is an
 * opaque handle or a plain struct of fixed-width fields; nothing C++ crosses this boundary.
 *
 *   kvpool_client* c; kvpool_pool* p; kvpool_immutable_batch* hit;
 *   if (kvpool_connect("default", NULL, &c) != KVPOOL_OK) puts(kvpool_last_error_message());
 *   kvpool_client_pool(c, "g2", &p);
 *   kvpool_pool_match(p, hashes, n, &hit);            // longest known prefix, one handle
 *   ... kvpool_immutable_batch_address(hit, i, layer, outer, &ptr) ...
 *   kvpool_immutable_batch_release(hit); kvpool_pool_release(p); kvpool_client_release(c);
 *
 * Conventions
 * - Functions that can fail return a kvpool_error_code (KVPOOL_OK = 0) and write results
 *   through out-pointers, which are left untouched on failure. The failing call's message
 *   ("pool 'g2' has 12 free blocks, 64 requested") is kept per thread until the next
 *   failing call on that thread: kvpool_last_error_message().
 * - A NULL handle or out-pointer where one is required fails with
 *   KVPOOL_ERR_INVALID_ARGUMENT (never a crash). Releasing NULL is a no-op.
 * - Handles that own something end in _release(). Handles are independent: a pool, block
 *   or batch keeps its client's connection alive, so they may be released in any order.
 * - Threads: a client and its pools may be used from several threads at once; a mutable
 *   block or batch belongs to one thread at a time; immutable blocks and batches may be
 *   read from several threads, and released on any thread.
 * - Borrowed pointers (kvpool_mutable_batch_at, kvpool_immutable_batch_at, the strings
 *   returned by name queries) live as long as the handle they came from.
 *
 * Versioning: KVPOOL_ABI_VERSION_MAJOR changes (with the SONAME, libkvpool_c.so.MAJOR) only
 * when an existing function or struct changes incompatibly; additions bump the minor.
 * Structs passed in or out begin with `struct_size`, which the caller sets to
 * sizeof(struct) of its own header, so older callers keep working when fields are added. */
#ifndef KVPOOL_KVPOOL_H
#define KVPOOL_KVPOOL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(KVPOOL_C_BUILDING)
#define KVPOOL_API __attribute__((visibility("default")))
#else
#define KVPOOL_API
#endif

#define KVPOOL_ABI_VERSION_MAJOR 1
#define KVPOOL_ABI_VERSION_MINOR 3
/* (major << 16) | minor: compare with kvpool_abi_version() at run time. */
#define KVPOOL_ABI_VERSION ((KVPOOL_ABI_VERSION_MAJOR << 16) | KVPOOL_ABI_VERSION_MINOR)

/* The ABI version of the library loaded at run time. A program built against major M must
 * refuse a library whose (kvpool_abi_version() >> 16) != M. */
KVPOOL_API uint32_t kvpool_abi_version(void);

/* ---- Errors -------------------------------------------------------------------------- */

/* The numbers of kvpool::ErrorCode (stable: they travel in shared memory). */
typedef enum kvpool_error_code {
  KVPOOL_OK = 0,
  KVPOOL_ERR_NOT_ENOUGH_BLOCKS = 1,    /* allocate(n) with fewer than n free + evictable */
  KVPOOL_ERR_INVALID_ARGUMENT = 2,     /* a value out of range, a NULL pointer */
  KVPOOL_ERR_INVALID_STATE = 3,        /* not allowed in the block's current state */
  KVPOOL_ERR_BLOCK_FULL = 4,           /* add_token on a full block */
  KVPOOL_ERR_BLOCK_EMPTY = 5,          /* pop_token on an empty block */
  KVPOOL_ERR_INCOMPLETE_BLOCK = 6,     /* commit before page_size tokens */
  KVPOOL_ERR_INVALID_HANDLE = 7,       /* a block already consumed, taken or released */
  KVPOOL_ERR_NOT_FOUND = 8,            /* unknown pool, instance */
  KVPOOL_ERR_RESOURCE_EXHAUSTED = 9,   /* a fixed capacity (slots, holds, ring, memory) */
  KVPOOL_ERR_DAEMON_GONE = 10,         /* kvpoold died or stopped: reconnect */
  KVPOOL_ERR_PROTOCOL_ERROR = 11,      /* malformed record */
  KVPOOL_ERR_VERSION_MISMATCH = 12,    /* shm layout major differs */
  KVPOOL_ERR_CONFIG_ERROR = 13,        /* bad configuration field */
  KVPOOL_ERR_PERMISSION_DENIED = 14,   /* uid/gid not allowed */
  KVPOOL_ERR_IO_ERROR = 15,            /* an OS call failed */
  KVPOOL_ERR_TIMEOUT = 16,             /* a bounded wait ran out */
  KVPOOL_ERR_UNSUPPORTED = 17,         /* e.g. built without CUDA */
  KVPOOL_ERR_DEVICE_ERROR = 18,        /* a CUDA call failed */
  KVPOOL_ERR_DISCONNECTED = 19,        /* the daemon cut this client off: reconnect */
  KVPOOL_ERR_INTERNAL = 20,            /* a bug: an invariant broke */
  KVPOOL_ERR_QUOTA_EXCEEDED = 21,      /* this client's share (blocks, references) is used up */
  KVPOOL_ERR_DAEMON_UNRESPONSIVE = 22, /* kvpoold runs but stopped answering (stopped, wedged) */
  /* a block's bytes no longer match its checksum: kvpoold evicted it */
  KVPOOL_ERR_CHECKSUM_MISMATCH = 23
} kvpool_error_code;

/* "NotEnoughBlocks", ...; "Unknown" for a number outside the list. Static storage. */
KVPOOL_API const char* kvpool_error_name(kvpool_error_code code);
/* The message of the last failing call on this thread ("" if none). Valid until the next
 * failing call on this thread. */
KVPOOL_API const char* kvpool_last_error_message(void);
/* The code of the last failing call on this thread (KVPOOL_OK if none). */
KVPOOL_API kvpool_error_code kvpool_last_error_code(void);

/* ---- Handles ------------------------------------------------------------------------- */

typedef struct kvpool_client kvpool_client;
typedef struct kvpool_pool kvpool_pool;
typedef struct kvpool_mutable_block kvpool_mutable_block;
typedef struct kvpool_mutable_batch kvpool_mutable_batch;
typedef struct kvpool_immutable_block kvpool_immutable_block;
typedef struct kvpool_immutable_batch kvpool_immutable_batch;

/* ---- Client -------------------------------------------------------------------------- */

typedef struct kvpool_connect_options {
  uint32_t struct_size;        /* sizeof(kvpool_connect_options) */
  uint32_t connect_timeout_ms; /* default 5000 */
  const char* runtime_dir;     /* NULL or "": resolved like kvpoold does */
  uint32_t poll_us;            /* µs a call polls for its answer before sleeping; default 50 */
  uint32_t pin_host_pools;     /* nonzero: cudaHostRegister host pools (CUDA builds) */
  /* Since ABI 1.1 (struct_size says): after kvpoold dies, the next call waits up to
   * reattach_timeout_ms for it to come back and reattaches; if none came, later calls
   * fail at once with KVPOOL_ERR_DAEMON_GONE (each tries once to reconnect) until one is
   * back, handles kept (ConnectOptions::reattach). */
  uint32_t reattach;            /* nonzero (the default): reattach */
  uint32_t reattach_timeout_ms; /* default 50 */
} kvpool_connect_options;

/* Fills *options with the defaults (struct_size included). */
KVPOOL_API void kvpool_connect_options_init(kvpool_connect_options* options);

/* Attaches to kvpoold `instance` (NULL: "default"); options NULL: the defaults. */
KVPOOL_API kvpool_error_code kvpool_connect(const char* instance,
                                            const kvpool_connect_options* options,
                                            kvpool_client** out);
/* Drops this handle; the connection closes once no pool, block or batch uses it. Releasing
 * the last client or pool handle of a client waits for its async callbacks still due. */
KVPOOL_API void kvpool_client_release(kvpool_client* client);
KVPOOL_API kvpool_error_code kvpool_client_pool(const kvpool_client* client, const char* name,
                                                kvpool_pool** out);
KVPOOL_API size_t kvpool_client_pool_count(const kvpool_client* client);
/* Name of pool `index` (NULL if out of range). */
KVPOOL_API const char* kvpool_client_pool_name(const kvpool_client* client, size_t index);
/* A round trip to kvpoold. */
KVPOOL_API kvpool_error_code kvpool_client_ping(kvpool_client* client);
/* Sends queued releases now (else with the next request, or within ~10 ms). */
KVPOOL_API void kvpool_client_flush(kvpool_client* client);
/* 1 while kvpoold serves this client, 0 once it died, stopped or cut us off. */
KVPOOL_API int kvpool_client_daemon_alive(const kvpool_client* client);
KVPOOL_API uint32_t kvpool_client_slot(const kvpool_client* client);

/* ---- Pool: layout and storage -------------------------------------------------------- */

typedef enum kvpool_storage { KVPOOL_STORAGE_HOST = 0, KVPOOL_STORAGE_CUDA = 1 } kvpool_storage;
typedef enum kvpool_layout_kind {
  KVPOOL_LAYOUT_FULLY_CONTIGUOUS = 0, /* [blocks][layers][outer][page*inner] */
  KVPOOL_LAYOUT_LAYER_SEPARATE = 1    /* [layers][blocks][outer][page*inner] */
} kvpool_layout_kind;

/* The element type the pool's config named ("dtype"); UNSPECIFIED when it gave dtype_bytes
 * alone (the data are then unsigned integers of dtype_bytes to the reader). */
typedef enum kvpool_dtype {
  KVPOOL_DTYPE_UNSPECIFIED = 0,
  KVPOOL_DTYPE_FP16 = 1,
  KVPOOL_DTYPE_BF16 = 2,
  KVPOOL_DTYPE_FP32 = 3,
  KVPOOL_DTYPE_FP8_E4M3 = 4,
  KVPOOL_DTYPE_U8 = 5
} kvpool_dtype;

typedef struct kvpool_layout {
  uint32_t struct_size; /* sizeof(kvpool_layout), set by the caller */
  uint32_t kind;        /* kvpool_layout_kind */
  uint32_t num_blocks;
  uint32_t num_layers;
  uint32_t outer_dim;
  uint32_t page_size;
  uint32_t inner_dim;
  uint32_t dtype_bytes;
  uint32_t alignment;
  uint32_t dtype;        /* kvpool_dtype */
  uint64_t region_bytes; /* page_size * inner_dim * dtype_bytes: one (layer, outer) region */
  uint64_t block_bytes;  /* num_layers * outer_dim * region_bytes */
  uint64_t total_bytes;  /* the pool's memory */
} kvpool_layout;

/* Block counts of a pool, read from the daemon's control segment (a moment old). */
typedef struct kvpool_pool_counts {
  uint32_t struct_size; /* sizeof(kvpool_pool_counts), set by the caller */
  uint32_t total;
  uint32_t free_blocks;    /* reset, owned by nobody */
  uint32_t inactive;       /* registered, unreferenced: matchable and evictable */
  uint32_t active;         /* registered and referenced */
  uint32_t mutable_blocks; /* handed out by allocate */
} kvpool_pool_counts;

KVPOOL_API void kvpool_pool_release(kvpool_pool* pool);
KVPOOL_API const char* kvpool_pool_name(const kvpool_pool* pool);
KVPOOL_API uint32_t kvpool_pool_index(const kvpool_pool* pool);
KVPOOL_API uint32_t kvpool_pool_page_size(const kvpool_pool* pool);
KVPOOL_API kvpool_error_code kvpool_pool_layout(const kvpool_pool* pool, kvpool_layout* out);
KVPOOL_API kvpool_storage kvpool_pool_storage(const kvpool_pool* pool);
/* Device pools: the local CUDA ordinal of the pool's GPU (KVPOOL_ERR_INVALID_STATE for host
 * pools). */
KVPOOL_API kvpool_error_code kvpool_pool_cuda_device(const kvpool_pool* pool, int* out);
KVPOOL_API kvpool_error_code kvpool_pool_counts_get(const kvpool_pool* pool,
                                                    kvpool_pool_counts* out);

/* Since ABI 1.2: how a pool hashes its blocks (kvpoold's "hash_scheme"; the numbers are
 * kvpool::HashScheme's). */
typedef enum kvpool_hash_scheme {
  KVPOOL_HASH_DYNAMO_0_2 = 0,   /* "dynamo-0.2": the chain seed is the salt */
  KVPOOL_HASH_DYNAMO_ROUTER = 1 /* "dynamo-router": the chain seed is always 1337 */
} kvpool_hash_scheme;
/* Since ABI 1.2. KVPOOL_HASH_DYNAMO_0_2 for a NULL pool. */
KVPOOL_API kvpool_hash_scheme kvpool_pool_hash_scheme(const kvpool_pool* pool);
/* Since ABI 1.2: the hashes of the full blocks of tokens[0..count) as this pool hashes them
 * (its page size and hash scheme): the sequence hashes to match, and that
 * kvpool_mutable_block_commit gives blocks initialised with the same salt. Otherwise as
 * kvpool_hash_tokens. Use this, not kvpool_hash_tokens, whatever the pool's scheme. */
KVPOOL_API kvpool_error_code kvpool_pool_hash_tokens(const kvpool_pool* pool,
                                                     const uint32_t* tokens, size_t count,
                                                     uint64_t salt, uint64_t* block_hashes,
                                                     uint64_t* sequence_hashes, size_t capacity,
                                                     size_t* blocks);

/* ---- Pool: allocate, register, match (blocking) --------------------------------------- */

/* `count` mutable blocks, all or nothing (KVPOOL_ERR_NOT_ENOUGH_BLOCKS). */
KVPOOL_API kvpool_error_code kvpool_pool_allocate(kvpool_pool* pool, uint32_t count,
                                                  kvpool_mutable_batch** out);
/* Registers every block of `batch` (each committed) and consumes the batch, whatever the
 * outcome (on failure its blocks are returned to the pool). *out holds, per block, the
 * registered block that now holds its hash (its own, or the one it was deduplicated onto). */
KVPOOL_API kvpool_error_code kvpool_pool_register_batch(kvpool_pool* pool,
                                                        kvpool_mutable_batch* batch,
                                                        kvpool_immutable_batch** out);
/* Since ABI 1.1: how kvpool_pool_register_batch_with registers (RegisterOptions). */
typedef struct kvpool_register_options {
  uint32_t struct_size; /* sizeof(kvpool_register_options) */
  /* nonzero: send each block's checksum (XXH3-64 of its bytes), so kvpoold can tell later
   * that its bytes changed. Host pools only (else KVPOOL_ERR_UNSUPPORTED). */
  uint32_t checksum;
  /* nonzero: send each block's token ids, so KV events carry them (kvpool-events --format
   * vllm: BlockStored.token_ids), for consumers that hash tokens themselves (llm-d's
   * KV-cache indexer). Costs page_size * 4 bytes per block; off, token_ids are empty. */
  uint32_t send_tokens;
} kvpool_register_options;

/* Fills *options with the defaults (everything off; struct_size included). */
KVPOOL_API void kvpool_register_options_init(kvpool_register_options* options);
/* kvpool_pool_register_batch with options (NULL: the defaults). Consumes `batch` whatever
 * the outcome. */
KVPOOL_API kvpool_error_code kvpool_pool_register_batch_with(kvpool_pool* pool,
                                                             kvpool_mutable_batch* batch,
                                                             const kvpool_register_options* options,
                                                             kvpool_immutable_batch** out);
/* The same for `count` separately owned blocks (from kvpool_mutable_batch_take); consumes
 * each of them, whatever the outcome. */
KVPOOL_API kvpool_error_code kvpool_pool_register_blocks(kvpool_pool* pool,
                                                         kvpool_mutable_block* const* blocks,
                                                         size_t count,
                                                         kvpool_immutable_batch** out);
/* Since ABI 1.1: kvpool_pool_register_blocks with options (NULL: the defaults). */
KVPOOL_API kvpool_error_code kvpool_pool_register_blocks_with(
    kvpool_pool* pool, kvpool_mutable_block* const* blocks, size_t count,
    const kvpool_register_options* options, kvpool_immutable_batch** out);
/* The longest prefix of hashes[0..count) the pool holds (possibly empty), one reference
 * each, as one handle. */
KVPOOL_API kvpool_error_code kvpool_pool_match(kvpool_pool* pool, const uint64_t* hashes,
                                               size_t count, kvpool_immutable_batch** out);

/* Since ABI 1.2: the peer tier (docs/peers.md). A match whose prefix may continue on
 * another host: what the pool lacks is asked of this host's kvpool-peer, which fetches it
 * from a peer's kvpoold, verifies and registers it here. Any failure of the peer path is
 * a shorter prefix, never an error; the call returns within about deadline_ms. */
typedef struct kvpool_peer_fetch_options {
  uint32_t deadline_ms; /* the whole fetch (0: 500) */
  const char* holder;   /* "host:port" of the holder's kvpool-peer, or NULL/"" (look it up) */
} kvpool_peer_fetch_options;
KVPOOL_API kvpool_error_code kvpool_pool_match_peers(kvpool_pool* pool, const uint64_t* hashes,
                                                     size_t count,
                                                     const kvpool_peer_fetch_options* options,
                                                     kvpool_immutable_batch** out);

/* Since ABI 1.3: how a match looks for the prefix on this host (C++ MatchOptions). */
typedef struct kvpool_match_options {
  uint32_t struct_size; /* sizeof(kvpool_match_options) */
  /* nonzero: continue the prefix from the pool's disk tier (docs/disk-tier.md) past what
   * host memory holds: kvpoold reads those blocks into host blocks, verifies each checksum,
   * registers them and answers with the longest prefix over both tiers, once the reads are
   * done (it serves every other call meanwhile). A block that fails its checksum or its
   * read ends the prefix (a miss, never a bad block). A pool without a disk tier answers
   * as kvpool_pool_match. */
  uint32_t onboard;
} kvpool_match_options;
/* Fills *options with the defaults (onboard off; struct_size included). */
KVPOOL_API void kvpool_match_options_init(kvpool_match_options* options);
/* kvpool_pool_match with options (NULL: the defaults). */
KVPOOL_API kvpool_error_code kvpool_pool_match_with(kvpool_pool* pool, const uint64_t* hashes,
                                                    size_t count,
                                                    const kvpool_match_options* options,
                                                    kvpool_immutable_batch** out);

/* ---- Pool: completion-based async forms ------------------------------------------------
 * The request is sent before the function returns; the callback runs exactly once, on the
 * client's completion thread (one per client, started on first use), when kvpoold has
 * answered or failed. If the function returns an error, the callback never runs. The
 * callback owns `result` (NULL unless code == KVPOOL_OK); `message` lives until it returns.
 * A callback may call kvpool functions, but must not wait for another async completion of
 * the same client (they run one after another on that thread). */
typedef void (*kvpool_mutable_done)(void* user_data, kvpool_error_code code, const char* message,
                                    kvpool_mutable_batch* result);
typedef void (*kvpool_immutable_done)(void* user_data, kvpool_error_code code, const char* message,
                                      kvpool_immutable_batch* result);

KVPOOL_API kvpool_error_code kvpool_pool_allocate_async(kvpool_pool* pool, uint32_t count,
                                                        kvpool_mutable_done done, void* user_data);
/* Consumes `batch` (also when it returns an error). */
KVPOOL_API kvpool_error_code kvpool_pool_register_batch_async(kvpool_pool* pool,
                                                              kvpool_mutable_batch* batch,
                                                              kvpool_immutable_done done,
                                                              void* user_data);
/* hashes are copied before it returns. */
KVPOOL_API kvpool_error_code kvpool_pool_match_async(kvpool_pool* pool, const uint64_t* hashes,
                                                     size_t count, kvpool_immutable_done done,
                                                     void* user_data);

/* Since ABI 1.2: kvpool_pool_match_peers, completed on the client's completion thread;
 * hashes and options are copied before it returns. */
KVPOOL_API kvpool_error_code kvpool_pool_match_peers_async(kvpool_pool* pool,
                                                           const uint64_t* hashes, size_t count,
                                                           const kvpool_peer_fetch_options* options,
                                                           kvpool_immutable_done done,
                                                           void* user_data);

/* Since ABI 1.3: kvpool_pool_match_with, completed on the client's completion thread;
 * hashes and options are copied before it returns. */
KVPOOL_API kvpool_error_code kvpool_pool_match_with_async(kvpool_pool* pool, const uint64_t* hashes,
                                                          size_t count,
                                                          const kvpool_match_options* options,
                                                          kvpool_immutable_done done,
                                                          void* user_data);

/* ---- Mutable blocks ------------------------------------------------------------------ */

typedef enum kvpool_block_state {
  KVPOOL_BLOCK_RESET = 0,
  KVPOOL_BLOCK_PARTIAL = 1,
  KVPOOL_BLOCK_COMPLETE = 2,
  KVPOOL_BLOCK_REGISTERED = 3,
  KVPOOL_BLOCK_INVALID = 255 /* taken, consumed or NULL */
} kvpool_block_state;

KVPOOL_API size_t kvpool_mutable_batch_size(const kvpool_mutable_batch* batch);
/* Borrowed pointer to block `index` (NULL if out of range), owned by the batch. */
KVPOOL_API kvpool_mutable_block* kvpool_mutable_batch_at(kvpool_mutable_batch* batch, size_t index);
/* Moves block `index` out into its own handle (release it, or register it); the batch's
 * slot is left empty (KVPOOL_ERR_INVALID_HANDLE if used). */
KVPOOL_API kvpool_error_code kvpool_mutable_batch_take(kvpool_mutable_batch* batch, size_t index,
                                                       kvpool_mutable_block** out);
/* Returns every block still in the batch to the pool. */
KVPOOL_API void kvpool_mutable_batch_release(kvpool_mutable_batch* batch);
/* Returns an owned block (from kvpool_mutable_batch_take) to the pool. Never pass a
 * borrowed kvpool_mutable_batch_at pointer. */
KVPOOL_API void kvpool_mutable_block_release(kvpool_mutable_block* block);

/* Token API (Dynamo's): Reset -> Partial -> Complete. */
KVPOOL_API kvpool_error_code kvpool_mutable_block_init_sequence(kvpool_mutable_block* block,
                                                                uint64_t salt, int has_parent,
                                                                uint64_t parent_sequence_hash);
KVPOOL_API kvpool_error_code kvpool_mutable_block_add_token(kvpool_mutable_block* block,
                                                            uint32_t token);
/* Adds as many of tokens[0..count) as fit; *added (may be NULL) says how many. */
KVPOOL_API kvpool_error_code kvpool_mutable_block_add_tokens(kvpool_mutable_block* block,
                                                             const uint32_t* tokens, size_t count,
                                                             size_t* added);
KVPOOL_API kvpool_error_code kvpool_mutable_block_pop_token(kvpool_mutable_block* block);
KVPOOL_API kvpool_error_code kvpool_mutable_block_pop_tokens(kvpool_mutable_block* block,
                                                             size_t count);
/* Only with exactly page_size tokens; computes the block and sequence hashes. */
KVPOOL_API kvpool_error_code kvpool_mutable_block_commit(kvpool_mutable_block* block);
/* Back to Reset (tokens and hashes dropped; the block stays allocated). */
KVPOOL_API kvpool_error_code kvpool_mutable_block_reset(kvpool_mutable_block* block);
KVPOOL_API kvpool_block_state kvpool_mutable_block_state(const kvpool_mutable_block* block);
KVPOOL_API size_t kvpool_mutable_block_token_count(const kvpool_mutable_block* block);
KVPOOL_API kvpool_error_code kvpool_mutable_block_sequence_hash(const kvpool_mutable_block* block,
                                                                uint64_t* out);
KVPOOL_API kvpool_error_code kvpool_mutable_block_block_hash(const kvpool_mutable_block* block,
                                                             uint64_t* out);
KVPOOL_API kvpool_error_code kvpool_mutable_block_set_priority(kvpool_mutable_block* block,
                                                               uint32_t priority);
KVPOOL_API uint32_t kvpool_mutable_block_priority(const kvpool_mutable_block* block);
KVPOOL_API uint32_t kvpool_mutable_block_id(const kvpool_mutable_block* block);
/* Region (layer, outer): a host pointer into the mapped pool, or a device pointer (device
 * pools: write it with kernels or copies, never dereference it on the host). */
KVPOOL_API kvpool_error_code kvpool_mutable_block_address(const kvpool_mutable_block* block,
                                                          uint32_t layer, uint32_t outer,
                                                          void** out);

/* ---- Immutable blocks ---------------------------------------------------------------- */

KVPOOL_API size_t kvpool_immutable_batch_size(const kvpool_immutable_batch* batch);
/* Borrowed pointer to block `index` (NULL if out of range), owned by the batch. */
KVPOOL_API const kvpool_immutable_block* kvpool_immutable_batch_at(
    const kvpool_immutable_batch* batch, size_t index);
/* Copies the sequence hashes / block ids of the first min(capacity, size) blocks; returns
 * how many were written. */
KVPOOL_API size_t kvpool_immutable_batch_sequence_hashes(const kvpool_immutable_batch* batch,
                                                         uint64_t* out, size_t capacity);
KVPOOL_API size_t kvpool_immutable_batch_block_ids(const kvpool_immutable_batch* batch,
                                                   uint32_t* out, size_t capacity);
/* Region (layer, outer) of block `index`, to read (KVPOOL_ERR_INVALID_ARGUMENT if an index
 * is out of range). */
KVPOOL_API kvpool_error_code kvpool_immutable_batch_address(const kvpool_immutable_batch* batch,
                                                            size_t index, uint32_t layer,
                                                            uint32_t outer, const void** out);
/* Drops the batch's references (batched; see kvpool_client_flush). */
KVPOOL_API void kvpool_immutable_batch_release(kvpool_immutable_batch* batch);

/* A new owned handle sharing the same reference (the reference goes with the last one). */
KVPOOL_API kvpool_error_code kvpool_immutable_block_clone(const kvpool_immutable_block* block,
                                                          kvpool_immutable_block** out);
KVPOOL_API void kvpool_immutable_block_release(kvpool_immutable_block* block);
KVPOOL_API uint64_t kvpool_immutable_block_sequence_hash(const kvpool_immutable_block* block);
KVPOOL_API uint32_t kvpool_immutable_block_id(const kvpool_immutable_block* block);
/* Region (layer, outer), to read: host or device pointer as for mutable blocks. */
KVPOOL_API kvpool_error_code kvpool_immutable_block_address(const kvpool_immutable_block* block,
                                                            uint32_t layer, uint32_t outer,
                                                            const void** out);

/* ---- Batch store: opaque keys, asynchronous batches (since ABI 1.2) ------------------ */
/* The C form of kvpool::BatchStore (kvpool/batch_store.hpp, docs/batch-store.md): byte-string
 * keys over one FullyContiguous host pool; submit a batch, wait on one eventfd, take the
 * completions. Copies run in this process (a worker thread of the store). */

typedef struct kvpool_batch_store kvpool_batch_store;
typedef struct kvpool_batch_completion kvpool_batch_completion;

typedef enum kvpool_batch_op {
  KVPOOL_BATCH_EXISTS = 0,
  KVPOOL_BATCH_GET = 1, /* copy values out into the buffers */
  KVPOOL_BATCH_SET = 2, /* copy the buffers in (a stored key keeps its value) */
  KVPOOL_BATCH_DELETE = 3,
  KVPOOL_BATCH_EXISTS_PREFIX = 4 /* kvpool_batch_completion_prefix: stored keys from the first */
} kvpool_batch_op;

/* Per key (kvpool_batch_completion_results). */
typedef enum kvpool_key_result {
  KVPOOL_KEY_MISS = 0,
  KVPOOL_KEY_OK = 1,
  KVPOOL_KEY_TOO_LARGE = 2, /* value above the capacity, or a get buffer too short */
  KVPOOL_KEY_FAILED = 3     /* the batch failed first (kvpool_batch_completion_status) */
} kvpool_key_result;

typedef struct kvpool_batch_store_options {
  uint32_t struct_size;      /* sizeof(kvpool_batch_store_options) */
  uint32_t max_key_bytes;    /* default 448 */
  const char* key_namespace; /* bytes; NULL: none */
  size_t key_namespace_len;
  uint32_t priority;         /* eviction priority of stored blocks; default 0 */
  uint32_t keys_per_request; /* default 128 */
  uint32_t index_bits;       /* 64; fewer only in tests (forces index collisions) */
} kvpool_batch_store_options;

KVPOOL_API void kvpool_batch_store_options_init(kvpool_batch_store_options* options);
/* Opens a store over `pool` of `client` (options NULL: the defaults). */
KVPOOL_API kvpool_error_code kvpool_batch_store_open(const kvpool_client* client, const char* pool,
                                                     const kvpool_batch_store_options* options,
                                                     kvpool_batch_store** out);
/* Closes (queued batches complete with KVPOOL_ERR_INVALID_STATE), waits for the batch in
 * progress, frees. Completions not taken are dropped. */
KVPOOL_API void kvpool_batch_store_release(kvpool_batch_store* store);
/* Readable while completions wait (nonblocking eventfd; kvpool_batch_store_next resets it). */
KVPOOL_API int kvpool_batch_store_event_fd(const kvpool_batch_store* store);
KVPOOL_API uint64_t kvpool_batch_store_value_capacity(const kvpool_batch_store* store);
/* Queues a batch of `count` keys (copied). GET and SET take one buffer per key (buffers and
 * buffer_sizes; they must stay valid until the completion is taken), the others none (NULL). */
KVPOOL_API kvpool_error_code kvpool_batch_store_submit(
    kvpool_batch_store* store, kvpool_batch_op op, size_t count, const void* const* keys,
    const size_t* key_sizes, void* const* buffers, const size_t* buffer_sizes, uint64_t* id_out);
/* The next completion ready now (in the order batches ran), or NULL when none is. */
KVPOOL_API kvpool_batch_completion* kvpool_batch_store_next(kvpool_batch_store* store);
/* Waits up to timeout_ms for batch `id` alone; KVPOOL_ERR_TIMEOUT when it is not done. */
KVPOOL_API kvpool_error_code kvpool_batch_store_wait(kvpool_batch_store* store, uint64_t id,
                                                     uint32_t timeout_ms,
                                                     kvpool_batch_completion** out);
KVPOOL_API uint64_t kvpool_batch_completion_id(const kvpool_batch_completion* c);
/* KVPOOL_OK, or why the batch stopped (its message: kvpool_batch_completion_message). */
KVPOOL_API kvpool_error_code kvpool_batch_completion_status(const kvpool_batch_completion* c);
KVPOOL_API const char* kvpool_batch_completion_message(const kvpool_batch_completion* c);
KVPOOL_API size_t kvpool_batch_completion_count(const kvpool_batch_completion* c);
/* count kvpool_key_result bytes, one per key. */
KVPOOL_API const uint8_t* kvpool_batch_completion_results(const kvpool_batch_completion* c);
/* GET: count byte counts copied (0 for a miss); NULL for other ops. */
KVPOOL_API const uint64_t* kvpool_batch_completion_value_sizes(const kvpool_batch_completion* c);
KVPOOL_API uint32_t kvpool_batch_completion_prefix(const kvpool_batch_completion* c);
KVPOOL_API void kvpool_batch_completion_release(kvpool_batch_completion* c);

/* ---- Hashing (Dynamo-compatible; no daemon needed) ----------------------------------- */
/* To match a pool's blocks, hash with the pool's scheme: kvpool_pool_hash_tokens, or
 * kvpool_hash_tokens_scheme with kvpool_pool_hash_scheme(pool). kvpool_sequence_hash and
 * kvpool_hash_tokens are the dynamo-0.2 scheme only. */

/* XXH3-64 of the tokens (little-endian u32) seeded with salt (the same in both schemes). */
KVPOOL_API uint64_t kvpool_block_hash(const uint32_t* tokens, size_t count, uint64_t salt);
/* dynamo-0.2: the block hash itself without a parent; else XXH3-64 of {parent, block_hash}
 * seeded with salt. */
KVPOOL_API uint64_t kvpool_sequence_hash(int has_parent, uint64_t parent, uint64_t block_hash,
                                         uint64_t salt);
/* dynamo-0.2: hashes of the full blocks of tokens[0..count) (a partial tail is not hashed):
 * *blocks = count / page_size; writes min(*blocks, capacity) entries of each array (either
 * may be NULL when capacity is 0). */
KVPOOL_API kvpool_error_code kvpool_hash_tokens(const uint32_t* tokens, size_t count,
                                                uint32_t page_size, uint64_t salt,
                                                uint64_t* block_hashes, uint64_t* sequence_hashes,
                                                size_t capacity, size_t* blocks);
/* Since ABI 1.2: kvpool_hash_tokens in the given scheme (KVPOOL_ERR_INVALID_ARGUMENT for a
 * scheme this library does not know). */
KVPOOL_API kvpool_error_code kvpool_hash_tokens_scheme(kvpool_hash_scheme scheme,
                                                       const uint32_t* tokens, size_t count,
                                                       uint32_t page_size, uint64_t salt,
                                                       uint64_t* block_hashes,
                                                       uint64_t* sequence_hashes, size_t capacity,
                                                       size_t* blocks);

#ifdef __cplusplus
}
#endif

#endif /* KVPOOL_KVPOOL_H */
