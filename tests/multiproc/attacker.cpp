// A hostile local client for the trust-boundary tests: one attack per run, on a real
// kvpoold, with libkvpool's transport (it needs the raw parts: the lease word, the pool
// descriptor), never the daemon's code.
//
//   kvpool_attacker --instance I --runtime-dir D <attack>
//     liar      attach, take 3 mutable blocks, overwrite the lease's futex word with 1 (a
//               tid that is not ours: init's), print "LIED slot=<n>" and exit at once, so
//               that only the pidfd can tell the daemon this client is gone
//     truncate  attach, then try to ftruncate and grow the host pool's descriptor; prints
//               "TRUNCATE shrink=<errno name> grow=<errno name>" and waits for EOF on stdin
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "connection.hpp"

using namespace kvpool;

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
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--instance" && i + 1 < argc) {
      instance = argv[++i];
    } else if (a == "--runtime-dir" && i + 1 < argc) {
      runtime_dir = argv[++i];
    } else {
      attack = a;
    }
  }
  detail::ConnectionOptions o;
  o.runtime_dir = runtime_dir;
  auto c = detail::Connection::open(instance, o);
  if (!c) die(c.status().to_string());
  detail::Connection& conn = **c;

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
  die("unknown attack '" + attack + "'");
}
