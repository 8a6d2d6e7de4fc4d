// libkvpool: a worker's connection to kvpoold.
//
//   auto client = kvpool::Client::connect("default");          // Result<Client>
//   auto pool = client->pool("g2");                            // Result<Pool>
//   auto blocks = pool->allocate_blocks(2);                    // all or nothing
//   blocks->at(0).init_sequence(salt); blocks->at(0).add_tokens(tokens); ...commit();
//   auto shared = pool->register_blocks(std::move(*blocks));   // ImmutableBlocks
//   auto hits = pool->match_sequence_hashes(hashes);           // longest known prefix
//
// Every call blocks until kvpoold answers; *_async forms send at once and return a
// future. A Client may be used from several threads, and each call returns when its own
// answer is in: one that takes long (an onboard from disk) holds up no other thread's
// calls on the same Client. If kvpoold dies, the calls in flight
// fail with ErrorCode::kDaemonGone (within ~50 ms), never hang; so do calls while no daemon
// runs, at once; the first call after a daemon is back reattaches to it, keeping the
// handles it proves are ours (ConnectOptions::reattach).
//
// Device pools (storage "cuda"): the daemon owns one CUDA allocation per pool; a client
// opens it with cudaIpcOpenMemHandle on first use and closes it when the Client goes.
// Block addresses are then device pointers; move bytes with kernels or copy_blocks.
#pragma once

#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvpool/block.hpp"
#include "kvpool/core/dtype.hpp"
#include "kvpool/core/layout.hpp"
#include "kvpool/core/status.hpp"
#include "kvpool/core/token_block.hpp"

namespace kvpool {

struct ConnectOptions {
  // Directory of kvpoold's socket; "" resolves like the daemon does ($RUNTIME_DIRECTORY,
  // /run/kvpool, $XDG_RUNTIME_DIR/kvpool, /tmp/kvpool-<uid>).
  std::string runtime_dir;
  std::chrono::milliseconds connect_timeout{5000};
  // How long a call polls for its answer (yielding the core between polls) before it
  // sleeps on the response ring's futex, in microseconds. A match or an allocate is
  // answered within tens of microseconds; polling that long costs no wake-up, and yielding
  // lets a daemon that shares our core run at once.
  uint32_t poll_us = 50;
  // A daemon whose heartbeat (in the control segment, every ~100 ms) is older than this is
  // taken as stalled (SIGSTOPped, wedged): calls fail with kDaemonUnresponsive instead of
  // waiting for it forever.
  std::chrono::milliseconds unresponsive_after{10000};
  // cudaHostRegister every host pool's mapping at connect (unregistered at disconnect), so
  // copy_blocks between host and device pools runs at DMA speed. connect fails with
  // kUnsupported when kvpool was built without CUDA, kDeviceError when CUDA cannot pin
  // (no device visible). Left false, no CUDA call is made for host pools.
  bool pin_host_pools = false;
  // When kvpoold dies, the calls in flight fail with kDaemonGone (what they did is unknown)
  // within milliseconds. With `reattach` (the default), the first call after that waits up
  // to `reattach_timeout` (50 ms: well under an engine's step) for a kvpoold on the same
  // instance; if none came, the daemon is known to be down and every later call tries
  // once to connect (microseconds while no daemon listens) and fails at once with
  // kDaemonGone: a missing daemon costs an engine a cache miss, never a stalled step. The
  // call that finds a daemon back connects to it and takes back what this client held:
  // handles stay valid (same ids, same memory) where the new daemon adopted the pool and
  // proves the block was ours; others fail with kInvalidHandle on use. A daemon with other
  // pools (names, shapes) is not reattached to: calls fail with kDaemonGone, connect a new
  // Client. See docs/restarts.md.
  bool reattach = true;
  std::chrono::milliseconds reattach_timeout{50};
};

class Pool;

// A match that may continue on another host (the peer tier, docs/peers.md): what this
// host's pool lacks of the prefix is asked of this host's kvpool-peer, which fetches it from
// the kvpoold of a host that holds it, registers it here and lets the match take it.
struct PeerFetchOptions {
  // The whole fetch, from asking kvpool-peer to the blocks being registered here. The call
  // returns within about this long after the local match, whatever the network does.
  std::chrono::milliseconds deadline{500};
  // "host:port" of the holder's kvpool-peer, when a router knows it; "": kvpool-peer looks
  // it up in what the peers' KV events said.
  std::string holder;
};

// How a match looks for the prefix on this host (Pool::match_sequence_hashes).
struct MatchOptions {
  // Continue the prefix from the pool's disk tier (docs/disk-tier.md) past what host memory
  // holds: kvpoold reads those blocks into host blocks (evicting as an allocate does),
  // verifies each one's checksum, registers them and answers with the longest prefix over
  // both tiers. The answer waits for the reads (typically a fraction of a millisecond per
  // block on NVMe); the daemon serves every other call meanwhile. A block whose bytes on
  // disk fail their checksum, or whose read fails, ends the prefix there (a miss, never a
  // bad block). A pool without a disk tier answers as a plain match. A kvpoold older than
  // this library refuses the request (kProtocolError, "unknown opcode 13").
  bool onboard = false;
};

struct RegisterOptions {
  // Send each block's checksum (XXH3-64 of its bytes, computed here before sending; see
  // kvpool/core/checksum.hpp) with it, so that kvpoold can tell later that its bytes
  // changed (verify_blocks, `kvpoolctl scrub`) and evict it instead of serving it again.
  // Costs one read of every block's bytes in this call. Host pools only: kUnsupported for
  // a device pool. A block deduplicated onto an existing one keeps that block's checksum
  // (or its lack of one).
  bool checksum = false;
  // Send each block's token ids with it, so that kvpoold's KV events carry them
  // (`kvpool-events --format vllm`: BlockStored.token_ids) for consumers that hash tokens
  // themselves (llm-d's KV-cache indexer). Costs page_size * 4 bytes per block on the
  // request ring and in the event ring's token area; off, events carry empty token_ids.
  // A block deduplicated onto an existing one stores nothing, so its tokens go nowhere.
  bool send_tokens = false;
  // With `checksum`: the blocks' checksums already known (one per block, in order, each
  // block_checksum of its bytes as they are now), sent instead of hashing the blocks again:
  // for copies whose bytes were checked against them as they arrived (kvpool-peer). A
  // wrong one only makes kvpoold evict the block at its next check. Empty: hashed here.
  // Read during the call (the async form too, before it returns).
  std::span<const uint64_t> checksums = {};
};

// What kvpoold found when it hashed a block (Pool::verify_blocks).
enum class ChecksumResult : uint32_t {
  kOk = 0,          // the bytes match the checksum it was registered with
  kMismatch = 1,    // they do not: the block is evicted (no match returns it again); this
                    // handle stays valid, but its bytes are wrong: drop it
  kNoChecksum = 2,  // registered without RegisterOptions::checksum: nothing to compare
};

// A block a scrub step found corrupt (and kvpoold evicted).
struct ScrubMismatch {
  uint32_t block_id;
  uint32_t generation;
  SequenceHash sequence_hash;
};

// One bounded step of a scrub (Pool::scrub_step).
struct ScrubStep {
  uint32_t next_block = 0;             // start of the next step; the pool's num_blocks when done
  uint32_t checked = 0;                // checksummed blocks hashed
  uint32_t mismatches = 0;             // of which failed (evicted)
  uint32_t skipped = 0;                // registered blocks without a checksum
  std::vector<ScrubMismatch> corrupt;  // the failed ones
};

// Copies whole blocks: block src_ids[i] of `src` onto block dst_ids[i] of `dst`, every
// (layer, outer) region, for every i: device -> host, host -> device, device -> device, or
// host -> host, between pools whose blocks have the same shape (the layout kinds may
// differ). Ids are block_id()s of blocks the caller holds.
//
// Enqueued on `cuda_stream` (a cudaStream_t; nullptr: the legacy default stream) as one
// cudaMemcpyAsync per run of ids consecutive in both pools (one cudaMemcpy2DAsync when
// FullyContiguous blocks are padded apart; per layer when a pool is LayerSeparate).
// Returns once enqueued: synchronise the stream before using the bytes. Host -> host with
// cuda_stream == nullptr is a plain memcpy, done when this returns, with no CUDA at all.
//
// kInvalidArgument: id lists of different lengths, an id out of range, different block
// shapes, a block both source and destination; kUnsupported: a device pool (or a stream)
// in a build without CUDA; kDeviceError: a CUDA failure (e.g. the pool's GPU is not here).
Status copy_blocks(const Pool& src, std::span<const uint32_t> src_ids, const Pool& dst,
                   std::span<const uint32_t> dst_ids, void* cuda_stream = nullptr);

// A pool's blocks by state, a moment old (Pool::counts).
struct BlockCounts {
  uint32_t total = 0;
  uint32_t free = 0;            // reset, owned by nobody
  uint32_t inactive = 0;        // registered, unreferenced: matchable and evictable
  uint32_t active = 0;          // registered and referenced
  uint32_t mutable_blocks = 0;  // handed out by allocate
};

class Pool {
 public:
  Result<std::vector<MutableBlock>> allocate_blocks(uint32_t count);
  // Takes committed blocks; returns, per block, the registered block that now holds its
  // hash (the caller's own, or an existing one it was deduplicated onto).
  Result<std::vector<ImmutableBlock>> register_blocks(std::vector<MutableBlock> blocks);
  Result<std::vector<ImmutableBlock>> register_blocks(std::vector<MutableBlock> blocks,
                                                      const RegisterOptions& options);
  Result<std::vector<ImmutableBlock>> match_sequence_hashes(std::span<const SequenceHash> hashes);
  // The same with options: MatchOptions::onboard continues the prefix from the disk tier.
  Result<std::vector<ImmutableBlock>> match_sequence_hashes(std::span<const SequenceHash> hashes,
                                                            const MatchOptions& options);
  std::future<Result<std::vector<ImmutableBlock>>> match_sequence_hashes_async(
      std::span<const SequenceHash> hashes, const MatchOptions& options);

  // The longest prefix of `hashes` found here (host, then disk where the pool has one) and
  // then, for what is missing, on a peer: kvpool-peer fetches it (verified, registered
  // here) and the result is one prefix, local blocks first. Any failure of the peer path
  // (no kvpool-peer, no holder, a dead or stalled holder, the deadline) is a shorter
  // prefix, never an error: only the local match's own errors are returned.
  Result<std::vector<ImmutableBlock>> match_sequence_hashes(std::span<const SequenceHash> hashes,
                                                            const PeerFetchOptions& peers);
  // The same on a thread of its own: the caller waits only when it reads the future.
  std::future<Result<std::vector<ImmutableBlock>>> match_sequence_hashes_async(
      std::span<const SequenceHash> hashes, const PeerFetchOptions& peers);

  std::future<Result<std::vector<MutableBlock>>> allocate_blocks_async(uint32_t count);
  std::future<Result<std::vector<ImmutableBlock>>> register_blocks_async(
      std::vector<MutableBlock> blocks);
  std::future<Result<std::vector<ImmutableBlock>>> register_blocks_async(
      std::vector<MutableBlock> blocks, const RegisterOptions& options);
  std::future<Result<std::vector<ImmutableBlock>>> match_sequence_hashes_async(
      std::span<const SequenceHash> hashes);

  // Per-block checksums (host pools; kUnsupported for a device pool). kvpoold hashes the
  // bytes itself: a client can ask for a check, never declare a block corrupt.
  //
  // Has kvpoold hash each of `blocks` (immutable blocks of this pool that this client
  // holds) and compare it with its registered checksum: one result per block, in order.
  // A kMismatch block has been evicted (counted in kvpool_checksum_mismatches_total).
  // Blocks are sent in requests of at most 64 KiB of hashing each (one block at least).
  Result<std::vector<ChecksumResult>> verify_blocks(std::span<const ImmutableBlock> blocks);
  // The same as one Status: ok when no block failed (blocks without a checksum pass),
  // else kChecksumMismatch naming the first that did.
  Status check_blocks(std::span<const ImmutableBlock> blocks);
  // One step of a scrub of the whole pool from `start_block`: kvpoold checks registered
  // blocks that carry a checksum, hashing at most `byte_budget` bytes (0, or more than
  // 64 KiB: 64 KiB) but at least one block, and evicts those that fail. Loop from 0 until
  // next_block == layout().num_blocks (`kvpoolctl scrub` does).
  Result<ScrubStep> scrub_step(uint32_t start_block, uint64_t byte_budget = 0);
  // The checksum `block` (held by this client, of this pool) was registered with: what its
  // bytes hashed to then (block_checksum), or 0 when it was registered without one. Read
  // from kvpoold's control segment, no request and no hashing: a copy of the bytes made
  // elsewhere is checked against it (kvpool-peer sends it with a block it serves).
  // kInvalidArgument: not a block of this pool; kInvalidHandle: a restart did not keep it.
  Result<uint64_t> registered_checksum(const ImmutableBlock& block) const;

  // Blocks by state, read from the daemon's control segment (no request; a moment old).
  BlockCounts counts() const;

  const std::string& name() const;
  const LayoutConfig& layout() const;
  uint32_t page_size() const { return layout().page_size; }
  // The element type the config named ("dtype"); kUnspecified when it gave dtype_bytes alone.
  DType dtype() const;
  uint32_t index() const { return index_; }
  // How this pool's blocks are hashed (kvpoold's "hash_scheme"; see kvpool/core/hash.hpp).
  // MutableBlock::commit uses it; hash sequences with it too (hash_tokens below).
  HashScheme hash_scheme() const;
  // The full blocks of `tokens` hashed as this pool hashes them (its page size and hash
  // scheme): the sequence hashes to match, and that MutableBlock::commit gives the blocks.
  // Salt as for MutableBlock::init_sequence (dynamo-router: dynamo_router_salt(...), 1337
  // for a plain request). Same as
  // TokenBlockSequence::create(tokens, page_size(), salt, hash_scheme()).
  Result<TokenBlockSequence> hash_tokens(std::span<const Token> tokens, Salt salt) const;
  // kVersionMismatch, naming both schemes, unless the pool hashes with `worker_scheme`:
  // for a worker built for one scheme, to refuse a pool whose hashes would never match.
  Status check_hash_scheme(HashScheme worker_scheme) const;

  // Where the blocks live (the daemon's "storage"): kHost, shared memory mapped in this
  // process; kCuda, one GPU's memory, reached through CUDA IPC. Block addresses of a kCuda
  // pool are device pointers.
  enum class Storage : uint32_t { kHost = 0, kCuda = 1 };
  Storage storage() const;
  bool is_device() const { return storage() == Storage::kCuda; }
  // Device pools: the local CUDA ordinal of the pool's GPU, found by its UUID (so it may
  // differ from the daemon's "device" under CUDA_VISIBLE_DEVICES). Opens the pool's CUDA
  // IPC handle in this process if nothing did yet. kInvalidState for host pools.
  Result<int> cuda_device() const;

 private:
  friend class Client;
  friend class BatchStore;
  friend Status copy_blocks(const Pool&, std::span<const uint32_t>, const Pool&,
                            std::span<const uint32_t>, void*);
  Pool(std::shared_ptr<detail::ClientImpl> c, uint32_t index)
      : client_(std::move(c)), index_(index) {}
  std::shared_ptr<detail::ClientImpl> client_;
  uint32_t index_;
};

class Client {
 public:
  static Result<Client> connect(std::string_view instance = "default",
                                const ConnectOptions& options = {});

  Result<Pool> pool(std::string_view name) const;
  std::vector<std::string> pool_names() const;
  // Round trip to the daemon.
  Status ping();
  // Sends queued releases now instead of with the next request (or within ~10 ms).
  void flush();
  bool daemon_alive() const;
  uint32_t slot() const;

 private:
  explicit Client(std::shared_ptr<detail::ClientImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<detail::ClientImpl> impl_;
};

}  // namespace kvpool
