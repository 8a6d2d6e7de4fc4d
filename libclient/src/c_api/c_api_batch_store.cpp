// kvpool.h's batch store (ABI 1.2): the C form of kvpool::BatchStore.
#include <chrono>
#include <deque>

#include "c_api_internal.hpp"
#include "kvpool/batch_store.hpp"

using namespace kvpool;
using namespace kvpool::c_api;

struct kvpool_batch_store {
  BatchStore store;
  std::deque<BatchCompletion> ready;  // drained, not yet taken by kvpool_batch_store_next
  std::vector<KeyBytes> keys;         // submit's scratch (the store copies the keys)
  std::vector<IoBuffer> buffers;
};

struct kvpool_batch_completion {
  BatchCompletion c;
};

extern "C" {

void kvpool_batch_store_options_init(kvpool_batch_store_options* o) {
  if (o == nullptr) return;
  const BatchStoreOptions d;
  *o = kvpool_batch_store_options{};
  o->struct_size = sizeof(*o);
  o->max_key_bytes = d.max_key_bytes;
  o->priority = d.priority;
  o->keys_per_request = d.keys_per_request;
  o->index_bits = d.index_bits;
}

kvpool_error_code kvpool_batch_store_open(const kvpool_client* client, const char* pool,
                                          const kvpool_batch_store_options* options,
                                          kvpool_batch_store** out) {
  return guarded([&] {
    if (client == nullptr || pool == nullptr || out == nullptr)
      return null_argument("client, pool and out must not be NULL");
    BatchStoreOptions o;
    if (options != nullptr) {
      if (options->struct_size < sizeof(kvpool_batch_store_options))
        return fail(KVPOOL_ERR_INVALID_ARGUMENT,
                    "options->struct_size is smaller than this ABI's kvpool_batch_store_options "
                    "(call kvpool_batch_store_options_init)");
      o.max_key_bytes = options->max_key_bytes;
      if (options->key_namespace != nullptr)
        o.key_namespace.assign(options->key_namespace, options->key_namespace_len);
      o.priority = options->priority;
      o.keys_per_request = options->keys_per_request;
      o.index_bits = options->index_bits;
    }
    auto s = BatchStore::open(client->client, pool, o);
    if (!s) return fail(s.status());
    *out = new kvpool_batch_store{std::move(s.value()), {}, {}, {}};
    return KVPOOL_OK;
  });
}

void kvpool_batch_store_release(kvpool_batch_store* store) { delete store; }

int kvpool_batch_store_event_fd(const kvpool_batch_store* store) {
  return store == nullptr ? -1 : store->store.event_fd();
}

uint64_t kvpool_batch_store_value_capacity(const kvpool_batch_store* store) {
  return store == nullptr ? 0 : store->store.value_capacity();
}

kvpool_error_code kvpool_batch_store_submit(kvpool_batch_store* store, kvpool_batch_op op,
                                            size_t count, const void* const* keys,
                                            const size_t* key_sizes, void* const* buffers,
                                            const size_t* buffer_sizes, uint64_t* id_out) {
  return guarded([&] {
    if (store == nullptr || id_out == nullptr ||
        (count > 0 && (keys == nullptr || key_sizes == nullptr)))
      return null_argument("store, id_out, keys and key_sizes must not be NULL");
    store->keys.clear();
    store->buffers.clear();
    for (size_t i = 0; i < count; ++i)
      store->keys.push_back({static_cast<const std::byte*>(keys[i]), key_sizes[i]});
    if (buffers != nullptr && buffer_sizes != nullptr)
      for (size_t i = 0; i < count; ++i) store->buffers.push_back({buffers[i], buffer_sizes[i]});
    auto id = store->store.submit(static_cast<BatchOp>(op), store->keys, store->buffers);
    if (!id) return fail(id.status());
    *id_out = *id;
    return KVPOOL_OK;
  });
}

kvpool_batch_completion* kvpool_batch_store_next(kvpool_batch_store* store) {
  if (store == nullptr) return nullptr;
  try {
    if (store->ready.empty())
      for (auto& c : store->store.drain()) store->ready.push_back(std::move(c));
    if (store->ready.empty()) return nullptr;
    auto* out = new kvpool_batch_completion{std::move(store->ready.front())};
    store->ready.pop_front();
    return out;
  } catch (const std::exception& e) {
    fail(KVPOOL_ERR_RESOURCE_EXHAUSTED, e.what());
    return nullptr;
  }
}

kvpool_error_code kvpool_batch_store_wait(kvpool_batch_store* store, uint64_t id,
                                          uint32_t timeout_ms, kvpool_batch_completion** out) {
  return guarded([&] {
    if (store == nullptr || out == nullptr) return null_argument("store and out must not be NULL");
    for (auto it = store->ready.begin(); it != store->ready.end(); ++it) {
      if (it->id != id) continue;
      *out = new kvpool_batch_completion{std::move(*it)};
      store->ready.erase(it);
      return KVPOOL_OK;
    }
    auto c = store->store.wait(id, std::chrono::milliseconds(timeout_ms));
    if (!c) return fail(c.status());
    *out = new kvpool_batch_completion{std::move(c.value())};
    return KVPOOL_OK;
  });
}

uint64_t kvpool_batch_completion_id(const kvpool_batch_completion* c) {
  return c == nullptr ? 0 : c->c.id;
}
kvpool_error_code kvpool_batch_completion_status(const kvpool_batch_completion* c) {
  return c == nullptr ? KVPOOL_ERR_INVALID_ARGUMENT : code_of(c->c.status.code());
}
const char* kvpool_batch_completion_message(const kvpool_batch_completion* c) {
  return c == nullptr ? "" : c->c.status.message().c_str();
}
size_t kvpool_batch_completion_count(const kvpool_batch_completion* c) {
  return c == nullptr ? 0 : c->c.results.size();
}
const uint8_t* kvpool_batch_completion_results(const kvpool_batch_completion* c) {
  static_assert(sizeof(KeyResult) == 1);
  return c == nullptr ? nullptr : reinterpret_cast<const uint8_t*>(c->c.results.data());
}
const uint64_t* kvpool_batch_completion_value_sizes(const kvpool_batch_completion* c) {
  return c == nullptr || c->c.value_sizes.empty() ? nullptr : c->c.value_sizes.data();
}
uint32_t kvpool_batch_completion_prefix(const kvpool_batch_completion* c) {
  return c == nullptr ? 0 : c->c.prefix;
}
void kvpool_batch_completion_release(kvpool_batch_completion* c) { delete c; }

}  // extern "C"
