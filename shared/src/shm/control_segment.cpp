#include "kvpool/shm/control_segment.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>
#include <utility>

#include "kvpool/core/clock.hpp"
#include "kvpool/core/paths.hpp"
#include "kvpool/core/version.hpp"
#include "kvpool/shm/fields.hpp"

namespace kvpool::shm {
namespace {

// The parts' alignments, which the layout below relies on.
static_assert(sizeof(ControlHeader) % 64 == 0 && alignof(ControlHeader) <= 64);
static_assert(sizeof(SlotInfo) % 64 == 0 && alignof(SlotInfo) <= 64);
static_assert(alignof(PoolInfo) <= 64);
static_assert(alignof(pool::ArenaHeader) <= 64, "arenas start 4 KiB aligned");
static_assert(alignof(EventRingHeader) <= 4096 && alignof(EventSlot) <= 4096);
constexpr uint64_t kPartAlign = 64;      // header, slots, pool infos: cache lines
constexpr uint64_t kRegionAlign = 4096;  // arenas and the ring: pages

Status outside(const std::string& what) {
  return Status(ErrorCode::kProtocolError, what + " lies outside the control segment");
}

}  // namespace

Result<ControlLayout> control_layout(uint32_t max_clients,
                                     std::span<const pool::PoolCoreConfig> pools,
                                     uint32_t event_ring_slots) {
  ControlLayout l;
  uint64_t off = align_up(sizeof(ControlHeader), kPartAlign);
  l.slots_offset = off;
  off = align_up(off + uint64_t{max_clients} * sizeof(SlotInfo), kPartAlign);
  l.pools_offset = off;
  off = align_up(off + uint64_t{pools.size()} * sizeof(PoolInfo), kPartAlign);
  for (size_t i = 0; i < pools.size(); ++i) {
    auto bytes = pool::PoolCore::arena_bytes(pools[i]);
    if (!bytes)
      return Status(ErrorCode::kConfigError,
                    "pools[" + std::to_string(i) + "]: " + bytes.status().message());
    l.arena_offset.push_back(off);
    l.arena_bytes.push_back(*bytes);
    off = align_up(off + *bytes, kRegionAlign);
  }
  if (event_ring_slots != 0) {
    l.event_ring_offset = off;
    l.event_ring_bytes = event_ring_bytes(event_ring_slots);
  }
  l.total_bytes = align_up(off + l.event_ring_bytes, kRegionAlign);
  return l;
}

// ---- writer ------------------------------------------------------------------------------

Result<ControlWriter> ControlWriter::create(const std::string& instance, uint32_t max_clients,
                                            ControlLayout layout, uint32_t event_ring_slots) {
  auto seg = Segment::create_anonymous(control_segment_name(instance), layout.total_bytes);
  if (!seg) return seg.status();
  ControlWriter w;
  w.segment_ = std::move(seg.value());
  w.layout_ = std::move(layout);
  const ControlLayout& l = w.layout_;
  auto* base = w.segment_.as<char>();
  // Plain stores: nobody has the segment yet, and readers trust none of it before kReady.
  auto* h = new (base) ControlHeader{};
  h->magic = kControlMagic;
  h->layout_major = kLayoutMajor;
  h->layout_minor = kLayoutMinor;
  h->header_bytes = sizeof(ControlHeader);
  h->daemon_pid = ::getpid();
  h->start_time_ns = now_ns(CLOCK_REALTIME);
  h->max_clients = max_clients;
  h->num_pools = static_cast<uint32_t>(l.arena_offset.size());
  h->slots_offset = l.slots_offset;
  h->pools_offset = l.pools_offset;
  h->total_bytes = l.total_bytes;
  copy_name(h->instance, instance);
  std::snprintf(h->daemon_version, sizeof(h->daemon_version), "%s",
                kvpool::version_string().c_str());
  if (l.event_ring_bytes != 0) {
    auto ring =
        EventRingWriter::create(base + l.event_ring_offset, l.event_ring_bytes, event_ring_slots);
    if (!ring)
      return Status(ErrorCode::kConfigError, "event_ring_slots: " + ring.status().message());
    w.event_ring_ = ring.value();
    h->event_ring_offset = l.event_ring_offset;
    h->event_ring_bytes = l.event_ring_bytes;
  }
  return w;
}

SlotInfo* ControlWriter::slots() const {
  return reinterpret_cast<SlotInfo*>(segment_.as<char>() + layout_.slots_offset);
}

PoolInfo& ControlWriter::pool_info(uint32_t i) const {
  return reinterpret_cast<PoolInfo*>(segment_.as<char>() + layout_.pools_offset)[i];
}

Result<pool::PoolCore> ControlWriter::create_pool_core(uint32_t i,
                                                       const pool::PoolCoreConfig& config,
                                                       const std::string& name) {
  auto core = pool::PoolCore::create(segment_.as<char>() + layout_.arena_offset[i],
                                     layout_.arena_bytes[i], config, i, name);
  if (!core) return core.status();
  pool_info(i).arena_offset = layout_.arena_offset[i];
  pool_info(i).arena_bytes = layout_.arena_bytes[i];
  return core;
}

void ControlWriter::publish_ready() {
  header().state.store(static_cast<uint32_t>(DaemonState::kReady), std::memory_order_release);
}

void ControlWriter::publish_stopping() {
  header().state.store(static_cast<uint32_t>(DaemonState::kStopping), std::memory_order_release);
}

// ---- reader ------------------------------------------------------------------------------

Result<ControlReader> ControlReader::open(Segment segment) {
  const uint64_t size = segment.size();
  const auto* base = segment.as<const char>();
  if (size < sizeof(ControlHeader) ||
      reinterpret_cast<const ControlHeader*>(base)->magic != kControlMagic)
    return Status(ErrorCode::kProtocolError, "the control segment is not a kvpool segment");
  const auto& h = *reinterpret_cast<const ControlHeader*>(base);
  if (h.layout_major != kLayoutMajor)
    return Status(ErrorCode::kVersionMismatch,
                  "kvpoold uses shm layout " + std::to_string(h.layout_major) + ", this library " +
                      std::to_string(kLayoutMajor));
  // Acquire: everything the daemon wrote before publishing kReady is visible from here on.
  if (h.state.load(std::memory_order_acquire) != static_cast<uint32_t>(DaemonState::kReady))
    return Status(ErrorCode::kDaemonGone,
                  "kvpoold is gone (it is not ready); reconnect when it is back");
  if (h.total_bytes > size)
    return Status(ErrorCode::kProtocolError, "the control segment is smaller than its header says");
  if (!within(h.slots_offset, uint64_t{h.max_clients} * sizeof(SlotInfo), size) ||
      h.slots_offset % alignof(SlotInfo) != 0)
    return outside("the slot table");
  if (!within(h.pools_offset, uint64_t{h.num_pools} * sizeof(PoolInfo), size) ||
      h.pools_offset % alignof(PoolInfo) != 0)
    return outside("the pool table");
  if (h.event_ring_offset != 0 && (!within(h.event_ring_offset, h.event_ring_bytes, size) ||
                                   h.event_ring_offset % alignof(EventRingHeader) != 0))
    return outside("the event ring");
  ControlReader r;
  r.header_ = &h;
  r.slots_ = reinterpret_cast<const SlotInfo*>(base + h.slots_offset);
  r.infos_ = reinterpret_cast<const PoolInfo*>(base + h.pools_offset);
  for (uint32_t i = 0; i < h.num_pools; ++i) {
    const PoolInfo& info = r.infos_[i];
    if (!within(info.arena_offset, info.arena_bytes, size) || info.arena_offset % 64 != 0)
      return outside("pool " + std::to_string(i) + " arena");
    auto arena = pool::ArenaView::attach(base + info.arena_offset, info.arena_bytes,
                                         std::string(info.name, strnlen(info.name, kNameBytes)));
    if (!arena)
      return Status(arena.status().code(),
                    "pool " + std::to_string(i) + " arena: " + arena.status().message());
    r.arenas_.push_back(std::move(arena.value()));
  }
  r.segment_ = std::move(segment);  // the mapping stays where it is: the pointers hold
  return r;
}

DaemonState ControlReader::state() const {
  return static_cast<DaemonState>(header_->state.load(std::memory_order_acquire));
}

Result<EventRingReader> ControlReader::event_ring() const {
  if (!has_event_ring())
    return Status(ErrorCode::kUnsupported, "the daemon runs without an event ring");
  return EventRingReader::attach(segment_.as<const char>() + header_->event_ring_offset,
                                 header_->event_ring_bytes);
}

const LatencyHistogram* ControlReader::request_latency() const {
  // Every layout-2 header has it; the size check guards against a short header only.
  if (header_->header_bytes < offsetof(ControlHeader, request_latency) + sizeof(LatencyHistogram))
    return nullptr;
  return &header_->request_latency;
}

const RestartInfo* ControlReader::restart() const {
  if (header_->header_bytes < offsetof(ControlHeader, restart) + sizeof(RestartInfo))
    return nullptr;
  return &header_->restart;
}

}  // namespace kvpool::shm
