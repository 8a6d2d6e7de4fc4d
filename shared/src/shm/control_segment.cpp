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
  l.pools_offset = align_up(sizeof(ControlHeader), kPartAlign);
  l.total_bytes =
      align_up(l.pools_offset + uint64_t{pools.size()} * sizeof(PoolInfo), kRegionAlign);
  for (size_t i = 0; i < pools.size(); ++i) {
    auto r = registry_layout(max_clients, pools[i], event_ring_slots);
    if (!r)
      return Status(ErrorCode::kConfigError,
                    "pools[" + std::to_string(i) + "]: " + r.status().message());
    l.registries.push_back(*r);
  }
  return l;
}

// ---- writer ------------------------------------------------------------------------------

Result<ControlWriter> ControlWriter::create(const std::string& instance, uint32_t max_clients,
                                            ControlLayout layout,
                                            std::span<const std::string> pool_names,
                                            uint32_t event_ring_slots) {
  if (pool_names.size() != layout.registries.size())
    return Status(ErrorCode::kInternal, "one pool name per registry layout expected");
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
  h->num_pools = static_cast<uint32_t>(l.registries.size());
  h->slots_offset = 0;  // the slot table lives in the registry segments (layout 4)
  h->pools_offset = l.pools_offset;
  h->total_bytes = l.total_bytes;
  copy_name(h->instance, instance);
  std::snprintf(h->daemon_version, sizeof(h->daemon_version), "%s",
                kvpool::version_string().c_str());
  for (uint32_t i = 0; i < h->num_pools; ++i) {
    auto r = RegistryWriter::create(instance, i, pool_names[i], max_clients, l.registries[i],
                                    event_ring_slots);
    if (!r) return r.status();
    w.registries_.push_back(std::move(r.value()));
  }
  return w;
}

PoolInfo& ControlWriter::pool_info(uint32_t i) const {
  return reinterpret_cast<PoolInfo*>(segment_.as<char>() + layout_.pools_offset)[i];
}

Result<pool::PoolCore> ControlWriter::create_pool_core(uint32_t i,
                                                       const pool::PoolCoreConfig& config,
                                                       const std::string& name) {
  return pool::PoolCore::create(registries_[i].arena(), registries_[i].arena_bytes(), config, i,
                                name);
}

void ControlWriter::set_epoch(uint64_t epoch) {
  for (RegistryWriter& r : registries_) r.header().epoch = epoch;
}

void ControlWriter::publish_ready() {
  header().state.store(static_cast<uint32_t>(DaemonState::kReady), std::memory_order_release);
}

void ControlWriter::publish_stopping() {
  header().state.store(static_cast<uint32_t>(DaemonState::kStopping), std::memory_order_release);
}

// ---- reader ------------------------------------------------------------------------------

const char* to_string(ControlGrade g) {
  switch (g) {
    case ControlGrade::kRefused:
      return "refused";
    case ControlGrade::kStarting:
      return "starting";
    case ControlGrade::kStopping:
      return "stopping";
    case ControlGrade::kReady:
      return "ready";
    case ControlGrade::kDead:
      return "a dead daemon's";
  }
  return "?";
}

namespace {

// Whether the daemon that wrote a stored control segment still runs: its pid names a live
// process, not this one (a successor in a fresh pid namespace may get its predecessor's
// pid), running this executable. A pid reused by another program, a zombie (no exe) and a
// replaced binary (its exe reads "... (deleted)") all read as gone, as they did before
// this check existed: adoption then goes on as it always has.
bool daemon_still_runs(int64_t pid) {
  if (pid <= 0 || pid == ::getpid()) return false;
  auto exe = [](const std::string& link) {
    char buf[4096];
    const ssize_t n = ::readlink(link.c_str(), buf, sizeof(buf) - 1);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
  };
  const std::string theirs = exe("/proc/" + std::to_string(pid) + "/exe");
  return !theirs.empty() && theirs == exe("/proc/self/exe");
}

GradedControl refuse(GradedControl g, ErrorCode code, const std::string& why) {
  g.grade = ControlGrade::kRefused;
  g.why = Status(code, why);
  return g;
}

}  // namespace

GradedControl ControlReader::open_graded(Segment segment, ControlOpener opener) {
  GradedControl g;
  const uint64_t size = segment.size();
  const auto* base = segment.as<const char>();
  g.segment = std::move(segment);  // the mapping stays where it is: pointers into it hold
  if (size < sizeof(ControlHeader) ||
      reinterpret_cast<const ControlHeader*>(base)->magic != kControlMagic)
    return refuse(std::move(g), ErrorCode::kProtocolError,
                  "the control segment is not a kvpool segment");
  const auto& h = *reinterpret_cast<const ControlHeader*>(base);
  g.header = &h;
  const bool successor = opener == ControlOpener::kSuccessor;
  if (h.layout_major != kLayoutMajor)
    return refuse(std::move(g), ErrorCode::kVersionMismatch,
                  "kvpoold uses shm layout " + std::to_string(h.layout_major) + ", this library " +
                      std::to_string(kLayoutMajor));
  if (successor && (h.layout_minor != kLayoutMinor || h.header_bytes != sizeof(ControlHeader)))
    return refuse(std::move(g), ErrorCode::kVersionMismatch,
                  "the previous kvpoold used shm layout " + std::to_string(h.layout_major) + "." +
                      std::to_string(h.layout_minor) + " (header " +
                      std::to_string(h.header_bytes) + " bytes), this one " +
                      std::to_string(kLayoutMajor) + "." + std::to_string(kLayoutMinor));
  // Acquire: everything the daemon wrote before publishing kReady is visible from here on,
  // the registry segments included. A successor reads what a dead writer left whatever
  // its state: nothing writes it any more.
  const uint32_t state = h.state.load(std::memory_order_acquire);
  if (!successor && state == static_cast<uint32_t>(DaemonState::kInitializing)) {
    g.grade = ControlGrade::kStarting;
    return g;
  }
  if (!successor && state != static_cast<uint32_t>(DaemonState::kReady)) {
    g.grade = ControlGrade::kStopping;
    return g;
  }
  if (h.total_bytes > size)
    return refuse(std::move(g), ErrorCode::kProtocolError,
                  "the control segment is smaller than its header says");
  if (!within(h.pools_offset, uint64_t{h.num_pools} * sizeof(PoolInfo), size) ||
      h.pools_offset % alignof(PoolInfo) != 0)
    return refuse(std::move(g), ErrorCode::kProtocolError, outside("the pool table").message());
  if (successor && daemon_still_runs(h.daemon_pid))
    return refuse(std::move(g), ErrorCode::kInvalidState,
                  "a live daemon's control segment: kvpoold pid " + std::to_string(h.daemon_pid) +
                      " still runs");
  g.grade = successor ? ControlGrade::kDead : ControlGrade::kReady;
  g.reader.header_ = &h;
  g.reader.infos_ = reinterpret_cast<const PoolInfo*>(base + h.pools_offset);
  g.reader.registries_.resize(h.num_pools);
  g.reader.segment_ = std::move(g.segment);
  return g;
}

Result<ControlReader> ControlReader::open(Segment segment) {
  GradedControl g = open_graded(std::move(segment), ControlOpener::kClient);
  switch (g.grade) {
    case ControlGrade::kReady:
      return std::move(g.reader);
    case ControlGrade::kRefused:
      return g.why;
    default:
      return Status(ErrorCode::kDaemonGone,
                    "kvpoold is gone (it is not ready); reconnect when it is back");
  }
}

Status ControlReader::add_registry(uint32_t i, Segment segment) {
  if (i >= registries_.size())
    return Status(ErrorCode::kProtocolError, "registry segment for pool " + std::to_string(i) +
                                                 " of " + std::to_string(registries_.size()));
  auto r = RegistryReader::open(std::move(segment), i, header_->max_clients);
  if (!r) return r.status();
  registries_[i] = std::move(r.value());
  return Status::ok();
}

DaemonState ControlReader::state() const {
  return static_cast<DaemonState>(header_->state.load(std::memory_order_acquire));
}

const SlotInfo& ControlReader::slot(uint32_t i) const {
  static const SlotInfo kNoSlot{};  // free, zero: a client this caller may not see
  const SlotInfo* first = nullptr;
  for (const RegistryReader& r : registries_) {
    if (!r.valid() || i >= r.slots().size()) continue;
    const SlotInfo& s = r.slots()[i];
    if (first == nullptr) first = &s;
    // Acquire, as publish_slot stores it last: the slot's other fields are this client's.
    if (s.state.load(std::memory_order_acquire) != static_cast<uint32_t>(SlotState::kFree))
      return s;
  }
  return first != nullptr ? *first : kNoSlot;
}

bool ControlReader::has_event_ring() const {
  return std::any_of(registries_.begin(), registries_.end(),
                     [](const RegistryReader& r) { return r.valid() && r.has_event_ring(); });
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
