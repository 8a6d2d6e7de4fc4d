// Unix-domain SOCK_SEQPACKET helpers for the attach handshake (docs/design.md §5): message
// boundaries are kept, descriptors travel with SCM_RIGHTS, SO_PEERCRED names the peer, and
// the socket reports hang-up the moment the peer process dies. Every descriptor is
// close-on-exec, so a child a worker spawns cannot keep a connection (and so the peer's
// death) hidden.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "kvpool/core/status.hpp"
#include "kvpool/shm/unique_fd.hpp"

namespace kvpool::shm {

// Most descriptors one message carries; a message with more is refused. The Welcome is the
// largest: control segment, client segment, doorbell, then a registry segment and a memory
// descriptor for each of up to 16 pools (daemon/sessions_attach.cpp asserts it fits).
inline constexpr size_t kMaxFdsPerMessage = 40;

// Binds and listens (non-blocking, for an epoll loop). A socket file left by a dead daemon
// is removed first; a live listener on the path, or a path that is not a socket, is an
// error. kInvalidArgument when the path does not fit in sun_path.
Result<UniqueFd> listen_unix(const std::string& path);

// Connects (blocking descriptor). kNotFound "no daemon listening on <path>" when nothing
// listens there.
Result<UniqueFd> connect_unix(const std::string& path);

// Accepts one pending connection without blocking. The new descriptor is close-on-exec
// and non-blocking, so a peer that stops reading can never block the daemon. Returns an
// invalid UniqueFd when no connection is pending.
Result<UniqueFd> accept_unix(int listen_fd);

// Sends one message with `fds` attached (each is duplicated into the receiver). Never
// raises SIGPIPE. An empty message is refused: recv_message reads 0 bytes as hang-up.
// On a non-blocking descriptor a full peer buffer gives kResourceExhausted.
Status send_message(int fd, std::span<const std::byte> bytes, std::span<const int> fds = {});

// Waits up to timeout_ms (negative: no limit) for one message and copies it into `buf`.
// Returns its size, or 0 when the peer hung up (orderly or by dying). Received
// descriptors are close-on-exec and appended to *fds_out; with fds_out == nullptr any
// descriptor received is closed and reported as kProtocolError. A message longer than
// `buf`, or with more descriptors than kMaxFdsPerMessage, is kProtocolError (nothing of it
// is kept). kTimeout when nothing arrives in time.
Result<size_t> recv_message(int fd, std::span<std::byte> buf, std::vector<UniqueFd>* fds_out,
                            int timeout_ms);

struct PeerCred {
  pid_t pid;
  uid_t uid;
  gid_t gid;                  // its effective gid
  std::vector<gid_t> groups;  // its supplementary groups (SO_PEERGROUPS)
  // Whether `g` is its gid or one of its supplementary groups.
  bool in_group(gid_t g) const;
};

// The peer's identity as the kernel recorded it at connect time (SO_PEERCRED and
// SO_PEERGROUPS), translated into our PID namespace.
Result<PeerCred> peer_credentials(int fd);

// A descriptor that becomes readable when process `pid` exits. Take the pid from
// peer_credentials while the socket is still connected, so it cannot have been reused.
Result<UniqueFd> pidfd_open(pid_t pid);

}  // namespace kvpool::shm
