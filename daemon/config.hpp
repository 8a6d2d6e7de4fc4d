// kvpoold's configuration: JSON (nlohmann_json), every field checked, errors name the field.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/disk/disk_config.hpp"
#include "kvpool/core/dtype.hpp"
#include "kvpool/core/hash.hpp"
#include "kvpool/core/layout.hpp"
#include "kvpool/core/status.hpp"
#include "kvpool/pool/pool_core.hpp"
#include "kvpool/shm/segment_layout.hpp"

namespace kvpool::daemon {

struct PoolConfig {
  std::string name;                                    // [A-Za-z0-9_-], 1..32 chars, unique
  shm::StorageKind storage = shm::StorageKind::kHost;  // "host" | "cuda"
  int32_t device = -1;     // "device": CUDA ordinal, cuda pools only (>= 0)
  LayoutConfig layout{};   // "num_blocks" and "layout": {...}
  uint32_t max_holds = 0;  // 0: 2 * num_blocks + 64
  // Who receives this pool's descriptors (on top of the instance's allow-lists); empty: all
  // attached clients. A client outside them attaches but does not see the pool.
  std::vector<uid_t> allowed_uids;
  std::vector<gid_t> allowed_gids;
  // "layout": {"dtype": ...}: the element type; dtype_bytes agrees with it.
  DType dtype = DType::kUnspecified;
  // "hash_scheme": how workers hash this pool's blocks (core/hash.hpp); published in
  // PoolInfo, kvpoolctl status and every event batch.
  HashScheme hash_scheme = HashScheme::kDynamo02;
  // Host pools only (daemon/host_pool_memory.hpp). "huge_pages": "" or "off" (4 KiB pages),
  // "transparent" (madvise(MADV_HUGEPAGE); shmem THP must be enabled), or the directory of
  // a hugetlbfs mount ("/dev/hugepages"). "numa_node": the node its pages are bound to (-1:
  // the kernel's choice).
  std::string huge_pages;
  int32_t numa_node = -1;
  // "disk": {...}: a disk tier below this host pool (daemon/disk/, docs/disk-tier.md).
  DiskConfig disk;

  // Field by field, so tests and reloads can tell whether a config changed.
  friend bool operator==(const PoolConfig&, const PoolConfig&) = default;
};

// Most pools one instance serves: each adds two descriptors to the Welcome
// (shm::kMaxFdsPerMessage).
inline constexpr size_t kMaxPools = 16;

struct Config {
  std::string instance = "default";
  std::string runtime_dir;           // "" -> default_runtime_dir()
  uint32_t max_clients = 64;         // 1..4096
  uint64_t ring_bytes = 256 * 1024;  // per ring, power of two, 4 KiB..64 MiB
  // How long the engine keeps polling the rings (pause-spinning, never yielding) after
  // its last request before it parks on epoll, in microseconds; it polls only while
  // requests have recently come closer together than this (docs/design.md §4).
  uint32_t poll_us = 50;
  std::string log_level = "info";   // trace|debug|info|warn|error|critical|off
  std::vector<uid_t> allowed_uids;  // empty: any uid may attach (socket permissions apply)
  std::vector<gid_t> allowed_gids;  // empty: any gid
  std::vector<PoolConfig> pools;
  // Slots of the event ring in the control segment (64 bytes each): a power of two in
  // 2..2^24, or 0 for no ring (no events for kvpool-events or other tools).
  uint32_t event_ring_slots = 65536;

  // Limits that keep one local user from starving the others (the trust boundary).
  // Attached or attaching slots per uid; 0: uid_share_percent of max_clients.
  uint32_t max_clients_per_uid = 0;
  // The share of each pool's blocks (mutable plus distinct registered blocks referenced,
  // summed over all its clients) and, unless max_clients_per_uid says otherwise, of the
  // client slots that one uid may hold: one user never takes everything, the others keep
  // the rest (docs/security.md sizes it). 100: no cap; nor is there one when allowed_uids
  // names a single uid.
  uint32_t uid_share_percent = 87;
  uint32_t max_pending_connections = 64;  // accepted sockets that have not said Hello
  uint32_t max_pending_per_uid = 16;
  uint32_t attach_timeout_ms = 5000;  // Hello to Ready (and accept to Hello)
  pool::OwnerQuota quota;             // per client, in every pool ("quota": {...})

  friend bool operator==(const Config&, const Config&) = default;
};

// The slots one uid may hold (0: no cap), and the blocks of a pool of `num_blocks` it may
// hold (0: no cap), from max_clients_per_uid and uid_share_percent.
uint32_t clients_per_uid(const Config& c);
// Whether uid_share_percent caps anyone: below 100, and more than one uid may attach (an
// allowed_uids of exactly one uid, the single-tenant host, shares with nobody).
bool uid_share_applies(const Config& c);
uint32_t blocks_per_uid(const Config& c, uint32_t num_blocks);

// The built-in default: one host pool "g2" of 1024 blocks (2 layers, outer 2, page 16,
// inner 128, 2-byte dtype, alignment 256), so `kvpoold` with no config runs anywhere.
Config default_config();
// Parses and validates. Unknown fields, wrong types and impossible sizes are errors
// (kConfigError) whose message names the field path, e.g. "pools[0].layout.page_size:
// must be > 0". Missing fields take their defaults; "pools" missing means default pools.
Result<Config> parse_config(const std::string& json_text);
Result<Config> load_config_file(const std::string& path);
// Pretty JSON of a config (round-trips through parse_config).
std::string config_to_json(const Config& config);
// Validates a config built in code (the same checks parse_config applies).
Status validate_config(const Config& config);

}  // namespace kvpool::daemon
