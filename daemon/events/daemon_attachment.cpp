#include "daemon/events/daemon_attachment.hpp"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "connection.hpp"
#include "kvpool/pool/pool_core.hpp"

namespace kvpool::events {
namespace {

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<char, FreeDeleter>;

AlignedBuffer aligned_buffer(size_t bytes) {
  return AlignedBuffer(static_cast<char*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
}

}  // namespace

Result<std::unique_ptr<DaemonAttachment>> DaemonAttachment::attach(const std::string& instance,
                                                                   const std::string& runtime_dir) {
  auto seg = detail::Connection::observe(instance, runtime_dir);
  if (!seg) return seg.status();
  std::unique_ptr<DaemonAttachment> a(new DaemonAttachment());
  a->segment_ = std::move(seg.value());
  const auto* base = a->segment_.as<const char>();
  const size_t size = a->segment_.size();
  if (size < sizeof(shm::ControlHeader))
    return Status(ErrorCode::kProtocolError, "control segment smaller than its header");
  a->header_ = reinterpret_cast<const shm::ControlHeader*>(base);
  const auto& h = *a->header_;
  if (h.magic != shm::kControlMagic || h.layout_major != shm::kLayoutMajor)
    return Status(ErrorCode::kVersionMismatch,
                  "kvpoold of instance '" + instance + "' speaks shm layout " +
                      std::to_string(h.layout_major) + "." + std::to_string(h.layout_minor) +
                      ", kvpool-events " + std::to_string(shm::kLayoutMajor) + "." +
                      std::to_string(shm::kLayoutMinor));
  if (h.event_ring_offset == 0)
    return Status(ErrorCode::kUnsupported, "kvpoold of instance '" + instance +
                                               "' has no event ring (\"event_ring_slots\": 0 in "
                                               "its config)");
  if (h.pools_offset + uint64_t{h.num_pools} * sizeof(shm::PoolInfo) > size ||
      h.event_ring_offset + h.event_ring_bytes > size)
    return Status(ErrorCode::kProtocolError, "control segment offsets lie outside the segment");
  a->infos_ = reinterpret_cast<const shm::PoolInfo*>(base + h.pools_offset);
  for (uint32_t i = 0; i < h.num_pools; ++i) {
    if (a->infos_[i].arena_offset + a->infos_[i].arena_bytes > size)
      return Status(ErrorCode::kProtocolError,
                    "pool " + std::to_string(i) + " arena lies outside the control segment");
  }
  auto ring = shm::EventRingReader::attach(base + h.event_ring_offset, h.event_ring_bytes);
  if (!ring) return ring.status();
  a->ring_ = ring.value();
  return a;
}

std::vector<PoolMeta> DaemonAttachment::pool_metas() const {
  std::vector<PoolMeta> metas;
  for (uint32_t i = 0; i < header_->num_pools; ++i) {
    const shm::PoolInfo& info = infos_[i];
    PoolMeta m;
    m.name.assign(info.name, strnlen(info.name, sizeof(info.name)));
    m.device = info.storage == static_cast<uint32_t>(shm::StorageKind::kCuda);
    m.page_size = info.layout.page_size;
    // A daemon older than layout 1.4 left this zero: dynamo-0.2, its only scheme.
    m.hash_scheme = static_cast<HashScheme>(info.hash_scheme);
    metas.push_back(std::move(m));
  }
  return metas;
}

bool DaemonAttachment::daemon_alive() const {
  if (header_->state.load(std::memory_order_acquire) !=
      static_cast<uint32_t>(shm::DaemonState::kReady))
    return false;
  // EPERM: alive, run by another user (the systemd unit's kvpool user).
  return ::kill(static_cast<pid_t>(header_->daemon_pid), 0) == 0 || errno == EPERM;
}

Result<RegistrySnapshot> DaemonAttachment::snapshot(uint32_t max_attempts) {
  const uint32_t np = header_->num_pools;
  const auto* base = segment_.as<const char>();
  std::vector<AlignedBuffer> copies(np);
  std::vector<pool::PoolCore> cores(np);
  for (uint32_t i = 0; i < np; ++i) {
    copies[i] = aligned_buffer(infos_[i].arena_bytes);
    if (!copies[i])
      return Status(ErrorCode::kResourceExhausted, "no memory for a registry snapshot");
  }
  RegistrySnapshot snap;
  Status last_error = Status(ErrorCode::kInternal, "no snapshot attempt made");
  max_attempts = std::max<uint32_t>(max_attempts, 1);
  for (uint32_t attempt = 1; attempt <= max_attempts; ++attempt) {
    if (attempt > 1) std::this_thread::yield();  // let the engine finish its call
    snap.attempts = attempt;
    const uint64_t resume = ring_.published();
    bool quiet = true;
    bool attached = true;
    for (uint32_t i = 0; i < np; ++i) {
      const auto* live = reinterpret_cast<const pool::ArenaHeader*>(base + infos_[i].arena_offset);
      // The writer keeps write_seq odd while a call changes the arena: a copy taken between
      // two equal even values saw no change at all.
      const uint32_t before = live->stats.write_seq.load(std::memory_order_acquire);
      std::memcpy(copies[i].get(), base + infos_[i].arena_offset, infos_[i].arena_bytes);
      std::atomic_thread_fence(std::memory_order_acquire);
      const uint32_t after = live->stats.write_seq.load(std::memory_order_relaxed);
      quiet = quiet && before % 2 == 0 && before == after;
      auto core = pool::PoolCore::attach(copies[i].get(), infos_[i].arena_bytes, i, infos_[i].name);
      if (!core) {
        last_error = core.status();
        attached = false;
        break;
      }
      cores[i] = std::move(core.value());
    }
    if (!attached) continue;
    bool invariants = true;
    for (uint32_t i = 0; i < np && invariants; ++i) {
      if (Status s = cores[i].check_invariants(); !s.is_ok()) {
        last_error = s;
        invariants = false;
      }
    }
    // A torn copy of a busy daemon is kept only as the last resort (see RegistrySnapshot).
    if (!(quiet && invariants) && attempt < max_attempts) continue;
    for (uint32_t i = 0; i < np; ++i) {
      for (uint32_t id = 0; id < cores[i].num_blocks(); ++id) {
        const pool::BlockMeta& b = cores[i].block(id);
        const auto st = static_cast<pool::BlockStateCode>(b.state);
        if (st != pool::BlockStateCode::kActive && st != pool::BlockStateCode::kInactive) continue;
        const bool has_parent = (b.flags & pool::kFlagHasParent) != 0;
        snap.blocks.push_back(
            {b.sequence_hash, b.block_hash, has_parent ? b.parent_hash : 0, i, has_parent});
      }
    }
    snap.resume_id = resume;
    snap.consistent = quiet && invariants;
    return snap;
  }
  return last_error;
}

}  // namespace kvpool::events
