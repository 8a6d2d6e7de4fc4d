// A hostile local client for the trust-boundary tests: one attack per run, on a real
// kvpoold, with the raw-protocol client of tests/support (it needs the raw parts: the lease
// word, the pool descriptor), never the daemon's code.
//
//   kvpool_attacker --instance I --runtime-dir D <attack>
//     liar      attach, take 3 mutable blocks, overwrite the lease's futex word with 1 (a
//               tid that is not ours: init's), print "LIED slot=<n>" and exit at once, so
//               that only the pidfd can tell the daemon this client is gone
//     truncate  attach, then try to ftruncate and grow the host pool's descriptor; prints
//               "TRUNCATE shrink=<errno name> grow=<errno name>" and waits for EOF on stdin
//     scribble --block N
//               attach, overwrite the first bytes of every region of block N of pool 0
//               through the read-write mapping every client of a host pool has (the
//               cache-poisoning write that checksums detect), print "SCRIBBLED block=N" and
//               wait for EOF on stdin
//     reclaim --epoch E --slot S --slot-generation G --block N --generation X
//               after a restart, claim another process's previous slot's block N (one
//               reference) with kReclaim; print "RECLAIM code=<error name> lost=<n>"
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "support/raw_connection.hpp"

using namespace kvpool;
using testsupport::RawConnection;

namespace {

[[noreturn]] void die(const std::string& what) {
  std::printf("ERR %s\n", what.c_str());
  std::fflush(stdout);
  std::exit(1);
}

std::string errno_name(int rc) {
  if (rc == 0) return "none";
  switch (errno) {
    case EPERM:
      return "EPERM";
    case EACCES:
      return "EACCES";
    case EBUSY:
      return "EBUSY";
    default:
      return std::to_string(errno);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string instance, runtime_dir, attack;
  long block = -1;
  uint64_t epoch = 0, slot = 0, slot_generation = 0, generation = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--block" && i + 1 < argc) {
      block = std::stol(argv[++i]);
    } else if (a == "--epoch" && i + 1 < argc) {
      epoch = std::stoull(argv[++i]);
    } else if (a == "--slot" && i + 1 < argc) {
      slot = std::stoull(argv[++i]);
    } else if (a == "--slot-generation" && i + 1 < argc) {
      slot_generation = std::stoull(argv[++i]);
    } else if (a == "--generation" && i + 1 < argc) {
      generation = std::stoull(argv[++i]);
    } else if (a == "--instance" && i + 1 < argc) {
      instance = argv[++i];
    } else if (a == "--runtime-dir" && i + 1 < argc) {
      runtime_dir = argv[++i];
    } else {
      attack = a;
    }
  }
  testsupport::RawOptions o;
  o.runtime_dir = runtime_dir;
  auto c = RawConnection::open(instance, o);
  if (!c) die(c.status().to_string());
  RawConnection& conn = **c;

  if (attack == "liar") {
    auto r = conn.call(proto::Opcode::kAllocate, 0, 3, nullptr, 0);
    if (!r || r->code != ErrorCode::kOk) die("allocate failed");
    // glibc's robust mutex keeps the owner's tid in __lock; 1 is init's, never ours.
    __atomic_store_n(&conn.client_header()->lease.m.__data.__lock, 1, __ATOMIC_RELEASE);
    std::printf("LIED slot=%u\n", conn.slot());
    std::fflush(stdout);
    ::_exit(0);  // no clean detach: the lease thread never gives the word back
  }
  if (attack == "truncate") {
    const int fd = conn.pools().at(0).data.fd();
    struct stat st {};
    if (::fstat(fd, &st) != 0) die("fstat");
    const std::string shrink = errno_name(::ftruncate(fd, 0));
    const std::string grow = errno_name(::ftruncate(fd, st.st_size * 2));
    std::printf("TRUNCATE shrink=%s grow=%s\n", shrink.c_str(), grow.c_str());
    std::fflush(stdout);
    std::string line;
    while (std::getline(std::cin, line)) {
    }
    return 0;
  }
  if (attack == "scribble") {
    const testsupport::RawPool& pool = conn.pools().at(0);
    if (block < 0 || static_cast<uint64_t>(block) >= pool.layout.config().num_blocks)
      die("scribble needs --block N within the pool");
    auto* base = static_cast<std::byte*>(pool.data.data());
    for (uint32_t l = 0; l < pool.layout.config().num_layers; ++l) {
      for (uint32_t o = 0; o < pool.layout.config().outer_dim; ++o) {
        std::byte* p = base + pool.layout.offset_unchecked(static_cast<uint32_t>(block), l, o);
        // Other processes read these bytes: plain stores would be a data race in C++ terms.
        for (int k = 0; k < 8; ++k)
          std::atomic_ref<std::byte>(p[k]).store(std::byte{0xEE}, std::memory_order_relaxed);
      }
    }
    std::atomic_thread_fence(std::memory_order_release);
    std::printf("SCRIBBLED block=%ld\n", block);
    std::fflush(stdout);
    std::string line;
    while (std::getline(std::cin, line)) {
    }
    return 0;
  }
  if (attack == "reclaim") {
    struct {
      proto::ReclaimHeader h;
      proto::ReclaimItem item;
    } rq{{epoch, static_cast<uint32_t>(slot), static_cast<uint32_t>(slot_generation),
          proto::kReclaimFinal, 0},
         {{static_cast<uint32_t>(block), static_cast<uint32_t>(generation)}, 1, 0}};
    auto r = conn.call(proto::Opcode::kReclaim, 0, 1, &rq, sizeof(rq));
    if (!r) die(r.status().to_string());
    std::printf("RECLAIM code=%s lost=%zu\n", std::string(error_code_name(r->code)).c_str(),
                r->refs.size());
    std::fflush(stdout);
    return 0;
  }
  die("unknown attack '" + attack + "'");
}
