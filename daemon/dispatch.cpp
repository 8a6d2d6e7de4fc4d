#include "daemon/dispatch.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "daemon/previous_clients.hpp"
#include "kvpool/shm/check_slice.hpp"
#include "kvpool/shm/event_ring.hpp"

namespace kvpool::daemon {
namespace {

constexpr uint32_t kHeaderBytes = sizeof(proto::ResponseHeader);
// A register's tokens go into one event-ring record per block.
static_assert(proto::kMaxRegisterTokens == shm::kEventMaxTokens);

}  // namespace

Dispatcher::Dispatcher(std::vector<pool::PoolCore*> cores, uint32_t max_answer_payload)
    : cores_(std::move(cores)) {
  const uint32_t fixed = kHeaderBytes + proto::kMaxErrorMessage;
  refs_limit_ = max_answer_payload > fixed
                    ? (max_answer_payload - fixed) / static_cast<uint32_t>(sizeof(pool::BlockRef))
                    : 0;
  // A record is no larger than an answer's ring, so these cover any valid batch.
  items_.reserve(max_answer_payload / sizeof(pool::RegisterItem));
  hashes_.reserve(max_answer_payload / sizeof(uint64_t));
  key_ends_.reserve(refs_limit_);  // one per block of a batch, which refs_limit_ bounds
  refs_.reserve(max_answer_payload / sizeof(pool::BlockRef));
}

Dispatcher::Request Dispatcher::decode(uint32_t type, std::span<const std::byte> record) {
  Request r;
  r.type = type;
  r.record = record;
  r.has_header = record.size() >= sizeof(r.rq);
  if (r.has_header) {
    std::memcpy(&r.rq, record.data(), sizeof(r.rq));
    r.items = record.data() + sizeof(r.rq);
    r.item_bytes = record.size() - sizeof(r.rq);
  } else {
    r.items = record.data();
  }
  return r;
}

uint32_t Dispatcher::answer_capacity(const Request& r) const {
  if (!answers(r.type)) return 0;
  // Words of the answer: one per item, but a kScrub's one request gets a summary and room
  // for the mismatches it may name.
  const uint32_t words = r.type == static_cast<uint32_t>(proto::Opcode::kScrub)
                             ? proto::kScrubAnswerWords
                             : r.rq.count;
  const uint32_t max_refs = std::min(words, refs_limit_);
  return kHeaderBytes + max_refs * static_cast<uint32_t>(sizeof(pool::BlockRef)) +
         proto::kMaxErrorMessage;
}

namespace {

// The items of a record as T, in place when the engine's copy is aligned for T, else
// copied into `spare` (records from fuzzers and tests may sit anywhere).
template <class T>
std::span<const T> items_as(const std::byte* items, uint32_t count, std::vector<T>& spare) {
  if (count == 0) return {};
  if (reinterpret_cast<uintptr_t>(items) % alignof(T) == 0)
    return {reinterpret_cast<const T*>(items), count};
  spare.resize(count);
  std::memcpy(spare.data(), items, uint64_t{count} * sizeof(T));
  return spare;
}

// Whether `n` blocks could be allocated from the pool now (free, or inactive to evict).
bool fits(const pool::PoolCore& core, uint32_t n) {
  const pool::PoolCounts c = core.counts();
  return uint64_t{n} <= uint64_t{c.free} + c.inactive;
}

}  // namespace

Dispatcher::Outcome Dispatcher::dispatch(const Caller& caller, const Request& req,
                                         std::span<std::byte> answer) {
  const bool answering = answers(req.type);
  const uint32_t capacity = answer_capacity(req);
  if (answering && answer.size() < capacity) {
    // A caller bug, not a client's: refuse to run a request whose answer cannot be written.
    return {ErrorCode::kInternal, 0};
  }
  uint32_t count_out = 0;
  uint32_t rejected = 0;
  Status st = check(req, caller.pools);
  if (st.is_ok()) st = run(caller, req, answer, &count_out, &rejected);
  if (!answering) return {st.code(), 0, rejected};
  return {st.code(), write_answer(req.rq.correlation_id, st, count_out, answer, capacity),
          rejected};
}

// Everything about a record that can be checked before it touches a pool: its framing,
// opcode, pool index and the client's access to it, and the payload's and answer's sizes.
Status Dispatcher::check(const Request& req, uint32_t pools) const {
  const proto::RequestHeader& rq = req.rq;
  const uint32_t type = req.type;
  const auto op = static_cast<proto::Opcode>(type);
  const uint64_t len = req.record.size();
  const uint64_t item_bytes = req.item_bytes;
  if (len < sizeof(rq)) {
    return Status(ErrorCode::kProtocolError,
                  "record of " + std::to_string(len) + " bytes is shorter than a request header");
  }
  if (!proto::opcode_known(type)) {
    return Status(ErrorCode::kProtocolError, "unknown opcode " + std::to_string(type));
  }
  if (op != proto::Opcode::kPing && rq.pool >= cores_.size()) {
    return Status(ErrorCode::kInvalidArgument, "pool index " + std::to_string(rq.pool) +
                                                   " does not exist (" +
                                                   std::to_string(cores_.size()) + " pools)");
  }
  if (op != proto::Opcode::kPing && rq.pool < 32 && (pools & (1u << rq.pool)) == 0) {
    return Status(ErrorCode::kPermissionDenied,
                  "pool '" + cores_[rq.pool]->name() +
                      "' is not open to this client (pools[].allowed_uids/allowed_gids)");
  }
  if (op == proto::Opcode::kRegisterTokens) {
    // Variable-sized items: register_tokens checks its own sizes; the batch limit is common.
    if (rq.count > refs_limit_)
      return Status(ErrorCode::kInvalidArgument,
                    "batch of " + std::to_string(rq.count) + " blocks exceeds the " +
                        std::to_string(refs_limit_) + " one answer can carry (raise ring_bytes)");
    return Status::ok();
  }
  if (op == proto::Opcode::kAllocate ? item_bytes != 0
                                     : item_bytes != proto::request_payload_bytes(op, rq.count)) {
    return Status(ErrorCode::kProtocolError, "payload of " + std::to_string(item_bytes) +
                                                 " bytes does not hold " +
                                                 std::to_string(rq.count) + " items");
  }
  if (op == proto::Opcode::kScrub && rq.count != 1) {
    return Status(ErrorCode::kProtocolError,
                  "a scrub request carries one ScrubRequest, not " + std::to_string(rq.count));
  }
  if (op == proto::Opcode::kScrub && proto::kScrubAnswerWords > refs_limit_) {
    return Status(ErrorCode::kInvalidArgument,
                  "a scrub answer does not fit this instance's response ring (raise ring_bytes)");
  }
  if (answers(type) && rq.count > refs_limit_) {
    return Status(ErrorCode::kInvalidArgument,
                  "batch of " + std::to_string(rq.count) + " blocks exceeds the " +
                      std::to_string(refs_limit_) + " one answer can carry (raise ring_bytes)");
  }
  return Status::ok();
}

// The opcode switch: one checked record against its pool's core. What the answer carries
// (refs, or kVerify's and kScrub's words) goes straight after the answer's header.
Status Dispatcher::run(const Caller& caller, const Request& req, std::span<std::byte> answer,
                       uint32_t* count_out, uint32_t* rejected) {
  const uint32_t owner = caller.slot;
  const proto::RequestHeader& rq = req.rq;
  const auto op = static_cast<proto::Opcode>(req.type);
  const std::byte* items = req.items;
  // Releases carry no answer: then there is no buffer (and offsetting null is UB).
  auto* refs_out =
      answer.empty() ? nullptr : reinterpret_cast<pool::BlockRef*>(answer.data() + kHeaderBytes);
  pool::PoolCore* core = op == proto::Opcode::kPing ? nullptr : cores_[rq.pool];
  Status st;
  // Not kReclaim: it gives a reattached process back what it held under the previous
  // daemon, within the quotas of that daemon; refused, the blocks would stay out of
  // circulation anyway until the process exits (it may still read them), so refusing
  // frees nothing (docs/security.md).
  if (admit_ && (op == proto::Opcode::kMatch || op == proto::Opcode::kMatchOnboard ||
                 (op == proto::Opcode::kAllocate && fits(*core, rq.count)))) {
    // A match is counted as if every hash hit; an allocation the pool cannot serve anyway
    // gets the pool's own answer (NotEnoughBlocksAvailable).
    KVPOOL_RETURN_IF_ERROR(admit_(owner, rq.pool, rq.count));
  }
  switch (op) {
    case proto::Opcode::kAllocate:
      st = core->allocate(owner, rq.count, refs_out);
      if (st.is_ok()) *count_out = rq.count;
      break;
    case proto::Opcode::kRegister: {
      st = core->register_blocks(owner, items_as(items, rq.count, items_), refs_out);
      if (st.is_ok()) *count_out = rq.count;
      break;
    }
    case proto::Opcode::kMatch:
    case proto::Opcode::kMatchOnboard: {  // the engine continues it on disk (engine_onboard.cpp)
      auto m = core->match(owner, items_as(items, rq.count, hashes_), refs_out);
      if (m) {
        *count_out = *m;
      } else {
        st = m.status();
      }
      break;
    }
    case proto::Opcode::kLookup: {
      auto m = core->lookup(owner, items_as(items, rq.count, hashes_), refs_out);
      if (m) {
        *count_out = rq.count;  // one answer per hash, misses included
      } else {
        st = m.status();
      }
      break;
    }
    case proto::Opcode::kRemove:
      st = core->remove(owner, items_as(items, rq.count, refs_), refs_out);
      if (st.is_ok()) *count_out = rq.count;
      break;
    case proto::Opcode::kReleaseMutable:
    case proto::Opcode::kReleaseImmutable: {
      // Fire and forget: a bad handle is counted in the pool's rejected_handles and in
      // the outcome (the engine cuts off a client that keeps sending them).
      const auto refs = items_as(items, rq.count, refs_);
      (void)(op == proto::Opcode::kReleaseMutable ? core->release_mutable(owner, refs, rejected)
                                                  : core->release_immutable(owner, refs, rejected));
      break;
    }
    case proto::Opcode::kVerify:
      st = verify(owner, req, answer.data() + kHeaderBytes, count_out);
      break;
    case proto::Opcode::kScrub:
      st = scrub(req, answer.data() + kHeaderBytes, count_out);
      break;
    case proto::Opcode::kReclaim:
      st = reclaim(caller, req, refs_out, count_out);
      break;
    case proto::Opcode::kRegisterTokens:
      st = register_extras(owner, req, refs_out);
      if (st.is_ok()) *count_out = rq.count;
      break;
    case proto::Opcode::kPing:
      break;
  }
  return st;
}

// ResponseHeader | `count` refs or words (written by run) | as much of the error message
// as fits `capacity`. Returns the bytes used.
uint32_t Dispatcher::write_answer(uint64_t correlation_id, const Status& st, uint32_t count,
                                  std::span<std::byte> answer, uint32_t capacity) {
  proto::ResponseHeader rh{};
  rh.correlation_id = correlation_id;
  rh.status = static_cast<uint16_t>(st.code());
  rh.count = count;
  const uint32_t used = kHeaderBytes + count * static_cast<uint32_t>(sizeof(pool::BlockRef));
  rh.message_len = static_cast<uint32_t>(std::min<size_t>(st.message().size(), capacity - used));
  std::memcpy(answer.data(), &rh, sizeof(rh));
  std::memcpy(answer.data() + used, st.message().data(), rh.message_len);
  return used + rh.message_len;
}

Status Dispatcher::register_extras(uint32_t owner, const Request& r, pool::BlockRef* out) {
  proto::RegisterExtrasHeader h{};
  if (r.item_bytes < sizeof(h))
    return Status(ErrorCode::kProtocolError,
                  "register-with-tokens payload of " + std::to_string(r.item_bytes) +
                      " bytes is shorter than its " + std::to_string(sizeof(h)) + "-byte header");
  std::memcpy(&h, r.items, sizeof(h));
  const uint32_t count = r.rq.count;
  const uint32_t per = h.tokens_per_block;
  if (per != 0) KVPOOL_RETURN_IF_ERROR(check_tokens_per_block(r.rq.pool, per));
  // Bounded before the size sum below, which must not overflow.
  if (h.key_bytes > uint64_t{count} * proto::kMaxRegisterKeyBytes)
    return Status(ErrorCode::kInvalidArgument, "register of " + std::to_string(count) +
                                                   " blocks with " + std::to_string(h.key_bytes) +
                                                   " key bytes: a block's key has at most " +
                                                   std::to_string(proto::kMaxRegisterKeyBytes));
  const uint64_t want = proto::register_extras_bytes(count, per, h.key_bytes);
  if (r.item_bytes != want)
    return Status(
        ErrorCode::kProtocolError,
        "register-with-tokens payload of " + std::to_string(r.item_bytes) +
            " bytes does not hold " + std::to_string(count) + " blocks of " + std::to_string(per) +
            " token ids" +
            (h.key_bytes == 0 ? std::string()
                              : " and keys of " + std::to_string(h.key_bytes) + " bytes") +
            " (" + std::to_string(want) + " bytes)");
  const std::byte* items = r.items + sizeof(h);
  const std::byte* tokens = items + uint64_t{count} * sizeof(pool::RegisterItem);
  pool::RegisterExtras with{items_as(tokens, count * per, tokens_), per, {}, {}};
  if (h.key_bytes != 0) {
    const std::byte* lengths = tokens + uint64_t{count} * per * sizeof(uint32_t);
    KVPOOL_RETURN_IF_ERROR(key_ends(items_as(lengths, count, key_lengths_), h.key_bytes));
    with.keys = {lengths + uint64_t{count} * sizeof(uint32_t), h.key_bytes};
    with.key_ends = key_ends_;
  }
  return cores_[r.rq.pool]->register_blocks(owner, items_as(items, count, items_), out, with);
}

Status Dispatcher::check_tokens_per_block(uint32_t pool, uint32_t per) const {
  const pool::PoolCore& core = *cores_[pool];
  if (pool >= page_sizes_.size() || page_sizes_[pool] == 0)
    return Status(ErrorCode::kUnsupported,
                  "pool '" + core.name() + "' does not take token ids with a register");
  const uint32_t page = page_sizes_[pool];
  if (per != page)
    return Status(ErrorCode::kInvalidArgument, "register with " + std::to_string(per) +
                                                   " token ids per block: pool '" + core.name() +
                                                   "' has " + std::to_string(page) +
                                                   " tokens per block (page_size)");
  if (page > proto::kMaxRegisterTokens)
    return Status(ErrorCode::kUnsupported,
                  "pool '" + core.name() + "' has " + std::to_string(page) +
                      " tokens per block: events carry token ids of blocks of at most " +
                      std::to_string(proto::kMaxRegisterTokens));
  return Status::ok();
}

// Each key's end in the key bytes (key_ends_), from the lengths the client sent: each at
// most kMaxRegisterKeyBytes, and all of them `total`.
Status Dispatcher::key_ends(std::span<const uint32_t> lengths, uint64_t total) {
  key_ends_.clear();
  uint64_t end = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] > proto::kMaxRegisterKeyBytes)
      return Status(ErrorCode::kInvalidArgument,
                    "the key of block " + std::to_string(i) + " has " + std::to_string(lengths[i]) +
                        " bytes: at most " + std::to_string(proto::kMaxRegisterKeyBytes));
    end += lengths[i];
    key_ends_.push_back(end);
  }
  if (end != total)
    return Status(ErrorCode::kProtocolError, "register key lengths add up to " +
                                                 std::to_string(end) + " bytes, its header says " +
                                                 std::to_string(total));
  return Status::ok();
}

Status Dispatcher::check_checker(uint32_t pool) const {
  if (pool < checkers_.size() && checkers_[pool].available()) return Status::ok();
  return Status(ErrorCode::kUnsupported,
                "pool '" + cores_[pool]->name() +
                    "' is not a host pool: block checksums need a host pool, whose bytes "
                    "kvpoold can read");
}

Status Dispatcher::verify(uint32_t owner, const Request& r, std::byte* words, uint32_t* count_out) {
  KVPOOL_RETURN_IF_ERROR(check_checker(r.rq.pool));
  const BlockChecker& checker = checkers_[r.rq.pool];
  pool::PoolCore& core = *cores_[r.rq.pool];
  if (r.rq.count > checker.max_verify_blocks())
    return Status(ErrorCode::kInvalidArgument,
                  "verify of " + std::to_string(r.rq.count) + " blocks: pool '" + core.name() +
                      "' checks at most " + std::to_string(checker.max_verify_blocks()) +
                      " per request (" + std::to_string(proto::kCheckSliceBytes) +
                      " bytes of hashing)");
  const auto refs = items_as(r.items, r.rq.count, refs_);
  // Every handle first: a bad one hashes nothing.
  for (const pool::BlockRef& ref : refs) KVPOOL_RETURN_IF_ERROR(core.check_held(owner, ref));
  for (uint32_t i = 0; i < refs.size(); ++i) {
    const proto::VerifyResult v{refs[i].id,
                                static_cast<uint32_t>(checker.verify(core, refs[i].id))};
    std::memcpy(words + i * sizeof(v), &v, sizeof(v));
  }
  *count_out = r.rq.count;
  return Status::ok();
}

Status Dispatcher::scrub(const Request& r, std::byte* words, uint32_t* count_out) {
  KVPOOL_RETURN_IF_ERROR(check_checker(r.rq.pool));
  proto::ScrubRequest sr;
  std::memcpy(&sr, r.items, sizeof(sr));
  proto::ScrubMismatch found[proto::kMaxScrubReported];
  const proto::ScrubSummary s =
      checkers_[r.rq.pool].scrub(*cores_[r.rq.pool], sr.start_block, sr.byte_budget, found);
  std::memcpy(words, &s, sizeof(s));
  std::memcpy(words + sizeof(s), found, s.reported * sizeof(proto::ScrubMismatch));
  *count_out = static_cast<uint32_t>((sizeof(s) + s.reported * sizeof(proto::ScrubMismatch)) / 8);
  return Status::ok();
}

Status Dispatcher::reclaim(const Caller& caller, const Request& r, pool::BlockRef* lost,
                           uint32_t* count_out) {
  if (previous_ == nullptr)  // a dispatcher outside kvpoold (the fuzzer, benches)
    return Status(ErrorCode::kUnsupported, "kReclaim is not served here");
  proto::ReclaimHeader h;
  std::memcpy(&h, r.items, sizeof(h));
  // Reserved fields and unknown flags must be 0, so that they can mean something later.
  if (h.reserved != 0 || (h.flags & ~proto::kReclaimFinal) != 0)
    return Status(ErrorCode::kProtocolError, "reclaim header with reserved field " +
                                                 std::to_string(h.reserved) + " and flags " +
                                                 std::to_string(h.flags) +
                                                 " (only kReclaimFinal = 1 is known)");
  const auto items = items_as(r.items + sizeof(h), r.rq.count, reclaim_items_);
  for (const proto::ReclaimItem& it : items)
    if (it.reserved != 0)
      return Status(ErrorCode::kProtocolError, "reclaim item for block " +
                                                   std::to_string(it.block.id) +
                                                   " has a nonzero reserved field");
  return previous_->reclaim(caller.slot, caller.pid, caller.uid, h, cores_, r.rq.pool, items, lost,
                            count_out);
}

}  // namespace kvpool::daemon
