// Opaque keys and an asynchronous batch store over one host pool (docs/design.md §6b).
//
//   auto store = kvpool::BatchStore::open(client, "kv");       // Result<BatchStore>
//   kvpool::KeyBytes keys[2] = {as_bytes("a"), as_bytes("b")};
//   kvpool::IoBuffer bufs[2] = {{page0, n}, {page1, n}};
//   auto id = store->submit(kvpool::BatchOp::kSet, keys, bufs);   // copies in, later
//   poll(store->event_fd()) ... for (auto& c : store->drain()) { c.id, c.results[i] }
//
// Engines address blocks by their own keys (byte strings: vLLM block-hash bytes + group
// index, SGLang SHA-256 hex, LMCache "model@rank@group@hash"). A BatchStore keeps one key per
// block of a FullyContiguous host pool: the block holds a 64-byte header, the key, then the
// value (docs/batch-store.md has the format). kvpoold finds the block by a 64-bit index hash
// of (namespace, key) — the same registry, eviction, quotas, events and metrics as any
// registered block — and the client compares the whole key stored in the block before it
// reports a hit. A lookup therefore never returns another key's value: two keys whose index
// hashes collide cost a miss for the second (it cannot be stored while the first is),
// never a false hit.
//
// Calls never block on kvpoold: submit() queues the batch and returns its id; one worker
// thread of this process runs batches in order (a round trip or two to kvpoold per 128 keys,
// then the copies, in this process, through the pool's shared mapping) and posts a
// completion; event_fd() becomes readable. When kvpoold is down a batch completes with
// kDaemonGone (its keys kFailed: a miss to an engine) within the Client's reattach_timeout
// (ConnectOptions), at once with reattach off.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvpool/client.hpp"
#include "kvpool/core/status.hpp"

namespace kvpool {

namespace detail {
class BatchStoreImpl;
}

enum class BatchOp : uint32_t {
  kExists = 0,        // per key: stored or not
  kGet = 1,           // per key: copy the value out into the caller's buffer
  kSet = 2,           // per key: copy the caller's buffer in (a stored key keeps its value)
  kDelete = 3,        // per key: take it out of the pool
  kExistsPrefix = 4,  // how many keys from the first are stored (BatchCompletion::prefix)
};

// Per key, in BatchCompletion::results.
enum class KeyResult : uint8_t {
  kMiss = 0,      // not stored (exists/get/delete), or could not be stored (set)
  kOk = 1,        // stored / copied / removed
  kTooLarge = 2,  // set: more bytes than value_capacity(); get: the buffer is shorter than
                  // the stored value (nothing copied)
  kFailed = 3,    // the batch failed before this key was done (BatchCompletion::status)
};

using KeyBytes = std::span<const std::byte>;

// A caller's buffer; it must stay valid until the batch's completion is drained.
struct IoBuffer {
  void* data = nullptr;
  size_t size = 0;
};

struct BatchCompletion {
  uint64_t id = 0;
  BatchOp op = BatchOp::kExists;
  Status status;                      // ok, or why the batch stopped (keys not done are kFailed)
  uint32_t prefix = 0;                // kExistsPrefix: stored keys from the first
  std::vector<KeyResult> results;     // one per key, in order
  std::vector<uint64_t> value_sizes;  // kGet: bytes copied per key (0 for a miss)
};

struct BatchStoreOptions {
  // Keys of one namespace never see another's (the namespace is part of the stored key).
  std::string key_namespace;
  // Bytes a key may have. Values start after the 64-byte header, 4 + namespace bytes and
  // this many key bytes, rounded up to 64 (batch_store_block_bytes).
  uint32_t max_key_bytes = 448;
  // Eviction priority of stored blocks (lower goes first), as RegisterOptions.
  uint32_t priority = 0;
  // Keys per request to kvpoold (the answer of one request must fit its response ring).
  uint32_t keys_per_request = 128;
  // A set sends each namespaced key (up to 4096 bytes) with its register, so that the pool's
  // Stored events carry it (kvpool-events --vllm-block-hashes key, docs/batch-store.md
  // "Events"). Off: the register carries no keys (events name the index hash only; a
  // kvpoold from before keys refuses a register with them).
  bool event_keys = true;
  // Testing only: index hashes keep only their low `index_bits` bits, so that distinct keys
  // collide in the registry (tests of the no-false-hit rule). 64 in production.
  uint32_t index_bits = 64;
};

// Bytes one block needs to hold a key of up to `max_key_bytes` (in a namespace of
// `namespace_bytes`) and a value of `value_bytes`: the pool's block bytes must be at least
// this (for sizing pools).
uint64_t batch_store_block_bytes(uint32_t max_key_bytes, uint64_t value_bytes,
                                 uint32_t namespace_bytes = 0);

// Counters of this store (this process only; kvpoold's metrics count the pool's side).
struct BatchStoreStats {
  uint64_t batches = 0;
  uint64_t keys = 0;
  uint64_t hits = 0;  // exists/get/delete keys found with their key
  uint64_t misses = 0;
  uint64_t key_mismatches = 0;  // index hash found, another key stored: a miss
  uint64_t bytes_in = 0;        // copied into the pool (set)
  uint64_t bytes_out = 0;       // copied out (get)
};

class BatchStore {
 public:
  // `pool`: a FullyContiguous host pool of `client`. kUnsupported otherwise, kInvalidArgument
  // when its blocks cannot hold a key of max_key_bytes and one byte of value.
  static Result<BatchStore> open(const Client& client, std::string_view pool,
                                 const BatchStoreOptions& options = {});
  BatchStore(BatchStore&&) noexcept;
  BatchStore& operator=(BatchStore&&) noexcept;
  ~BatchStore();  // close(), then waits for the batch in progress

  // Queues a batch. `buffers` has one entry per key for kGet and kSet, none otherwise.
  // Keys are copied; buffers are not (keep them until the completion is drained).
  // kInvalidArgument (nothing queued) for a key longer than max_key_bytes, a buffer count
  // that does not match, or a store that is closed.
  Result<uint64_t> submit(BatchOp op, std::span<const KeyBytes> keys,
                          std::span<const IoBuffer> buffers = {});
  // Readable (eventfd, nonblocking) while completions wait to be drained. It may also be
  // readable with nothing to drain (a completion taken by wait() just before): poll, drain,
  // and poll again when drain() gives nothing.
  int event_fd() const;
  // Every completion ready now, in the order the batches ran; resets event_fd.
  std::vector<BatchCompletion> drain();
  // Waits for batch `id` alone (others stay for drain); kTimeout when it is not done in time.
  Result<BatchCompletion> wait(uint64_t id, std::chrono::milliseconds timeout);
  // Stops taking batches; the queued ones complete with kInvalidState. Idempotent.
  void close();

  uint64_t value_capacity() const;
  uint32_t max_key_bytes() const;
  const std::string& pool_name() const;
  BatchStoreStats stats() const;

  // The 64-bit index hash kvpoold files a key under (XXH3-64 of the namespaced key, masked
  // to index_bits): what KV events name for it.
  uint64_t index_hash(KeyBytes key) const;

 private:
  explicit BatchStore(std::unique_ptr<detail::BatchStoreImpl> impl);
  std::unique_ptr<detail::BatchStoreImpl> impl_;
};

// A key from text (SGLang and LMCache keys are strings).
inline KeyBytes key_bytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

}  // namespace kvpool
