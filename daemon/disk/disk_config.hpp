// A host pool's disk tier, as configured ("pools[i].disk", DESIGN §6a, docs/disk-tier.md).
// Plain data; config.cpp reads and checks it like every other field.
#pragma once

#include <cstdint>
#include <string>

namespace kvpool::daemon {

// "direct_io": auto probes O_DIRECT and falls back to buffered I/O (logged once) where the
// file system or the pool's alignment refuses it; on refuses to start without it; off never
// tries it.
enum class DirectIo : uint8_t { kAuto, kOn, kOff };
// "admit": all writes every newly registered block behind; second_hit only a block whose
// hash was registered or matched once before (spares SSD wear on one-off prompts).
enum class DiskAdmit : uint8_t { kAll, kSecondHit };
// "io": auto uses io_uring and falls back to I/O threads (logged once) where the kernel
// refuses it (a seccomp profile); io_uring refuses to start without it; threads never
// tries it (a kernel whose io_uring the operator does not trust).
enum class DiskIoEngine : uint8_t { kAuto, kIoUring, kThreads };

struct DiskConfig {
  bool enabled = false;  // the pool has a "disk" object
  // The slot file; "" -> <state dir>/<instance>-<pool>.slots (default_disk_dir()).
  std::string path;
  // Size: slots (one block each), or bytes (slots = bytes / slot size); exactly one is set.
  uint64_t num_blocks = 0;
  uint64_t bytes = 0;
  DirectIo direct_io = DirectIo::kAuto;
  // Bytes of writes and reads in flight at once (>= one slot); 0 -> 64 MiB.
  uint64_t max_inflight_bytes = 0;
  DiskAdmit admit = DiskAdmit::kAll;
  DiskIoEngine io = DiskIoEngine::kAuto;

  friend bool operator==(const DiskConfig&, const DiskConfig&) = default;
};

// The unit's StateDirectory= ($STATE_DIRECTORY when systemd sets it), else /var/lib/kvpool.
std::string default_disk_dir();
// The file a pool's tier uses when "path" is not given.
std::string default_disk_path(const std::string& instance, const std::string& pool);

inline constexpr uint64_t kDefaultDiskInflightBytes = uint64_t{64} << 20;

}  // namespace kvpool::daemon
