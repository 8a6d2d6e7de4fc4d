// The holder's side of a fetch: pin, send, unpin (service.hpp).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "kvpool/core/checksum.hpp"
#include "service.hpp"
#include "service_state.hpp"

namespace kvpool::peer {

void Service::reply_fetch(Conn& c, uint64_t id, ErrorCode code, const std::string& why,
                          uint32_t count, uint64_t block_bytes) {
  FetchReply r{};
  r.id = id;
  r.epoch = epoch_;
  r.code = static_cast<uint32_t>(code);
  r.count = count;
  r.block_bytes = block_bytes;
  std::strncpy(r.message, why.c_str(), sizeof(r.message) - 1);
  if (Status s = send_control(c, kAmFetchReply, &r, sizeof(r)); !s.is_ok())
    close_conn(c, s.message());
}

void Service::on_fetch(Conn& c, const FetchRequest& rq, const uint64_t* hashes) {
  const std::string pool_name(name_of(rq.pool));
  auto lp = std::find_if(pools_.begin(), pools_.end(),
                         [&](const LocalPool& p) { return p.name == pool_name && p.exported; });
  // One answer for "no such pool" and "not exported": a peer learns nothing of the others.
  if (lp == pools_.end())
    return reply_fetch(c, rq.id, ErrorCode::kPermissionDenied,
                       "pool '" + pool_name + "' is not exported by " + options_.name);
  if (rq.fingerprint != lp->fingerprint)
    return reply_fetch(c, rq.id, ErrorCode::kVersionMismatch,
                       "pool '" + pool_name + "' has another layout or hash scheme on " +
                           options_.name);
  if (serves_.size() >= options_.max_serves)
    return reply_fetch(c, rq.id, ErrorCode::kResourceExhausted,
                       std::to_string(serves_.size()) + " transfers in flight on " + options_.name);
  const uint32_t deadline_ms = std::min(rq.deadline_ms, options_.max_deadline_ms);
  // The pins: one match reference per block, this transfer's only.
  auto pins = lp->pool->match_sequence_hashes({hashes, rq.count});
  if (!pins) return reply_fetch(c, rq.id, pins.status().code(), pins.status().message());
  const uint64_t block_bytes = lp->layout->block_bytes();
  auto serve = std::make_unique<Serve>();
  serve->id = next_id_++;
  serve->conn_id = c.id;
  serve->peer = c.key();
  serve->deadline_ns = mono_ns() + uint64_t{deadline_ms} * 1'000'000ull;
  serve->pins = std::move(*pins);
  serve->bytes = block_bytes;
  const auto n = static_cast<uint32_t>(serve->pins.size());
  serve->headers.resize(n);
  reply_fetch(c, rq.id, ErrorCode::kOk, "", n, block_bytes);
  PeerFigures& fig = metrics_.of(c.key());
  ++fig.serves;
  Serve& s = *serve;
  serves_[s.id] = std::move(serve);
  for (uint32_t i = 0; i < n && c.state == Conn::State::kReady; ++i) {
    const ImmutableBlock& b = s.pins[i];
    auto addr = b.address(0, 0);
    if (!addr) break;  // the local daemon went away; the fetcher's deadline covers it
    const std::byte* base = *addr - lp->layout->offset_unchecked(b.block_id(), 0, 0);
    BlockHeader& h = s.headers[i];
    h.id = rq.id;
    h.epoch = epoch_;
    h.index = i;
    h.sequence_hash = b.sequence_hash();
    h.checksum = block_checksum(base, *lp->layout, b.block_id());
    // The chain: block i's parent is the hash before it; the first one's, the caller knows
    // (it asked for a prefix continuing its own), so it is sent as "has a parent" only when
    // the caller's list starts mid-sequence, which the caller tells by its own match.
    h.has_parent = i > 0 ? 1 : 0;
    h.parent_hash = i > 0 ? hashes[i - 1] : 0;
    h.block_hash = 0;
    auto* op = new OpContext{OpContext::kBlockSend, this, s.id, i, {}};
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                     UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_AM_SEND_FLAG_REPLY;
    p.cb.send = &Service::send_callback;
    p.user_data = op;
    // Straight from the pinned block: UCX reads it (eager copy or rendezvous zero-copy)
    // until the send completes; the pin holds until then.
    void* r = ucp_am_send_nbx(c.ep, kAmBlock, &h, sizeof(h), *addr, block_bytes, &p);
    if (UCS_PTR_IS_PTR(r)) {
      ++s.sending;
    } else {
      delete op;
      if (UCS_PTR_STATUS(r) != UCS_OK) break;
      ++fig.blocks_served;
      fig.bytes_served += block_bytes;
    }
  }
  if (s.sending == 0) serve_done(s.id);
}

void Service::on_block_sent(uint64_t serve_id, ucs_status_t st) {
  auto it = serves_.find(serve_id);
  if (it == serves_.end()) return;
  Serve& s = *it->second;
  --s.sending;
  if (st == UCS_OK) {
    PeerFigures& fig = metrics_.of(s.peer);
    ++fig.blocks_served;
    fig.bytes_served += s.bytes;
  }
  if (s.sending == 0) serve_done(serve_id);
}

// The transfer is over (sent, failed or cut off): its pins go back.
void Service::serve_done(uint64_t serve_id) { serves_.erase(serve_id); }

}  // namespace kvpool::peer
