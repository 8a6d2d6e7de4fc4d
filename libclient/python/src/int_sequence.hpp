// Unsigned integers (tokens, hashes) from Python: a 1-D buffer of integers (NumPy array,
// array.array, memoryview) is read directly; any other sequence item by item. Negative or
// too large values raise OverflowError, non-integers TypeError.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace kvpool::python {

namespace detail {

[[noreturn]] inline void overflow(const std::string& message) {
  PyErr_SetString(PyExc_OverflowError, message.c_str());
  throw pybind11::error_already_set();
}

template <typename T>
T checked(unsigned long long v, const char* what) {
  if (v > std::numeric_limits<T>::max())
    overflow(std::string(what) + ": " + std::to_string(v) + " does not fit in " +
             std::to_string(sizeof(T) * 8) + " bits");
  return static_cast<T>(v);
}

template <typename T, typename S>
bool read_items(const Py_buffer& b, std::vector<T>& out, const char* what) {
  const auto* p = static_cast<const char*>(b.buf);
  for (size_t i = 0; i < out.size(); ++i) {
    S v;
    std::memcpy(&v, p + i * sizeof(S), sizeof(S));
    if constexpr (std::is_signed_v<S>) {
      if (v < 0) overflow(std::string(what) + ": negative value " + std::to_string(v));
    }
    out[i] = checked<T>(static_cast<unsigned long long>(v), what);
  }
  return true;
}

// Fills `out` from a C-contiguous 1-D integer buffer; false when `obj` is no such buffer.
template <typename T>
bool from_buffer(pybind11::handle obj, std::vector<T>& out, const char* what) {
  if (!PyObject_CheckBuffer(obj.ptr()) || PyBytes_Check(obj.ptr()) || PyByteArray_Check(obj.ptr()))
    return false;
  Py_buffer b;
  if (PyObject_GetBuffer(obj.ptr(), &b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
    PyErr_Clear();
    return false;
  }
  struct Release {
    Py_buffer* b;
    ~Release() { PyBuffer_Release(b); }
  } release{&b};
  if (b.ndim > 1) return false;
  const char* f = b.format ? b.format : "B";
  if (*f == '@' || *f == '=' || *f == '<') ++f;
  if (f[0] == '\0' || f[1] != '\0') return false;
  out.resize(static_cast<size_t>(b.len / b.itemsize));
  const bool is_signed =
      f[0] == 'b' || f[0] == 'h' || f[0] == 'i' || f[0] == 'l' || f[0] == 'q' || f[0] == 'n';
  const bool is_unsigned =
      f[0] == 'B' || f[0] == 'H' || f[0] == 'I' || f[0] == 'L' || f[0] == 'Q' || f[0] == 'N';
  if (!is_signed && !is_unsigned) {
    throw pybind11::type_error(std::string(what) + ": a buffer of integers is needed, format '" +
                               (b.format ? b.format : "B") + "'");
  }
  switch (b.itemsize) {
    case 1:
      return is_signed ? read_items<T, int8_t>(b, out, what) : read_items<T, uint8_t>(b, out, what);
    case 2:
      return is_signed ? read_items<T, int16_t>(b, out, what)
                       : read_items<T, uint16_t>(b, out, what);
    case 4:
      return is_signed ? read_items<T, int32_t>(b, out, what)
                       : read_items<T, uint32_t>(b, out, what);
    case 8:
      return is_signed ? read_items<T, int64_t>(b, out, what)
                       : read_items<T, uint64_t>(b, out, what);
    default:
      return false;
  }
}

}  // namespace detail

template <typename T>
std::vector<T> to_unsigned_vector(pybind11::handle obj, const char* what) {
  std::vector<T> out;
  if (detail::from_buffer<T>(obj, out, what)) return out;
  if (PyUnicode_Check(obj.ptr()) || PyBytes_Check(obj.ptr()))
    throw pybind11::type_error(std::string(what) + ": a sequence of integers is needed, not " +
                               Py_TYPE(obj.ptr())->tp_name);
  PyObject* seq = PySequence_Fast(obj.ptr(), what);
  if (!seq) throw pybind11::error_already_set();
  auto owned = pybind11::reinterpret_steal<pybind11::object>(seq);
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject** items = PySequence_Fast_ITEMS(seq);
  out.resize(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = items[i];
    // PyLong_AsUnsignedLong, not ...LongLong: the latter goes byte by byte through
    // _PyLong_AsByteArray for values above 2^30 (every hash), several times slower.
    static_assert(sizeof(unsigned long) == sizeof(uint64_t));
    unsigned long long v;
    if (PyLong_Check(item)) {
      v = PyLong_AsUnsignedLong(item);
    } else {
      PyObject* idx = PyNumber_Index(item);  // NumPy integer scalars
      if (!idx) throw pybind11::error_already_set();
      v = PyLong_AsUnsignedLong(idx);
      Py_DECREF(idx);
    }
    if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred())
      throw pybind11::error_already_set();
    out[static_cast<size_t>(i)] = detail::checked<T>(v, what);
  }
  return out;
}

}  // namespace kvpool::python
