// What the public handles share: the connection to kvpoold (replaced when the client
// reattaches to a restarted daemon), what this client holds, and the per-block state of
// immutables.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "connection.hpp"
#include "device_view.hpp"
#include "kvpool/core/hash.hpp"

namespace kvpool::detail {

struct ReattachPolicy {
  bool enabled = true;
  // The longest a call waits for a restarted daemon (ConnectOptions::reattach_timeout).
  std::chrono::milliseconds wait{50};
};

// One request on its way: the connection it went out on, and its correlation id there.
struct Call {
  Connection* conn = nullptr;
  uint64_t corr = 0;
};

// What this client holds in one pool, one 64-bit word per block: its generation (high
// half), whether it is our mutable block (bit 31), whether the daemon refused to give it
// back at a reattach (bit 30, "lost"), and our ImmutableBlock handles' slabs on it (bits
// 0-29). However many, the daemon holds one reference per block for us (count_locked).
// It is what a reattach claims back (daemon/previous_clients.hpp): the daemon's own record
// cannot tell a release that was on its way when the daemon died from one never made.
// Pages are zero until touched (an anonymous mapping): a pool of 1M blocks costs 8 MiB of
// address space, and memory only where this client held blocks.
class HeldTable {
 public:
  static constexpr uint64_t kMutable = 1ull << 31;
  static constexpr uint64_t kLost = 1ull << 30;
  static constexpr uint64_t kCountMask = kLost - 1;

  HeldTable() = default;
  explicit HeldTable(uint32_t blocks);
  HeldTable(HeldTable&& o) noexcept;
  HeldTable& operator=(HeldTable&& o) noexcept;
  ~HeldTable();

  uint32_t size() const { return blocks_; }
  uint64_t load(uint32_t id) const {
    return id < blocks_ ? words_[id].load(std::memory_order_relaxed) : 0;
  }
  void store(uint32_t id, uint64_t w) {
    if (id < blocks_) words_[id].store(w, std::memory_order_relaxed);
  }
  static uint32_t generation_of(uint64_t w) { return static_cast<uint32_t>(w >> 32); }

 private:
  std::atomic<uint64_t>* words_ = nullptr;
  uint32_t blocks_ = 0;
};

struct ImmutableSlab;

class ClientImpl : private shm::LeaseWork {
 public:
  ClientImpl(std::unique_ptr<Connection> c, std::string instance, ConnectionOptions options,
             ReattachPolicy reattach);
  ~ClientImpl();

  // The current connection (its pools' names and shapes never change: a reattach keeps
  // them). Connections this client had before a reattach live as long as it does, so a
  // pointer to one, or to memory it mapped, stays valid.
  Connection& conn() const { return *current_.load(std::memory_order_acquire); }
  const std::string& instance() const { return instance_; }
  // As the caller gave it ("": found like the daemon's socket).
  const std::string& runtime_dir() const { return options_.runtime_dir; }

  // Sends one request on the current connection; when its daemon is gone and reattach is
  // on, first reattaches to a restarted daemon: the first call after the death waits up to
  // the policy's bound for one; once that found none, each call tries once and fails at
  // once with kDaemonGone (the daemon is known to be down) until a daemon is back.
  Result<Call> send(proto::Opcode op, uint32_t pool, uint32_t count, const void* items,
                    size_t item_bytes);
  Result<Response> call(proto::Opcode op, uint32_t pool, uint32_t count, const void* items,
                        size_t item_bytes);

  // ---- what this client holds ----
  uint32_t incarnation(uint32_t pool) const {
    return incarnations_[pool].load(std::memory_order_acquire);
  }
  // An answer on `call` gave us `refs` (immutable: a reference each; else mutable blocks).
  // Returns the pool's incarnation their handles carry. kDaemonGone when the client
  // reattached since the call went out: the new daemon does not know them as ours, and
  // they must not be used.
  Result<uint32_t> took(const Call& call, uint32_t pool, std::span<const pool::BlockRef> refs,
                        bool immutable);
  // A register on `call` answered: `handed` (our mutable blocks) are the daemon's now,
  // `refs` our references. As took().
  Result<uint32_t> registered(const Call& call, uint32_t pool,
                              std::span<const pool::BlockRef> handed,
                              std::span<const pool::BlockRef> refs);
  // Our mutable blocks that an abandoned answer's owner (Connection::abandon) disposes of.
  void forget_mutable(uint32_t pool, std::span<const pool::BlockRef> refs);
  // A handle of `incarnation` goes: one reference (immutable) or the mutable block back.
  void release(uint32_t pool, uint32_t incarnation, bool immutable, pool::BlockRef ref);
  // References of immutable handles of `incarnation` go back, many under one lock.
  void release_immutables(uint32_t pool, uint32_t incarnation,
                          std::span<const pool::BlockRef> refs);
  // `slab` holds references its handles dropped and that did not go back yet
  // (ImmutableSlab::drop): they go with the next request, flush() or lease tick, whichever
  // comes first. The caller took a hold on the slab for the list.
  void defer(ImmutableSlab* slab);
  // Gives back the references of every deferred slab.
  void give_back_deferred();
  // Everything dropped goes to the daemon now (Client::flush).
  void flush();

  // A pool's base in this process: the host mapping, or (device pools) the device pointer
  // of the daemon's slab, opened on first use.
  // `readonly`: host pools answer from the PROT_READ mapping, so that a write through an
  // immutable block's address faults in the writer instead of corrupting every reader.
  Result<std::byte*> base(uint32_t pool, bool readonly = false) const;
  Result<std::byte*> base_of(const Connection& mapping, uint32_t pool, bool readonly) const;
  // kInvalidHandle when a reattach did not keep the block of a handle issued under
  // `incarnation` (its pool's memory is new, or the daemon did not give it back).
  Status check_handle(uint32_t pool, uint32_t incarnation, pool::BlockRef ref) const;
  // Where block `ref` of a handle issued under `incarnation` lies; an error when a
  // reattach did not keep it.
  Result<std::byte*> address(uint32_t pool, uint32_t incarnation, pool::BlockRef ref,
                             uint32_t layer, uint32_t outer, bool readonly = false) const;
  // The checksum a held block `ref` was registered with (Pool::registered_checksum); an
  // error when a reattach did not keep it.
  Result<uint64_t> registered_checksum(uint32_t pool, uint32_t incarnation,
                                       pool::BlockRef ref) const;

 private:
  // shm::LeaseWork, run by the current connection's lease thread: deferred slabs.
  bool pending() const override { return deferred_.load(std::memory_order_relaxed) != nullptr; }
  bool run() override;
  // mu_ held: what letting go of one handle on `ref` changes in our table; true when the
  // daemon's reference (or the mutable block) must go back to it.
  bool let_go_locked(uint32_t pool, bool immutable, pool::BlockRef ref);
  Result<Connection*> usable();
  Result<Connection*> reattach(Connection* dead);
  // reattach_mutex_ held. `bound`: how long to wait for a daemon to come back (0: one try).
  Result<Connection*> reattach_locked(Connection* dead, std::chrono::milliseconds bound);
  Result<std::unique_ptr<Connection>> reconnect(std::chrono::milliseconds bound);
  Status check_same_pools(const Connection& old, const Connection& fresh) const;
  // mu_ held. *successor_died: `fresh`'s daemon died before it answered every record;
  // what it did answer is ours under its slot there, which the daemon after it adopts.
  Status claim_back(Connection& old, Connection& fresh, bool* successor_died);
  // `surplus`: daemon references on blocks we held already, to give back once unlocked.
  void count_locked(uint32_t pool, std::span<const pool::BlockRef> refs, bool immutable,
                    std::vector<pool::BlockRef>* surplus);

  const std::string instance_;
  const ConnectionOptions options_;
  const ReattachPolicy reattach_;

  std::mutex reattach_mutex_;  // one reattach at a time
  Status failed_;              // a reattach that cannot succeed (reattach_mutex_)
  // Attempts that failed, and the last one's error (reattach_mutex_): a thread that waited
  // for another's attempt takes its answer instead of waiting the whole bound again.
  std::atomic<uint64_t> reattach_failures_{0};
  Status last_reattach_failure_;
  // A wait of the policy's bound found no daemon (reattach_mutex_): it is known to be
  // down, and calls stop waiting for it (an engine's step must not stall on a cache).
  bool known_down_ = false;
  std::chrono::steady_clock::time_point down_since_{};
  // Held for every change of what we hold and for the swap of connections: a release is
  // counted and sent on the connection current at that moment, never half on each side
  // of a reattach's claim.
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Connection>> connections_;  // the current one last (mu_)
  std::atomic<Connection*> current_;
  std::vector<HeldTable> held_;  // per pool (mu_; address() reads words lock-free)
  std::unique_ptr<std::atomic<uint32_t>[]> incarnations_;  // per pool: bumped when reset
  // Per pool: the connection whose mapping of the pool's memory addresses come from. An
  // adopted pool keeps the first one (the same file), so an address taken before a restart
  // stays the address of the block; a pool whose memory is new takes the new connection's.
  std::unique_ptr<std::atomic<const Connection*>[]> mapped_by_;
  // Slabs with dropped references not given back yet, each holding a hold for the list: a
  // lock-free stack through ImmutableSlab::next_deferred (pushed by drops, taken whole).
  std::atomic<ImmutableSlab*> deferred_{nullptr};
};

// The immutable blocks of one answer, in one allocation (a match of 64 blocks used to cost
// 64 shared states). Each block has its own count of ImmutableBlock copies. When a block's
// last copy goes, its reference does not go back to the daemon alone: it waits in the slab
// (one bit) and goes as one batch with the others of the answer, when the answer's last
// block goes, or with the client's next request, flush() or lease tick (~10 ms), whichever
// comes first, so holding one block of an answer never pins the others for long. Dropping
// a match of 64 used to cost 64 trips through two mutexes; now one batch (docs/performance.md).

struct ImmutableEntry {
  std::atomic<uint32_t> copies{1};
  uint32_t index = 0;  // in its slab
  pool::BlockRef ref{};
  SequenceHash sequence_hash = 0;
};

struct ImmutableSlab {
  // Kept while an entry lives (the last drop lets it go): so a slab on the client's list,
  // which the lease thread may free, never ends the client there.
  std::shared_ptr<ClientImpl> client;
  uint32_t pool = 0;
  uint32_t incarnation = 0;  // ClientImpl::incarnation(pool) when the answer came
  uint32_t count = 0;
  std::atomic<uint32_t> live{0};  // entries whose copies have not all gone
  // What keeps the allocation: 1 while an entry lives, 1 while on the client's list.
  std::atomic<uint32_t> holds{1};
  std::atomic<bool> listed{false};         // on the client's list of deferred slabs
  ImmutableSlab* next_deferred = nullptr;  // the next on that list (set while unlisted)

  // One allocation: the slab, then `refs.size()` entries (each starts with one copy), then
  // one bit per entry: its last copy went, its reference has not gone back yet.
  static ImmutableSlab* create(std::shared_ptr<ClientImpl> c, uint32_t pool, uint32_t incarnation,
                               std::span<const pool::BlockRef> refs,
                               std::span<const SequenceHash> hashes);
  static ImmutableSlab* of(const ImmutableEntry* e);
  ImmutableEntry* entries();
  std::atomic<uint64_t>* dropped();

  // The last copy of `e` went: its reference waits for the batch (see above).
  static void drop(ImmutableEntry* e);
  // Gives back, as one batch through `c`, every dropped reference not given back yet.
  void give_back(ClientImpl& c);
  // Lets go of one hold; frees the slab with the last.
  void unhold();
};

}  // namespace kvpool::detail
