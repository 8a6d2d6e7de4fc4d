// kvpool::copy_blocks: plan the byte ranges (core/copy_plan), then memcpy them (host pools,
// no stream) or enqueue them on a CUDA stream.
#include "client_impl.hpp"
#include "kvpool/client.hpp"
#include "kvpool/core/copy_plan.hpp"
#include "kvpool/cuda/device.hpp"

namespace kvpool {

Status copy_blocks(const Pool& src, std::span<const uint32_t> src_ids, const Pool& dst,
                   std::span<const uint32_t> dst_ids, void* cuda_stream) {
  const detail::PoolView& sv = src.client_->conn().pools()[src.index_];
  const detail::PoolView& dv = dst.client_->conn().pools()[dst.index_];
  const std::string what = "copy_blocks '" + sv.name + "' -> '" + dv.name + "': ";
  const bool same_pool = src.client_ == dst.client_ && src.index_ == dst.index_;
  auto ops = plan_block_copies(sv.layout, src_ids, dv.layout, dst_ids, same_pool);
  if (!ops) return Status(ops.status().code(), what + ops.status().message());
  if (ops->empty()) return Status::ok();
  auto src_base = src.client_->base(src.index_);
  if (!src_base) return Status(src_base.status().code(), what + src_base.status().message());
  auto dst_base = dst.client_->base(dst.index_);
  if (!dst_base) return Status(dst_base.status().code(), what + dst_base.status().message());

  if (!sv.device && !dv.device && cuda_stream == nullptr) {
    copy_on_host(*ops, *src_base, *dst_base);
    return Status::ok();
  }
  Status st = cuda::copy_async(*ops, *src_base, *dst_base, cuda_stream);
  if (!st.is_ok()) return Status(st.code(), what + st.message());
  return Status::ok();
}

}  // namespace kvpool
