// The disk tier's slot file (slot_format.hpp): created or reopened, preallocated, probed for
// O_DIRECT, and scanned for the slots a previous daemon left (the disk index is rebuilt
// from the file at every start: after kill -9, without the fd store, after a reboot).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/disk/disk_config.hpp"
#include "daemon/disk/slot_format.hpp"
#include "kvpool/core/status.hpp"
#include "kvpool/shm/unique_fd.hpp"

namespace kvpool::daemon::disk {

struct SlotFileOptions {
  std::string pool;  // for messages
  std::string path;
  uint64_t num_slots = 0;
  uint64_t slot_bytes = 0;
  uint64_t layout_fingerprint = 0;
  uint32_t hash_scheme = 0;
  DirectIo direct_io = DirectIo::kAuto;
  // The pool's block regions allow O_DIRECT in place (4 KiB aligned addresses and sizes).
  bool memory_aligned = false;
};

// A slot a previous writer completed: its header passed every check.
struct FoundSlot {
  uint64_t slot;
  SlotHeader header;
};

class SlotFile {
 public:
  // Opens `path` (mode 0600, parent directory made 0700 when missing), reinitialises it
  // when it holds another format, layout, scheme or size (logging why), reserves every
  // byte with posix_fallocate (a full file system fails here, naming path and bytes) and
  // returns the slots found valid in `found`.
  static Result<SlotFile> open(const SlotFileOptions& options, std::vector<FoundSlot>* found);

  int fd() const { return fd_.get(); }
  bool direct() const { return direct_; }
  uint64_t generation() const { return generation_; }
  uint64_t slot_offset(uint64_t slot) const { return disk::slot_offset(slot_bytes_, slot); }
  uint64_t slot_bytes() const { return slot_bytes_; }
  const std::string& path() const { return path_; }
  // Why the file was reinitialised at open ("" when its slots were kept).
  const std::string& reinitialised() const { return reinit_reason_; }

 private:
  shm::UniqueFd fd_;  // O_DIRECT when direct_
  bool direct_ = false;
  uint64_t generation_ = 0;
  uint64_t slot_bytes_ = 0;
  std::string path_;
  std::string reinit_reason_;
};

}  // namespace kvpool::daemon::disk
