// libFuzzer target: kvpoold's request validation and dispatch (daemon::Dispatcher) fed raw
// ring records from a few owners against two small live pool cores.
//
// Input: a sequence of records, each
//   u8 owner | u8 type | u8 flags | u16 length (LE) | length bytes of record payload
// `type` below 0xF0 is an opcode (type % 16, so 0, 14 and 15 are unknown opcodes); from
// 0xF0 up it picks one of a few far-out values. The payload is what a client would put on its
// ring: RequestHeader then items. Random bytes rarely name a live block, so `flags` lets
// the fuzzer make parts of a record plausible while leaving the rest hostile:
//   bit 0  count := what the payload holds, payload trimmed to whole items
//   bit 1  pool := pool % 2
//   bit 2  BlockRefs in the items := handles seen in earlier answers (any owner's); for a
//          register with token ids / keys (kRegisterTokens), in the items after its header
//   bit 3  hashes in the items := sequence hashes registered earlier
//   bit 4  register items: parent := an earlier hash, has_parent in {0,1}, priority small
//   bit 5  allocate: count := count % 24
// After every record: both cores pass check_invariants() and the answer is well formed
// (header, status, count, refs the owner now really holds, message bounds). At the end of
// the input every owner is released and every block must be free or inactive again.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "daemon/dispatch.hpp"
#include "kvpool/pool/pool_core.hpp"
#include "kvpool/shm/protocol.hpp"
#include "kvpool/shm/ring.hpp"

using namespace kvpool;

namespace {

constexpr uint32_t kOwners = 3;
constexpr size_t kRingBytes = 4096;  // the daemon's smallest ring: refs_limit 188
constexpr uint32_t kMaxPayload = shm::max_ring_payload(kRingBytes);
constexpr size_t kHistory = 256;

[[noreturn]] void die(const char* what, uint64_t a = 0, uint64_t b = 0) {
  std::fprintf(stderr, "dispatch_fuzz: %s (%llu, %llu)\n", what, static_cast<unsigned long long>(a),
               static_cast<unsigned long long>(b));
  std::abort();
}

struct Arena {
  pool::PoolCoreConfig config;
  size_t bytes = 0;
  void* memory = nullptr;
};

// The arenas live in static storage (no heap: nothing for LeakSanitizer to lose track of).
constexpr size_t kArenaRoom = size_t{1} << 20;
alignas(64) unsigned char g_memory[2][kArenaRoom];

std::vector<Arena>& arenas() {
  static std::vector<Arena> a = [] {
    // A tight pool (few holds: exhaustion paths) and a roomier one.
    std::vector<Arena> v{{{16, kOwners, 20}}, {{48, kOwners, 0}}};
    for (size_t i = 0; i < v.size(); ++i) {
      v[i].bytes = *pool::PoolCore::arena_bytes(v[i].config);
      if (v[i].bytes > kArenaRoom) die("arena too large", v[i].bytes);
      v[i].memory = g_memory[i];
    }
    return v;
  }();
  return a;
}

class Reader {
 public:
  Reader(const uint8_t* d, size_t n) : d_(d), n_(n) {}
  bool empty() const { return pos_ >= n_; }
  uint8_t u8() { return pos_ < n_ ? d_[pos_++] : 0; }
  uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
  std::span<const uint8_t> take(size_t k) {
    k = std::min(k, n_ - std::min(pos_, n_));
    std::span<const uint8_t> s(d_ + pos_, k);
    pos_ += k;
    return s;
  }

 private:
  const uint8_t* d_;
  size_t n_;
  size_t pos_ = 0;
};

uint32_t pick_type(uint8_t t) {
  if (t < 0xF0) return t % 16;
  static constexpr uint32_t far[] = {0xFFFFu,     0x7FFFFFFFu, 0xFFFFFFFEu, 0x100u | 1u,
                                     0x80000003u, 256u,        65535u,      0xFFFFFFF0u};
  return far[t % 8];
}

struct Run {
  std::vector<pool::PoolCore> cores;
  daemon::Dispatcher dispatcher;
  std::vector<pool::BlockRef> refs;  // handles seen in answers
  std::vector<uint64_t> hashes;      // sequence hashes seen in register records

  template <typename T>
  const T& pick(const std::vector<T>& v, uint64_t i) const {
    return v[i % v.size()];
  }
};

void remember_ref(Run& r, pool::BlockRef ref) {
  if (r.refs.size() < kHistory)
    r.refs.push_back(ref);
  else
    r.refs[(ref.id * 31 + ref.generation) % kHistory] = ref;
}
void remember_hash(Run& r, uint64_t h) {
  if (r.hashes.size() < kHistory)
    r.hashes.push_back(h);
  else
    r.hashes[h % kHistory] = h;
}

void shape(Run& r, uint32_t type, uint8_t flags, std::vector<std::byte>& rec) {
  if (rec.size() < sizeof(proto::RequestHeader)) return;
  proto::RequestHeader rq;
  std::memcpy(&rq, rec.data(), sizeof(rq));
  const auto op = static_cast<proto::Opcode>(type);
  const bool opcode = proto::opcode_known(type);
  const uint64_t item = opcode ? proto::request_item_bytes(op) : 0;
  if (flags & 2) rq.pool %= 2;
  if ((flags & 32) && type == static_cast<uint32_t>(proto::Opcode::kAllocate)) rq.count %= 24;
  if ((flags & 1) && item > 0) {
    rq.count = static_cast<uint32_t>((rec.size() - sizeof(rq)) / item);
    rec.resize(sizeof(rq) + rq.count * item);
  }
  std::memcpy(rec.data(), &rq, sizeof(rq));
  if (op == proto::Opcode::kRegisterTokens && (flags & 4) && !r.refs.empty()) {
    // The items after the 8-byte RegisterExtrasHeader; the rest (token ids, key lengths,
    // keys) stays as the input has it.
    for (size_t at = sizeof(rq) + sizeof(proto::RegisterExtrasHeader), i = 0;
         i < rq.count && at + sizeof(pool::RegisterItem) <= rec.size();
         ++i, at += sizeof(pool::RegisterItem)) {
      pool::RegisterItem it;
      std::memcpy(&it, rec.data() + at, sizeof(it));
      it.block = r.pick(r.refs, it.block.id);
      std::memcpy(rec.data() + at, &it, sizeof(it));
    }
  }
  std::byte* items = rec.data() + sizeof(rq);
  const size_t n = item > 0 ? (rec.size() - sizeof(rq)) / item : 0;
  for (size_t i = 0; i < n; ++i) {
    std::byte* at = items + i * item;
    if (op == proto::Opcode::kMatch) {
      uint64_t h;
      std::memcpy(&h, at, 8);
      if ((flags & 8) && !r.hashes.empty()) h = r.pick(r.hashes, h);
      std::memcpy(at, &h, 8);
    } else if (op == proto::Opcode::kRegister) {
      pool::RegisterItem it;
      std::memcpy(&it, at, sizeof(it));
      if ((flags & 4) && !r.refs.empty()) it.block = r.pick(r.refs, it.block.id);
      if ((flags & 8) && !r.hashes.empty() && (it.sequence_hash & 3) == 0)
        it.sequence_hash = r.pick(r.hashes, it.sequence_hash >> 2);  // a duplicate on purpose
      if (flags & 16) {
        it.has_parent &= 1;
        it.priority %= 4;
        if (!r.hashes.empty()) it.parent_hash = r.pick(r.hashes, it.parent_hash);
      }
      std::memcpy(at, &it, sizeof(it));
    } else if (op == proto::Opcode::kReleaseMutable || op == proto::Opcode::kReleaseImmutable) {
      pool::BlockRef ref;
      std::memcpy(&ref, at, sizeof(ref));
      if ((flags & 4) && !r.refs.empty()) ref = r.pick(r.refs, ref.id);
      std::memcpy(at, &ref, sizeof(ref));
    }
  }
}

void check_answer(Run& r, uint32_t owner, uint32_t type, std::span<const std::byte> rec,
                  std::span<const std::byte> answer, const daemon::Dispatcher::Outcome& out) {
  proto::RequestHeader rq{};
  const bool has_header = rec.size() >= sizeof(rq);
  if (has_header) std::memcpy(&rq, rec.data(), sizeof(rq));
  const uint32_t capacity = r.dispatcher.answer_capacity(type, rec);
  if (!daemon::Dispatcher::answers(type)) {
    if (capacity != 0 || out.answer_bytes != 0) die("a release was answered", type);
    for (std::byte b : answer)
      if (b != std::byte{0xA5}) die("a release wrote into the answer buffer", type);
    return;
  }
  if (out.answer_bytes < sizeof(proto::ResponseHeader) || out.answer_bytes > capacity)
    die("answer size out of bounds", out.answer_bytes, capacity);
  proto::ResponseHeader rh;
  std::memcpy(&rh, answer.data(), sizeof(rh));
  if (rh.correlation_id != rq.correlation_id) die("correlation id not echoed", rh.correlation_id);
  if (rh.status != static_cast<uint16_t>(out.code)) die("status differs from outcome", rh.status);
  if (rh.status > static_cast<uint16_t>(ErrorCode::kInternal)) die("unknown status", rh.status);
  if (out.code == ErrorCode::kInternal) die("internal error answered");
  if (sizeof(rh) + uint64_t{rh.count} * sizeof(pool::BlockRef) + rh.message_len != out.answer_bytes)
    die("answer length does not add up", rh.count, rh.message_len);
  if (out.code != ErrorCode::kOk && (rh.count != 0 || rh.message_len == 0))
    die("error answer with refs or without a message", rh.count, rh.message_len);
  if (std::memchr(answer.data() + sizeof(rh), 0, rh.message_len) != nullptr)
    die("NUL in an error message");
  const bool valid_op = proto::opcode_known(type);
  if (!has_header || !valid_op) {
    if (out.code != ErrorCode::kProtocolError)
      die("malformed record not refused", type, rec.size());
    return;
  }
  if (out.code == ErrorCode::kOk && rh.count > rq.count)
    die("more refs than asked", rh.count, rq.count);
  const auto op = static_cast<proto::Opcode>(type);
  if (out.code == ErrorCode::kOk &&
      (op == proto::Opcode::kAllocate || op == proto::Opcode::kRegister ||
       op == proto::Opcode::kRegisterTokens) &&
      rh.count != rq.count)
    die("allocate/register answered a partial batch", rh.count, rq.count);
  if (op == proto::Opcode::kPing && rec.size() == sizeof(rq) &&
      rq.count <= r.dispatcher.refs_limit() && out.code != ErrorCode::kOk)
    die("ping refused", rh.status);
  for (uint32_t i = 0; i < rh.count; ++i) {
    pool::BlockRef ref;
    std::memcpy(&ref, answer.data() + sizeof(rh) + i * sizeof(ref), sizeof(ref));
    // kLookup's misses and kRemove's no-ops name no block.
    if ((op == proto::Opcode::kLookup || op == proto::Opcode::kRemove) && ref.id == proto::kNoBlock)
      continue;
    const pool::PoolCore& core = r.cores[rq.pool];
    if (ref.id >= core.num_blocks()) die("answered block id out of range", ref.id);
    const pool::BlockMeta& m = core.block(ref.id);
    if (m.generation != ref.generation) die("answered a stale generation", ref.id, ref.generation);
    const auto st = static_cast<pool::BlockStateCode>(m.state);
    if (op == proto::Opcode::kAllocate) {
      if (st != pool::BlockStateCode::kMutable || m.owner != owner)
        die("allocated block not the owner's", ref.id);
    } else if (st != pool::BlockStateCode::kActive || core.holds_of(owner, ref.id) == 0) {
      die("registered/matched block not held", ref.id, m.state);
    }
    if (op != proto::Opcode::kRemove) remember_ref(r, ref);  // a remove takes no reference
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Run r;
  std::vector<pool::PoolCore*> ptrs;
  uint32_t index = 0;
  for (Arena& a : arenas()) {
    auto core = pool::PoolCore::create(a.memory, a.bytes, a.config, index++, "fuzz");
    if (!core) die("cannot create a pool core");
    r.cores.push_back(std::move(core.value()));
  }
  for (auto& c : r.cores) ptrs.push_back(&c);
  r.dispatcher = daemon::Dispatcher(ptrs, kMaxPayload);
  // kRegisterTokens checks its token counts against these (4 tokens per block, every pool).
  r.dispatcher.set_page_sizes(std::vector<uint32_t>(ptrs.size(), 4));

  alignas(8) static std::byte answer[kMaxPayload];
  std::vector<std::byte> rec;
  Reader in(data, size);
  for (int records = 0; !in.empty() && records < 512; ++records) {
    const uint32_t owner = in.u8() % kOwners;
    const uint32_t type = pick_type(in.u8());
    const uint8_t flags = in.u8();
    const uint32_t len = in.u16() % (kMaxPayload + 1);
    auto bytes = in.take(len);
    rec.assign(reinterpret_cast<const std::byte*>(bytes.data()),
               reinterpret_cast<const std::byte*>(bytes.data()) + bytes.size());
    shape(r, type, flags, rec);
    if (type == static_cast<uint32_t>(proto::Opcode::kRegister) &&
        rec.size() > sizeof(proto::RequestHeader)) {
      for (size_t off = sizeof(proto::RequestHeader);
           off + sizeof(pool::RegisterItem) <= rec.size(); off += sizeof(pool::RegisterItem)) {
        pool::RegisterItem it;
        std::memcpy(&it, rec.data() + off, sizeof(it));
        remember_hash(r, it.sequence_hash);
      }
    }
    std::memset(answer, 0xA5, sizeof(answer));
    const uint32_t capacity = r.dispatcher.answer_capacity(type, rec);
    if (capacity > sizeof(answer)) die("answer capacity beyond the ring's payload", capacity);
    const auto out = r.dispatcher.dispatch(owner, type, rec, {answer, capacity});
    check_answer(r, owner, type, rec, {answer, sizeof(answer)}, out);
    for (auto& c : r.cores) {
      Status inv = c.check_invariants();
      if (!inv.is_ok()) {
        std::fprintf(stderr, "after owner %u type %u (%zu bytes): %s\n", owner, type, rec.size(),
                     inv.to_string().c_str());
        die("invariants broken");
      }
    }
  }
  // A client's death: everything it held comes back.
  for (auto& c : r.cores) {
    for (uint32_t o = 0; o < kOwners; ++o) (void)c.release_owner(o);
    Status inv = c.check_invariants();
    if (!inv.is_ok()) {
      std::fprintf(stderr, "after release_owner: %s\n", inv.to_string().c_str());
      die("invariants broken after release_owner");
    }
    const pool::PoolCounts n = c.counts();
    if (n.mutable_blocks != 0 || n.active != 0 || n.free + n.inactive != n.total)
      die("blocks still held after every owner was released", n.mutable_blocks, n.active);
    if (c.stats().holds_used.load() != 0) die("holds still used", c.stats().holds_used.load());
  }
  return 0;
}
