#include "dlpack.hpp"

#ifdef KVPOOL_HAVE_DLPACK

#include <dlpack/dlpack.h>

#include <string>

#include "errors.hpp"

namespace py = pybind11;

namespace kvpool::python {
namespace {

// DLPack 0.6 has no fp8 code: fp8_e4m3 goes out as uint8 (torch: .view(torch.float8_e4m3fn)
// where the consumer has it). A pool without a dtype: raw integers of dtype_bytes, unsigned
// for 1 byte, else signed (torch has no uint16/32/64; the bits are the same), as its buffer
// protocol export says too (blocks.cpp item_format).
DLDataType dl_dtype(const PoolMeta& m) {
  switch (m.dtype) {
    case DType::kFp16:
      return {kDLFloat, 16, 1};
    case DType::kBf16:
      return {kDLBfloat, 16, 1};
    case DType::kFp32:
      return {kDLFloat, 32, 1};
    case DType::kFp8E4M3:
    case DType::kU8:
      return {kDLUInt, 8, 1};
    case DType::kUnspecified:
      break;
  }
  const auto bits = static_cast<uint8_t>(8 * m.config.dtype_bytes);
  return {bits == 8 ? static_cast<uint8_t>(kDLUInt) : static_cast<uint8_t>(kDLInt), bits, 1};
}

// What the DLManagedTensor owns: the shape and strides, and a reference to the block object.
struct Context {
  DLManagedTensor tensor{};
  int64_t shape[4]{};
  int64_t strides[4]{};
  PyObject* owner = nullptr;  // the block object; its export count includes this tensor
  void (*drop_export)(PyObject*) = nullptr;
};

// The consumer calls this when done, on any thread, with or without the GIL.
void deleter(DLManagedTensor* t) {
  auto* ctx = static_cast<Context*>(t->manager_ctx);
  PyGILState_STATE g = PyGILState_Ensure();
  ctx->drop_export(ctx->owner);
  Py_DECREF(ctx->owner);
  PyGILState_Release(g);
  delete ctx;
}

// A capsule no consumer took (still named "dltensor") frees its tensor itself.
void capsule_destructor(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;  // consumed: "used_dltensor"
  auto* t = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (t && t->deleter) t->deleter(t);
}

template <typename Obj>
void drop_export_of(PyObject* o) {
  try {
    py::handle(o).cast<Obj&>().drop_export();
  } catch (...) {
    PyErr_WriteUnraisable(o);
  }
}

}  // namespace

py::tuple dlpack_device(const PoolMeta& m) {
  if (!m.device) return py::make_tuple(static_cast<int>(kDLCPU), 0);
  return py::make_tuple(static_cast<int>(kDLCUDA), m.cuda_device);
}

template <typename Obj>
py::capsule dlpack_capsule(py::handle self, Obj& block, void* addr) {
  const PoolMeta& m = block.meta();
  const int64_t item = m.config.dtype_bytes;
  if (m.layer_stride % item != 0 || m.region_bytes % item != 0)
    throw StatusError(Status(ErrorCode::kInvalidArgument,
                             "pool '" + m.name + "': its layer stride (" +
                                 std::to_string(m.layer_stride) +
                                 " bytes) is not a whole number of elements; DLPack strides "
                                 "count elements (raise the layout's alignment)"));
  auto* ctx = new Context();
  ctx->shape[0] = m.config.num_layers;
  ctx->shape[1] = m.config.outer_dim;
  ctx->shape[2] = m.config.page_size;
  ctx->shape[3] = m.config.inner_dim;
  ctx->strides[0] = m.layer_stride / item;
  ctx->strides[1] = m.region_bytes / item;
  ctx->strides[2] = m.config.inner_dim;
  ctx->strides[3] = 1;
  DLTensor& t = ctx->tensor.dl_tensor;
  t.data = addr;
  t.device = m.device ? DLDevice{kDLCUDA, m.cuda_device} : DLDevice{kDLCPU, 0};
  t.ndim = 4;
  t.dtype = dl_dtype(m);
  t.shape = ctx->shape;
  t.strides = ctx->strides;
  t.byte_offset = 0;
  ctx->tensor.manager_ctx = ctx;
  ctx->tensor.deleter = &deleter;
  ctx->owner = self.ptr();
  ctx->drop_export = &drop_export_of<Obj>;
  Py_INCREF(ctx->owner);
  block.add_export();
  PyObject* cap = PyCapsule_New(&ctx->tensor, "dltensor", &capsule_destructor);
  if (!cap) {
    deleter(&ctx->tensor);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(cap);
}

template py::capsule dlpack_capsule<MutableBlockObject>(py::handle, MutableBlockObject&, void*);
template py::capsule dlpack_capsule<ImmutableBlockObject>(py::handle, ImmutableBlockObject&, void*);

void bind_dlpack(py::module_& m) {
  py::object mutable_cls = m.attr("MutableBlock");
  py::object immutable_cls = m.attr("ImmutableBlock");
  // The stream argument: a device block's bytes were written (and synchronised) by whoever
  // filled it before it was shared, so there is nothing for the consumer's stream to wait on.
  py::cpp_function mut_dlpack(
      [](py::handle self, py::object /*stream*/) {
        auto& b = self.cast<MutableBlockObject&>();
        void* addr = check(b.get().address(0, 0));
        return dlpack_capsule(self, b, addr);
      },
      py::name("__dlpack__"), py::is_method(mutable_cls), py::arg("stream") = py::none(),
      "A DLPack capsule of the block's memory (torch.from_dlpack, numpy.from_dlpack).");
  mutable_cls.attr("__dlpack__") = mut_dlpack;
  py::cpp_function imm_dlpack(
      [](py::handle self, py::object /*stream*/) {
        auto& b = self.cast<ImmutableBlockObject&>();
        void* addr = const_cast<std::byte*>(check(b.get().address(0, 0)));
        return dlpack_capsule(self, b, addr);
      },
      py::name("__dlpack__"), py::is_method(immutable_cls), py::arg("stream") = py::none(),
      "A DLPack capsule of the block's memory. DLPack 0.6 cannot mark it read-only: a\n"
      "registered block is shared, never write through the tensor.");
  immutable_cls.attr("__dlpack__") = imm_dlpack;
  py::cpp_function mut_dev([](const MutableBlockObject& b) { return dlpack_device(b.meta()); },
                           py::name("__dlpack_device__"), py::is_method(mutable_cls));
  mutable_cls.attr("__dlpack_device__") = mut_dev;
  py::cpp_function imm_dev([](const ImmutableBlockObject& b) { return dlpack_device(b.meta()); },
                           py::name("__dlpack_device__"), py::is_method(immutable_cls));
  immutable_cls.attr("__dlpack_device__") = imm_dev;
}

}  // namespace kvpool::python

#endif  // KVPOOL_HAVE_DLPACK
