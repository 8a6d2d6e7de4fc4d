// kvpool.BatchStore and kvpool.BatchCompletion (batch_store.cpp).
#pragma once

#include <pybind11/pybind11.h>

namespace kvpool::python {

void bind_batch_store(pybind11::module_& m);

}  // namespace kvpool::python
