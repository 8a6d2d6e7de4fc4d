// Pool::match_sequence_hashes with PeerFetchOptions: the local match (host memory and disk
// tier), then what is missing asked of kvpool-peer over its Unix socket
// (kvpool/peer/local_request.hpp), then a local match of what it fetched. The socket stays open
// until that match holds the blocks: kvpool-peer keeps them registered (a reference each) until we
// hang up.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <thread>

#include "client_impl.hpp"
#include "kvpool/client.hpp"
#include "kvpool/core/paths.hpp"
#include "kvpool/peer/local_request.hpp"
#include "kvpool/shm/unix_socket.hpp"

namespace kvpool {
namespace {

using Clock = std::chrono::steady_clock;

// Asks kvpool-peer for `hashes`; returns how many leading ones are registered here now, and
// the open socket (which keeps them so) in *keep. 0 on any failure of the peer path.
uint32_t ask_peer(const detail::ClientImpl& c, const std::string& pool,
                  std::span<const SequenceHash> hashes, bool has_parent, SequenceHash parent,
                  const PeerFetchOptions& o, Clock::time_point until, shm::UniqueFd* keep) {
  std::string dir = c.runtime_dir();
  if (dir.empty()) {
    auto found = find_runtime_dir(c.instance());
    if (!found) return 0;
    dir = *found;
  }
  auto fd = shm::connect_unix(peer::peer_socket_path(dir, c.instance()));
  if (!fd) return 0;  // no kvpool-peer on this host: the peer tier is off
  const auto n = static_cast<uint32_t>(std::min<size_t>(hashes.size(), peer::kMaxFetchHashes));
  std::vector<std::byte> msg(sizeof(peer::LocalRequestHeader) + n * sizeof(SequenceHash));
  peer::LocalRequestHeader h{};
  h.magic = peer::kLocalRequestMagic;
  h.version = peer::kLocalVersion;
  // What is left of the caller's deadline after the local match.
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
  h.deadline_ms = static_cast<uint32_t>(std::clamp<int64_t>(ms, 1, 60000));
  h.count = n;
  peer::copy_name(h.pool, pool);
  peer::copy_name(h.holder, o.holder);
  h.parent = has_parent ? parent : 0;
  h.has_parent = has_parent ? 1 : 0;
  std::memcpy(msg.data(), &h, sizeof(h));
  std::memcpy(msg.data() + sizeof(h), hashes.data(), n * sizeof(SequenceHash));
  if (!shm::send_message(fd->get(), msg).is_ok()) return 0;
  // kvpool-peer answers by the deadline; a little more for the answer's own way here.
  const auto left = until - Clock::now() + std::chrono::milliseconds(50);
  const int wait_ms = static_cast<int>(
      std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(left).count()));
  peer::LocalAnswer a{};
  auto got =
      shm::recv_message(fd->get(), {reinterpret_cast<std::byte*>(&a), sizeof(a)}, nullptr, wait_ms);
  if (!got || *got != sizeof(a) || a.magic != peer::kLocalAnswerMagic ||
      a.code != static_cast<uint32_t>(ErrorCode::kOk))
    return 0;
  *keep = std::move(*fd);
  return std::min(a.fetched, n);
}

Result<std::vector<ImmutableBlock>> match_with_peers(Pool pool,
                                                     const std::shared_ptr<detail::ClientImpl>& c,
                                                     std::span<const SequenceHash> hashes,
                                                     const PeerFetchOptions& o) {
  const auto until = Clock::now() + o.deadline;
  // This host's tiers go first: host memory, then the pool's disk tier (an onboard match;
  // a pool without one answers it as a plain match), so a peer is asked only for what
  // neither holds. A kvpoold older than this library does not know the onboard match.
  MatchOptions onboard;
  onboard.onboard = true;
  auto local = pool.match_sequence_hashes(hashes, onboard);
  if (!local && local.status().code() == ErrorCode::kProtocolError)
    local = pool.match_sequence_hashes(hashes);
  if (!local || local->size() >= hashes.size() || hashes.empty()) return local;
  const size_t have = local->size();
  shm::UniqueFd keep;
  const SequenceHash parent = have > 0 ? hashes[have - 1] : 0;
  const uint32_t fetched =
      ask_peer(*c, pool.name(), hashes.subspan(have), have > 0, parent, o, until, &keep);
  if (fetched == 0) return local;
  auto more = pool.match_sequence_hashes(hashes.subspan(have, fetched));
  if (more)
    for (auto& b : *more) local->push_back(std::move(b));
  return local;  // `keep` closes now: kvpool-peer drops its references, ours hold the blocks
}

}  // namespace

Result<std::vector<ImmutableBlock>> Pool::match_sequence_hashes(
    std::span<const SequenceHash> hashes, const PeerFetchOptions& peers) {
  return match_with_peers(*this, client_, hashes, peers);
}

std::future<Result<std::vector<ImmutableBlock>>> Pool::match_sequence_hashes_async(
    std::span<const SequenceHash> hashes, const PeerFetchOptions& peers) {
  std::vector<SequenceHash> h(hashes.begin(), hashes.end());
  return std::async(std::launch::async, [pool = *this, c = client_, h = std::move(h), peers]() {
    return match_with_peers(pool, c, h, peers);
  });
}

}  // namespace kvpool
