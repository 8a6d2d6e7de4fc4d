#include "kvpool/shm/pool_event_rings.hpp"

#include <algorithm>

namespace kvpool::shm {

Result<PoolEventRings> PoolEventRings::open(const ControlReader& control) {
  PoolEventRings r;
  for (uint32_t i = 0; i < control.num_pools(); ++i) {
    if (!control.has_pool(i) || !control.registry(i).has_event_ring()) continue;
    auto ring = control.event_ring(i);  // bounds checked when the registry was opened
    if (!ring) return ring.status();
    r.rings_.push_back({i, ring.value()});
  }
  if (r.rings_.empty())
    return Status(ErrorCode::kUnsupported,
                  "no event ring to read (\"event_ring_slots\": 0 in the daemon's config, or "
                  "no pool open to this uid)");
  return r;
}

PoolEventRings::Outcome PoolEventRings::next(EventRecord* out) {
  // Each ring is tried once per call, from the current one: a batch in progress is finished
  // first (its records are published together, so the rest is there).
  for (size_t tried = 0; tried < rings_.size(); ++tried) {
    Ring& ring = rings_[current_];
    const Outcome o = ring.reader.next(out);
    if (o == Outcome::kEvent) {
      in_batch_ = !out->batch_last();
      if (!in_batch_) current_ = (current_ + 1) % rings_.size();
      return o;
    }
    in_batch_ = false;
    if (o == Outcome::kLapped) {
      lost_ = ring.reader.lost();
      return o;
    }
    current_ = (current_ + 1) % rings_.size();
  }
  return Outcome::kEmpty;
}

bool PoolEventRings::read_tokens(const EventRecord& record, std::vector<uint32_t>* out) const {
  for (const Ring& r : rings_)
    if (r.pool == record.payload.pool) return r.reader.read_tokens(record, out);
  out->clear();
  return false;
}

bool PoolEventRings::read_key(const EventRecord& record, std::vector<std::byte>* out) const {
  for (const Ring& r : rings_)
    if (r.pool == record.payload.pool) return r.reader.read_key(record, out);
  out->clear();
  return false;
}

std::vector<uint64_t> PoolEventRings::published() const {
  std::vector<uint64_t> ids;
  for (const Ring& r : rings_) ids.push_back(r.reader.published());
  return ids;
}

std::vector<uint64_t> PoolEventRings::positions() const {
  std::vector<uint64_t> ids;
  for (const Ring& r : rings_) ids.push_back(r.reader.position());
  return ids;
}

void PoolEventRings::seek(const std::vector<uint64_t>& ids) {
  for (size_t i = 0; i < rings_.size() && i < ids.size(); ++i) rings_[i].reader.seek(ids[i]);
  in_batch_ = false;
}

void PoolEventRings::seek_to_start() {
  for (Ring& r : rings_) r.reader.seek(1);
  in_batch_ = false;
}

void PoolEventRings::seek_to_end() {
  for (Ring& r : rings_) r.reader.seek_to_end();
  in_batch_ = false;
}

void PoolEventRings::seek_back(uint64_t last) {
  // Ids start at 1; the next read clamps to what the ring still holds.
  for (Ring& r : rings_) {
    const uint64_t end = r.reader.published();
    r.reader.seek(end > last + 1 ? end - last : 1);
  }
  in_batch_ = false;
}

uint64_t PoolEventRings::lag() const {
  uint64_t lag = 0;
  for (const Ring& r : rings_) {
    const uint64_t pos = r.reader.position() == 0 ? 1 : r.reader.position();  // ids from 1
    const uint64_t pub = r.reader.published();
    lag += pub > pos ? pub - pos : 0;
  }
  return lag;
}

bool PoolEventRings::reached(const std::vector<uint64_t>& marks) const {
  for (size_t i = 0; i < rings_.size() && i < marks.size(); ++i)
    if (rings_[i].reader.position() < marks[i]) return false;
  return true;
}

}  // namespace kvpool::shm
