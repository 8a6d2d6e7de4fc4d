// The fetcher's side: allocate, ask, receive into our blocks, verify, register (service.hpp).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "directory.hpp"
#include "kvpool/core/checksum.hpp"
#include "service.hpp"
#include "service_state.hpp"

namespace kvpool::peer {
namespace {
// BlockHeader::reserved of a block whose bytes failed their checksum here.
constexpr uint64_t kChecksumFailed = 1;
}  // namespace

Service::Fetch* Service::fetch_of(uint64_t id) {
  auto it = fetches_.find(id);
  return it == fetches_.end() ? nullptr : it->second.get();
}

void Service::start_fetch(Waiter& w, const LocalRequestHeader& h, std::vector<uint64_t> hashes) {
  const int fd = w.fd.get();
  const std::string pool_name(name_of(h.pool));
  auto lp = std::find_if(pools_.begin(), pools_.end(),
                         [&](const LocalPool& p) { return p.name == pool_name; });
  if (lp == pools_.end())
    return answer_waiter(fd, ErrorCode::kNotFound, 0, "no local pool '" + pool_name + "'");
  if (!lp->unusable.empty()) return answer_waiter(fd, ErrorCode::kUnsupported, 0, lp->unusable);
  std::string holder(name_of(h.holder));
  uint64_t known_epoch = 0;
  if (holder.empty() && directory_ != nullptr) {
    if (auto found = directory_->holder_of(hashes[0], options_.name)) {
      holder = found->address;
      known_epoch = found->epoch;
    }
  }
  if (holder.empty()) {
    metrics_.failed("(none)", FetchFailure::kNoHolder);
    return answer_waiter(fd, ErrorCode::kOk, 0, "no peer is known to hold the first block");
  }
  auto f = std::make_unique<Fetch>();
  f->id = next_id_++;
  f->waiter_fd = fd;
  f->pool = static_cast<uint32_t>(lp - pools_.begin());
  f->hashes = std::move(hashes);
  f->start_ns = mono_ns();
  // The worker's deadline, less a margin for registering what arrived and answering.
  const uint64_t deadline_ns = uint64_t{h.deadline_ms} * 1'000'000ull;
  f->deadline_ns = f->start_ns + deadline_ns - std::min<uint64_t>(deadline_ns / 10, 100'000'000ull);
  f->epoch = known_epoch;
  f->peer = holder;
  f->meta.resize(f->hashes.size());
  f->state.assign(f->hashes.size(), Fetch::kPending);
  // Our blocks first: the bytes land straight in them. All or nothing, like any allocate.
  auto blocks = lp->pool->allocate_blocks(static_cast<uint32_t>(f->hashes.size()));
  if (!blocks) {
    metrics_.failed(holder, FetchFailure::kLocal);
    return answer_waiter(fd, ErrorCode::kOk, 0,
                         "no room for the blocks here: " + blocks.status().message());
  }
  f->blocks = std::move(*blocks);
  // The bytes land in these pages while UCX progresses: map them now, in one call, rather
  // than one fault per page inside the receive (prefault.hpp).
  std::vector<uint32_t> ids;
  std::vector<ByteRun> runs;
  const uint64_t block_bytes = lp->layout->block_bytes();
  for (MutableBlock& b : f->blocks)
    if (auto a = b.address(0, 0)) {
      ids.push_back(b.block_id());
      runs.push_back({*a, block_bytes});
    }
  lp->pages.populate(ids, runs, /*for_write=*/true);
  if (h.has_parent) f->meta[0].parent_hash = h.parent, f->meta[0].has_parent = 1;
  auto conn = outbound(holder);
  if (!conn) {
    metrics_.failed(holder, FetchFailure::kConnect);
    return answer_waiter(fd, ErrorCode::kOk, 0, conn.status().message());
  }
  Conn& c = **conn;
  f->conn_id = c.id;
  Fetch& ref = *f;
  fetches_[f->id] = std::move(f);
  w.asked = true;
  if (c.state == Conn::State::kReady) {
    send_fetch(ref, c);
  } else {
    c.waiting.push_back(ref.id);
  }
}

void Service::send_fetch(Fetch& f, Conn& c) {
  if (f.epoch != 0 && c.peer_epoch != f.epoch) {
    // The directory knew another start of this holder: what it said it holds is gone.
    metrics_.failed(f.peer, FetchFailure::kEpoch);
    if (directory_ != nullptr) directory_->forget_epoch(f.peer, f.epoch);
    return fail_fetch(f, ErrorCode::kOk, "the holder restarted (new epoch) since it announced");
  }
  f.epoch = c.peer_epoch;
  f.peer = c.key();  // metrics by the holder's name from here on
  ++metrics_.of(f.peer).fetches;
  FetchRequest rq{};
  rq.id = f.id;
  rq.fingerprint = pools_[f.pool].fingerprint;
  const uint64_t now = mono_ns();
  rq.deadline_ms =
      f.deadline_ns > now ? static_cast<uint32_t>((f.deadline_ns - now) / 1'000'000) + 1 : 1;
  rq.count = static_cast<uint32_t>(f.hashes.size());
  copy_name(rq.pool, pools_[f.pool].name);
  if (Status s = send_control(c, kAmFetch, &rq, sizeof(rq), f.hashes.data(),
                              f.hashes.size() * sizeof(uint64_t));
      !s.is_ok()) {
    metrics_.failed(f.peer, FetchFailure::kTransport);
    fail_fetch(f, ErrorCode::kOk, s.message());
  }
}

void Service::on_fetch_reply(Conn& c, const FetchReply& r) {
  Fetch* f = fetch_of(r.id);
  if (f == nullptr || f->conn_id != c.id || f->answered) return;  // late: it ended already
  const auto code = static_cast<ErrorCode>(r.code);
  std::string msg(r.message, strnlen(r.message, sizeof(r.message)));
  if (r.epoch != f->epoch) {
    metrics_.failed(f->peer, FetchFailure::kEpoch);
    return fail_fetch(*f, ErrorCode::kOk, "the holder's epoch changed during the fetch");
  }
  if (code != ErrorCode::kOk) {
    metrics_.failed(f->peer, code == ErrorCode::kVersionMismatch ? FetchFailure::kLayout
                                                                 : FetchFailure::kRefused);
    return fail_fetch(*f, ErrorCode::kOk, "holder " + c.key() + ": " + msg);
  }
  if (r.count > f->hashes.size() || r.block_bytes != pools_[f->pool].layout->block_bytes()) {
    metrics_.failed(f->peer, FetchFailure::kLayout);
    return fail_fetch(*f, ErrorCode::kOk, "holder " + c.key() + " answered another block size");
  }
  f->expected = r.count;
  maybe_finish(*f);
}

// Block bytes for fetch `h.id`: eager (`data` holds them, now) or rendezvous (`data` is
// UCX's descriptor: receive it straight into the block, or release it).
void Service::on_block(uint64_t conn_id, const BlockHeader& h, void* data, size_t len, bool rndv) {
  Fetch* f = fetch_of(h.id);
  const bool wanted = f != nullptr && f->conn_id == conn_id && !f->answered &&
                      h.index < f->blocks.size() && f->state[h.index] == Fetch::kPending &&
                      len == pools_[f->pool].layout->block_bytes();
  std::byte* dst = nullptr;
  if (wanted) {
    auto a = f->blocks[h.index].address(0, 0);
    if (a) dst = *a;
  }
  if (dst == nullptr) {
    if (rndv) ucp_am_data_release(worker_, data);
    return;
  }
  const uint64_t parent = f->meta[h.index].parent_hash;
  const uint32_t has_parent = f->meta[h.index].has_parent;
  f->meta[h.index] = h;
  f->meta[h.index].parent_hash = parent;
  f->meta[h.index].has_parent = has_parent;
  if (!rndv) {
    std::memcpy(dst, data, len);
    f->state[h.index] = verify(*f, h.index) ? Fetch::kReceived : Fetch::kFailed;
    Event e;
    e.kind = Event::kBlockReceived;
    e.id = f->id;
    e.index = UINT32_MAX;  // already counted: only look whether the fetch is complete
    events_.push_back(std::move(e));
    return;
  }
  auto* op = new OpContext{OpContext::kBlockRecv, this, f->id, h.index, {}};
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.recv_am = &Service::recv_callback;
  p.user_data = op;
  void* r = ucp_am_recv_data_nbx(worker_, data, dst, len, &p);
  if (UCS_PTR_IS_PTR(r)) {
    f->state[h.index] = Fetch::kReceiving;
    ++f->receiving;
    return;
  }
  delete op;
  f->state[h.index] =
      UCS_PTR_STATUS(r) == UCS_OK && verify(*f, h.index) ? Fetch::kReceived : Fetch::kFailed;
  maybe_finish(*f);
}

void Service::on_block_received(uint64_t fetch_id, uint32_t index, ucs_status_t st) {
  Fetch* f = fetch_of(fetch_id);
  if (f == nullptr) return;
  if (index != UINT32_MAX) {
    --f->receiving;
    if (index < f->state.size())
      f->state[index] =
          st == UCS_OK && !f->answered && verify(*f, index) ? Fetch::kReceived : Fetch::kFailed;
  }
  maybe_finish(*f);
}

// Checks block i's bytes, now in our block, against the holder's checksum (as each block
// lands, so that the answer at the end only registers).
bool Service::verify(Fetch& f, uint32_t i) {
  const LocalPool& lp = pools_[f.pool];
  MutableBlock& b = f.blocks[i];
  auto a = b.address(0, 0);
  if (!a) return false;
  const std::byte* base = *a - lp.layout->offset_unchecked(b.block_id(), 0, 0);
  if (block_checksum(base, *lp.layout, b.block_id()) == f.meta[i].checksum) return true;
  f.meta[i].reserved = kChecksumFailed;
  metrics_.failed(f.peer, FetchFailure::kChecksum);
  return false;
}

void Service::maybe_finish(Fetch& f) {
  if (f.answered) {
    if (f.receiving == 0) fetches_.erase(f.id);  // drained: the rest of its blocks go back
    return;
  }
  if (f.receiving > 0) return;
  // Its endpoint is gone (closed, failed): nothing more will arrive.
  if (f.conn_id == 0) return finish_fetch(f);
  if (f.expected < 0) return;
  for (int64_t i = 0; i < f.expected; ++i)
    if (f.state[i] == Fetch::kPending) return;
  finish_fetch(f);
}

// Answers the worker with the intact prefix of what arrived, registered here. Blocks whose
// receives are still in flight stay with the fetch until UCX is done with them.
void Service::finish_fetch(Fetch& f) {
  LocalPool& lp = pools_[f.pool];
  uint32_t intact = 0;
  std::string why;
  const uint64_t limit = f.expected < 0 ? 0 : static_cast<uint64_t>(f.expected);
  for (; intact < limit; ++intact) {
    const BlockHeader& m = f.meta[intact];
    if (f.state[intact] == Fetch::kFailed && f.meta[intact].reserved == kChecksumFailed) {
      why = "block " + std::to_string(intact) + " arrived with other bytes (checksum)";
      break;
    }
    if (f.state[intact] != Fetch::kReceived) {
      why = "block " + std::to_string(intact) + " did not arrive intact in time";
      break;
    }
    if (m.sequence_hash != f.hashes[intact] || m.epoch != f.epoch) {
      why = "block " + std::to_string(intact) + " is not the one asked for";
      break;
    }
    MutableBlock& b = f.blocks[intact];
    const std::optional<uint64_t> parent =
        intact > 0 ? std::optional<uint64_t>(f.hashes[intact - 1])
                   : (m.has_parent ? std::optional<uint64_t>(m.parent_hash) : std::nullopt);
    if (!b.complete_as(m.sequence_hash, m.block_hash, parent).is_ok()) break;
  }
  if (why.empty() && f.expected < 0)
    why = "no answer from the holder within the deadline";
  else if (why.empty() && limit < f.hashes.size())
    why = "the holder has " + std::to_string(limit) + " of the " + std::to_string(f.hashes.size()) +
          " blocks";
  uint32_t registered = 0;
  ErrorCode code = ErrorCode::kOk;
  if (intact > 0) {
    std::vector<MutableBlock> ready;
    // Each one is the hash of the block's bytes here (verify checked it as they landed):
    // registered with it, the block can be scrubbed here and served on without hashing.
    std::vector<uint64_t> sums;
    for (uint32_t i = 0; i < intact; ++i) {
      ready.push_back(std::move(f.blocks[i]));
      sums.push_back(f.meta[i].checksum);
    }
    RegisterOptions ro;
    ro.checksum = true;
    ro.checksums = sums;
    auto imm = lp.pool->register_blocks(std::move(ready), ro);
    if (imm) {
      registered = intact;
      auto w = waiters_.find(f.waiter_fd);
      if (w != waiters_.end())
        for (auto& b : *imm) w->second->held.push_back(std::move(b));
      PeerFigures& fig = metrics_.of(f.peer);
      fig.blocks_fetched += intact;
      fig.bytes_fetched += intact * lp.layout->block_bytes();
      const uint64_t took = mono_ns() - f.start_ns;
      fig.latency_ns_sum += took;
      ++fig.latency_count;
      fig.latency_ns_max = std::max(fig.latency_ns_max, took);
      spdlog::debug("fetched {} block(s) of pool '{}' from {} in {} us", intact, lp.name, f.peer,
                    took / 1000);
      if (fetched_hook_) {
        nlohmann::json ev = {
            {"peer_event", "fetched"},
            {"host", options_.name},
            {"worker_id", options_.worker_id},
            {"from", f.peer},
            {"from_epoch", f.epoch},
            {"pool", lp.name},
            {"sequence_hashes", std::vector<uint64_t>(f.hashes.begin(), f.hashes.begin() + intact)},
            {"bytes", intact * lp.layout->block_bytes()},
            {"latency_us", took / 1000}};
        fetched_hook_(ev.dump());
      }
    } else {
      metrics_.failed(f.peer, FetchFailure::kLocal);
      why = "registering here failed: " + imm.status().message();
    }
  }
  f.answered = true;
  if (f.waiter_fd >= 0) answer_waiter(f.waiter_fd, code, registered, why);
  // Every block not registered goes back now, except those UCX may still write.
  release_idle_blocks(f);
  maybe_finish(f);
}

void Service::fail_fetch(Fetch& f, ErrorCode code, const std::string& why) {
  spdlog::debug("fetch from {}: {}", f.peer, why);
  f.answered = true;
  if (f.waiter_fd >= 0) answer_waiter(f.waiter_fd, code, 0, why);
  // Receives in flight write into our blocks: close the endpoint, which ends them; the
  // blocks go back as each completes.
  if (f.receiving > 0)
    if (auto it = conns_.find(f.conn_id); it != conns_.end()) close_conn(*it->second, why);
  release_idle_blocks(f);
  maybe_finish(f);
}

void Service::release_idle_blocks(Fetch& f) {
  for (size_t i = 0; i < f.blocks.size(); ++i)
    if (f.state[i] != Fetch::kReceiving && f.blocks[i].valid()) {
      MutableBlock gone(std::move(f.blocks[i]));  // its destructor returns it to the pool
    }
}

}  // namespace kvpool::peer
