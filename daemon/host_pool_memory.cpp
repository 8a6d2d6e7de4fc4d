#include "daemon/host_pool_memory.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#ifdef KVPOOL_HAVE_NUMA
#include <numa.h>
#include <numaif.h>
#endif

#include "kvpool/core/units.hpp"

namespace kvpool::daemon {
namespace {

constexpr uint64_t kChunk = 256ull << 20;  // pre-fault step: progress granularity
constexpr long kHugetlbfsMagic = 0x958458f6;

std::string free_space(int fd) {
  struct statvfs v {};
  if (::fstatvfs(fd, &v) != 0 || v.f_blocks == 0) return "";
  return " (" + gib_text(static_cast<uint64_t>(v.f_bavail) * v.f_frsize, 2) + " free of " +
         gib_text(static_cast<uint64_t>(v.f_blocks) * v.f_frsize, 2) + ")";
}

// The object: an unnamed memfd (no name in /dev/shm or on the hugetlbfs mount for anyone to
// open, read or squat), mode 0600 so a client's read-only descriptor cannot be re-opened
// read-write through /proc by another user, sealed against resizing once sized.
Result<shm::UniqueFd> create_object(const std::string& name, bool hugetlbfs) {
  unsigned flags = MFD_CLOEXEC | MFD_ALLOW_SEALING;
  if (hugetlbfs) flags |= MFD_HUGETLB;  // the default huge page size, as the mount's
  shm::UniqueFd fd(::memfd_create(name.c_str(), flags));
  if (!fd) return io_error("memfd_create " + name, errno);
  if (::fchmod(fd.get(), 0600) != 0) return io_error("fchmod " + name, errno);
  return fd;
}

Status bind_to_node(void* data, uint64_t bytes, int32_t node) {
#ifdef KVPOOL_HAVE_NUMA
  if (numa_available() < 0)
    return Status(ErrorCode::kConfigError,
                  "numa_node " + std::to_string(node) + ": NUMA is not available on this machine");
  const int max = numa_max_node();
  if (node > max)
    return Status(ErrorCode::kConfigError, "numa_node " + std::to_string(node) +
                                               ": this machine has NUMA nodes 0.." +
                                               std::to_string(max));
  struct bitmask* mask = numa_allocate_nodemask();
  numa_bitmask_setbit(mask, static_cast<unsigned>(node));
  // MPOL_BIND on a shared mapping is the object's policy: every fault, in any process,
  // allocates on `node` (or fails, which the pre-fault below reports).
  const long rc = mbind(data, bytes, MPOL_BIND, mask->maskp, mask->size + 1, 0);
  const int err = errno;
  numa_free_nodemask(mask);
  if (rc != 0) return io_error("mbind to NUMA node " + std::to_string(node), err);
  return Status::ok();
#else
  (void)data;
  (void)bytes;
  return Status(ErrorCode::kConfigError, "numa_node " + std::to_string(node) +
                                             ": kvpoold was built without libnuma "
                                             "(apt install libnuma-dev and rebuild)");
#endif
}

std::string thp_shmem_mode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
  std::string line;
  std::getline(f, line);
  auto open = line.find('['), close = line.find(']');
  return open != std::string::npos && close > open ? line.substr(open + 1, close - open - 1) : "";
}

// Backs [offset, offset + len) now, failing instead of a later SIGBUS. posix_fallocate
// allocates through the object (and honours its NUMA policy, which mbind set) and is about
// twice as fast as faulting the pages in, but it does not see a mapping's advice, so
// transparent huge pages are populated through the mapping (MADV_POPULATE_WRITE; kernels
// before 5.14 answer EINVAL and get posix_fallocate).
Status populate(int fd, std::byte* data, uint64_t offset, uint64_t len, bool* use_fallocate) {
  if (!*use_fallocate) {
    int rc;
    do {
      rc = ::madvise(data + offset, len, MADV_POPULATE_WRITE);
    } while (rc != 0 && errno == EINTR);
    if (rc == 0) return Status::ok();
    if (errno != EINVAL) return Status(ErrorCode::kResourceExhausted, std::strerror(errno));
    *use_fallocate = true;
  }
  int err;
  do {
    err = ::posix_fallocate(fd, static_cast<off_t>(offset), static_cast<off_t>(len));
  } while (err == EINTR);
  if (err != 0) return Status(ErrorCode::kResourceExhausted, std::strerror(err));
  return Status::ok();
}

// A hugetlbfs pool's size: `bytes` rounded up to the mount's page size. kConfigError when
// `dir` is not a hugetlbfs mount.
Result<uint64_t> hugetlbfs_bytes(const std::string& dir, uint64_t bytes) {
  struct statfs fs {};
  if (::statfs(dir.c_str(), &fs) != 0) return io_error("huge_pages directory " + dir, errno);
  if (static_cast<long>(fs.f_type) != kHugetlbfsMagic)
    return Status(ErrorCode::kConfigError,
                  "huge_pages: " + dir + " is not a hugetlbfs mount (mount -t hugetlbfs none " +
                      dir + ", and reserve pages in /proc/sys/vm/nr_hugepages)");
  const uint64_t page = static_cast<uint64_t>(fs.f_bsize);
  return (bytes + page - 1) / page * page;
}

// Backs every page of the mapped pool now, chunk by chunk, so that a shortage fails the
// start with a message that says what to free, not a SIGBUS in a worker later.
Status prefault(HostPoolMemory& m, uint64_t size, const HostPoolPlacement& placement,
                const std::string& where_free, const PrefaultProgress& progress) {
  auto* data = static_cast<std::byte*>(m.segment.data());
  bool use_fallocate = placement.huge_pages != "transparent";
  if (progress) progress(0, size);
  for (uint64_t off = 0; off < size; off += kChunk) {
    const uint64_t len = std::min(kChunk, size - off);
    if (Status st = populate(m.segment.fd(), data, off, len, &use_fallocate); !st.is_ok()) {
      return Status(
          ErrorCode::kResourceExhausted,
          "cannot back " + std::to_string(size) + " bytes of " + m.name + " (stopped at " +
              gib_text(off, 2) + "): " + st.message() + where_free +
              (m.hugetlbfs ? "; reserve more huge pages (/proc/sys/vm/nr_hugepages) or lower "
                             "num_blocks"
               : placement.numa_node >= 0
                   ? "; free memory on NUMA node " + std::to_string(placement.numa_node) +
                         ", or lower num_blocks"
                   : "; free space in /dev/shm or lower num_blocks"));
    }
    if (progress) progress(off + len, size);
  }
  return Status::ok();
}

}  // namespace

Result<HostPoolMemory> create_host_pool_memory(const std::string& shm_name, uint64_t bytes,
                                               const HostPoolPlacement& placement,
                                               const PrefaultProgress& progress) {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page_bytes = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page_bytes > 0 &&
      bytes > static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_bytes))
    return Status(ErrorCode::kResourceExhausted,
                  "cannot back " + std::to_string(bytes) + " bytes: more than this machine's " +
                      "memory (" + gib_text(static_cast<uint64_t>(pages) * page_bytes, 2) +
                      "); lower num_blocks");
  HostPoolMemory m;
  m.hugetlbfs = !placement.huge_pages.empty() && placement.huge_pages != "transparent";
  uint64_t size = bytes;
  if (m.hugetlbfs) {
    auto rounded = hugetlbfs_bytes(placement.huge_pages, bytes);
    if (!rounded) return rounded.status();
    size = *rounded;
    m.name = shm_name + " (hugetlb)";
  } else {
    m.name = shm_name;
  }
  auto fd = create_object(m.name, m.hugetlbfs);
  if (!fd) return fd.status();
  // From here on a failure removes the half-made object, so it holds no memory.
  auto fail = [&m](const Status& st) {
    remove_host_pool_memory(m);
    return st;
  };
  if (::ftruncate(fd->get(), static_cast<off_t>(size)) != 0)
    return fail(io_error("ftruncate " + m.name + " to " + std::to_string(size) + " bytes", errno));
  // Clients get this descriptor: nobody may shrink the pool under everyone's mappings (the
  // next access would SIGBUS every worker) or grow it.
  if (::fcntl(fd->get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    return fail(io_error("seal " + m.name, errno));
  const std::string where_free = free_space(fd->get());
  auto seg = shm::Segment::map_fd(std::move(fd.value()), /*writable=*/true);
  if (!seg) return fail(seg.status());
  m.segment = std::move(seg.value());
  auto* data = static_cast<std::byte*>(m.segment.data());

  if (placement.numa_node >= 0) {
    if (Status st = bind_to_node(data, size, placement.numa_node); !st.is_ok()) return fail(st);
  }
  if (placement.huge_pages == "transparent") {
    const std::string mode = thp_shmem_mode();
    if (mode == "never" || mode == "deny")
      return fail(Status(ErrorCode::kConfigError,
                         "huge_pages \"transparent\": shared-memory THP is '" + mode +
                             "' in /sys/kernel/mm/transparent_hugepage/shmem_enabled (set it "
                             "to advise, or use a hugetlbfs mount)"));
    if (::madvise(data, size, MADV_HUGEPAGE) != 0)
      return fail(io_error("madvise(MADV_HUGEPAGE) on " + m.name, errno));
  }

  if (Status st = prefault(m, size, placement, where_free, progress); !st.is_ok()) return fail(st);
  return m;
}

void remove_host_pool_memory(const HostPoolMemory& m) {
  // A memfd has no name: its memory goes with the last descriptor and mapping.
  (void)m;
}

}  // namespace kvpool::daemon
