// DLPack export of blocks (__dlpack__, __dlpack_device__), with Debian's dlpack.h (0.6):
// torch.from_dlpack(block) / numpy.from_dlpack(block) give a zero-copy tensor shaped
// (num_layers, outer_dim, page_size, inner_dim), typed by the pool's dtype.
#pragma once

#include <pybind11/pybind11.h>

#include "blocks.hpp"

namespace kvpool::python {

// (device_type, device_id): (1, 0) for host blocks (kDLCPU), (2, ordinal) for device
// blocks (kDLCUDA).
pybind11::tuple dlpack_device(const PoolMeta& m);

// A "dltensor" capsule over the block `self` (a MutableBlockObject or ImmutableBlockObject)
// at `addr`. The capsule holds the block object, and counts as an exported view until the
// consumer's deleter runs (so release() waits for it and register_blocks refuses).
template <typename Obj>
pybind11::capsule dlpack_capsule(pybind11::handle self, Obj& block, void* addr);

void bind_dlpack(pybind11::module_& m);

}  // namespace kvpool::python
