// kvpool.h: allocate / register / match (blocking), mutable and immutable blocks, batches.
#include <algorithm>
#include <cstddef>
#include <cstring>

#include "c_api_internal.hpp"

using namespace kvpool;
using namespace kvpool::c_api;

namespace {

kvpool_error_code taken(const char* fn) {
  return fail(KVPOOL_ERR_INVALID_HANDLE,
              (std::string(fn) + ": the block was taken, registered or released already").c_str());
}

// A usable mutable block, or the code that says why not.
#define KVPOOL_C_MUTABLE(block, fn)                         \
  if (!(block)) return null_argument(fn ": block is NULL"); \
  if (!cpp(block)->valid()) return taken(fn)

kvpool_error_code status(const Status& s) { return s ? KVPOOL_OK : fail(s); }

// The C options as RegisterOptions; false (the error recorded) when the struct is too small.
// A caller built against an older header passes a shorter struct: fields it lacks are off.
bool register_options(const kvpool_register_options* options, RegisterOptions* out,
                      const char* fn) {
  kvpool_register_options o{};
  if (options) {
    if (options->struct_size < offsetof(kvpool_register_options, checksum)) {
      (void)fail(KVPOOL_ERR_INVALID_ARGUMENT,
                 (std::string(fn) +
                  ": options->struct_size is too small (use kvpool_register_options_init)")
                     .c_str());
      return false;
    }
    std::memcpy(&o, options, std::min<size_t>(options->struct_size, sizeof(o)));
  }
  out->checksum = o.checksum != 0;
  out->send_tokens = o.send_tokens != 0;
  return true;
}

}  // namespace

extern "C" {

// ---- Pool operations (blocking) -----------------------------------------------------------

kvpool_error_code kvpool_pool_allocate(kvpool_pool* pool, uint32_t count,
                                       kvpool_mutable_batch** out) {
  if (!pool || !out) return null_argument("kvpool_pool_allocate: pool and out must not be NULL");
  return guarded([&] {
    auto r = pool->pool.allocate_blocks(count);
    if (!r) return fail(r.status());
    *out = new kvpool_mutable_batch{std::move(r.value())};
    return KVPOOL_OK;
  });
}

kvpool_error_code kvpool_pool_register_batch(kvpool_pool* pool, kvpool_mutable_batch* batch,
                                             kvpool_immutable_batch** out) {
  std::unique_ptr<kvpool_mutable_batch> owned(batch);  // consumed whatever the outcome
  if (!pool || !batch || !out)
    return null_argument("kvpool_pool_register_batch: pool, batch and out must not be NULL");
  return guarded([&] {
    auto r = pool->pool.register_blocks(std::move(owned->blocks));
    if (!r) return fail(r.status());
    *out = new kvpool_immutable_batch{std::move(r.value())};
    return KVPOOL_OK;
  });
}

void kvpool_register_options_init(kvpool_register_options* options) {
  if (!options) return;
  *options = kvpool_register_options{};
  options->struct_size = sizeof(kvpool_register_options);
}

kvpool_error_code kvpool_pool_register_batch_with(kvpool_pool* pool, kvpool_mutable_batch* batch,
                                                  const kvpool_register_options* options,
                                                  kvpool_immutable_batch** out) {
  std::unique_ptr<kvpool_mutable_batch> owned(batch);  // consumed whatever the outcome
  if (!pool || !batch || !out)
    return null_argument("kvpool_pool_register_batch_with: pool, batch and out must not be NULL");
  RegisterOptions ro;
  if (!register_options(options, &ro, "kvpool_pool_register_batch_with"))
    return KVPOOL_ERR_INVALID_ARGUMENT;
  return guarded([&] {
    auto r = pool->pool.register_blocks(std::move(owned->blocks), ro);
    if (!r) return fail(r.status());
    *out = new kvpool_immutable_batch{std::move(r.value())};
    return KVPOOL_OK;
  });
}

kvpool_error_code kvpool_pool_register_blocks(kvpool_pool* pool,
                                              kvpool_mutable_block* const* blocks, size_t count,
                                              kvpool_immutable_batch** out) {
  return kvpool_pool_register_blocks_with(pool, blocks, count, nullptr, out);
}

kvpool_error_code kvpool_pool_register_blocks_with(kvpool_pool* pool,
                                                   kvpool_mutable_block* const* blocks,
                                                   size_t count,
                                                   const kvpool_register_options* options,
                                                   kvpool_immutable_batch** out) {
  return guarded([&] {
    // Consumed whatever the outcome: own each distinct block once (a block listed twice
    // must not be freed twice), then check.
    std::vector<kvpool_mutable_block*> raw;
    if (blocks) raw.assign(blocks, blocks + count);
    std::vector<kvpool_mutable_block*> distinct = raw;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    std::vector<std::unique_ptr<MutableBlock>> owned;
    owned.reserve(distinct.size());
    for (auto* b : distinct)
      if (b) owned.emplace_back(cpp(b));
    if (!pool || !out || (!blocks && count > 0))
      return null_argument("kvpool_pool_register_blocks: pool, blocks and out must not be NULL");
    for (size_t i = 0; i < count; ++i)
      if (!raw[i])
        return fail(
            KVPOOL_ERR_INVALID_ARGUMENT,
            ("kvpool_pool_register_blocks: blocks[" + std::to_string(i) + "] is NULL").c_str());
    if (distinct.size() != count)
      return fail(KVPOOL_ERR_INVALID_ARGUMENT,
                  "kvpool_pool_register_blocks: a block appears twice in blocks[]");
    RegisterOptions ro;
    if (!register_options(options, &ro, "kvpool_pool_register_blocks_with"))
      return KVPOOL_ERR_INVALID_ARGUMENT;
    std::vector<MutableBlock> v;
    v.reserve(count);
    for (size_t i = 0; i < count; ++i) v.push_back(std::move(*cpp(raw[i])));
    auto r = pool->pool.register_blocks(std::move(v), ro);
    if (!r) return fail(r.status());
    *out = new kvpool_immutable_batch{std::move(r.value())};
    return KVPOOL_OK;
  });
}

kvpool_error_code kvpool_pool_match(kvpool_pool* pool, const uint64_t* hashes, size_t count,
                                    kvpool_immutable_batch** out) {
  if (!pool || !out || (!hashes && count > 0))
    return null_argument("kvpool_pool_match: pool, hashes and out must not be NULL");
  return guarded([&] {
    auto r = pool->pool.match_sequence_hashes(std::span<const SequenceHash>(hashes, count));
    if (!r) return fail(r.status());
    *out = new kvpool_immutable_batch{std::move(r.value())};
    return KVPOOL_OK;
  });
}

kvpool_error_code kvpool_pool_match_peers(kvpool_pool* pool, const uint64_t* hashes, size_t count,
                                          const kvpool_peer_fetch_options* options,
                                          kvpool_immutable_batch** out) {
  if (!pool || !out || (!hashes && count > 0))
    return null_argument("kvpool_pool_match_peers: pool, hashes and out must not be NULL");
  return guarded([&] {
    auto r = pool->pool.match_sequence_hashes(std::span<const SequenceHash>(hashes, count),
                                              peer_options(options));
    if (!r) return fail(r.status());
    *out = new kvpool_immutable_batch{std::move(r.value())};
    return KVPOOL_OK;
  });
}

void kvpool_match_options_init(kvpool_match_options* options) {
  if (!options) return;
  *options = kvpool_match_options{};
  options->struct_size = sizeof(kvpool_match_options);
}

kvpool_error_code kvpool_pool_match_with(kvpool_pool* pool, const uint64_t* hashes, size_t count,
                                         const kvpool_match_options* options,
                                         kvpool_immutable_batch** out) {
  if (!pool || !out || (!hashes && count > 0))
    return null_argument("kvpool_pool_match_with: pool, hashes and out must not be NULL");
  MatchOptions o;
  if (!match_options(options, &o, "kvpool_pool_match_with")) return KVPOOL_ERR_INVALID_ARGUMENT;
  return guarded([&] {
    auto r = pool->pool.match_sequence_hashes(std::span<const SequenceHash>(hashes, count), o);
    if (!r) return fail(r.status());
    *out = new kvpool_immutable_batch{std::move(r.value())};
    return KVPOOL_OK;
  });
}

// ---- Mutable batches and blocks ----------------------------------------------------------

size_t kvpool_mutable_batch_size(const kvpool_mutable_batch* batch) {
  return batch ? batch->blocks.size() : 0;
}

kvpool_mutable_block* kvpool_mutable_batch_at(kvpool_mutable_batch* batch, size_t index) {
  if (!batch || index >= batch->blocks.size()) return nullptr;
  return c(&batch->blocks[index]);
}

kvpool_error_code kvpool_mutable_batch_take(kvpool_mutable_batch* batch, size_t index,
                                            kvpool_mutable_block** out) {
  if (!batch || !out)
    return null_argument("kvpool_mutable_batch_take: batch and out must not be NULL");
  if (index >= batch->blocks.size())
    return fail(KVPOOL_ERR_INVALID_ARGUMENT,
                ("kvpool_mutable_batch_take: index " + std::to_string(index) + " >= size " +
                 std::to_string(batch->blocks.size()))
                    .c_str());
  if (!batch->blocks[index].valid()) return taken("kvpool_mutable_batch_take");
  return guarded([&] {
    *out = c(new MutableBlock(std::move(batch->blocks[index])));
    return KVPOOL_OK;
  });
}

void kvpool_mutable_batch_release(kvpool_mutable_batch* batch) { delete batch; }
void kvpool_mutable_block_release(kvpool_mutable_block* block) { delete cpp(block); }

kvpool_error_code kvpool_mutable_block_init_sequence(kvpool_mutable_block* block, uint64_t salt,
                                                     int has_parent, uint64_t parent) {
  KVPOOL_C_MUTABLE(block, "kvpool_mutable_block_init_sequence");
  return status(cpp(block)->init_sequence(
      salt, has_parent ? std::optional<SequenceHash>(parent) : std::nullopt));
}

kvpool_error_code kvpool_mutable_block_add_token(kvpool_mutable_block* block, uint32_t token) {
  KVPOOL_C_MUTABLE(block, "kvpool_mutable_block_add_token");
  return status(cpp(block)->add_token(token));
}

kvpool_error_code kvpool_mutable_block_add_tokens(kvpool_mutable_block* block,
                                                  const uint32_t* tokens, size_t count,
                                                  size_t* added) {
  KVPOOL_C_MUTABLE(block, "kvpool_mutable_block_add_tokens");
  if (!tokens && count > 0) return null_argument("kvpool_mutable_block_add_tokens: tokens is NULL");
  auto r = cpp(block)->add_tokens(std::span<const Token>(tokens, count));
  if (!r) return fail(r.status());
  if (added) *added = *r;
  return KVPOOL_OK;
}

kvpool_error_code kvpool_mutable_block_pop_token(kvpool_mutable_block* block) {
  KVPOOL_C_MUTABLE(block, "kvpool_mutable_block_pop_token");
  return status(cpp(block)->pop_token());
}

kvpool_error_code kvpool_mutable_block_pop_tokens(kvpool_mutable_block* block, size_t count) {
  KVPOOL_C_MUTABLE(block, "kvpool_mutable_block_pop_tokens");
  return status(cpp(block)->pop_tokens(count));
}

kvpool_error_code kvpool_mutable_block_commit(kvpool_mutable_block* block) {
  KVPOOL_C_MUTABLE(block, "kvpool_mutable_block_commit");
  return status(cpp(block)->commit());
}

kvpool_error_code kvpool_mutable_block_reset(kvpool_mutable_block* block) {
  KVPOOL_C_MUTABLE(block, "kvpool_mutable_block_reset");
  cpp(block)->reset();
  return KVPOOL_OK;
}

kvpool_block_state kvpool_mutable_block_state(const kvpool_mutable_block* block) {
  if (!block || !cpp(block)->valid()) return KVPOOL_BLOCK_INVALID;
  return static_cast<kvpool_block_state>(cpp(block)->state().kind());
}

size_t kvpool_mutable_block_token_count(const kvpool_mutable_block* block) {
  if (!block || !cpp(block)->valid()) return 0;
  return cpp(block)->state().tokens().size();
}

kvpool_error_code kvpool_mutable_block_sequence_hash(const kvpool_mutable_block* block,
                                                     uint64_t* out) {
  KVPOOL_C_MUTABLE(block, "kvpool_mutable_block_sequence_hash");
  if (!out) return null_argument("kvpool_mutable_block_sequence_hash: out is NULL");
  auto r = cpp(block)->state().sequence_hash();
  if (!r) return fail(r.status());
  *out = *r;
  return KVPOOL_OK;
}

kvpool_error_code kvpool_mutable_block_block_hash(const kvpool_mutable_block* block,
                                                  uint64_t* out) {
  KVPOOL_C_MUTABLE(block, "kvpool_mutable_block_block_hash");
  if (!out) return null_argument("kvpool_mutable_block_block_hash: out is NULL");
  auto r = cpp(block)->state().block_hash();
  if (!r) return fail(r.status());
  *out = *r;
  return KVPOOL_OK;
}

kvpool_error_code kvpool_mutable_block_set_priority(kvpool_mutable_block* block,
                                                    uint32_t priority) {
  KVPOOL_C_MUTABLE(block, "kvpool_mutable_block_set_priority");
  cpp(block)->set_priority(priority);
  return KVPOOL_OK;
}

uint32_t kvpool_mutable_block_priority(const kvpool_mutable_block* block) {
  return block ? cpp(block)->priority() : 0;
}

uint32_t kvpool_mutable_block_id(const kvpool_mutable_block* block) {
  return block ? cpp(block)->block_id() : 0;
}

kvpool_error_code kvpool_mutable_block_address(const kvpool_mutable_block* block, uint32_t layer,
                                               uint32_t outer, void** out) {
  KVPOOL_C_MUTABLE(block, "kvpool_mutable_block_address");
  if (!out) return null_argument("kvpool_mutable_block_address: out is NULL");
  return guarded([&] {
    auto r = cpp(block)->address(layer, outer);
    if (!r) return fail(r.status());
    *out = *r;
    return KVPOOL_OK;
  });
}

// ---- Immutable batches and blocks --------------------------------------------------------

size_t kvpool_immutable_batch_size(const kvpool_immutable_batch* batch) {
  return batch ? batch->blocks.size() : 0;
}

const kvpool_immutable_block* kvpool_immutable_batch_at(const kvpool_immutable_batch* batch,
                                                        size_t index) {
  if (!batch || index >= batch->blocks.size()) return nullptr;
  return c(&batch->blocks[index]);
}

size_t kvpool_immutable_batch_sequence_hashes(const kvpool_immutable_batch* batch, uint64_t* out,
                                              size_t capacity) {
  if (!batch || !out) return 0;
  size_t n = std::min(capacity, batch->blocks.size());
  for (size_t i = 0; i < n; ++i) out[i] = batch->blocks[i].sequence_hash();
  return n;
}

size_t kvpool_immutable_batch_block_ids(const kvpool_immutable_batch* batch, uint32_t* out,
                                        size_t capacity) {
  if (!batch || !out) return 0;
  size_t n = std::min(capacity, batch->blocks.size());
  for (size_t i = 0; i < n; ++i) out[i] = batch->blocks[i].block_id();
  return n;
}

kvpool_error_code kvpool_immutable_batch_address(const kvpool_immutable_batch* batch, size_t index,
                                                 uint32_t layer, uint32_t outer, const void** out) {
  if (!batch || !out)
    return null_argument("kvpool_immutable_batch_address: batch and out must not be NULL");
  if (index >= batch->blocks.size())
    return fail(KVPOOL_ERR_INVALID_ARGUMENT,
                ("kvpool_immutable_batch_address: index " + std::to_string(index) + " >= size " +
                 std::to_string(batch->blocks.size()))
                    .c_str());
  return kvpool_immutable_block_address(c(&batch->blocks[index]), layer, outer, out);
}

void kvpool_immutable_batch_release(kvpool_immutable_batch* batch) { delete batch; }

kvpool_error_code kvpool_immutable_block_clone(const kvpool_immutable_block* block,
                                               kvpool_immutable_block** out) {
  if (!block || !out)
    return null_argument("kvpool_immutable_block_clone: block and out must not be NULL");
  if (!cpp(block)->valid()) return taken("kvpool_immutable_block_clone");
  return guarded([&] {
    *out = c(new ImmutableBlock(*cpp(block)));
    return KVPOOL_OK;
  });
}

void kvpool_immutable_block_release(kvpool_immutable_block* block) { delete cpp(block); }

uint64_t kvpool_immutable_block_sequence_hash(const kvpool_immutable_block* block) {
  return block && cpp(block)->valid() ? cpp(block)->sequence_hash() : 0;
}

uint32_t kvpool_immutable_block_id(const kvpool_immutable_block* block) {
  return block && cpp(block)->valid() ? cpp(block)->block_id() : 0;
}

kvpool_error_code kvpool_immutable_block_address(const kvpool_immutable_block* block,
                                                 uint32_t layer, uint32_t outer, const void** out) {
  if (!block || !out)
    return null_argument("kvpool_immutable_block_address: block and out must not be NULL");
  if (!cpp(block)->valid()) return taken("kvpool_immutable_block_address");
  return guarded([&] {
    auto r = cpp(block)->address(layer, outer);
    if (!r) return fail(r.status());
    *out = *r;
    return KVPOOL_OK;
  });
}

}  // extern "C"
