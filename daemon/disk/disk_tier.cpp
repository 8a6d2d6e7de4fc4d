#include "daemon/disk/disk_tier.hpp"

#include <poll.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kvpool/core/checksum.hpp"
#include "kvpool/core/clock.hpp"
#include "kvpool/core/counter.hpp"
#include "kvpool/shm/fields.hpp"

namespace kvpool::daemon::disk {
namespace {

// Regions of a block, in (layer, outer) order, coalesced where they touch in memory.
std::vector<iovec> block_regions(std::byte* base, const Layout& layout, uint32_t block) {
  const LayoutConfig& c = layout.config();
  std::vector<iovec> out;
  for (uint32_t l = 0; l < c.num_layers; ++l) {
    for (uint32_t o = 0; o < c.outer_dim; ++o) {
      std::byte* p = base + layout.offset_unchecked(block, l, o);
      if (!out.empty() && static_cast<std::byte*>(out.back().iov_base) + out.back().iov_len == p) {
        out.back().iov_len += layout.region_bytes();
      } else {
        out.push_back({p, layout.region_bytes()});
      }
    }
  }
  return out;
}

// O_DIRECT reads and writes the pool's memory in place: every region's address and size
// must be 4 KiB multiples (offsets are linear in block, layer and outer, so three steps and
// the region size decide it for all blocks).
bool regions_aligned(const std::byte* base, const Layout& layout) {
  const LayoutConfig& c = layout.config();
  auto a = [](uint64_t v) { return v % kSectorBytes == 0; };
  if (!a(reinterpret_cast<uintptr_t>(base)) || !a(layout.region_bytes())) return false;
  if (!a(layout.offset_unchecked(0, 0, 0))) return false;
  if (c.num_blocks > 1 && !a(layout.offset_unchecked(1, 0, 0))) return false;
  if (c.num_layers > 1 && !a(layout.offset_unchecked(0, 1, 0))) return false;
  if (c.outer_dim > 1 && !a(layout.offset_unchecked(0, 0, 1))) return false;
  return true;
}

}  // namespace

// One op's state. The engine thread fills it before submit and reads it after reap; in
// between, the I/O thread's hooks write `header` and `sector` (a write) or `read_checksum`
// (a read): the op queues' release/acquire order the two sides.
struct DiskTier::Op {
  const DiskTier* tier = nullptr;
  bool write = false;
  uint32_t slot = kNoSlot;
  uint32_t block = 0;  // the host block written from or read into
  pool::BlockRef ref{};
  uint64_t onboard = 0;        // the onboard a read belongs to
  uint32_t position = 0;       // its place in that onboard
  uint64_t expected = 0;       // bytes the op moves when it succeeds
  SlotHeader header{};         // a write's, sealed by seal_write
  uint64_t read_checksum = 0;  // a read's bytes, by sum_read (0: the read failed)
  SectorBuffer sector = sector_buffer();
  std::vector<iovec> iov;
};

// On the I/O thread, before a write goes out: the checksum of the block's bytes (held by
// the tier, so they cannot change), the seal, and the header sector. An XXH3 of a block
// costs tens of microseconds to milliseconds (block size): never the engine's.
void DiskTier::seal_write(void* ctx, int64_t) {
  Op& op = *static_cast<Op*>(ctx);
  op.header.data_checksum = block_checksum(op.tier->setup_.host_base, op.tier->layout_, op.block);
  seal(op.header);
  std::memset(op.sector.get(), 0, kSectorBytes);
  std::memcpy(op.sector.get(), &op.header, sizeof(op.header));
}

// On the I/O thread, once a read came in: the checksum of the bytes it put in the block.
void DiskTier::sum_read(void* ctx, int64_t result) {
  Op& op = *static_cast<Op*>(ctx);
  op.read_checksum = result == static_cast<int64_t>(op.expected)
                         ? block_checksum(op.tier->setup_.host_base, op.tier->layout_, op.block)
                         : 0;
}

struct DiskTier::Onboard {
  uint64_t cookie = 0;
  uint64_t t0 = 0;
  std::vector<uint64_t> hashes;
  std::vector<uint32_t> slots;
  std::vector<pool::BlockRef> blocks;  // the tier's mutable blocks being read into
  std::vector<int64_t> results;
  std::vector<SlotHeader> headers;  // as read from the file
  std::vector<uint64_t> checksums;  // of the bytes read (sum_read)
  uint32_t pending = 0;
};

DiskTier::DiskTier(const DiskTierSetup& setup, pool::PoolCore& core, SlotFile file, Layout layout,
                   uint32_t num_slots)
    : setup_(setup),
      core_(core),
      file_(std::move(file)),
      layout_(std::move(layout)),
      fingerprint_(layout_fingerprint(setup.layout, setup.dtype)),
      index_(num_slots) {}

// Ops in flight read into and write from buffers this object owns: let them finish (bounded:
// a dead device must not hang a stop) before the buffers go. Nothing new is started.
DiskTier::~DiskTier() {
  stopping_ = true;
  for (int i = 0; i < 500 && inflight_ops_ > 0 && io_; ++i) {
    pollfd p{io_->event_fd(), POLLIN, 0};
    ::poll(&p, 1, 10);
    on_io_ready();
  }
  io_.reset();
}

Result<std::unique_ptr<DiskTier>> DiskTier::open(const DiskTierSetup& setup, pool::PoolCore& core) {
  auto layout = Layout::create(setup.layout);
  if (!layout) return layout.status();
  const DiskConfig& c = setup.config;
  const uint64_t slot_bytes = slot_bytes_for(layout->block_bytes());
  const uint64_t num_slots = c.num_blocks != 0 ? c.num_blocks : c.bytes / slot_bytes;
  if (num_slots == 0 || num_slots >= kNoSlot)
    return Status(ErrorCode::kConfigError,
                  "pools." + setup.pool + ".disk: " + std::to_string(c.bytes) +
                      " bytes hold no slot of " + std::to_string(slot_bytes) +
                      " bytes (a block and its 4 KiB header)");
  SlotFileOptions fo;
  fo.pool = setup.pool;
  fo.path = c.path.empty() ? default_disk_path(setup.instance, setup.pool) : c.path;
  fo.num_slots = num_slots;
  fo.slot_bytes = slot_bytes;
  fo.layout_fingerprint = layout_fingerprint(setup.layout, setup.dtype);
  fo.hash_scheme = setup.hash_scheme;
  fo.direct_io = c.direct_io;
  fo.memory_aligned = regions_aligned(setup.host_base, *layout);
  std::vector<FoundSlot> found;
  auto file = SlotFile::open(fo, &found);
  if (!file) return file.status();

  std::unique_ptr<DiskTier> t(new DiskTier(setup, core, std::move(file.value()),
                                           std::move(layout.value()),
                                           static_cast<uint32_t>(num_slots)));
  t->index_.load(found);
  for (const FoundSlot& f : found)
    t->next_write_seq_ = std::max(t->next_write_seq_, f.header.write_seq + 1);
  t->max_inflight_bytes_ = std::max<uint64_t>(
      c.max_inflight_bytes != 0 ? c.max_inflight_bytes : kDefaultDiskInflightBytes, slot_bytes);
  const uint64_t write_slots = t->max_inflight_bytes_ / slot_bytes;
  // Queued blocks are held (out of host eviction, one reference slot each): never more than
  // a quarter of the pool, so clients keep their blocks and reference slots.
  t->queue_cap_ = static_cast<size_t>(std::min<uint64_t>(
      std::max<uint64_t>(write_slots * 4, 64), std::max<uint32_t>(core.num_blocks() / 4, 16)));
  // Writes within the byte budget, plus reads for onboards (at most a ring's batch each).
  const uint32_t depth = static_cast<uint32_t>(std::min<uint64_t>(write_slots + 1024, 8192));
  auto io = DiskIo::create(setup.backend, depth, setup.pool);
  if (!io) return io.status();
  t->io_ = std::move(io.value());
  for (uint32_t i = 0; i < depth; ++i) {
    t->ops_.push_back(std::make_unique<Op>());
    t->ops_.back()->tier = t.get();
    t->free_ops_.push_back(depth - 1 - i);
  }
  t->publish_fixed();
  t->announce_index();  // a start tells routers what the file still holds (disk-tier.md)
  spdlog::info(
      "disk tier of pool '{}': {} slots of {} bytes in {} ({} I/O, {}), {} blocks found on disk",
      setup.pool, num_slots, slot_bytes, t->file_.path(),
      t->file_.direct() ? "O_DIRECT" : "buffered", t->io_->name(), t->index_.used());
  return t;
}

uint32_t DiskTier::op_alloc() {
  if (free_ops_.empty()) return kNoSlot;
  uint32_t i = free_ops_.back();
  free_ops_.pop_back();
  ++inflight_ops_;
  return i;
}

void DiskTier::build_iov(Op& op, uint32_t block) {
  op.block = block;
  op.iov.clear();
  op.iov.push_back({op.sector.get(), kSectorBytes});
  for (const iovec& v : block_regions(setup_.host_base, layout_, block)) op.iov.push_back(v);
  op.expected = kSectorBytes + layout_.block_bytes();
}

// ---- write-behind ---------------------------------------------------------------------

bool DiskTier::admit(uint64_t hash) {
  if (setup_.config.admit == DiskAdmit::kAll) return true;
  if (seen_.count(hash) != 0) return true;
  seen_.insert(hash);
  seen_order_.push_back(hash);
  if (seen_order_.size() > index_.total()) {  // remember about as many as the disk holds
    seen_.erase(seen_order_.front());
    seen_order_.pop_front();
  }
  return false;
}

void DiskTier::on_stored(std::span<const pool::StoredBlock> blocks) {
  for (const pool::StoredBlock& b : blocks) {
    if (index_.known(b.sequence_hash) || !admit(b.sequence_hash)) continue;
    if (incoming_.size() + held_.size() >= queue_cap_) {
      ++stats_.write_queue_drops;
      continue;
    }
    pool::StoredBlock copy = b;
    copy.extras = {};  // they point into the request
    incoming_.push_back(copy);
  }
}

void DiskTier::note_match(std::span<const uint64_t> hashes) {
  if (setup_.config.admit != DiskAdmit::kSecondHit) return;
  for (uint64_t h : hashes) {
    if (index_.known(h)) continue;
    if (seen_.count(h) == 0) {
      admit(h);
      continue;
    }
    if (incoming_.size() + held_.size() >= queue_cap_) {
      ++stats_.write_queue_drops;
      continue;
    }
    // Its chain facts come from the registry when the write starts (pump).
    pool::StoredBlock b{};
    b.sequence_hash = h;
    incoming_.push_back(b);
  }
}

void DiskTier::pump() {
  if (stopping_) return;
  for (const pool::StoredBlock& b : incoming_) {
    auto ref = core_.hold_registered(setup_.owner, b.sequence_hash);
    if (!ref) {
      ++stats_.write_skipped;  // evicted (or poisoned) before we got to it
      continue;
    }
    Queued q{b, *ref};
    if (q.block.block_hash == 0 && q.block.parent_hash == 0) {
      // From note_match: take the chain facts the pool core recorded.
      const pool::BlockMeta& m = core_.block(ref->id);
      q.block.block_hash = m.block_hash;
      q.block.parent_hash = m.parent_hash;
      q.block.has_parent = (m.flags & pool::kFlagHasParent) != 0;
      q.block.priority = m.priority;
    }
    held_.push_back(q);
  }
  incoming_.clear();
  while (!held_.empty() && inflight_write_bytes_ + file_.slot_bytes() <= max_inflight_bytes_) {
    Queued q = held_.front();
    held_.pop_front();
    if (!start_write(q)) {
      uint32_t rejected = 0;
      (void)core_.release_immutable(setup_.owner, {&q.ref, 1}, &rejected);
    }
  }
  publish();
}

bool DiskTier::start_write(Queued& q) {
  if (index_.known(q.block.sequence_hash)) return false;
  uint64_t evicted = 0;
  bool did_evict = false;
  const uint32_t slot = index_.claim(q.block.sequence_hash, &evicted, &did_evict);
  if (slot == kNoSlot) {
    ++stats_.write_skipped;  // every slot is being written or read
    return false;
  }
  if (did_evict) {
    ++stats_.evictions;
    announce_removed(evicted);
  }
  const uint32_t oi = op_alloc();
  if (oi == kNoSlot) {
    index_.abandon(slot);
    ++stats_.write_queue_drops;
    return false;
  }
  Op& op = *ops_[oi];
  op.write = true;
  op.slot = slot;
  op.ref = q.ref;
  SlotHeader& h = op.header;
  h = SlotHeader{};
  h.magic = kSlotMagic;
  h.generation = file_.generation();
  h.slot = slot;
  h.sequence_hash = q.block.sequence_hash;
  h.parent_hash = q.block.has_parent ? q.block.parent_hash : 0;
  h.block_hash = q.block.block_hash;
  h.layout_fingerprint = fingerprint_;
  h.write_seq = next_write_seq_++;
  h.hash_scheme = setup_.hash_scheme;
  h.has_parent = q.block.has_parent ? 1 : 0;
  h.priority = q.block.priority;
  // data_checksum and the seal: seal_write, on the I/O thread.
  build_iov(op, q.ref.id);
  IoOp io{true,
          file_.fd(),
          file_.slot_offset(slot),
          op.iov.data(),
          static_cast<uint32_t>(op.iov.size()),
          oi,
          &DiskTier::seal_write,
          nullptr,
          &op};
  if (Status s = io_->submit(io); !s.is_ok()) {
    index_.abandon(slot);
    free_ops_.push_back(oi);
    --inflight_ops_;
    ++stats_.io_errors;
    return false;
  }
  inflight_write_bytes_ += file_.slot_bytes();
  return true;
}

void DiskTier::write_done(Op& op, int64_t result) {
  inflight_write_bytes_ -= file_.slot_bytes();
  if (result == static_cast<int64_t>(op.expected)) {
    const SlotHeader& h = op.header;  // sealed by seal_write on the I/O thread
    if (index_.find(h.sequence_hash) == kNoSlot) note_on_disk(h);  // a rewrite is no news
    index_.publish(op.slot, h);  // durable (RWF_DSYNC) before it is findable
    stats_.bytes_written += layout_.block_bytes();
    ++stats_.blocks_written;
  } else {
    index_.abandon(op.slot);
    ++stats_.io_errors;
    if (logged_errors_++ < 16)
      spdlog::error("disk tier of pool '{}': write of slot {} in {} failed: {}", setup_.pool,
                    op.slot, file_.path(),
                    result < 0 ? std::strerror(static_cast<int>(-result)) : "short write");
  }
  uint32_t rejected = 0;
  (void)core_.release_immutable(setup_.owner, {&op.ref, 1}, &rejected);
}

// ---- onboard --------------------------------------------------------------------------

uint32_t DiskTier::disk_prefix(std::span<const uint64_t> hashes) const {
  uint32_t n = 0;
  while (n < hashes.size() && index_.find(hashes[n]) != kNoSlot) ++n;
  return n;
}

bool DiskTier::start_onboard(uint64_t cookie, std::span<const uint64_t> hashes,
                             uint32_t max_blocks) {
  // Blocks registered before this match get their slots (and evict) before this read
  // touches any: the disk's order is then the order requests came in, whether or not the
  // engine pumped between them (kvpool-replay's two-tier model follows that order).
  pump();
  uint32_t k = std::min<uint32_t>(disk_prefix(hashes), max_blocks);
  k = std::min<uint32_t>(k, static_cast<uint32_t>(free_ops_.size()));
  const pool::PoolCounts counts = core_.counts();
  k = std::min<uint32_t>(k, counts.free + counts.inactive);
  if (k == 0) return false;
  auto ob = std::make_unique<Onboard>();
  ob->cookie = cookie;
  ob->t0 = now_ns(CLOCK_MONOTONIC);
  ob->hashes.assign(hashes.begin(), hashes.begin() + k);
  ob->blocks.resize(k);
  if (!core_.allocate(setup_.owner, k, ob->blocks.data()).is_ok()) return false;
  ob->results.assign(k, 0);
  ob->headers.resize(k);
  ob->checksums.assign(k, 0);
  const uint64_t id = next_onboard_++;
  for (uint32_t i = 0; i < k; ++i) {
    const uint32_t slot = index_.find(ob->hashes[i]);
    index_.add_reader(slot);
    index_.touch(slot);
    ob->slots.push_back(slot);
    const uint32_t oi = op_alloc();  // k <= free ops
    Op& op = *ops_[oi];
    op.write = false;
    op.slot = slot;
    op.onboard = id;
    op.position = i;
    build_iov(op, ob->blocks[i].id);
    IoOp io{false,
            file_.fd(),
            file_.slot_offset(slot),
            op.iov.data(),
            static_cast<uint32_t>(op.iov.size()),
            oi,
            nullptr,
            &DiskTier::sum_read,
            &op};
    if (!io_->submit(io).is_ok()) {
      free_ops_.push_back(oi);
      --inflight_ops_;
      ob->results[i] = -EIO;  // finished below as an I/O error
      continue;
    }
    ++ob->pending;
  }
  ++stats_.onboards;
  const bool done_now = ob->pending == 0;
  onboards_[id] = std::move(ob);
  if (done_now) finish_onboard(id);
  publish();
  return true;
}

void DiskTier::read_done(Op& op, int64_t result) {
  auto it = onboards_.find(op.onboard);
  if (it == onboards_.end()) return;
  Onboard& ob = *it->second;
  ob.results[op.position] = result;
  std::memcpy(&ob.headers[op.position], op.sector.get(), sizeof(SlotHeader));
  ob.checksums[op.position] = op.read_checksum;
  if (--ob.pending == 0) finish_onboard(op.onboard);
}

uint32_t DiskTier::verify_onboard(Onboard& ob) {
  uint32_t good = 0;
  for (; good < ob.hashes.size(); ++good) {
    const SlotHeader& h = ob.headers[good];
    const int64_t r = ob.results[good];
    const char* why = nullptr;
    if (r != static_cast<int64_t>(kSectorBytes + layout_.block_bytes())) {
      ++stats_.io_errors;
      why = "read failed";
    } else if (!sealed(h) || h.sequence_hash != ob.hashes[good] || h.slot != ob.slots[good] ||
               h.generation != file_.generation() || h.layout_fingerprint != fingerprint_ ||
               ob.checksums[good] != h.data_checksum) {
      ++stats_.checksum_failures;
      why = "checksum mismatch";
    }
    if (why == nullptr) continue;
    index_.drop(ob.slots[good]);
    announce_removed(ob.hashes[good]);
    if (logged_errors_++ < 16)
      spdlog::error("disk tier of pool '{}': slot {} of {} ({}): {}; dropped, served as a miss",
                    setup_.pool, ob.slots[good], file_.path(),
                    r < 0 ? std::strerror(static_cast<int>(-r)) : "", why);
    break;
  }
  return good;
}

void DiskTier::finish_onboard(uint64_t id) {
  auto it = onboards_.find(id);
  Onboard& ob = *it->second;
  const uint32_t good = verify_onboard(ob);
  for (uint32_t s : ob.slots) index_.remove_reader(s);
  const uint32_t k = static_cast<uint32_t>(ob.hashes.size());
  uint32_t rejected = 0;
  if (good < k)
    (void)core_.release_mutable(setup_.owner, std::span(ob.blocks).subspan(good), &rejected);
  std::vector<pool::RegisterItem> items;
  for (uint32_t i = 0; i < good; ++i) {
    const SlotHeader& h = ob.headers[i];
    items.push_back({ob.blocks[i], h.sequence_hash, h.block_hash, h.parent_hash, h.priority,
                     h.has_parent, h.data_checksum});
  }
  std::vector<pool::BlockRef> held(good);
  uint32_t registered = 0;
  if (good > 0) {
    if (Status s = core_.register_blocks(setup_.owner, items, held.data()); s.is_ok()) {
      registered = good;
    } else {
      spdlog::error("disk tier of pool '{}': registering onboarded blocks: {}", setup_.pool,
                    s.message());
      (void)core_.release_mutable(setup_.owner, std::span(ob.blocks).first(good), &rejected);
    }
  }
  stats_.blocks_onboarded += registered;
  stats_.bytes_read += uint64_t{registered} * layout_.block_bytes();
  const uint64_t ns = now_ns(CLOCK_MONOTONIC) - ob.t0;
  stats_.onboard_ns_total += ns;
  stats_.onboard_ns_max = std::max(stats_.onboard_ns_max, ns);
  if (shm::DiskTierInfo* d = setup_.published) {
    bump(d->onboard_latency.buckets[shm::latency_bucket(shm::kOnboardBoundsNs, ns)], 1);
    bump(d->onboard_latency.sum_ns, ns);
    bump(d->onboard_latency.count, 1);
  }
  std::vector<uint64_t> hashes = ob.hashes;
  const uint64_t cookie = ob.cookie;
  onboards_.erase(it);
  if (onboard_done_) onboard_done_(cookie, std::span(hashes).first(registered));
  if (registered > 0)
    (void)core_.release_immutable(setup_.owner, std::span(held).first(registered), &rejected);
}

// ---- what tools read ------------------------------------------------------------------

void DiskTier::publish_fixed() {
  shm::DiskTierInfo* d = setup_.published;
  if (d == nullptr) return;
  // Plain stores: kvpoold opens its tiers before it publishes kReady (release).
  d->enabled = 1;
  d->direct_io = file_.direct() ? 1 : 0;
  d->slots_total = index_.total();
  d->slot_bytes = file_.slot_bytes();
  d->block_bytes = layout_.block_bytes();
  shm::copy_name(d->io_engine, io_->name());
  shm::copy_name(d->path, file_.path());
  publish();
}

// Every counter, relaxed: one writer (the engine thread), readers take each a moment old.
void DiskTier::publish() {
  shm::DiskTierInfo* d = setup_.published;
  if (d == nullptr) return;
  auto set = [](std::atomic<uint64_t>& a, uint64_t v) { a.store(v, std::memory_order_relaxed); };
  set(d->slots_used, index_.used());
  set(d->bytes_written, stats_.bytes_written);
  set(d->bytes_read, stats_.bytes_read);
  set(d->blocks_written, stats_.blocks_written);
  set(d->blocks_onboarded, stats_.blocks_onboarded);
  set(d->write_queue_drops, stats_.write_queue_drops);
  set(d->write_skipped, stats_.write_skipped);
  set(d->evictions, stats_.evictions);
  set(d->checksum_failures, stats_.checksum_failures);
  set(d->io_errors, stats_.io_errors);
  set(d->onboards, stats_.onboards);
  set(d->onboard_ns_max, stats_.onboard_ns_max);
}

// ---- completions ----------------------------------------------------------------------

void DiskTier::on_io_ready() {
  done_scratch_.clear();
  io_->reap(done_scratch_);
  for (const IoDone& d : done_scratch_) {
    const uint32_t oi = static_cast<uint32_t>(d.tag);
    Op& op = *ops_[oi];
    if (op.write) {
      write_done(op, d.result);
    } else {
      read_done(op, d.result);
    }
    free_ops_.push_back(oi);
    --inflight_ops_;
  }
  announce_stored();  // this round's published slots, one batch
  pump();
}

}  // namespace kvpool::daemon::disk
