// kvpool.h: version, errors, the client, and pool queries.
#include <atomic>
#include <chrono>
#include <cstring>

#include "c_api_internal.hpp"
#include "connection.hpp"
#include "kvpool/shm/control_segment.hpp"
#include "kvpool/shm/handshake.hpp"

using namespace kvpool;
using namespace kvpool::c_api;

namespace kvpool::c_api {
namespace {

struct LastError {
  kvpool_error_code code = KVPOOL_OK;
  std::string message;
};
thread_local LastError last_error;

}  // namespace

kvpool_error_code fail(const Status& s) {
  last_error.code = code_of(s.code());
  last_error.message = s.message();
  return last_error.code;
}

kvpool_error_code fail(kvpool_error_code code, const char* message) {
  last_error.code = code;
  last_error.message = message;
  return code;
}

Completer& ClientShared::completer_once() {
  std::lock_guard<std::mutex> lock(mu);
  if (!completer) completer = std::make_shared<Completer>();
  return *completer;
}

}  // namespace kvpool::c_api

extern "C" {

uint32_t kvpool_abi_version(void) { return KVPOOL_ABI_VERSION; }

const char* kvpool_error_name(kvpool_error_code code) {
  // error_code_name returns views of string literals, so .data() is NUL-terminated.
  if (code < KVPOOL_OK || code > KVPOOL_ERR_CHECKSUM_MISMATCH) return "Unknown";
  return error_code_name(static_cast<ErrorCode>(code)).data();
}

const char* kvpool_last_error_message(void) { return last_error.message.c_str(); }
kvpool_error_code kvpool_last_error_code(void) { return last_error.code; }

void kvpool_connect_options_init(kvpool_connect_options* options) {
  if (!options) return;
  ConnectOptions d;
  *options = kvpool_connect_options{};
  options->struct_size = sizeof(kvpool_connect_options);
  options->connect_timeout_ms = static_cast<uint32_t>(d.connect_timeout.count());
  options->runtime_dir = nullptr;
  options->poll_us = d.poll_us;
  options->pin_host_pools = d.pin_host_pools ? 1 : 0;
  options->reattach = d.reattach ? 1 : 0;
  options->reattach_timeout_ms = static_cast<uint32_t>(d.reattach_timeout.count());
}

kvpool_error_code kvpool_connect(const char* instance, const kvpool_connect_options* options,
                                 kvpool_client** out) {
  if (!out) return null_argument("kvpool_connect: out is NULL");
  return guarded([&] {
    kvpool_connect_options o;
    kvpool_connect_options_init(&o);
    if (options) {
      // An older caller's struct is a prefix of ours: copy what it has.
      if (options->struct_size < offsetof(kvpool_connect_options, runtime_dir))
        return fail(KVPOOL_ERR_INVALID_ARGUMENT,
                    "kvpool_connect: options->struct_size is too small (use "
                    "kvpool_connect_options_init)");
      std::memcpy(&o, options, std::min<size_t>(options->struct_size, sizeof(o)));
    }
    ConnectOptions co;
    co.runtime_dir = o.runtime_dir ? o.runtime_dir : "";
    co.connect_timeout = std::chrono::milliseconds(o.connect_timeout_ms);
    co.poll_us = o.poll_us;
    co.pin_host_pools = o.pin_host_pools != 0;
    co.reattach = o.reattach != 0;
    co.reattach_timeout = std::chrono::milliseconds(o.reattach_timeout_ms);
    std::string name = instance ? instance : "default";
    auto r = Client::connect(name, co);
    if (!r) return fail(r.status());
    auto shared = std::make_shared<ClientShared>();
    shared->instance = name;
    shared->runtime_dir = co.runtime_dir;
    auto names = r->pool_names();
    *out = new kvpool_client{std::move(r.value()), std::move(shared), std::move(names)};
    return KVPOOL_OK;
  });
}

void kvpool_client_release(kvpool_client* client) { delete client; }

kvpool_error_code kvpool_client_pool(const kvpool_client* client, const char* name,
                                     kvpool_pool** out) {
  if (!client || !name || !out)
    return null_argument("kvpool_client_pool: client, name and out must not be NULL");
  return guarded([&] {
    auto r = client->client.pool(name);
    if (!r) return fail(r.status());
    *out = new kvpool_pool{std::move(r.value()), client->shared};
    return KVPOOL_OK;
  });
}

size_t kvpool_client_pool_count(const kvpool_client* client) {
  return client ? client->pool_names.size() : 0;
}

const char* kvpool_client_pool_name(const kvpool_client* client, size_t index) {
  if (!client || index >= client->pool_names.size()) return nullptr;
  return client->pool_names[index].c_str();
}

kvpool_error_code kvpool_client_ping(kvpool_client* client) {
  if (!client) return null_argument("kvpool_client_ping: client is NULL");
  return guarded([&] {
    Status s = client->client.ping();
    return s ? KVPOOL_OK : fail(s);
  });
}

void kvpool_client_flush(kvpool_client* client) {
  if (client) client->client.flush();
}

int kvpool_client_daemon_alive(const kvpool_client* client) {
  return client && client->client.daemon_alive() ? 1 : 0;
}

uint32_t kvpool_client_slot(const kvpool_client* client) {
  return client ? client->client.slot() : 0;
}

// ---- Pool queries ------------------------------------------------------------------------

void kvpool_pool_release(kvpool_pool* pool) { delete pool; }

const char* kvpool_pool_name(const kvpool_pool* pool) {
  return pool ? pool->pool.name().c_str() : nullptr;
}

uint32_t kvpool_pool_index(const kvpool_pool* pool) { return pool ? pool->pool.index() : 0; }

uint32_t kvpool_pool_page_size(const kvpool_pool* pool) {
  return pool ? pool->pool.page_size() : 0;
}

kvpool_error_code kvpool_pool_layout(const kvpool_pool* pool, kvpool_layout* out) {
  if (!pool || !out) return null_argument("kvpool_pool_layout: pool and out must not be NULL");
  if (out->struct_size < offsetof(kvpool_layout, region_bytes))
    return fail(KVPOOL_ERR_INVALID_ARGUMENT,
                "kvpool_pool_layout: set out->struct_size = sizeof(kvpool_layout) first");
  const LayoutConfig& lc = pool->pool.layout();
  auto layout = Layout::create(lc);  // validated by the connection already: cannot fail
  if (!layout) return fail(layout.status());
  kvpool_layout l{};
  l.struct_size = out->struct_size;
  l.kind = static_cast<uint32_t>(lc.kind);
  l.num_blocks = lc.num_blocks;
  l.num_layers = lc.num_layers;
  l.outer_dim = lc.outer_dim;
  l.page_size = lc.page_size;
  l.inner_dim = lc.inner_dim;
  l.dtype_bytes = lc.dtype_bytes;
  l.alignment = lc.alignment;
  l.dtype = static_cast<uint32_t>(pool->pool.dtype());
  l.region_bytes = layout->region_bytes();
  l.block_bytes = layout->block_bytes();
  l.total_bytes = layout->total_bytes();
  std::memcpy(out, &l, std::min<size_t>(out->struct_size, sizeof(l)));
  return KVPOOL_OK;
}

kvpool_storage kvpool_pool_storage(const kvpool_pool* pool) {
  return pool && pool->pool.is_device() ? KVPOOL_STORAGE_CUDA : KVPOOL_STORAGE_HOST;
}

kvpool_error_code kvpool_pool_cuda_device(const kvpool_pool* pool, int* out) {
  if (!pool || !out) return null_argument("kvpool_pool_cuda_device: pool and out must not be NULL");
  return guarded([&] {
    auto r = pool->pool.cuda_device();
    if (!r) return fail(r.status());
    *out = *r;
    return KVPOOL_OK;
  });
}

kvpool_error_code kvpool_pool_counts_get(const kvpool_pool* pool, kvpool_pool_counts* out) {
  if (!pool || !out) return null_argument("kvpool_pool_counts_get: pool and out must not be NULL");
  if (out->struct_size < sizeof(kvpool_pool_counts))
    return fail(KVPOOL_ERR_INVALID_ARGUMENT,
                "kvpool_pool_counts_get: set out->struct_size = sizeof(kvpool_pool_counts) first");
  return guarded([&] {
    ClientShared& sh = *pool->shared;
    const shm::ControlReader* control;
    {
      // The public C++ API has no counts: read them, as kvpoolctl does, from a read-only
      // mapping of the pool's registry segment, asked for once per client.
      std::lock_guard<std::mutex> lock(sh.mu);
      if (!sh.observed) {
        auto observed = shm::observe(sh.instance, sh.runtime_dir);
        if (!observed) return fail(observed.status());
        sh.observed.emplace(std::move(observed.value()));
      }
      control = &*sh.observed;
    }
    uint32_t index = pool->pool.index();
    if (index >= control->num_pools())
      return fail(KVPOOL_ERR_INTERNAL, "pool index beyond the daemon's pools");
    // The observer gets the registries of the pools its uid may use, as a worker does.
    if (!control->has_pool(index))
      return fail(Status(ErrorCode::kPermissionDenied,
                         "pool " + std::to_string(index) + " is not open to this uid"));
    const pool::PoolCounts counts = control->arena(index).counts();  // relaxed loads
    kvpool_pool_counts c{};
    c.struct_size = sizeof(c);
    c.total = counts.total;
    c.free_blocks = counts.free;
    c.inactive = counts.inactive;
    c.active = counts.active;
    c.mutable_blocks = counts.mutable_blocks;
    *out = c;
    return KVPOOL_OK;
  });
}

}  // extern "C"
