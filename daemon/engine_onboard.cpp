// kMatchOnboard (issue 28 item 6): a match whose prefix continues on the pool's disk tier.
// The host part is matched at once (the client's references taken, as kMatch); the disk
// part is read into new host blocks by the tier (daemon/disk/), and the answer goes out
// when those reads complete and their checksums held: the engine serves every other
// request meanwhile, this client's too (answers carry their correlation id).
//
// An answer that finds its client's response ring full waits in undelivered_ (in order)
// and goes out before that client's next request is read, so a client that stops reading
// stalls only itself.
#include <spdlog/spdlog.h>

#include <cstring>

#include "daemon/engine.hpp"
#include "kvpool/shm/fields.hpp"

namespace kvpool::daemon {

using shm::SlotState;

// The claimed answer (header and host refs, written by the dispatcher) is taken back off
// the ring before the tier may call back: an answer the callback delivers must not sit
// behind a claim that is never published.
bool Engine::defer_match_onboard(Session& s, const Dispatcher::Request& req,
                                 std::span<const std::byte> answer) {
  const uint32_t pool = req.rq.pool;
  if (pool >= disks_.size() || !disks_[pool] || answer.size() < sizeof(proto::ResponseHeader))
    return false;
  disk::DiskTier& tier = *disks_[pool];
  proto::ResponseHeader h{};
  std::memcpy(&h, answer.data(), sizeof(h));
  if (h.status != static_cast<uint16_t>(ErrorCode::kOk) || h.count >= req.rq.count) return false;
  // The engine's private, 8-aligned copy of the record (drain()).
  const auto* hashes = reinterpret_cast<const uint64_t*>(req.items);
  const std::span<const uint64_t> rest(hashes + h.count, req.rq.count - h.count);
  if (tier.disk_prefix(rest) == 0) return false;

  DeferredMatch m;
  m.slot = s.slot;
  m.generation = s.generation;
  m.correlation_id = req.rq.correlation_id;
  m.pool = pool;
  m.host.resize(h.count);
  // No host prefix leaves m.host without storage, and memcpy from/to null is undefined even
  // for 0 bytes (UBSan's nonnull check).
  if (h.count != 0)
    std::memcpy(m.host.data(), answer.data() + sizeof(h), h.count * sizeof(pool::BlockRef));
  m.rest.assign(rest.begin(), rest.end());
  std::vector<std::byte> host_answer(answer.begin(), answer.end());
  s.responses->cancel_claims();
  const uint64_t cookie = next_deferred_++;
  deferred_.emplace(cookie, std::move(m));
  if (!tier.start_onboard(cookie, rest, static_cast<uint32_t>(rest.size()))) {
    // No memory to read into, or the reads were refused: what host memory gave.
    deferred_.erase(cookie);
    deliver(s, std::move(host_answer));
  }
  return true;
}

// The tier registered `good` blocks of the onboard and holds them until this returns: the
// client's references are taken by matching what follows the host part again (the onboarded
// blocks, and any host block after them: the longest prefix over both tiers).
void Engine::on_onboard_done(uint64_t cookie, std::span<const uint64_t> good) {
  auto it = deferred_.find(cookie);
  if (it == deferred_.end()) return;
  DeferredMatch m = std::move(it->second);
  deferred_.erase(it);
  Session& s = sessions_[m.slot];
  // A client that went meanwhile had its host references reclaimed with the rest of what it
  // held; the onboarded blocks stay registered for whoever asks next.
  if (s.state != SlotState::kAttached || s.generation != m.generation || !s.responses) return;
  std::vector<pool::BlockRef> refs = std::move(m.host);
  const size_t host = refs.size();
  refs.resize(host + m.rest.size());
  auto more = pools_[m.pool].core.match(m.slot, m.rest, refs.data() + host);
  refs.resize(host + (more ? *more : 0));
  if (!more)
    spdlog::warn("onboard of pool '{}' for slot {}: {} blocks read, not handed over: {}",
                 pools_[m.pool].config.name, m.slot, good.size(), more.status().message());
  proto::ResponseHeader rh{};
  rh.correlation_id = m.correlation_id;
  rh.status = static_cast<uint16_t>(ErrorCode::kOk);
  rh.count = static_cast<uint32_t>(refs.size());
  std::vector<std::byte> answer(sizeof(rh) + refs.size() * sizeof(pool::BlockRef));
  std::memcpy(answer.data(), &rh, sizeof(rh));
  if (!refs.empty())
    std::memcpy(answer.data() + sizeof(rh), refs.data(), refs.size() * sizeof(pool::BlockRef));
  sessions_.bump_slot(s, &shm::SlotInfo::match_hits, refs.size());
  deliver(s, std::move(answer));
}

void Engine::deliver(Session& s, std::vector<std::byte> answer) {
  auto& q = undelivered_[s.slot];
  if (q.empty() && put_answer(s, answer)) return;
  q.push_back({s.generation, std::move(answer)});
}

bool Engine::put_answer(Session& s, std::span<const std::byte> answer) {
  auto claim = s.responses->try_claim(
      proto::answer_type(static_cast<uint32_t>(proto::Opcode::kMatchOnboard)),
      static_cast<uint32_t>(answer.size()));
  if (!claim) {
    sessions_.disconnect(s, "response ring corrupt: " + claim.status().message());
    return true;  // nothing more goes to this client
  }
  if (*claim == nullptr) return false;
  std::memcpy(*claim, answer.data(), answer.size());
  publish_answers(s);
  return true;
}

bool Engine::flush_undelivered(Session& s) {
  auto& q = undelivered_[s.slot];
  while (!q.empty()) {
    if (q.front().generation != s.generation) {  // a previous client of this slot's
      q.pop_front();
      continue;
    }
    if (!put_answer(s, q.front().bytes)) return false;
    if (s.state != SlotState::kAttached) {  // cut off while answering
      q.clear();
      return true;
    }
    q.pop_front();
  }
  return true;
}

}  // namespace kvpool::daemon
