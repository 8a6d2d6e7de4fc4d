#include "errors.hpp"

#include <array>
#include <string_view>

namespace py = pybind11;

namespace kvpool::python {
namespace {

constexpr uint16_t kMaxCode = static_cast<uint16_t>(ErrorCode::kChecksumMismatch);

// One exception class per code, indexed by the code's number; [0] is kvpool.Error. Owned by
// the module (as attributes), so plain pointers live as long as it does.
std::array<PyObject*, kMaxCode + 1> g_classes{};
PyObject* g_error_code_enum = nullptr;

const char* doc_of(ErrorCode code) {
  switch (code) {
    case ErrorCode::kNotEnoughBlocks:
      return "allocate_blocks(n) found fewer than n free or evictable blocks.";
    case ErrorCode::kInvalidArgument:
      return "A value out of range (count, index, dimension, token).";
    case ErrorCode::kInvalidState:
      return "Not allowed in the block's current state (or the block was released).";
    case ErrorCode::kBlockFull:
      return "add_token on a full block.";
    case ErrorCode::kBlockEmpty:
      return "pop_token on an empty block.";
    case ErrorCode::kIncompleteBlock:
      return "commit() before the block holds page_size tokens.";
    case ErrorCode::kInvalidHandle:
      return "A stale, foreign or unknown block handle (a bug in the caller).";
    case ErrorCode::kNotFound:
      return "Unknown pool, instance or file.";
    case ErrorCode::kResourceExhausted:
      return "A fixed capacity (client slots, holds, ring) is used up.";
    case ErrorCode::kDaemonGone:
      return "kvpoold died or shut down under this client: reconnect.";
    case ErrorCode::kProtocolError:
      return "A malformed record on a ring or the socket.";
    case ErrorCode::kVersionMismatch:
      return "kvpoold's shared-memory layout differs: rebuild against a matching libkvpool.";
    case ErrorCode::kConfigError:
      return "A bad configuration field.";
    case ErrorCode::kPermissionDenied:
      return "uid/gid not allowed (group kvpool, allowed_uids), or an OS permission error.";
    case ErrorCode::kIoError:
      return "An OS call failed (the message carries errno's text).";
    case ErrorCode::kTimeout:
      return "A bounded wait ran out.";
    case ErrorCode::kUnsupported:
      return "Not supported by this build (e.g. built without CUDA).";
    case ErrorCode::kDeviceError:
      return "A CUDA call failed.";
    case ErrorCode::kDisconnected:
      return "kvpoold disconnected this client: reconnect.";
    case ErrorCode::kInternal:
      return "A broken invariant: a bug (kvpoolctl check says where).";
    case ErrorCode::kQuotaExceeded:
      return "This client's share (blocks, references, priority) is used up (config \"quota\").";
    case ErrorCode::kDaemonUnresponsive:
      return "kvpoold runs but has stopped answering (stopped, wedged).";
    case ErrorCode::kChecksumMismatch:
      return "A block's bytes no longer match the checksum it was registered with: kvpoold "
             "evicted it.";
    case ErrorCode::kOk:
      break;
  }
  return "";
}

void raise(const Status& s) {
  auto n = static_cast<uint16_t>(s.code());
  PyObject* cls = n <= kMaxCode && g_classes[n] ? g_classes[n] : g_classes[0];
  py::object exc =
      py::reinterpret_steal<py::object>(PyObject_CallOneArg(cls, py::str(s.message()).ptr()));
  if (!exc) return;  // the call set an exception
  // .code on the instance too: kvpool.Error raised for a code it has no subclass for.
  py::object code =
      g_error_code_enum ? py::reinterpret_borrow<py::object>(g_error_code_enum)(n) : py::int_(n);
  exc.attr("code") = code;
  exc.attr("message") = py::str(s.message());
  PyErr_SetObject(cls, exc.ptr());
}

}  // namespace

void set_python_error(const Status& status) { raise(status); }

void bind_errors(py::module_& m) {
  // ErrorCode as an IntEnum: names as in C++ without the k, numbers stable (they travel in shm).
  py::list members;
  for (uint16_t n = 0; n <= kMaxCode; ++n)
    members.append(py::make_tuple(std::string(error_code_name(static_cast<ErrorCode>(n))), n));
  py::object enum_cls = py::module_::import("enum").attr("IntEnum")("ErrorCode", members,
                                                                    py::arg("module") = "kvpool");
  enum_cls.attr("__doc__") = "Stable numbers of kvpool's error codes (kvpool::ErrorCode).";
  m.attr("ErrorCode") = enum_cls;
  g_error_code_enum = enum_cls.ptr();

  PyObject* base = PyErr_NewExceptionWithDoc(
      "kvpool.Error",
      "Base of kvpool's exceptions. .code is the kvpool.ErrorCode, .message the C++ message "
      "(also str(e)).",
      PyExc_Exception, nullptr);
  if (!base) throw py::error_already_set();
  m.attr("Error") = py::reinterpret_steal<py::object>(base);
  g_classes[0] = base;
  for (uint16_t n = 1; n <= kMaxCode; ++n) {
    auto code = static_cast<ErrorCode>(n);
    std::string name(error_code_name(code));
    std::string qual = "kvpool." + name;
    PyObject* cls = PyErr_NewExceptionWithDoc(qual.c_str(), doc_of(code), base, nullptr);
    if (!cls) throw py::error_already_set();
    py::object owned = py::reinterpret_steal<py::object>(cls);
    owned.attr("code") = enum_cls(n);
    m.attr(name.c_str()) = owned;
    g_classes[n] = cls;
  }

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      raise(e.status());
    }
  });
}

}  // namespace kvpool::python
