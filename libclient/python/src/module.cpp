// kvpool._kvpool: Python bindings of libkvpool (see docs/python.md). Every call
// that waits for kvpoold runs with the GIL released.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cmath>
#include <future>
#include <string>
#include <vector>

#include "batch_store.hpp"
#include "blocks.hpp"
#include "dlpack.hpp"
#include "errors.hpp"
#include "int_sequence.hpp"
#include "kvpool/client.hpp"
#include "kvpool/core/token_block.hpp"
#include "kvpool/core/version.hpp"

namespace py = pybind11;

namespace kvpool::python {
namespace {

// Runs f (a call that waits for kvpoold) with the GIL released.
template <typename F>
auto without_gil(F&& f) {
  py::gil_scoped_release nogil;
  return f();
}

// A request already sent to kvpoold, whose answer wait() collects (with the GIL released).
// kvpool.Pool.*_async run wait() on a waiter thread, so the event loop never blocks on it
// (libclient/python/kvpool/__init__.py).
template <typename T, typename Out>
class Pending {
 public:
  Pending(std::future<Result<std::vector<T>>> fut, std::shared_ptr<const PoolMeta> meta)
      : fut_(std::move(fut)), meta_(std::move(meta)) {}
  Pending(Pending&&) noexcept = default;
  Pending& operator=(Pending&&) = delete;
  Pending(const Pending&) = delete;
  // Never collected (a cancelled or never-awaited coroutine): collect the answer now and
  // drop it, so that its blocks go back instead of staying held until disconnect.
  ~Pending() {
    if (!fut_.valid()) return;
    py::gil_scoped_release nogil;
    (void)fut_.get();
  }

  Out wait() {
    if (!fut_.valid())
      throw StatusError(Status(ErrorCode::kInvalidState, "this request was already collected"));
    Result<std::vector<T>> r = [&] {
      py::gil_scoped_release nogil;
      return fut_.get();
    }();
    return convert(check(std::move(r)));
  }

 private:
  Out convert(std::vector<T> v);
  std::future<Result<std::vector<T>>> fut_;
  std::shared_ptr<const PoolMeta> meta_;
};

template <>
py::list Pending<MutableBlock, py::list>::convert(std::vector<MutableBlock> blocks) {
  py::list out(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i)
    out[i] = py::cast(MutableBlockObject(std::move(blocks[i]), meta_));
  return out;
}

template <>
ImmutableBlocksObject Pending<ImmutableBlock, ImmutableBlocksObject>::convert(
    std::vector<ImmutableBlock> blocks) {
  return ImmutableBlocksObject(std::move(blocks), meta_);
}

using PendingAllocate = Pending<MutableBlock, py::list>;
using PendingImmutables = Pending<ImmutableBlock, ImmutableBlocksObject>;

class PoolObject {
 public:
  explicit PoolObject(Pool pool) : pool_(std::move(pool)), meta_(PoolMeta::of(pool_)) {}

  py::list allocate_blocks(uint32_t count) {
    auto r = without_gil([&] { return pool_.allocate_blocks(count); });
    auto blocks = check(std::move(r));
    py::list out(blocks.size());
    for (size_t i = 0; i < blocks.size(); ++i)
      out[i] = py::cast(MutableBlockObject(std::move(blocks[i]), meta_));
    return out;
  }

  static RegisterOptions register_options(bool send_tokens) {
    RegisterOptions o;
    o.send_tokens = send_tokens;
    return o;
  }

  ImmutableBlocksObject register_blocks(const py::iterable& blocks, bool send_tokens) {
    auto handles = take_blocks(blocks);
    auto r = without_gil(
        [&] { return pool_.register_blocks(std::move(handles), register_options(send_tokens)); });
    return ImmutableBlocksObject(check(std::move(r)), meta_);
  }

  // The async forms' first half: send now, collect with Pending::wait().
  PendingAllocate allocate_send(uint32_t count) {
    return PendingAllocate(without_gil([&] { return pool_.allocate_blocks_async(count); }), meta_);
  }
  PendingImmutables register_send(const py::iterable& blocks, bool send_tokens) {
    auto handles = take_blocks(blocks);
    return PendingImmutables(without_gil([&] {
                               return pool_.register_blocks_async(std::move(handles),
                                                                  register_options(send_tokens));
                             }),
                             meta_);
  }
  PendingImmutables match_send(py::handle hashes, bool peers, uint32_t deadline_ms,
                               const std::string& holder, bool onboard) {
    auto h = to_unsigned_vector<SequenceHash>(hashes, "hashes");
    // peers=True implies onboard, as in match_sequence_hashes below.
    return PendingImmutables(
        without_gil([&] {
          return peers ? pool_.match_sequence_hashes_async(h, peer_options(deadline_ms, holder))
                       : pool_.match_sequence_hashes_async(h, MatchOptions{.onboard = onboard});
        }),
        meta_);
  }
  static PeerFetchOptions peer_options(uint32_t deadline_ms, const std::string& holder) {
    PeerFetchOptions o;
    o.deadline = std::chrono::milliseconds(deadline_ms);
    o.holder = holder;
    return o;
  }

  // Takes the handles out of MutableBlock objects for register (which consumes them).
  std::vector<MutableBlock> take_blocks(const py::iterable& blocks) {
    // Check every block first, so a bad one leaves all of them with the caller.
    std::vector<py::object> owners;  // keeps what a generator yields alive
    std::vector<MutableBlockObject*> objs;
    for (py::handle h : blocks) {
      owners.push_back(py::reinterpret_borrow<py::object>(h));
      auto* o = h.cast<MutableBlockObject*>();
      o->check_takeable();
      for (auto* seen : objs)
        if (seen == o)
          throw StatusError(
              Status(ErrorCode::kInvalidArgument, "block " + std::to_string(o->get().block_id()) +
                                                      " appears twice in register_blocks"));
      objs.push_back(o);
    }
    std::vector<MutableBlock> handles;
    handles.reserve(objs.size());
    for (auto* o : objs) handles.push_back(o->take());
    return handles;
  }

  ImmutableBlocksObject match_sequence_hashes(py::handle hashes, bool peers, uint32_t deadline_ms,
                                              const std::string& holder, bool onboard) {
    auto h = to_unsigned_vector<SequenceHash>(hashes, "hashes");
    // As in C++, the peer path's local match is an onboard match (host memory, then the
    // disk tier; docs/peers.md), so onboard adds nothing to peers=True.
    auto r = without_gil([&] {
      return peers ? pool_.match_sequence_hashes(h, peer_options(deadline_ms, holder))
                   : pool_.match_sequence_hashes(h, MatchOptions{.onboard = onboard});
    });
    return ImmutableBlocksObject(check(std::move(r)), meta_);
  }

  int cuda_device() const {
    auto r = without_gil([&] { return pool_.cuda_device(); });
    return check(std::move(r));
  }

  const Pool& pool() const { return pool_; }
  const PoolMeta& meta() const { return *meta_; }

 private:
  Pool pool_;
  std::shared_ptr<const PoolMeta> meta_;
};

Client connect(const std::string& instance, const std::string& runtime_dir, double connect_timeout,
               uint32_t poll_us, bool pin_host_pools, bool reattach, double reattach_timeout) {
  if (!(connect_timeout >= 0) || !std::isfinite(connect_timeout))
    throw StatusError(
        Status(ErrorCode::kInvalidArgument, "connect_timeout must be finite and >= 0 seconds"));
  if (!(reattach_timeout >= 0) || !std::isfinite(reattach_timeout))
    throw StatusError(
        Status(ErrorCode::kInvalidArgument, "reattach_timeout must be finite and >= 0 seconds"));
  ConnectOptions o;
  o.runtime_dir = runtime_dir;
  o.connect_timeout = std::chrono::milliseconds(static_cast<int64_t>(connect_timeout * 1000.0));
  o.poll_us = poll_us;
  o.pin_host_pools = pin_host_pools;
  o.reattach = reattach;
  o.reattach_timeout = std::chrono::milliseconds(static_cast<int64_t>(reattach_timeout * 1000.0));
  auto r = without_gil([&] { return Client::connect(instance, o); });
  return check(std::move(r));
}

py::tuple hashes_of(const TokenBlockSequence& seq) {
  std::vector<BlockHash> block_hashes;
  block_hashes.reserve(seq.blocks().size());
  for (const auto& b : seq.blocks()) block_hashes.push_back(b.block_hash);
  return py::make_tuple(py::cast(block_hashes), py::cast(seq.sequence_hashes()));
}

// The free function names its scheme (default dynamo-0.2); Pool.hash_tokens uses the pool's.
py::tuple hash_tokens(py::handle tokens, uint32_t page_size, uint64_t salt,
                      const std::string& hash_scheme) {
  auto scheme = parse_hash_scheme(hash_scheme);
  if (!scheme)
    throw py::value_error("hash_scheme must be 'dynamo-0.2' or 'dynamo-router', got '" +
                          hash_scheme + "'");
  auto t = to_unsigned_vector<Token>(tokens, "tokens");
  return hashes_of(check(TokenBlockSequence::create(t, page_size, salt, *scheme)));
}

py::tuple pool_hash_tokens(const PoolObject& p, py::handle tokens, uint64_t salt) {
  auto t = to_unsigned_vector<Token>(tokens, "tokens");
  return hashes_of(check(p.pool().hash_tokens(t, salt)));
}

py::dict pool_counts(const PoolObject& p) {
  const BlockCounts c = p.pool().counts();
  py::dict d;
  d["total"] = c.total;
  d["free"] = c.free;
  d["inactive"] = c.inactive;
  d["active"] = c.active;
  d["mutable"] = c.mutable_blocks;
  return d;
}

py::dict layout_dict(const PoolMeta& m) {
  const LayoutConfig& c = m.config;
  py::dict d;
  d["kind"] = std::string(layout_kind_name(c.kind));
  d["num_blocks"] = c.num_blocks;
  d["num_layers"] = c.num_layers;
  d["outer_dim"] = c.outer_dim;
  d["page_size"] = c.page_size;
  d["inner_dim"] = c.inner_dim;
  d["dtype_bytes"] = c.dtype_bytes;
  d["dtype"] = m.dtype == DType::kUnspecified
                   ? py::object(py::none())
                   : py::object(py::str(std::string(dtype_name(m.dtype))));
  d["alignment"] = c.alignment;
  return d;
}

void bind_pool(py::module_& m) {
  py::class_<PoolObject>(m, "Pool", "One of kvpoold's pools, from Client.pool(name).")
      .def("_allocate_blocks_send", &PoolObject::allocate_send, py::arg("count"))
      .def("_register_blocks_send", &PoolObject::register_send, py::arg("blocks"),
           py::arg("send_tokens") = false)
      .def("_match_sequence_hashes_send", &PoolObject::match_send, py::arg("hashes"),
           py::arg("peers") = false, py::arg("deadline_ms") = 500, py::arg("holder") = "",
           py::arg("onboard") = false)
      .def_property_readonly(
          "dtype",
          [](const PoolObject& p) -> py::object {
            if (p.meta().dtype == DType::kUnspecified) return py::none();
            return py::str(std::string(dtype_name(p.meta().dtype)));
          },
          "The element type the config named ('fp16', 'bf16', 'fp32', 'fp8_e4m3', 'u8'), or\n"
          "None when it gave dtype_bytes alone.")
      .def("allocate_blocks", &PoolObject::allocate_blocks, py::arg("count"),
           "count MutableBlocks (all or nothing: NotEnoughBlocks otherwise).")
      .def("register_blocks", &PoolObject::register_blocks, py::arg("blocks"),
           py::arg("send_tokens") = false,
           "Registers committed MutableBlocks (which it consumes, whatever the outcome) and "
           "returns,\n"
           "per block, the registered block that now holds its hash (its own, or the existing\n"
           "one it was deduplicated onto). send_tokens=True sends each block's token ids too,\n"
           "so that KV events carry them (kvpool-events --format vllm: BlockStored.token_ids).")
      .def("match_sequence_hashes", &PoolObject::match_sequence_hashes, py::arg("hashes"),
           py::arg("peers") = false, py::arg("deadline_ms") = 500, py::arg("holder") = "",
           py::arg("onboard") = false,
           "The longest prefix of `hashes` (ints, or a NumPy uint64 array) the pool holds, as\n"
           "ImmutableBlocks. peers=True: what the pool lacks is fetched from another host's\n"
           "kvpoold through this host's kvpool-peer (docs/peers.md) within deadline_ms; holder\n"
           "'host:port' names the holder's kvpool-peer (else it is looked up). A failure of the\n"
           "peer path is a shorter prefix, never an error. onboard=True: the prefix continues\n"
           "from the pool's disk tier past host memory (docs/disk-tier.md): kvpoold reads,\n"
           "verifies and registers those blocks, and answers once the reads are done.\n"
           "peers=True implies it: the local match before any peer is asked covers the disk\n"
           "tier too, as in C++ (onboard may be given with it, and changes nothing).")
      .def("hash_tokens", &pool_hash_tokens, py::arg("tokens"), py::arg("salt") = 0,
           "(block_hashes, sequence_hashes) of the full blocks of `tokens` as this pool hashes\n"
           "them (its page size and hash scheme): the hashes MutableBlock.commit gives blocks\n"
           "started with init_sequence(salt, ...), and the ones to match.")
      .def_property_readonly(
          "hash_scheme",
          [](const PoolObject& p) { return std::string(hash_scheme_name(p.pool().hash_scheme())); },
          "How the pool hashes its blocks: 'dynamo-0.2' or 'dynamo-router'.")
      .def("counts", &pool_counts,
           "Blocks by state, a moment old: {'total', 'free', 'inactive', 'active', 'mutable'}\n"
           "(as kvpool_pool_counts_get in C and Pool::counts in Rust).")
      .def_property_readonly("name", [](const PoolObject& p) { return p.pool().name(); })
      .def_property_readonly("page_size", [](const PoolObject& p) { return p.pool().page_size(); })
      .def_property_readonly("index", [](const PoolObject& p) { return p.pool().index(); })
      .def_property_readonly(
          "layout", [](const PoolObject& p) { return layout_dict(p.meta()); },
          "The pool's layout: kind, num_blocks, num_layers, outer_dim, page_size,\n"
          "inner_dim, dtype_bytes, alignment.")
      .def_property_readonly("block_shape",
                             [](const PoolObject& p) {
                               const auto& c = p.meta().config;
                               return py::make_tuple(c.num_layers, c.outer_dim, c.page_size,
                                                     c.inner_dim);
                             })
      .def_property_readonly("is_device", [](const PoolObject& p) { return p.pool().is_device(); })
      .def_property_readonly(
          "storage", [](const PoolObject& p) { return p.pool().is_device() ? "cuda" : "host"; })
      .def("cuda_device", &PoolObject::cuda_device,
           "Local CUDA ordinal of a device pool's GPU (InvalidState for host pools).")
      .def("__repr__", [](const PoolObject& p) {
        return "<kvpool.Pool '" + p.pool().name() + "' " +
               (p.pool().is_device() ? "cuda" : "host") + ">";
      });
}

void bind_client(py::module_& m) {
  py::class_<Client>(m, "Client", "A connection to kvpoold; may be shared by threads.")
      .def_static("connect", &connect, py::arg("instance") = "default", py::arg("runtime_dir") = "",
                  py::arg("connect_timeout") = 5.0, py::arg("poll_us") = 50,
                  py::arg("pin_host_pools") = false, py::arg("reattach") = true,
                  py::arg("reattach_timeout") = 0.05,
                  "Attaches to kvpoold `instance`; runtime_dir '' resolves like the daemon does.\n"
                  "connect_timeout in seconds. reattach: after kvpoold dies, the next call waits\n"
                  "up to reattach_timeout seconds (0.05) for it to come back and reattaches,\n"
                  "keeping the blocks the restarted daemon adopted; if none came, later calls\n"
                  "raise DaemonGone at once (each tries once to reconnect) until one is back.")
      .def(
          "pool",
          [](const Client& c, const std::string& name) { return PoolObject(check(c.pool(name))); },
          py::arg("name"), "The pool called name (NotFound otherwise).")
      .def_property_readonly("pool_names", &Client::pool_names)
      .def(
          "ping", [](Client& c) { check(without_gil([&] { return c.ping(); })); },
          "A round trip to kvpoold.")
      .def(
          "flush",
          [](Client& c) {
            py::gil_scoped_release nogil;
            c.flush();
          },
          "Sends queued releases now (else with the next request, or within ~10 ms).")
      .def_property_readonly("daemon_alive", &Client::daemon_alive)
      .def_property_readonly("slot", &Client::slot)
      .def("__repr__",
           [](const Client& c) { return "<kvpool.Client slot=" + std::to_string(c.slot()) + ">"; });
}

}  // namespace
}  // namespace kvpool::python

PYBIND11_MODULE(_kvpool, m) {
  using namespace kvpool;
  using namespace kvpool::python;
  m.doc() =
      "Python bindings of libkvpool, a worker's connection to kvpoold (see kvpool's "
      "docs/python.md).";
  bind_errors(m);
  bind_blocks(m);
#ifdef KVPOOL_HAVE_DLPACK
  bind_dlpack(m);
#endif

  py::class_<PendingAllocate>(m, "_PendingAllocate")
      .def("wait", &PendingAllocate::wait, "The answer (blocks until kvpoold gives it).");
  py::class_<PendingImmutables>(m, "_PendingImmutables")
      .def("wait", &PendingImmutables::wait, "The answer (blocks until kvpoold gives it).");

  // The libkvpool this extension was built with (kvpool/core/version.hpp).
  m.attr("__version__") = kvpool::version();
  m.attr("__git_commit__") = kvpool::git_commit();

  bind_pool(m);
  bind_client(m);
  bind_batch_store(m);

  m.def("hash_tokens", &hash_tokens, py::arg("tokens"), py::arg("page_size"), py::arg("salt") = 0,
        py::arg("hash_scheme") = "dynamo-0.2",
        "(block_hashes, sequence_hashes) of the full blocks of `tokens` in `hash_scheme`\n"
        "('dynamo-0.2' or 'dynamo-router'; a partial tail is not hashed). To match a pool's\n"
        "blocks use Pool.hash_tokens, which hashes as the pool does.");
}
