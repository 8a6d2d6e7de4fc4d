#include "daemon/dispatch.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

namespace kvpool::daemon {
namespace {

constexpr uint32_t kHeaderBytes = sizeof(proto::ResponseHeader);

bool known(uint32_t type) { return type != 0 && type <= proto::kMaxOpcode; }

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
  refs_.reserve(max_answer_payload / sizeof(pool::BlockRef));
}

bool Dispatcher::answers(uint32_t type) {
  return !known(type) || proto::opcode_answers(static_cast<proto::Opcode>(type));
}

uint32_t Dispatcher::answer_type(uint32_t type) { return known(type) ? type : kUnknownAnswerType; }

uint32_t Dispatcher::answer_capacity(uint32_t type, std::span<const std::byte> record) const {
  if (!answers(type)) return 0;
  proto::RequestHeader rq{};
  if (record.size() >= sizeof(rq)) std::memcpy(&rq, record.data(), sizeof(rq));
  const uint32_t max_refs = std::min(rq.count, refs_limit_);
  return kHeaderBytes + max_refs * static_cast<uint32_t>(sizeof(pool::BlockRef)) +
         proto::kMaxErrorMessage;
}

Dispatcher::Outcome Dispatcher::dispatch(uint32_t owner, uint32_t type,
                                         std::span<const std::byte> record,
                                         std::span<std::byte> answer) {
  proto::RequestHeader rq{};
  Status st;
  const auto op = static_cast<proto::Opcode>(type);
  const bool answering = answers(type);
  const uint64_t len = record.size();
  if (len >= sizeof(rq)) std::memcpy(&rq, record.data(), sizeof(rq));
  const std::byte* items = record.data() + (len >= sizeof(rq) ? sizeof(rq) : 0);
  const uint64_t item_bytes = len >= sizeof(rq) ? len - sizeof(rq) : 0;

  const uint32_t capacity = answer_capacity(type, record);
  if (answering && answer.size() < capacity) {
    // A caller bug, not a client's: refuse to run a request whose answer cannot be written.
    return {ErrorCode::kInternal, 0};
  }
  // Releases carry no answer: then there is no buffer (and offsetting null is UB).
  auto* refs_out =
      answer.empty() ? nullptr : reinterpret_cast<pool::BlockRef*>(answer.data() + kHeaderBytes);
  uint32_t count_out = 0;

  if (len < sizeof(rq)) {
    st = Status(ErrorCode::kProtocolError,
                "record of " + std::to_string(len) + " bytes is shorter than a request header");
  } else if (!known(type)) {
    st = Status(ErrorCode::kProtocolError, "unknown opcode " + std::to_string(type));
  } else if (op != proto::Opcode::kPing && rq.pool >= cores_.size()) {
    st = Status(ErrorCode::kInvalidArgument, "pool index " + std::to_string(rq.pool) +
                                                 " does not exist (" +
                                                 std::to_string(cores_.size()) + " pools)");
  } else if (op == proto::Opcode::kAllocate
                 ? item_bytes != 0
                 : item_bytes != uint64_t{rq.count} * proto::request_item_bytes(op)) {
    st = Status(ErrorCode::kProtocolError, "payload of " + std::to_string(item_bytes) +
                                               " bytes does not hold " + std::to_string(rq.count) +
                                               " items");
  } else if (answering && rq.count > refs_limit_) {
    st = Status(ErrorCode::kInvalidArgument,
                "batch of " + std::to_string(rq.count) + " blocks exceeds the " +
                    std::to_string(refs_limit_) + " one answer can carry (raise ring_bytes)");
  } else {
    pool::PoolCore* core = op == proto::Opcode::kPing ? nullptr : cores_[rq.pool];
    switch (op) {
      case proto::Opcode::kAllocate:
        st = core->allocate(owner, rq.count, refs_out);
        if (st.is_ok()) count_out = rq.count;
        break;
      case proto::Opcode::kRegister: {
        items_.resize(rq.count);
        if (item_bytes > 0) std::memcpy(items_.data(), items, item_bytes);  // data() may be null
        st = core->register_blocks(owner, items_, refs_out);
        if (st.is_ok()) count_out = rq.count;
        break;
      }
      case proto::Opcode::kMatch: {
        hashes_.resize(rq.count);
        if (item_bytes > 0) std::memcpy(hashes_.data(), items, item_bytes);  // data() may be null
        auto m = core->match(owner, hashes_, refs_out);
        if (m) {
          count_out = *m;
        } else {
          st = m.status();
        }
        break;
      }
      case proto::Opcode::kReleaseMutable:
      case proto::Opcode::kReleaseImmutable: {
        refs_.resize(rq.count);
        if (item_bytes > 0) std::memcpy(refs_.data(), items, item_bytes);  // data() may be null
        // Fire and forget: a bad handle is counted in the pool's rejected_handles.
        (void)(op == proto::Opcode::kReleaseMutable ? core->release_mutable(owner, refs_)
                                                    : core->release_immutable(owner, refs_));
        break;
      }
      case proto::Opcode::kPing:
        break;
    }
  }
  if (!answering) return {st.code(), 0};

  proto::ResponseHeader rh{};
  rh.correlation_id = rq.correlation_id;
  rh.status = static_cast<uint16_t>(st.code());
  rh.count = count_out;
  const uint32_t used = kHeaderBytes + count_out * static_cast<uint32_t>(sizeof(pool::BlockRef));
  rh.message_len = static_cast<uint32_t>(std::min<size_t>(st.message().size(), capacity - used));
  std::memcpy(answer.data(), &rh, sizeof(rh));
  std::memcpy(answer.data() + used, st.message().data(), rh.message_len);
  return {st.code(), used + rh.message_len};
}

}  // namespace kvpool::daemon
