// kvpool.h: the completion-based async forms. The C++ *_async call sends the request at
// once; the client's completion thread waits for the answer and runs the callback.
#include "c_api_internal.hpp"

using namespace kvpool;
using namespace kvpool::c_api;

namespace {

// Waits for `fut` on the completion thread and hands the outcome to `done`.
template <typename Batch, typename Done, typename T>
void complete_later(ClientShared& shared, std::future<Result<std::vector<T>>> fut, Done done,
                    void* user_data) {
  auto f = std::make_shared<std::future<Result<std::vector<T>>>>(std::move(fut));
  shared.completer_once().post([f, done, user_data] {
    Batch* out = nullptr;
    kvpool_error_code code = KVPOOL_OK;
    std::string message;
    try {
      auto r = f->get();
      if (r) {
        out = new Batch{std::move(r.value())};
      } else {
        code = code_of(r.status().code());
        message = r.status().message();
      }
    } catch (const std::exception& e) {  // bad_alloc: no exception may reach the thread's top
      code = KVPOOL_ERR_RESOURCE_EXHAUSTED;
      message = e.what();
    }
    done(user_data, code, message.c_str(), out);
  });
}

}  // namespace

extern "C" {

kvpool_error_code kvpool_pool_allocate_async(kvpool_pool* pool, uint32_t count,
                                             kvpool_mutable_done done, void* user_data) {
  if (!pool || !done)
    return null_argument("kvpool_pool_allocate_async: pool and done must not be NULL");
  return guarded([&] {
    complete_later<kvpool_mutable_batch>(*pool->shared, pool->pool.allocate_blocks_async(count),
                                         done, user_data);
    return KVPOOL_OK;
  });
}

kvpool_error_code kvpool_pool_register_batch_async(kvpool_pool* pool, kvpool_mutable_batch* batch,
                                                   kvpool_immutable_done done, void* user_data) {
  std::unique_ptr<kvpool_mutable_batch> owned(batch);  // consumed whatever the outcome
  if (!pool || !batch || !done)
    return null_argument("kvpool_pool_register_batch_async: pool, batch and done must not be NULL");
  return guarded([&] {
    complete_later<kvpool_immutable_batch>(
        *pool->shared, pool->pool.register_blocks_async(std::move(owned->blocks)), done, user_data);
    return KVPOOL_OK;
  });
}

kvpool_error_code kvpool_pool_match_async(kvpool_pool* pool, const uint64_t* hashes, size_t count,
                                          kvpool_immutable_done done, void* user_data) {
  if (!pool || !done || (!hashes && count > 0))
    return null_argument("kvpool_pool_match_async: pool, hashes and done must not be NULL");
  return guarded([&] {
    complete_later<kvpool_immutable_batch>(
        *pool->shared,
        pool->pool.match_sequence_hashes_async(std::span<const SequenceHash>(hashes, count)), done,
        user_data);
    return KVPOOL_OK;
  });
}

kvpool_error_code kvpool_pool_match_peers_async(kvpool_pool* pool, const uint64_t* hashes,
                                                size_t count,
                                                const kvpool_peer_fetch_options* options,
                                                kvpool_immutable_done done, void* user_data) {
  if (!pool || !done || (!hashes && count > 0))
    return null_argument("kvpool_pool_match_peers_async: pool, hashes and done must not be NULL");
  return guarded([&] {
    complete_later<kvpool_immutable_batch>(
        *pool->shared,
        pool->pool.match_sequence_hashes_async(std::span<const SequenceHash>(hashes, count),
                                               peer_options(options)),
        done, user_data);
    return KVPOOL_OK;
  });
}

kvpool_error_code kvpool_pool_match_with_async(kvpool_pool* pool, const uint64_t* hashes,
                                               size_t count, const kvpool_match_options* options,
                                               kvpool_immutable_done done, void* user_data) {
  if (!pool || !done || (!hashes && count > 0))
    return null_argument("kvpool_pool_match_with_async: pool, hashes and done must not be NULL");
  MatchOptions o;
  if (!match_options(options, &o, "kvpool_pool_match_with_async"))
    return KVPOOL_ERR_INVALID_ARGUMENT;
  return guarded([&] {
    complete_later<kvpool_immutable_batch>(
        *pool->shared,
        pool->pool.match_sequence_hashes_async(std::span<const SequenceHash>(hashes, count), o),
        done, user_data);
    return KVPOOL_OK;
  });
}

}  // extern "C"
