// The holder's side of a fetch: pin, send, unpin (service.hpp).
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "kvpool/core/checksum.hpp"
#include "service.hpp"
#include "service_state.hpp"

namespace kvpool::peer {
namespace {
// Bytes of one transfer in flight at once (at least 2 blocks, at most 32): enough to keep a
// link busy, few enough that blocks complete in order, a few at a time.
constexpr uint64_t kSendWindowBytes = 4ull << 20;
uint32_t send_window(uint64_t block_bytes) {
  return static_cast<uint32_t>(std::clamp<uint64_t>(kSendWindowBytes / block_bytes, 2, 32));
}

// The checksum a served block travels with: the one it was registered with (kvpoold's
// arena), where it has one. The fetcher hashes what arrives and compares, so a block whose
// bytes changed here after it was registered, in flight or on arrival is refused all the
// same, and this side need not read the bytes once more to hash them (12-14% of
// kvpool-peer's CPU where CPU bounds the bandwidth). A block registered without one is
// hashed here: then its bytes as they are now are the only record there is.
uint64_t served_checksum(const LocalPool& lp, const ImmutableBlock& b, const std::byte* base) {
  if (auto registered = lp.pool->registered_checksum(b); registered && *registered != kNoChecksum)
    return *registered;
  return block_checksum(base, *lp.layout, b.block_id());
}
}  // namespace

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
    return reply_fetch(
        c, rq.id, ErrorCode::kVersionMismatch,
        "pool '" + pool_name + "' has another layout or hash scheme on " + options_.name);
  if (serves_.size() + onboards_.size() >= options_.max_serves)
    return reply_fetch(c, rq.id, ErrorCode::kResourceExhausted,
                       std::to_string(serves_.size() + onboards_.size()) +
                           " transfers in flight on " + options_.name);
  const uint32_t deadline_ms = std::min(rq.deadline_ms, options_.max_deadline_ms);
  const uint64_t deadline_ns = mono_ns() + uint64_t{deadline_ms} * 1'000'000ull;
  const auto pool = static_cast<uint32_t>(lp - pools_.begin());
  // The pins: one match reference per block, this transfer's only. Host memory first, here
  // (a round trip to kvpoold, microseconds).
  auto pins = lp->pool->match_sequence_hashes({hashes, rq.count});
  if (!pins) return reply_fetch(c, rq.id, pins.status().code(), pins.status().message());
  if (pins->size() == rq.count) return begin_serve(c, rq, pool, std::move(*pins), deadline_ns);
  // Host memory ends the prefix early: the rest may be on the pool's disk tier. The onboard
  // match takes the host part again with the rest, so these pins go.
  pins->clear();
  start_onboard(c, rq, pool, std::vector<uint64_t>(hashes, hashes + rq.count), deadline_ns);
}

// The onboard match waits for the disk (kvpoold reads the slots into host blocks and
// verifies them): a thread of its own waits, so this thread goes on moving other transfers.
// A pool without a disk tier answers it as a plain match.
void Service::start_onboard(Conn& c, const FetchRequest& rq, uint32_t pool,
                            std::vector<uint64_t> hashes, uint64_t deadline_ns) {
  auto ob = std::make_unique<Onboard>();
  ob->conn_id = c.id;
  ob->request = rq;
  ob->pool = pool;
  ob->deadline_ns = deadline_ns;
  std::promise<Result<std::vector<ImmutableBlock>>> done;
  ob->pins = done.get_future();
  ob->thread = std::thread([p = *pools_[pool].pool, h = std::move(hashes), done = std::move(done),
                            fd = onboard_fd_.get()]() mutable {
    MatchOptions mo;
    mo.onboard = true;
    done.set_value(p.match_sequence_hashes(h, mo));
    // After the value: on_onboarded, woken by this, finds the future ready.
    const uint64_t one = 1;
    (void)!::write(fd, &one, sizeof(one));  // onboard_fd_ outlives every onboard (~Service)
  });
  onboards_[next_id_++] = std::move(ob);
}

// Some onboard thread finished: serve what each finished one pinned, if its fetcher is
// still there and waiting.
void Service::on_onboarded() {
  uint64_t n = 0;
  (void)!::read(onboard_fd_.get(), &n, sizeof(n));
  const uint64_t now = mono_ns();
  for (auto it = onboards_.begin(); it != onboards_.end();) {
    Onboard& ob = *it->second;
    if (ob.pins.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      ++it;
      continue;
    }
    auto pins = ob.pins.get();
    const FetchRequest rq = ob.request;
    const uint32_t pool = ob.pool;
    const uint64_t deadline_ns = ob.deadline_ns;
    auto c = conns_.find(ob.conn_id);
    it = onboards_.erase(it);
    // Gone, or past the fetch's deadline (the fetcher no longer takes blocks): the pins go.
    if (c == conns_.end() || c->second->state != Conn::State::kReady || now >= deadline_ns) {
      if (c != conns_.end() && now >= deadline_ns) ++metrics_.of(c->second->key()).serve_timeouts;
      continue;
    }
    if (!pins) {
      reply_fetch(*c->second, rq.id, pins.status().code(), pins.status().message());
      continue;
    }
    begin_serve(*c->second, rq, pool, std::move(*pins), deadline_ns);
  }
}

void Service::begin_serve(Conn& c, const FetchRequest& rq, uint32_t pool,
                          std::vector<ImmutableBlock> pins, uint64_t deadline_ns) {
  auto serve = std::make_unique<Serve>();
  serve->id = next_id_++;
  serve->conn_id = c.id;
  serve->peer = c.key();
  serve->deadline_ns = deadline_ns;
  serve->pins = std::move(pins);
  serve->bytes = pools_[pool].layout->block_bytes();
  const auto n = static_cast<uint32_t>(serve->pins.size());
  serve->headers.resize(n);
  reply_fetch(c, rq.id, ErrorCode::kOk, "", n, serve->bytes);
  ++metrics_.of(c.key()).serves;
  serve->pool = pool;
  serve->request_id = rq.id;
  Serve& s = *serve;
  serves_[s.id] = std::move(serve);
  // The sends (and the checksum of a block registered without one) read every page of
  // these blocks: map them in one call (prefault.hpp).
  std::vector<uint32_t> ids;
  std::vector<ByteRun> runs;
  for (const ImmutableBlock& b : s.pins)
    if (auto a = b.address(0, 0)) {
      ids.push_back(b.block_id());
      runs.push_back({*a, s.bytes});
    }
  pools_[pool].pages.populate(ids, runs, /*for_write=*/false);
  send_blocks(s);
  if (s.sending == 0) serve_done(s.id);
}

// Keeps a window of blocks in flight, in order: the fetcher gets a growing intact
// prefix instead of every block finishing at once at the end (which a deadline would
// turn into nothing at all).
void Service::send_blocks(Serve& s) {
  auto c = conns_.find(s.conn_id);
  const LocalPool& lp = pools_[s.pool];
  const uint64_t block_bytes = lp.layout->block_bytes();
  const auto n = static_cast<uint32_t>(s.pins.size());
  while (s.sending < send_window(block_bytes) && s.next < n) {
    if (c == conns_.end() || c->second->state != Conn::State::kReady || s.cut) {
      s.next = n;  // nobody to send to any more
      break;
    }
    const uint32_t i = s.next++;
    const ImmutableBlock& b = s.pins[i];
    auto addr = b.address(0, 0);
    if (!addr) {  // the local daemon went away; the fetcher's deadline covers it
      s.next = n;
      break;
    }
    const std::byte* base = *addr - lp.layout->offset_unchecked(b.block_id(), 0, 0);
    BlockHeader& h = s.headers[i];
    h.id = s.request_id;
    h.epoch = epoch_;
    h.index = i;
    h.sequence_hash = b.sequence_hash();
    h.checksum = served_checksum(lp, b, base);
    auto* op = new OpContext{OpContext::kBlockSend, this, s.id, i, {}};
    ucp_request_param_t p{};
    p.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_AM_SEND_FLAG_REPLY;
    p.cb.send = &Service::send_callback;
    p.user_data = op;
    // Straight from the pinned block: UCX reads it (eager copy or rendezvous zero-copy)
    // until the send completes; the pin holds until then.
    void* r = ucp_am_send_nbx(c->second->ep, kAmBlock, &h, sizeof(h), *addr, block_bytes, &p);
    if (UCS_PTR_IS_PTR(r)) {
      ++s.sending;
      continue;
    }
    delete op;
    if (UCS_PTR_STATUS(r) != UCS_OK) {
      s.next = n;
      break;
    }
    PeerFigures& fig = metrics_.of(s.peer);
    ++fig.blocks_served;
    fig.bytes_served += block_bytes;
  }
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
  if (st != UCS_OK) s.next = static_cast<uint32_t>(s.pins.size());  // the endpoint failed
  send_blocks(s);
  if (s.sending == 0) serve_done(serve_id);
}

// The transfer is over (sent, failed or cut off): its pins go back.
void Service::serve_done(uint64_t serve_id) { serves_.erase(serve_id); }

}  // namespace kvpool::peer
