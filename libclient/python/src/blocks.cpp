#include "blocks.hpp"

#include <pybind11/stl.h>

#include <string>

#include "errors.hpp"
#include "int_sequence.hpp"

namespace py = pybind11;

namespace kvpool::python {
namespace {

Status released_error(const char* what, const char* why) {
  return Status(ErrorCode::kInvalidState,
                std::string(what) + " was " + why + "; it no longer holds a block");
}

// ---- memory views -----------------------------------------------------------------------------

// Items: the pool's dtype where the buffer protocol has a format for it (fp16 'e', fp32 'f');
// bf16, fp8 and u8 as unsigned integers of their size (view bf16 with .view() / DLPack); a
// pool without a dtype as signed integers of dtype_bytes, the same as its DLPack export
// (dlpack.cpp: torch has no uint16/32/64), so NumPy and torch see one type.
bool raw_signed(const PoolMeta& m) {
  return m.dtype == DType::kUnspecified && m.config.dtype_bytes > 1;
}

const char* item_format(const PoolMeta& m) {
  if (m.dtype == DType::kFp16) return "e";
  if (m.dtype == DType::kFp32) return "f";
  if (raw_signed(m)) return m.config.dtype_bytes == 2 ? "h" : m.config.dtype_bytes == 4 ? "i" : "q";
  switch (m.config.dtype_bytes) {
    case 1:
      return "B";
    case 2:
      return "H";
    case 4:
      return "I";
    default:
      return "Q";
  }
}

const char* typestr(const PoolMeta& m) {
  if (m.dtype == DType::kFp16) return "<f2";
  if (m.dtype == DType::kFp32) return "<f4";
  if (raw_signed(m))
    return m.config.dtype_bytes == 2 ? "<i2" : m.config.dtype_bytes == 4 ? "<i4" : "<i8";
  switch (m.config.dtype_bytes) {
    case 1:
      return "|u1";
    case 2:
      return "<u2";
    case 4:
      return "<u4";
    default:
      return "<u8";
  }
}

bool c_contiguous(const PoolMeta& m) {
  return m.config.num_layers == 1 || m.layer_stride == int64_t{m.config.outer_dim} * m.region_bytes;
}

py::tuple block_shape(const PoolMeta& m) {
  return py::make_tuple(m.config.num_layers, m.config.outer_dim, m.config.page_size,
                        m.config.inner_dim);
}

uint64_t block_nbytes(const PoolMeta& m) {
  return uint64_t{m.config.num_layers} * m.config.outer_dim * uint64_t(m.region_bytes);
}

Status device_no_buffer(const PoolMeta& m) {
  return Status(ErrorCode::kInvalidArgument,
                "pool '" + m.name +
                    "' is a device pool: its blocks are GPU memory; wrap them with "
                    "__cuda_array_interface__ (torch.as_tensor, cupy.asarray), not the buffer "
                    "protocol");
}

// Fills `view` over a block at `addr`. Without PyBUF_FORMAT the items are bytes (the last
// dimension is inner_dim * dtype_bytes); without PyBUF_ND it is one flat run of bytes.
int fill_view(PyObject* self, Py_buffer* view, int flags, std::byte* addr, const PoolMeta& m,
              bool readonly) {
  if (readonly && (flags & PyBUF_WRITABLE) == PyBUF_WRITABLE) {
    PyErr_SetString(PyExc_BufferError,
                    "ImmutableBlock is read-only: registered blocks are shared, never written");
    return -1;
  }
  const bool contiguous = c_contiguous(m);
  if (!contiguous && (flags & PyBUF_STRIDES) != PyBUF_STRIDES) {
    PyErr_SetString(PyExc_BufferError,
                    "block of a LayerSeparate pool is not contiguous: ask for a strided buffer "
                    "(memoryview, numpy.asarray)");
    return -1;
  }
  const bool items = (flags & PyBUF_FORMAT) == PyBUF_FORMAT;
  const bool nd = (flags & PyBUF_ND) == PyBUF_ND;
  const int64_t dtype = m.config.dtype_bytes;
  auto* dims = new Py_ssize_t[8];
  dims[0] = m.config.num_layers;
  dims[1] = m.config.outer_dim;
  dims[2] = m.config.page_size;
  dims[3] = items ? m.config.inner_dim : m.config.inner_dim * dtype;
  dims[4] = m.layer_stride;
  dims[5] = m.region_bytes;
  dims[6] = m.config.inner_dim * dtype;
  dims[7] = items ? dtype : 1;
  view->buf = addr;
  Py_INCREF(self);  // Py_NewRef is CPython 3.10+; the bindings build for 3.9 too
  view->obj = self;
  view->len = static_cast<Py_ssize_t>(block_nbytes(m));
  view->readonly = readonly ? 1 : 0;
  view->itemsize = nd && items ? dtype : 1;
  view->format = items ? const_cast<char*>(nd ? item_format(m) : "B") : nullptr;
  view->ndim = nd ? 4 : 1;
  view->shape = nd ? dims : nullptr;
  view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? dims + 4 : nullptr;
  view->suboffsets = nullptr;
  view->internal = dims;
  const bool want_c = (flags & PyBUF_C_CONTIGUOUS) == PyBUF_C_CONTIGUOUS ||
                      (flags & PyBUF_ANY_CONTIGUOUS) == PyBUF_ANY_CONTIGUOUS;
  const bool want_f = (flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS;
  if ((want_c && !contiguous) || (want_f && !PyBuffer_IsContiguous(view, 'F'))) {
    delete[] dims;
    Py_CLEAR(view->obj);
    PyErr_SetString(PyExc_BufferError, "block is not contiguous in the order asked for");
    return -1;
  }
  return 0;
}

template <typename Obj>
int get_buffer(PyObject* self, Py_buffer* view, int flags) {
  view->obj = nullptr;
  try {
    Obj& o = py::handle(self).cast<Obj&>();
    const PoolMeta& m = o.meta();
    if (m.device) throw StatusError(device_no_buffer(m));
    std::byte* addr;
    if constexpr (std::is_same_v<Obj, MutableBlockObject>) {
      addr = check(o.get().address(0, 0));
    } else {
      addr = const_cast<std::byte*>(check(o.get().address(0, 0)));
    }
    if (fill_view(self, view, flags, addr, m, std::is_same_v<Obj, ImmutableBlockObject>) != 0)
      return -1;
    o.add_export();
    return 0;
  } catch (const StatusError& e) {
    set_python_error(e.status());
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const py::builtin_exception& e) {
    e.set_error();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_BufferError, e.what());
  }
  return -1;
}

template <typename Obj>
void release_buffer(PyObject* self, Py_buffer* view) {
  delete[] static_cast<Py_ssize_t*>(view->internal);
  view->internal = nullptr;
  try {
    py::handle(self).cast<Obj&>().drop_export();
  } catch (...) {
    PyErr_WriteUnraisable(self);
  }
}

template <typename Obj>
void enable_buffer(PyHeapTypeObject* heap) {
  heap->as_buffer.bf_getbuffer = &get_buffer<Obj>;
  heap->as_buffer.bf_releasebuffer = &release_buffer<Obj>;
  heap->ht_type.tp_as_buffer = &heap->as_buffer;
}

// __cuda_array_interface__ (version 3) of a device block; AttributeError for host blocks, so
// hasattr() is False and libraries fall back to the buffer protocol.
py::dict cuda_array_interface(uintptr_t addr, const PoolMeta& m, bool readonly) {
  py::dict d;
  d["shape"] = block_shape(m);
  d["typestr"] = typestr(m);
  d["data"] = py::make_tuple(addr, readonly);
  d["version"] = 3;
  const int64_t dtype = m.config.dtype_bytes;
  if (c_contiguous(m)) {
    d["strides"] = py::none();
  } else {
    d["strides"] =
        py::make_tuple(m.layer_stride, m.region_bytes, m.config.inner_dim * dtype, dtype);
  }
  // The bytes are written by whoever filled the block, on their own stream, before they
  // registered it: nothing for the consumer to synchronise with here.
  d["stream"] = py::none();
  return d;
}

[[noreturn]] void no_cuda_interface(const PoolMeta& m) {
  throw py::attribute_error("block of host pool '" + m.name +
                            "' has no __cuda_array_interface__: use the buffer protocol "
                            "(memoryview(block), numpy.asarray(block))");
}

Py_ssize_t normalise_index(Py_ssize_t i, size_t n) {
  if (i < 0) i += static_cast<Py_ssize_t>(n);
  if (i < 0 || static_cast<size_t>(i) >= n)
    throw py::index_error("ImmutableBlocks index out of range");
  return i;
}

std::string state_name(const MutableBlockObject& b) {
  return std::string(block_state_name(b.get().state().kind()));
}

}  // namespace

// ---- PoolMeta ---------------------------------------------------------------------------------

std::shared_ptr<const PoolMeta> PoolMeta::of(const Pool& pool) {
  auto m = std::make_shared<PoolMeta>();
  m->name = pool.name();
  m->config = pool.layout();
  m->device = pool.is_device();
  m->dtype = pool.dtype();
  if (m->device) {
    // Opens the pool's CUDA IPC handle here; a GPU not visible in this process leaves -1
    // (addresses and exports then fail with the reason).
    auto d = pool.cuda_device();
    m->cuda_device = d ? *d : -1;
  }
  auto layout = check(Layout::create(m->config));
  m->region_bytes = static_cast<int64_t>(layout.region_bytes());
  m->layer_stride = m->config.num_layers > 1
                        ? static_cast<int64_t>(layout.offset_unchecked(0, 1, 0) -
                                               layout.offset_unchecked(0, 0, 0))
                        : int64_t{m->config.outer_dim} * m->region_bytes;
  return m;
}

// ---- MutableBlockObject -----------------------------------------------------------------------

MutableBlock& MutableBlockObject::get() {
  if (!block_ || pending_release_) throw StatusError(released_error("MutableBlock", gone_));
  return *block_;
}

void MutableBlockObject::check_takeable() const {
  (void)get();
  if (exports_ > 0)
    throw py::buffer_error("MutableBlock " + std::to_string(block_->block_id()) + " has " +
                           std::to_string(exports_) +
                           " exported view(s) (memoryview / NumPy array): delete them before "
                           "register_blocks; a registered block is read-only");
}

MutableBlock MutableBlockObject::take() {
  check_takeable();
  MutableBlock b = std::move(*block_);
  block_.reset();
  gone_ = "registered (use the ImmutableBlock register_blocks returned)";
  return b;
}

void MutableBlockObject::release() {
  if (exports_ > 0) {
    pending_release_ = true;  // the last view's release drops it
    return;
  }
  block_.reset();
}

void MutableBlockObject::drop_export() {
  if (--exports_ == 0 && pending_release_) {
    block_.reset();
    pending_release_ = false;
  }
}

// ---- ImmutableBlockObject ---------------------------------------------------------------------

const ImmutableBlock& ImmutableBlockObject::get() const {
  if (!block_.valid() || pending_release_)
    throw StatusError(released_error("ImmutableBlock", "released"));
  return block_;
}

void ImmutableBlockObject::release() {
  if (exports_ > 0) {
    pending_release_ = true;
    return;
  }
  block_.reset();
}

void ImmutableBlockObject::drop_export() {
  if (--exports_ == 0 && pending_release_) {
    block_.reset();
    pending_release_ = false;
  }
}

// ---- ImmutableBlocksObject --------------------------------------------------------------------

ImmutableBlockObject ImmutableBlocksObject::at(Py_ssize_t index) const {
  return ImmutableBlockObject(blocks_[static_cast<size_t>(normalise_index(index, blocks_.size()))],
                              meta_);
}

void ImmutableBlocksObject::release() {
  std::vector<ImmutableBlock> drop;
  drop.swap(blocks_);
  py::gil_scoped_release nogil;  // the last copies queue releases to the daemon
  drop.clear();
}

// ---- bindings ---------------------------------------------------------------------------------

namespace {

using MutableClass = py::class_<MutableBlockObject>;

// The token state machine: Reset -> Partial -> Complete, and the hashes commit computes.
void bind_mutable_tokens(MutableClass& c) {
  c.def(
       "init_sequence",
       [](MutableBlockObject& b, uint64_t salt, std::optional<uint64_t> parent) {
         check(b.get().init_sequence(salt, parent));
       },
       py::arg("salt") = 0, py::arg("parent") = py::none(),
       "Reset -> Partial. parent: the sequence hash of the previous block, None for the first.")
      .def(
          "add_token", [](MutableBlockObject& b, uint32_t t) { check(b.get().add_token(t)); },
          py::arg("token"), "Adds one token (Partial only); BlockFull when full.")
      .def(
          "add_tokens",
          [](MutableBlockObject& b, py::handle tokens) {
            auto v = to_unsigned_vector<Token>(tokens, "tokens");
            return check(b.get().add_tokens(v));
          },
          py::arg("tokens"), "Adds as many tokens as fit (Partial only) and returns how many.")
      .def("pop_token", [](MutableBlockObject& b) { check(b.get().pop_token()); })
      .def(
          "pop_tokens", [](MutableBlockObject& b, size_t n) { check(b.get().pop_tokens(n)); },
          py::arg("n"))
      .def(
          "commit", [](MutableBlockObject& b) { check(b.get().commit()); },
          "Partial -> Complete once it holds exactly page_size tokens; computes the hashes.")
      .def(
          "reset", [](MutableBlockObject& b) { b.get().reset(); },
          "Back to Reset: forgets tokens, salt, parent and hashes (keeps the block).")
      .def_property_readonly(
          "sequence_hash",
          [](const MutableBlockObject& b) { return check(b.get().sequence_hash()); },
          "Sequence hash (Complete only, else InvalidState).")
      .def_property_readonly(
          "block_hash",
          [](const MutableBlockObject& b) { return check(b.get().state().block_hash()); },
          "Hash of this block's tokens alone (Complete only).")
      .def_property_readonly(
          "parent_sequence_hash",
          [](const MutableBlockObject& b) { return b.get().state().parent_sequence_hash(); })
      .def_property_readonly("tokens",
                             [](const MutableBlockObject& b) {
                               auto t = b.get().state().tokens();
                               return std::vector<Token>(t.begin(), t.end());
                             })
      .def_property_readonly("state", &state_name, "'Reset', 'Partial' or 'Complete'.");
}

// Identity, memory (addresses, buffer, CUDA array interface) and lifetime.
void bind_mutable_memory(MutableClass& c) {
  c.def_property_readonly("block_id",
                          [](const MutableBlockObject& b) { return b.get().block_id(); })
      .def_property_readonly("generation",
                             [](const MutableBlockObject& b) { return b.get().generation(); })
      .def_property_readonly("pool_index",
                             [](const MutableBlockObject& b) { return b.get().pool_index(); })
      .def_property(
          "priority", [](const MutableBlockObject& b) { return b.get().priority(); },
          [](MutableBlockObject& b, uint32_t p) { b.get().set_priority(p); },
          "Eviction priority once registered and unreferenced: lower goes first.")
      .def(
          "address",
          [](const MutableBlockObject& b, uint32_t layer, uint32_t outer) {
            return reinterpret_cast<uintptr_t>(check(b.get().address(layer, outer)));
          },
          py::arg("layer") = 0, py::arg("outer") = 0,
          "Address of region (layer, outer): a host pointer, or a device pointer for device pools.")
      .def_property_readonly("shape",
                             [](const MutableBlockObject& b) { return block_shape(b.meta()); })
      .def_property_readonly("nbytes",
                             [](const MutableBlockObject& b) { return block_nbytes(b.meta()); })
      .def_property_readonly("is_device",
                             [](const MutableBlockObject& b) { return b.meta().device; })
      .def_property_readonly("released", &MutableBlockObject::released)
      .def_property_readonly("__cuda_array_interface__",
                             [](const MutableBlockObject& b) {
                               if (!b.meta().device) no_cuda_interface(b.meta());
                               auto a = check(b.get().address(0, 0));
                               return cuda_array_interface(reinterpret_cast<uintptr_t>(a), b.meta(),
                                                           false);
                             })
      .def("release", &MutableBlockObject::release,
           "Returns the block to the pool now (or when its last exported view goes).")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](MutableBlockObject& b, py::args) { b.release(); })
      .def("__repr__", [](const MutableBlockObject& b) {
        if (b.released()) return std::string("<kvpool.MutableBlock released>");
        return "<kvpool.MutableBlock pool='" + b.meta().name +
               "' id=" + std::to_string(b.get().block_id()) + " " + state_name(b) + ">";
      });
}

void bind_mutable_block(py::module_& m) {
  MutableClass c(
      m, "MutableBlock", py::custom_type_setup(&enable_buffer<MutableBlockObject>),
      "A block this worker owns alone, from Pool.allocate_blocks: fill it (token API, and bytes\n"
      "through the buffer protocol), then hand it to Pool.register_blocks.\n\n"
      "Released (returned to the pool, reset) by release(), at the end of a `with` block, or\n"
      "when garbage-collected. numpy.asarray(block) / memoryview(block) is a writable view\n"
      "of the block's memory, shaped (num_layers, outer_dim, page_size, inner_dim), items\n"
      "unsigned integers of dtype_bytes (use .view(numpy.float16) etc.).");
  bind_mutable_tokens(c);
  bind_mutable_memory(c);
}

void bind_immutable_block(py::module_& m) {
  py::class_<ImmutableBlockObject>(
      m, "ImmutableBlock", py::custom_type_setup(&enable_buffer<ImmutableBlockObject>),
      "A registered block: one reference, dropped by release(), at the end of a `with` block,\n"
      "or when garbage-collected. numpy.asarray(block) is a read-only view of its memory.")
      .def_property_readonly("sequence_hash",
                             [](const ImmutableBlockObject& b) { return b.get().sequence_hash(); })
      .def_property_readonly("block_id",
                             [](const ImmutableBlockObject& b) { return b.get().block_id(); })
      .def_property_readonly("generation",
                             [](const ImmutableBlockObject& b) { return b.get().generation(); })
      .def_property_readonly("pool_index",
                             [](const ImmutableBlockObject& b) { return b.get().pool_index(); })
      .def(
          "address",
          [](const ImmutableBlockObject& b, uint32_t layer, uint32_t outer) {
            return reinterpret_cast<uintptr_t>(check(b.get().address(layer, outer)));
          },
          py::arg("layer") = 0, py::arg("outer") = 0)
      .def_property_readonly("shape",
                             [](const ImmutableBlockObject& b) { return block_shape(b.meta()); })
      .def_property_readonly("nbytes",
                             [](const ImmutableBlockObject& b) { return block_nbytes(b.meta()); })
      .def_property_readonly("is_device",
                             [](const ImmutableBlockObject& b) { return b.meta().device; })
      .def_property_readonly("released", &ImmutableBlockObject::released)
      .def_property_readonly("__cuda_array_interface__",
                             [](const ImmutableBlockObject& b) {
                               if (!b.meta().device) no_cuda_interface(b.meta());
                               auto a = check(b.get().address(0, 0));
                               return cuda_array_interface(reinterpret_cast<uintptr_t>(a), b.meta(),
                                                           true);
                             })
      .def("release", &ImmutableBlockObject::release,
           "Drops this reference now (or when its last exported view goes).")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](ImmutableBlockObject& b, py::args) { b.release(); })
      .def("__repr__", [](const ImmutableBlockObject& b) {
        if (b.released()) return std::string("<kvpool.ImmutableBlock released>");
        return "<kvpool.ImmutableBlock pool='" + b.meta().name +
               "' id=" + std::to_string(b.get().block_id()) +
               " sequence_hash=" + std::to_string(b.get().sequence_hash()) + ">";
      });
}

void bind_immutable_blocks(py::module_& m) {
  py::class_<ImmutableBlocksObject>(
      m, "ImmutableBlocks",
      "Registered blocks returned by register_blocks / match_sequence_hashes: a sequence of\n"
      "ImmutableBlock holding one reference per block. release() (or the end of a `with`\n"
      "block, or garbage collection) drops them; blocks taken out of it keep their own.")
      .def("__len__", &ImmutableBlocksObject::size)
      .def("__bool__", [](const ImmutableBlocksObject& b) { return b.size() > 0; })
      .def("__getitem__", &ImmutableBlocksObject::at, py::arg("index"))
      .def("__getitem__",
           [](const ImmutableBlocksObject& b, const py::slice& s) {
             size_t start, stop, step, n;
             if (!s.compute(b.size(), &start, &stop, &step, &n)) throw py::error_already_set();
             std::vector<ImmutableBlock> out;
             out.reserve(n);
             for (size_t i = 0; i < n; ++i, start += step) out.push_back(b.blocks()[start]);
             return ImmutableBlocksObject(std::move(out), b.meta());
           })
      .def("__iter__",
           [](const ImmutableBlocksObject& b) {
             py::list items(b.size());
             for (size_t i = 0; i < b.size(); ++i)
               items[i] = py::cast(b.at(static_cast<Py_ssize_t>(i)));
             return items.attr("__iter__")();
           })
      .def_property_readonly("sequence_hashes",
                             [](const ImmutableBlocksObject& b) {
                               std::vector<SequenceHash> h;
                               h.reserve(b.size());
                               for (auto& x : b.blocks()) h.push_back(x.sequence_hash());
                               return h;
                             })
      .def_property_readonly("block_ids",
                             [](const ImmutableBlocksObject& b) {
                               std::vector<uint32_t> ids;
                               ids.reserve(b.size());
                               for (auto& x : b.blocks()) ids.push_back(x.block_id());
                               return ids;
                             })
      .def("release", &ImmutableBlocksObject::release,
           "Drops every reference it holds; it is then empty.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](ImmutableBlocksObject& b, py::args) { b.release(); })
      .def("__repr__", [](const ImmutableBlocksObject& b) {
        return "<kvpool.ImmutableBlocks pool='" + b.meta()->name + "' " + std::to_string(b.size()) +
               " block(s)>";
      });
}

}  // namespace

void bind_blocks(py::module_& m) {
  bind_mutable_block(m);
  bind_immutable_block(m);
  bind_immutable_blocks(m);
}

}  // namespace kvpool::python
