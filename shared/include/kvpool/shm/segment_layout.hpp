// The shared-memory layout of kvpool: every struct that lives in a segment, with its size
// and offsets pinned by static_assert. A change to any of them bumps kLayoutMajor (clients
// refuse another major) or, for additions at the end, kLayoutMinor.
//
// Segments (all created and sized by the daemon):
//   control  memfd "kvpool.<instance>.ctl"   ControlHeader | PoolInfo[num_pools]: what
//            every client and observer of the instance may see. Clients, kvpoolctl and
//            kvpool-events get a read-only fd over the socket and map it read-only.
//   registry memfd, one per pool (registry_segment.hpp): the pool's clients (a SlotInfo
//            mirror), its arena (PoolCore state) and its event ring; a read-only fd goes
//            only to callers the pool's allow-lists admit.
//   pool     "/kvpool.<instance>.pool.<name>"   block data of one host pool (layout bytes).
//   client   memfd, one per attached client, read-write for that client only:
//            ClientHeader | request ring | response ring.
//
// Ordering rule: the daemon fills a header completely, then stores `state` with release;
// readers load `state` with acquire before trusting anything else in it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kvpool/core/layout.hpp"
#include "kvpool/shm/lease_mutex.hpp"
#include "kvpool/shm/ring.hpp"

namespace kvpool::shm {

inline constexpr uint64_t kControlMagic = 0x4B56504F4F4C4354ull;  // "KVPOOLCT"
inline constexpr uint64_t kClientMagic = 0x4B56504F4F4C434Cull;   // "KVPOOLCL"
// Major 2: segments are sealed memfds, the Welcome carries a pool mask. Minors of 1 (event
// ring, latency histogram, reclaim times, PoolInfo::dtype) are all in 2.0, which adds
// per-slot rejected handles. Major 3: per-block checksums (RegisterItem grows to 48 bytes,
// the pool arena stores a checksum per block, opcodes kVerify and kScrub). Minor 1 of 3:
// restarts (ControlHeader::restart, PoolInfo's adoption counts; generations carry the
// daemon's tag, pool/arena.hpp), additions only: a 3.0 reader reads a 3.1 segment.
// Major 4: tenant isolation (issue 27): each pool's arena, event ring and client table move
// out of the control segment into the pool's own registry segment; the control segment
// keeps ControlHeader and PoolInfo (its arena_offset/arena_bytes are 0, its device_uuid
// and ipc_handle zero: the registry header carries them), and ControlHeader's slots_offset
// and event_ring_offset are 0. Minor 1 of 4: each registry segment ends with the pool's
// DiskTierInfo (disk_tier_info.hpp; RegistryHeader::disk_offset, in its reserved bytes).
inline constexpr uint16_t kLayoutMajor = 4;
inline constexpr uint16_t kLayoutMinor = 1;
inline constexpr size_t kNameBytes = 64;  // NUL-terminated names in shm

enum class DaemonState : uint32_t {
  kInitializing = 0,
  kReady = 1,     // every segment valid, socket listening
  kStopping = 2,  // clean shutdown in progress: clients get DaemonGone
};

enum class SlotState : uint32_t {
  kFree = 0,
  kAttaching = 1,  // handshake under way
  kAttached = 2,
  kSuspect = 3,  // socket hung up but the lease is still held: never reclaimed while so
};

struct ControlStats {
  std::atomic<uint64_t> clients_attached;   // attaches completed, ever
  std::atomic<uint64_t> clients_detached;   // clean detaches
  std::atomic<uint64_t> reclaimed_clients;  // clients that died and were reclaimed
  std::atomic<uint64_t> reclaimed_blocks;   // blocks returned by those reclaims
  std::atomic<uint64_t> requests;           // ring records processed
  std::atomic<uint64_t> protocol_errors;    // malformed records answered with an error
  std::atomic<uint64_t> disconnects;        // clients cut off for corrupting their rings
  std::atomic<uint64_t> refused_attaches;   // version, uid or capacity refusals
  std::atomic<uint64_t> engine_sleeps;      // times the progress engine parked
  // Minor 3: CLOCK_MONOTONIC of the last reclaim: when the engine took up the dead client's
  // hang-up (or pidfd), and when it had returned its blocks. Written before
  // reclaimed_clients is bumped (release): a reader that sees the counter move (acquire)
  // reads the times of that reclaim or a later one.
  std::atomic<uint64_t> last_reclaim_noticed_ns;
  std::atomic<uint64_t> last_reclaim_done_ns;
  // Gauges for the callers' wait policy (shm/cpu_share.hpp; zero from daemons before them,
  // whose reserved bytes these were, which callers read as "unknown"). engine_cpus: the
  // CPUs kvpoold's engine may run on, stored once before kReady. clients_busy: clients in a
  // call right now as the engine saw them on its last pass (a request taken within the last
  // kBusyWindowNs, or an answer not read yet); relaxed, stored when it changes.
  // clients_awake: of those, the ones whose response doorbell does not say they sleep (they
  // poll, or run, or wait for a core: each wants one), with shm::kAwakePublished set; zero
  // from daemons before it, whose callers fall back to clients_busy.
  std::atomic<uint64_t> engine_cpus;
  std::atomic<uint64_t> clients_busy;
  std::atomic<uint64_t> clients_awake;
  std::atomic<uint64_t> reserved[2];
};
static_assert(sizeof(ControlStats) == 128);

// Minor 2: how long the progress engine spent on each request record, from taking it off
// the ring to publishing its answer. buckets[i] counts records that took at most
// kLatencyBoundsNs[i] and more than the bound before it (not cumulative); bucket
// kLatencyBounds counts the slower ones. Relaxed counters, written by the engine only.
inline constexpr size_t kLatencyBounds = 13;
inline constexpr uint64_t kLatencyBoundsNs[kLatencyBounds] = {
    250,    500,     1'000,   2'500,   5'000,     10'000,    25'000,
    50'000, 100'000, 250'000, 500'000, 1'000'000, 10'000'000};
struct LatencyHistogram {
  std::atomic<uint64_t> buckets[16];  // [0, kLatencyBounds] used
  std::atomic<uint64_t> count;
  std::atomic<uint64_t> sum_ns;
  std::atomic<uint64_t> reserved[6];
};
static_assert(sizeof(LatencyHistogram) == 192);

// Minor 1 (header_bytes >= 576): who this daemon is, and what it kept of its predecessor.
// Written once before kReady (plain fields, published by the state store).
struct RestartInfo {
  // Random, nonzero, new at every start (daemon/epoch.hpp): names this daemon process among
  // all the daemons that ever served the instance. The pid does not (a successor may get
  // the same pid in another PID namespace or after a wrap), and neither does a start time
  // (two daemons of two instances may start in the same tick).
  uint64_t epoch;
  // The epoch of the daemon whose pools this one adopted (0: it adopted nothing).
  uint64_t previous_epoch;
  // The top byte of every block generation this daemon issues (pool/arena.hpp), nonzero and
  // never the tag of a generation still present in an adopted arena.
  uint32_t generation_tag;
  uint32_t adopted_pools;  // pools whose registry this daemon took over
  // Registered blocks taken over, and blocks whose registration could not be proven and
  // were dropped (daemon/adoption.hpp); sums over the pools (PoolInfo has each pool's).
  uint64_t adopted_blocks;
  uint64_t adoption_dropped_blocks;
  uint64_t adoption_ns;  // how long adoption took (0: none)
  uint8_t reserved[16];
};
static_assert(sizeof(RestartInfo) == 64 && std::is_trivially_copyable_v<RestartInfo>);

struct ControlHeader {
  uint64_t magic;
  uint16_t layout_major;
  uint16_t layout_minor;
  uint32_t header_bytes;  // sizeof(ControlHeader): lets a newer minor add fields
  int64_t daemon_pid;
  uint64_t start_time_ns;  // CLOCK_REALTIME at start
  uint32_t max_clients;
  uint32_t num_pools;
  uint64_t slots_offset;
  uint64_t pools_offset;
  uint64_t total_bytes;
  char instance[kNameBytes];
  // offset 128
  alignas(64) std::atomic<uint32_t> state;  // DaemonState, stored last (release)
  // Written only by the daemon. Bit 0: set while the progress engine is about to park, so
  // a client that publishes a request knows to ring its eventfd (Dekker with its tail
  // store). Bits 1-31 (since 0.2; zero before): the engine's CPU tag (shm::cpu_tag), so a
  // client knows when kvpoold shares its core. Clients that test the whole word for zero
  // only ring more often than needed.
  std::atomic<uint32_t> daemon_sleeping;
  std::atomic<uint64_t> heartbeat_ns;  // CLOCK_MONOTONIC of the engine's last loop
  // Minor 1: the event ring (shm/event_ring.hpp); offset 0 when the daemon runs without
  // one (event_ring_slots 0, or a minor-0 daemon, whose reserved bytes here are zero).
  uint64_t event_ring_offset;
  uint64_t event_ring_bytes;
  // kvpool::version_string() of the daemon, NUL-terminated ("0.1.0 (git 3f0eb92)", cut to
  // fit); all zero (empty) from daemons before it was written, whose reserved bytes these were.
  char daemon_version[32];
  // offset 192
  alignas(64) ControlStats stats;
  // offset 320. Minor 2 (header_bytes >= 512): per-request engine time.
  alignas(64) LatencyHistogram request_latency;
  // offset 512. Minor 1 of major 3 (header_bytes >= 576).
  alignas(64) RestartInfo restart;
};
static_assert(std::is_standard_layout_v<ControlHeader>);
static_assert(offsetof(ControlHeader, instance) == 64);
static_assert(offsetof(ControlHeader, state) == 128);
static_assert(offsetof(ControlHeader, daemon_sleeping) == 132);
static_assert(offsetof(ControlHeader, heartbeat_ns) == 136);
static_assert(offsetof(ControlHeader, event_ring_offset) == 144);
static_assert(offsetof(ControlHeader, event_ring_bytes) == 152);
static_assert(offsetof(ControlHeader, daemon_version) == 160);
static_assert(offsetof(ControlHeader, stats) == 192);
static_assert(offsetof(ControlHeader, request_latency) == 320);
static_assert(offsetof(ControlHeader, restart) == 512);
static_assert(sizeof(ControlHeader) == 576);

// One per client slot: what `kvpoolctl clients` shows. Written by the daemon only.
struct SlotInfo {
  std::atomic<uint32_t> state;       // SlotState
  std::atomic<uint32_t> generation;  // bumps on every reuse of the slot
  std::atomic<int32_t> pid;
  std::atomic<uint32_t> uid;
  std::atomic<uint64_t> attach_time_ns;  // CLOCK_REALTIME
  std::atomic<uint64_t> requests;
  std::atomic<uint64_t> protocol_errors;
  // Minor 4: release handles the daemon refused (stale, foreign, unknown); zeroed with the
  // other counters when the slot is reused.
  std::atomic<uint64_t> rejected_handles;
  std::atomic<uint64_t> match_hits;  // blocks its matches found (per-client hit figures)
  // The client process's start time (field 22 of /proc/<pid>/stat, clock ticks since boot):
  // with pid it names the process, so the next daemon tells a client that still runs from
  // an unrelated process that took its pid while no daemon ran. 0: unknown (a 4.0 daemon
  // wrote these bytes as reserved zeros), and the next daemon trusts the pid alone.
  std::atomic<uint64_t> start_ticks;
};
static_assert(std::is_standard_layout_v<SlotInfo>);
static_assert(sizeof(SlotInfo) == 64);

enum class StorageKind : uint32_t { kHost = 0, kCuda = 1 };

struct PoolInfo {
  char name[kNameBytes];
  char shm_name[kNameBytes];  // host pools: the data segment's name
  LayoutConfig layout;        // 32 bytes
  uint32_t storage;           // StorageKind
  int32_t device;             // CUDA ordinal, -1 for host
  uint64_t data_bytes;
  uint64_t arena_offset;  // PoolCore arena inside the control segment
  uint64_t arena_bytes;
  uint8_t device_uuid[16];  // CUDA device UUID (device pools)
  uint8_t ipc_handle[64];   // cudaIpcMemHandle_t (device pools)
  uint32_t dtype;           // kvpool::DType (0: unspecified)
  uint32_t hash_scheme;     // kvpool::HashScheme of the pool's hashes (core/hash.hpp)
  // Minor 1: registered blocks this pool took over from the previous daemon, and those it
  // dropped because their state could not be proven (0 and 0: a fresh pool).
  uint64_t adopted_blocks;
  uint64_t adoption_dropped_blocks;
  uint8_t reserved[16];
};
static_assert(std::is_standard_layout_v<PoolInfo> && std::is_trivially_copyable_v<PoolInfo>);
static_assert(offsetof(PoolInfo, layout) == 128);
static_assert(offsetof(PoolInfo, data_bytes) == 168);
static_assert(offsetof(PoolInfo, ipc_handle) == 208);
static_assert(offsetof(PoolInfo, dtype) == 272);
static_assert(offsetof(PoolInfo, hash_scheme) == 276);
static_assert(offsetof(PoolInfo, adopted_blocks) == 280);
static_assert(sizeof(PoolInfo) == 312);

// Head of a client's own segment. The lease mutex is locked by the client's lease thread
// for the life of the connection; EOWNERDEAD on it proves that thread (or process) died.
struct ClientHeader {
  uint64_t magic;
  uint16_t layout_major;
  uint16_t layout_minor;
  uint32_t slot;
  uint32_t generation;
  uint32_t reserved0;
  uint64_t ring_capacity;    // data bytes of each ring
  uint64_t request_offset;   // RingHeader of the request ring (client -> daemon)
  uint64_t response_offset;  // RingHeader of the response ring (daemon -> client)
  uint8_t reserved1[16];
  alignas(64) LeaseMutex lease;
};
static_assert(std::is_standard_layout_v<ClientHeader>);
static_assert(offsetof(ClientHeader, ring_capacity) == 24);
static_assert(offsetof(ClientHeader, lease) == 64);
static_assert(sizeof(ClientHeader) == 128);

constexpr uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Offsets of a client segment with rings of `capacity` bytes.
struct ClientSegmentLayout {
  uint64_t request_offset;
  uint64_t response_offset;
  uint64_t total_bytes;
};
constexpr ClientSegmentLayout client_segment_layout(uint64_t ring_capacity) {
  uint64_t req = align_up(sizeof(ClientHeader), 4096);
  uint64_t resp = align_up(req + ring_bytes(ring_capacity), 4096);
  return {req, resp, align_up(resp + ring_bytes(ring_capacity), 4096)};
}

}  // namespace kvpool::shm
