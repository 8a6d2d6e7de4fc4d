// One host pool's disk tier (DESIGN §6a, docs/disk-tier.md): write-behind of registered
// blocks into the slot file, and onboard of blocks read back into the host pool. Runs on
// the engine thread; the I/O itself runs in io_uring (or the fallback threads), and the
// engine calls on_io_ready() when the tier's eventfd is readable. Nothing here waits on
// the disk, and no block's bytes are hashed here: the XXH3 of each write and each read
// runs on the I/O thread (seal_write, sum_read).
//
// Holds: while a block is written, the tier holds one reference on it as the daemon's own
// pool-core owner, so it cannot be evicted and reused mid-write; while blocks are read,
// the tier holds them as its own mutable blocks, registers them once their checksums
// hold, and hands them to the asking client (OnboardDone) before dropping its references.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "daemon/disk/disk_config.hpp"
#include "daemon/disk/disk_events.hpp"
#include "daemon/disk/disk_index.hpp"
#include "daemon/disk/disk_io.hpp"
#include "daemon/disk/slot_file.hpp"
#include "kvpool/core/layout.hpp"
#include "kvpool/pool/events.hpp"
#include "kvpool/pool/pool_core.hpp"
#include "kvpool/shm/disk_tier_info.hpp"

namespace kvpool::daemon::disk {

// Counters of one tier (kvpoolctl status / metrics).
struct DiskStats {
  uint64_t bytes_written = 0;
  uint64_t bytes_read = 0;
  uint64_t blocks_written = 0;
  uint64_t blocks_onboarded = 0;
  uint64_t write_queue_drops = 0;  // skipped: the write queue was full (never waited for)
  uint64_t write_skipped = 0;      // gone from host memory, or no slot free, before its write
  uint64_t evictions = 0;          // published slots reused for newer blocks
  uint64_t checksum_failures = 0;  // a read whose data did not match its header: a miss
  uint64_t io_errors = 0;          // a read or write the OS failed (or cut short)
  uint64_t onboards = 0;           // onboard requests that read at least one block
  uint64_t onboard_ns_total = 0;   // their latency, summed (submit to registered)
  uint64_t onboard_ns_max = 0;
};

struct DiskTierSetup {
  std::string pool;
  std::string instance;
  DiskConfig config;
  LayoutConfig layout{};
  uint32_t dtype = 0;
  uint32_t hash_scheme = 0;
  std::byte* host_base = nullptr;  // the pool's block bytes, mapped writable
  uint32_t owner = 0;              // the pool-core owner the tier holds blocks as
  IoBackend backend = IoBackend::kAuto;
  // Where tools read this tier (the pool's registry segment; null: nowhere). The tier is
  // its one writer: fixed fields at open, live counters after each step (publish()).
  shm::DiskTierInfo* published = nullptr;
  // Where its Stored / Removed go (the event ring's publisher; null: nowhere), as pool
  // `pool_index` (PoolInfo order).
  DiskEventSink* events = nullptr;
  uint32_t pool_index = 0;
};

class DiskTier {
 public:
  static Result<std::unique_ptr<DiskTier>> open(const DiskTierSetup& setup, pool::PoolCore& core);
  ~DiskTier();

  // ---- write-behind ----
  // From the pool core's event sink, inside register_blocks: only queues (the core must not
  // be called back from inside itself). A full queue drops the block and counts it.
  void on_stored(std::span<const pool::StoredBlock> blocks);
  // Hashes a match answered from host memory (second_hit admission counts them as uses).
  void note_match(std::span<const uint64_t> hashes);
  // After each request: holds the queued blocks and starts writes within the byte budget.
  void pump();

  // ---- onboard ----
  // Of hashes[0..), how many in a row are published on disk.
  uint32_t disk_prefix(std::span<const uint64_t> hashes) const;
  // The blocks an onboard read registered: `hashes[0..good)` are now registered in the
  // pool and held by the tier until this returns (the engine gives the client its own
  // references inside it).
  using OnboardDone = std::function<void(uint64_t cookie, std::span<const uint64_t> good)>;
  void set_onboard_done(OnboardDone f) { onboard_done_ = std::move(f); }
  // Starts reading the disk prefix of `hashes` (at most `max_blocks`) into new host
  // blocks; false when nothing could be started (no prefix, no memory, I/O refused): the
  // caller answers with what host memory gave.
  bool start_onboard(uint64_t cookie, std::span<const uint64_t> hashes, uint32_t max_blocks);

  // ---- completions ----
  int event_fd() const { return io_->event_fd(); }
  void on_io_ready();
  // Everything in flight (tests and a stop wait for it with a deadline).
  bool idle() const { return inflight_ops_ == 0; }

  const DiskStats& stats() const { return stats_; }
  const DiskIndex& index() const { return index_; }
  uint32_t slots_used() const { return index_.used(); }
  uint32_t slots_total() const { return index_.total(); }
  bool direct() const { return file_.direct(); }
  const char* io_name() const { return io_->name(); }
  const std::string& path() const { return file_.path(); }
  uint64_t slot_bytes() const { return file_.slot_bytes(); }

 private:
  struct Queued {
    pool::StoredBlock block;
    pool::BlockRef ref{};  // the tier's hold, once pump took it
  };
  struct Op;
  struct Onboard;
  DiskTier(const DiskTierSetup& setup, pool::PoolCore& core, SlotFile file, Layout layout,
           uint32_t num_slots);
  uint32_t op_alloc();
  void build_iov(Op& op, uint32_t block);
  bool start_write(Queued& q);
  void write_done(Op& op, int64_t result);
  void read_done(Op& op, int64_t result);
  void finish_onboard(uint64_t id);
  // How many of an onboard's blocks are good, in order: stops at the first bad one (which
  // is dropped from the index and counted).
  uint32_t verify_onboard(Onboard& ob);
  // The I/O thread's hooks (disk_io.hpp): a write's checksum and seal, a read's checksum.
  static void seal_write(void* ctx, int64_t result);
  static void sum_read(void* ctx, int64_t result);
  bool admit(uint64_t hash);
  // Fixed fields of setup_.published (before kReady), then its live counters (relaxed).
  void publish_fixed();
  void publish();
  // Events (disk_tier_events.cpp): the slots published since the last announce_stored()
  // go out as one batch; a slot leaving the index goes out at once (after that batch).
  void note_on_disk(const SlotHeader& h);
  void announce_stored();
  void announce_removed(uint64_t sequence_hash);
  // A start: every slot the file gave back, parents before children.
  void announce_index();

  DiskTierSetup setup_;
  pool::PoolCore& core_;
  SlotFile file_;
  Layout layout_;
  uint64_t fingerprint_ = 0;  // layout_fingerprint of this pool's layout and dtype
  DiskIndex index_;
  std::unique_ptr<DiskIo> io_;
  std::vector<std::unique_ptr<Op>> ops_;
  std::vector<uint32_t> free_ops_;
  uint32_t inflight_ops_ = 0;
  uint64_t inflight_write_bytes_ = 0;
  uint64_t max_inflight_bytes_ = 0;
  size_t queue_cap_ = 0;
  std::vector<pool::StoredBlock> incoming_;  // from on_stored, not yet held
  std::deque<Queued> held_;                  // held, waiting for the byte budget
  uint64_t next_write_seq_ = 1;
  std::unordered_map<uint64_t, std::unique_ptr<Onboard>> onboards_;
  uint64_t next_onboard_ = 1;
  OnboardDone onboard_done_;
  // second_hit: hashes seen once (a bounded FIFO of them).
  std::unordered_set<uint64_t> seen_;
  std::deque<uint64_t> seen_order_;
  std::vector<IoDone> done_scratch_;
  std::vector<pool::StoredBlock> newly_on_disk_;  // published, not yet announced
  DiskStats stats_;
  uint64_t logged_errors_ = 0;
  bool stopping_ = false;
};

}  // namespace kvpool::daemon::disk
