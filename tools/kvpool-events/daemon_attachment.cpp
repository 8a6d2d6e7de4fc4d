#include "tools/kvpool-events/daemon_attachment.hpp"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <unordered_map>

#include "kvpool/pool/arena_view.hpp"
#include "kvpool/pool/pool_core.hpp"
#include "kvpool/shm/disk_tier_info.hpp"
#include "kvpool/shm/handshake.hpp"

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
  // Validated once, completely (offsets, lengths, arenas): see shm/control_segment.hpp.
  auto control = shm::observe(instance, runtime_dir);
  if (!control) return control.status();
  std::unique_ptr<DaemonAttachment> a(new DaemonAttachment());
  a->control_ = std::move(control.value());
  if (!a->control_.has_event_ring())
    return Status(ErrorCode::kUnsupported,
                  "kvpoold of instance '" + instance +
                      "' has no event ring this uid may read (\"event_ring_slots\": 0 in its "
                      "config, or no pool open to this uid)");
  auto ring = shm::PoolEventRings::open(a->control_);
  if (!ring) return ring.status();
  a->ring_ = ring.value();
  return a;
}

std::vector<PoolMeta> DaemonAttachment::pool_metas() const {
  std::vector<PoolMeta> metas;
  for (uint32_t i = 0; i < control_.num_pools(); ++i) {
    const shm::PoolInfo& info = control_.pool_info(i);
    PoolMeta m;
    m.name.assign(info.name, strnlen(info.name, sizeof(info.name)));
    m.device = info.storage == static_cast<uint32_t>(shm::StorageKind::kCuda);
    m.page_size = info.layout.page_size;
    // A daemon older than layout 1.4 left this zero: dynamo-0.2, its only scheme.
    m.hash_scheme = static_cast<HashScheme>(info.hash_scheme);
    if (control_.has_pool(i))
      if (const shm::DiskTierInfo* d = control_.registry(i).disk_info()) m.disk = d->enabled != 0;
    metas.push_back(std::move(m));
  }
  return metas;
}

bool DaemonAttachment::daemon_alive() const {
  if (control_.state() != shm::DaemonState::kReady) return false;  // an acquire load
  // EPERM: alive, run by another user (the systemd unit's kvpool user).
  return ::kill(static_cast<pid_t>(daemon_pid()), 0) == 0 || errno == EPERM;
}

Result<RegistrySnapshot> DaemonAttachment::snapshot(uint32_t max_attempts) {
  const uint32_t np = control_.num_pools();
  std::vector<AlignedBuffer> copies(np);
  std::vector<pool::PoolCore> cores(np);
  for (uint32_t i = 0; i < np; ++i) {
    if (!control_.has_pool(i)) continue;  // closed to this process: not forwarded
    copies[i] = aligned_buffer(control_.arena(i).bytes());
    if (!copies[i])
      return Status(ErrorCode::kResourceExhausted, "no memory for a registry snapshot");
  }
  RegistrySnapshot snap;
  Status last_error = Status(ErrorCode::kInternal, "no snapshot attempt made");
  max_attempts = std::max<uint32_t>(max_attempts, 1);
  for (uint32_t attempt = 1; attempt <= max_attempts; ++attempt) {
    if (attempt > 1) std::this_thread::yield();  // let the engine finish its call
    snap.attempts = attempt;
    const std::vector<uint64_t> resume = ring_.published();
    bool quiet = true;
    bool attached = true;
    for (uint32_t i = 0; i < np; ++i) {
      if (!control_.has_pool(i)) continue;
      const pool::ArenaView& live = control_.arena(i);
      // The arena's seqlock: a copy the writer did not change meanwhile. Every pool is
      // copied even after a torn one (a best-effort copy is kept as the last resort).
      const bool stable = live.copy_to(copies[i].get());
      quiet = quiet && stable;
      auto core = pool::PoolCore::attach(copies[i].get(), live.bytes(), i, live.name());
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
      if (!control_.has_pool(i)) continue;
      if (Status s = cores[i].check_invariants(); !s.is_ok()) {
        last_error = s;
        invariants = false;
      }
    }
    // A torn copy of a busy daemon is kept only as the last resort (see RegistrySnapshot).
    if (!(quiet && invariants) && attempt < max_attempts) continue;
    for (uint32_t i = 0; i < np; ++i) {
      if (!control_.has_pool(i)) continue;
      for (uint32_t id = 0; id < cores[i].num_blocks(); ++id) {
        const pool::BlockMeta& b = cores[i].block(id);
        const auto st = static_cast<pool::BlockStateCode>(b.state);
        if (st != pool::BlockStateCode::kActive && st != pool::BlockStateCode::kInactive) continue;
        const bool has_parent = (b.flags & pool::kFlagHasParent) != 0;
        snap.blocks.push_back(
            {b.sequence_hash, b.block_hash, has_parent ? b.parent_hash : 0, i, has_parent});
      }
    }
    snap.resume_ids = resume;
    snap.consistent = quiet && invariants;
    return snap;
  }
  return last_error;
}

void fold_disk_record(const shm::EventRecord& r, DiskView* view) {
  if (!r.disk_tier()) return;
  const shm::EventPayload& p = r.payload;
  if (view->size() <= p.pool) view->resize(p.pool + 1u);
  auto& pool = (*view)[p.pool];
  if (r.type() == shm::EventType::kStored) {
    pool[p.sequence_hash] = {p.sequence_hash, p.block_hash,   r.has_parent() ? p.parent_hash : 0,
                             p.pool,          r.has_parent(), true};
  } else if (r.type() == shm::EventType::kRemoved) {
    pool.erase(p.sequence_hash);
  }
}

uint64_t DaemonAttachment::fold_disk_records(const std::vector<uint64_t>& from,
                                             const std::vector<uint64_t>& until,
                                             DiskView* view) const {
  uint64_t lost = 0;
  // The rings in PoolEventRings' order (pools this process reads that have a ring).
  size_t k = 0;
  for (uint32_t i = 0; i < control_.num_pools() && k < until.size() && k < from.size(); ++i) {
    if (!control_.has_pool(i) || !control_.registry(i).has_event_ring()) continue;
    const uint64_t start = from[k], end = until[k];
    ++k;
    const shm::DiskTierInfo* d = control_.registry(i).disk_info();
    if (d == nullptr || d->enabled == 0 || start >= end) continue;
    auto reader = control_.registry(i).event_ring();
    if (!reader) continue;
    reader->seek(start);
    shm::EventRecord r;
    while (reader->position() < end) {
      const auto o = reader->next(&r);
      if (o == shm::EventRingReader::Outcome::kEmpty) break;
      if (o == shm::EventRingReader::Outcome::kLapped) continue;  // lost() counts them
      if (r.event_id >= end) break;
      fold_disk_record(r, view);
    }
    lost += reader->lost();
  }
  return lost;
}

}  // namespace kvpool::events
