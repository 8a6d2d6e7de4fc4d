// The request half of kvpoold's progress engine, on its own: validates one ring record
// (opcode, header, payload size, pool index, batch size) and runs it against the pool
// cores, writing the answer (ResponseHeader | BlockRefs | error text) into a buffer the
// caller provides. It owns no pool state and knows nothing of sessions, sockets or rings,
// so tests and fuzzers can feed it raw records against a live PoolCore.
//
// Nothing in a record is trusted: every field is checked before use, a malformed record
// gets an error answer (kProtocolError for framing errors, which the engine counts), and
// the answer never overruns the buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include <sys/types.h>

#include "daemon/block_checks.hpp"
#include "kvpool/core/status.hpp"
#include "kvpool/pool/pool_core.hpp"
#include "kvpool/shm/protocol.hpp"

namespace kvpool::daemon {

class PreviousClients;

class Dispatcher {
 public:
  static constexpr uint32_t kUnknownAnswerType = proto::kUnknownAnswerType;

  Dispatcher() = default;
  // `cores[i]` is pool index i; the cores must outlive the dispatcher. Answers are bounded
  // by `max_answer_payload` (the response ring's largest record payload).
  Dispatcher(std::vector<pool::PoolCore*> cores, uint32_t max_answer_payload);

  // What kVerify and kScrub read: checkers[i] is pool i's (a default one, for a pool whose
  // bytes the daemon cannot read, answers kUnsupported). Without this, every pool is so.
  void set_checkers(std::vector<BlockChecker> checkers) { checkers_ = std::move(checkers); }
  // What kRegisterTokens checks its token counts against: page_sizes[i] is pool i's tokens
  // per block. Without this, every pool refuses token ids with a register (kUnsupported).
  void set_page_sizes(std::vector<uint32_t> page_sizes) { page_sizes_ = std::move(page_sizes); }

  // kReclaim (a client of the previous daemon, reattached): the previous daemon's clients
  // that still run (daemon/previous_clients.hpp), which must outlive the dispatcher; the
  // caller's pid and uid say whether it is one of them. Unset: refused.
  void set_previous_clients(PreviousClients* previous) { previous_ = previous; }

  // What the daemon checks beyond one client's own quota before a request may add `more`
  // blocks to what `owner` holds in `pool` (kAllocate, kMatch): the share of the
  // pool one uid may hold over all its clients (uid_share_percent). Unset: nothing more.
  using AdmitFn = std::function<Status(uint32_t owner, uint32_t pool, uint32_t more)>;
  void set_admission(AdmitFn f) { admit_ = std::move(f); }

  // proto::record_answers and proto::answer_type (shm/protocol.hpp).
  static bool answers(uint32_t type) { return proto::record_answers(type); }
  static uint32_t answer_type(uint32_t type) { return proto::answer_type(type); }

  // One record with its header decoded, once: the engine sizes the answer and runs the
  // request from the same decoding (the record is the engine's private copy).
  struct Request {
    uint32_t type = 0;
    bool has_header = false;  // the record is at least a RequestHeader long
    proto::RequestHeader rq{};
    std::span<const std::byte> record;
    const std::byte* items = nullptr;  // after the header
    uint64_t item_bytes = 0;
  };
  static Request decode(uint32_t type, std::span<const std::byte> record);

  // Most BlockRefs one answer can carry; larger batches are refused (kInvalidArgument).
  uint32_t refs_limit() const { return refs_limit_; }
  // Bytes to reserve for the answer to this record before dispatching it (0: no answer).
  // Reserved first because once the pool changed, the answer must fit.
  uint32_t answer_capacity(const Request& r) const;
  uint32_t answer_capacity(uint32_t type, std::span<const std::byte> record) const {
    return answer_capacity(decode(type, record));
  }

  struct Outcome {
    ErrorCode code = ErrorCode::kOk;  // kProtocolError: a malformed record
    uint32_t answer_bytes = 0;        // header + refs + message written to `answer`
    uint32_t rejected = 0;            // handles a release refused (stale, foreign, unknown)
  };
  // Every pool (the default): a client that may use all of them.
  static constexpr uint32_t kAllPools = 0xFFFFFFFFu;
  // Who sent a record, as the engine knows it from the client's attach.
  struct Caller {
    uint32_t slot = 0;  // its owner in every pool core (< every core's max_owners)
    pid_t pid = 0;      // its process and user (SO_PEERCRED at attach): kReclaim is
    uid_t uid = 0;      // answered only for the previous daemon's client they name
    // Bit i set when the client may use pool i (per-pool allow-lists); others answer
    // kPermissionDenied.
    uint32_t pools = kAllPools;
  };
  // Validates and runs one record of `caller`. `answer` must hold at least
  // answer_capacity(type, record) bytes when the record answers; it is left alone otherwise.
  // A `record` that is 8-byte aligned is read in place (the engine's private copy: the one
  // copy out of the client's ring); a misaligned one (fuzzers) is copied first.
  Outcome dispatch(const Caller& caller, const Request& r, std::span<std::byte> answer);
  // A caller known by its slot alone (fuzzers, benches: no process to reclaim for).
  Outcome dispatch(uint32_t owner, uint32_t type, std::span<const std::byte> record,
                   std::span<std::byte> answer, uint32_t pools = kAllPools) {
    return dispatch(Caller{owner, 0, 0, pools}, decode(type, record), answer);
  }

 private:
  // dispatch's three steps: validate the record, run it (the opcode switch), answer.
  Status check(const Request& r, uint32_t pools) const;
  Status run(const Caller& caller, const Request& r, std::span<std::byte> answer,
             uint32_t* count_out, uint32_t* rejected);
  static uint32_t write_answer(uint64_t correlation_id, const Status& st, uint32_t count,
                               std::span<std::byte> answer, uint32_t capacity);
  // kVerify and kScrub: validate, hash and write their answer words; count_out in words.
  Status verify(uint32_t owner, const Request& r, std::byte* words, uint32_t* count_out);
  Status scrub(const Request& r, std::byte* words, uint32_t* count_out);
  Status reclaim(const Caller& caller, const Request& r, pool::BlockRef* lost, uint32_t* count_out);
  Status check_checker(uint32_t pool) const;
  // kRegisterTokens: validates the header and sizes, then registers with the token ids
  // and keys (each bounded, their sizes adding up exactly to the payload's).
  Status register_extras(uint32_t owner, const Request& r, pool::BlockRef* out);
  Status check_tokens_per_block(uint32_t pool, uint32_t per) const;
  Status key_ends(std::span<const uint32_t> lengths, uint64_t total);

  std::vector<pool::PoolCore*> cores_;
  std::vector<BlockChecker> checkers_;
  std::vector<uint32_t> page_sizes_;
  uint32_t refs_limit_ = 0;
  // Copies of the payload's items, aligned for the pool core (records are only 8-aligned
  // and live in memory the client can still write).
  std::vector<pool::RegisterItem> items_;  // only for misaligned records
  std::vector<uint64_t> hashes_;
  std::vector<pool::BlockRef> refs_;
  std::vector<proto::ReclaimItem> reclaim_items_;
  PreviousClients* previous_ = nullptr;
  AdmitFn admit_;
  std::vector<uint32_t> tokens_;       // only for misaligned records
  std::vector<uint32_t> key_lengths_;  // only for misaligned records
  std::vector<uint64_t> key_ends_;     // a register's keys: where each ends
};

}  // namespace kvpool::daemon
