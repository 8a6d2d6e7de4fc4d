// kvpool.BatchStore: the Python form of kvpool::BatchStore (opaque keys, asynchronous
// batches; kvpool/batch_store.hpp). Buffers given to submit() are kept alive by the store
// until their batch's completion is taken (drain / wait) or the store is closed.
#include "batch_store.hpp"

#include <pybind11/stl.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "errors.hpp"
#include "kvpool/batch_store.hpp"

namespace py = pybind11;

namespace kvpool::python {
namespace {

BatchOp op_of(const py::object& op) {
  if (py::isinstance<py::str>(op)) {
    const auto s = op.cast<std::string>();
    if (s == "exists") return BatchOp::kExists;
    if (s == "get") return BatchOp::kGet;
    if (s == "set") return BatchOp::kSet;
    if (s == "delete") return BatchOp::kDelete;
    if (s == "exists_prefix") return BatchOp::kExistsPrefix;
    throw StatusError(Status(ErrorCode::kInvalidArgument,
                             "op '" + s + "': one of exists, get, set, delete, exists_prefix"));
  }
  return static_cast<BatchOp>(op.cast<uint32_t>());
}

struct Completion {
  uint64_t id = 0;
  int code = 0;
  std::string message;
  std::vector<uint8_t> results;
  uint32_t prefix = 0;
  std::vector<uint64_t> value_sizes;

  explicit Completion(BatchCompletion&& c)
      : id(c.id),
        code(static_cast<int>(c.status.code())),
        message(c.status.message()),
        prefix(c.prefix),
        value_sizes(std::move(c.value_sizes)) {
    results.reserve(c.results.size());
    for (KeyResult r : c.results) results.push_back(static_cast<uint8_t>(r));
  }
  bool ok() const { return code == 0; }
  std::vector<bool> hits() const {
    std::vector<bool> out(results.size());
    for (size_t i = 0; i < results.size(); ++i)
      out[i] = results[i] == static_cast<uint8_t>(KeyResult::kOk);
    return out;
  }
};

class BatchStoreObject {
 public:
  BatchStoreObject(const Client& client, const std::string& pool, const py::bytes& ns,
                   uint32_t max_key_bytes, uint32_t priority, uint32_t keys_per_request,
                   uint32_t index_bits, bool event_keys) {
    BatchStoreOptions o;
    o.key_namespace = ns.cast<std::string>();
    o.max_key_bytes = max_key_bytes;
    o.priority = priority;
    o.keys_per_request = keys_per_request;
    o.index_bits = index_bits;
    o.event_keys = event_keys;
    store_.emplace(check(BatchStore::open(client, pool, o)));
  }
  ~BatchStoreObject() { close(); }

  BatchStore& store() {
    if (!store_) throw StatusError(Status(ErrorCode::kInvalidState, "the batch store is closed"));
    return *store_;
  }

  uint64_t submit(const py::object& op_obj, const py::sequence& keys,
                  const std::optional<py::sequence>& buffers) {
    const BatchOp op = op_of(op_obj);
    const size_t n = py::len(keys);
    // Keys: bytes or str, viewed in place for the call (the store copies them).
    std::vector<py::object> held;
    held.reserve(n);
    std::vector<KeyBytes> kb(n);
    for (size_t i = 0; i < n; ++i) {
      py::object k = keys[i];
      if (py::isinstance<py::str>(k)) k = k.attr("encode")("utf-8");
      char* data = nullptr;
      Py_ssize_t len = 0;
      if (!py::isinstance<py::bytes>(k) || PyBytes_AsStringAndSize(k.ptr(), &data, &len) != 0)
        throw StatusError(Status(ErrorCode::kInvalidArgument,
                                 "key " + std::to_string(i) + " is not bytes or str"));
      kb[i] = {reinterpret_cast<const std::byte*>(data), static_cast<size_t>(len)};
      held.push_back(std::move(k));
    }
    std::vector<IoBuffer> bufs;
    py::list keep;
    if (buffers) {
      const bool writable = op == BatchOp::kGet;
      const size_t m = py::len(*buffers);
      bufs.reserve(m);
      for (size_t i = 0; i < m; ++i) {
        py::object b = (*buffers)[i];
        if (py::isinstance<py::tuple>(b)) {  // (address, size): memory the caller owns
          auto t = b.cast<py::tuple>();
          bufs.push_back({reinterpret_cast<void*>(t[0].cast<uintptr_t>()), t[1].cast<size_t>()});
        } else {
          py::buffer_info info = b.cast<py::buffer>().request(writable);
          bufs.push_back({info.ptr, static_cast<size_t>(info.size * info.itemsize)});
          keep.append(b);
        }
      }
    }
    const uint64_t id = check(store().submit(op, kb, bufs));
    if (py::len(keep) > 0) keep_[id] = std::move(keep);
    return id;
  }

  std::vector<Completion> drain() {
    std::vector<BatchCompletion> done;
    {
      py::gil_scoped_release nogil;
      done = store().drain();
    }
    std::vector<Completion> out;
    out.reserve(done.size());
    for (auto& c : done) {
      keep_.erase(c.id);
      out.emplace_back(std::move(c));
    }
    return out;
  }

  Completion wait(uint64_t id, double timeout) {
    if (!(timeout >= 0) || !std::isfinite(timeout))
      throw StatusError(Status(ErrorCode::kInvalidArgument, "timeout must be finite and >= 0"));
    BatchStore& s = store();
    Result<BatchCompletion> r = [&] {
      py::gil_scoped_release nogil;
      return s.wait(id, std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000.0)));
    }();
    BatchCompletion c = check(std::move(r));
    keep_.erase(c.id);
    return Completion(std::move(c));
  }

  // Stops the worker (the batch in progress finishes first), then lets the buffers go.
  void close() {
    if (!store_) return;
    {
      py::gil_scoped_release nogil;
      store_.reset();
    }
    keep_.clear();
  }

  py::dict stats() {
    const BatchStoreStats s = store().stats();
    py::dict d;
    d["batches"] = s.batches;
    d["keys"] = s.keys;
    d["hits"] = s.hits;
    d["misses"] = s.misses;
    d["key_mismatches"] = s.key_mismatches;
    d["bytes_in"] = s.bytes_in;
    d["bytes_out"] = s.bytes_out;
    return d;
  }

 private:
  std::optional<BatchStore> store_;
  std::unordered_map<uint64_t, py::list> keep_;  // batch id -> its buffer objects
};

}  // namespace

void bind_batch_store(py::module_& m) {
  py::class_<Completion>(m, "BatchCompletion", "What one batch of a BatchStore did.")
      .def_readonly("id", &Completion::id)
      .def_readonly("code", &Completion::code, "0 (Ok), or the ErrorCode that stopped the batch")
      .def_readonly("message", &Completion::message)
      .def_property_readonly("ok", &Completion::ok)
      .def_readonly("results", &Completion::results,
                    "per key: 0 miss, 1 ok, 2 too large, 3 failed (the batch stopped first)")
      .def_property_readonly("hits", &Completion::hits, "per key: result == ok")
      .def_readonly("prefix", &Completion::prefix, "exists_prefix: stored keys from the first")
      .def_readonly("value_sizes", &Completion::value_sizes, "get: bytes copied per key");

  py::class_<BatchStoreObject>(
      m, "BatchStore",
      "Opaque byte-string keys over one host pool, in asynchronous batches (see\n"
      "docs/batch-store.md). submit() returns at once; a worker thread of this process does\n"
      "the round trips to kvpoold and the copies; event_fd() becomes readable; drain() or\n"
      "wait(id) take the completions.")
      .def(py::init<const Client&, const std::string&, const py::bytes&, uint32_t, uint32_t,
                    uint32_t, uint32_t, bool>(),
           py::arg("client"), py::arg("pool"), py::arg("key_namespace") = py::bytes(),
           py::arg("max_key_bytes") = 448, py::arg("priority") = 0,
           py::arg("keys_per_request") = 128, py::arg("index_bits") = 64,
           py::arg("event_keys") = true)
      .def("submit", &BatchStoreObject::submit, py::arg("op"), py::arg("keys"),
           py::arg("buffers") = py::none(),
           "Queues a batch; returns its id. op: 'exists', 'get', 'set', 'delete',\n"
           "'exists_prefix'. keys: bytes or str. buffers (get/set: one per key): objects with\n"
           "the buffer protocol (kept alive until the completion is taken), or (address, size)\n"
           "tuples of memory the caller keeps valid.")
      .def("drain", &BatchStoreObject::drain, "Every completion ready now; resets event_fd.")
      .def("wait", &BatchStoreObject::wait, py::arg("id"), py::arg("timeout") = 30.0,
           "Waits (GIL released) for batch id alone; kvpool.Timeout when not done in time.")
      .def("event_fd", [](BatchStoreObject& s) { return s.store().event_fd(); })
      .def_property_readonly("value_capacity",
                             [](BatchStoreObject& s) { return s.store().value_capacity(); })
      .def_property_readonly("max_key_bytes",
                             [](BatchStoreObject& s) { return s.store().max_key_bytes(); })
      .def("index_hash",
           [](BatchStoreObject& s, const py::bytes& key) {
             const auto k = key.cast<std::string>();
             return s.store().index_hash(key_bytes(k));
           })
      .def("stats", &BatchStoreObject::stats)
      .def("close", &BatchStoreObject::close,
           "Stops the worker (after the batch in progress); queued batches are dropped.");
  m.def("batch_store_block_bytes", &batch_store_block_bytes, py::arg("max_key_bytes"),
        py::arg("value_bytes"), py::arg("namespace_bytes") = 0,
        "Block bytes a pool needs for keys of max_key_bytes and values of value_bytes.");
}

}  // namespace kvpool::python
