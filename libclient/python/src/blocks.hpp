// Python block objects over libkvpool's handles.
//
//   MutableBlock     one kvpool::MutableBlock: token API, writable buffer
//   ImmutableBlock   one kvpool::ImmutableBlock copy: read-only buffer
//   ImmutableBlocks  what register_blocks / match_sequence_hashes return: the vector of
//                    handles as one Python object (a sequence), so a match of 64 blocks costs
//                    one Python object, not 64
//
// A host block exports the buffer protocol, shaped (num_layers, outer_dim, page_size,
// inner_dim) with unsigned items of dtype_bytes; a device block exports
// __cuda_array_interface__ instead. A view holds the block object, so the block lives at
// least as long as its views; release() with views still exported drops the handle when the
// last view goes.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvpool/block.hpp"
#include "kvpool/client.hpp"
#include "kvpool/core/dtype.hpp"
#include "kvpool/core/layout.hpp"

namespace kvpool::python {

// What a pool's blocks need to describe their memory, shared by the pool and its blocks.
struct PoolMeta {
  std::string name;
  LayoutConfig config{};
  bool device = false;
  int64_t layer_stride = 0;           // bytes between (l, o) and (l + 1, o) of one block
  int64_t region_bytes = 0;           // page_size * inner_dim * dtype_bytes
  DType dtype = DType::kUnspecified;  // the config's "dtype"
  int cuda_device = -1;               // device pools: local ordinal (-1: not visible here)

  static std::shared_ptr<const PoolMeta> of(const Pool& pool);
};

class MutableBlockObject {
 public:
  MutableBlockObject(MutableBlock block, std::shared_ptr<const PoolMeta> meta)
      : block_(std::move(block)), meta_(std::move(meta)) {}

  // The handle; InvalidState when released or registered.
  MutableBlock& get();
  const MutableBlock& get() const { return const_cast<MutableBlockObject*>(this)->get(); }
  // Moves the handle out for register_blocks; BufferError while views are exported.
  MutableBlock take();
  void check_takeable() const;
  void release();
  bool released() const { return !block_ || pending_release_; }
  const PoolMeta& meta() const { return *meta_; }

  // Buffer protocol bookkeeping.
  void add_export() { ++exports_; }
  void drop_export();
  int exports() const { return exports_; }

 private:
  std::optional<MutableBlock> block_;
  std::shared_ptr<const PoolMeta> meta_;
  const char* gone_ = "released";  // why block_ is empty
  int exports_ = 0;
  bool pending_release_ = false;
};

class ImmutableBlockObject {
 public:
  ImmutableBlockObject(ImmutableBlock block, std::shared_ptr<const PoolMeta> meta)
      : block_(std::move(block)), meta_(std::move(meta)) {}

  const ImmutableBlock& get() const;
  void release();
  bool released() const { return !block_.valid() || pending_release_; }
  const PoolMeta& meta() const { return *meta_; }

  void add_export() { ++exports_; }
  void drop_export();
  int exports() const { return exports_; }

 private:
  ImmutableBlock block_;
  std::shared_ptr<const PoolMeta> meta_;
  int exports_ = 0;
  bool pending_release_ = false;
};

class ImmutableBlocksObject {
 public:
  ImmutableBlocksObject(std::vector<ImmutableBlock> blocks, std::shared_ptr<const PoolMeta> meta)
      : blocks_(std::move(blocks)), meta_(std::move(meta)) {}

  size_t size() const { return blocks_.size(); }
  ImmutableBlockObject at(Py_ssize_t index) const;
  const std::vector<ImmutableBlock>& blocks() const { return blocks_; }
  const std::shared_ptr<const PoolMeta>& meta() const { return meta_; }
  void release();

 private:
  std::vector<ImmutableBlock> blocks_;
  std::shared_ptr<const PoolMeta> meta_;
};

void bind_blocks(pybind11::module_& m);

}  // namespace kvpool::python
