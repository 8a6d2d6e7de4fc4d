// kvpool's Status as Python exceptions: kvpool.Error (with .code, a kvpool.ErrorCode, and
// .message, the C++ message) and one subclass per ErrorCode (kvpool.NotEnoughBlocks, ...).
#pragma once

#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

#include "kvpool/core/status.hpp"

namespace kvpool::python {

// Thrown by the binding code; translated to the kvpool exception of its code.
class StatusError : public std::exception {
 public:
  explicit StatusError(Status status) : status_(std::move(status)) {}
  const Status& status() const { return status_; }
  const char* what() const noexcept override { return status_.message().c_str(); }

 private:
  Status status_;
};

// Throws StatusError unless ok; returns the value of an ok Result.
inline void check(const Status& s) {
  if (!s.is_ok()) throw StatusError(s);
}
template <typename T>
T check(Result<T>&& r) {
  if (!r.is_ok()) throw StatusError(r.status());
  return std::move(r).value();
}

// Sets the Python error of `status` (not ok): for C slots that cannot throw.
void set_python_error(const Status& status);

// Adds ErrorCode, Error and its subclasses to `m`, and translates StatusError to them.
void bind_errors(pybind11::module_& m);

}  // namespace kvpool::python
