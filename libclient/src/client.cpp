#include "kvpool/client.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "client_impl.hpp"
#include "kvpool/core/checksum.hpp"
#include "kvpool/shm/check_slice.hpp"

namespace kvpool {
namespace {

using detail::ClientImpl;
using proto::Opcode;

std::vector<ImmutableBlock> make_immutables(const std::shared_ptr<ClientImpl>& c, uint32_t pool,
                                            uint32_t incarnation,
                                            const std::vector<pool::BlockRef>& refs,
                                            std::span<const SequenceHash> hashes);

}  // namespace

// ---- Pool --------------------------------------------------------------------------------

const std::string& Pool::name() const { return client_->conn().pools()[index_].name; }
const LayoutConfig& Pool::layout() const { return client_->conn().pools()[index_].layout.config(); }

DType Pool::dtype() const { return dtype_from_shm(client_->conn().pools()[index_].info.dtype); }

HashScheme Pool::hash_scheme() const { return client_->conn().pools()[index_].hash_scheme(); }

BlockCounts Pool::counts() const {
  const pool::PoolCounts c = client_->conn().counts(index_);
  return BlockCounts{c.total, c.free, c.inactive, c.active, c.mutable_blocks};
}

Result<TokenBlockSequence> Pool::hash_tokens(std::span<const Token> tokens, Salt salt) const {
  return TokenBlockSequence::create(tokens, page_size(), salt, hash_scheme());
}

Status Pool::check_hash_scheme(HashScheme worker_scheme) const {
  const HashScheme pool_scheme = hash_scheme();
  if (pool_scheme == worker_scheme) return Status::ok();
  return Status(ErrorCode::kVersionMismatch,
                "pool '" + name() + "' hashes with scheme '" +
                    std::string(hash_scheme_name(pool_scheme)) + "' (" +
                    std::to_string(static_cast<uint32_t>(pool_scheme)) + "), this worker with '" +
                    std::string(hash_scheme_name(worker_scheme)) +
                    "': its hashes would never match the pool's; use the pool's scheme "
                    "(Pool::hash_scheme()) or set \"hash_scheme\" in kvpoold's config");
}

Pool::Storage Pool::storage() const {
  return client_->conn().pools()[index_].is_device() ? Storage::kCuda : Storage::kHost;
}

Result<int> Pool::cuda_device() const {
  const auto& p = client_->conn().pools()[index_];
  if (!p.device)
    return Status(ErrorCode::kInvalidState,
                  "pool '" + p.name + "' is a host pool: it has no CUDA device");
  return p.device->device();
}

// Lets the pool build and retire handles without widening their public API.
class PoolAccess {
 public:
  static void forget(MutableBlock& b) { b.client_.reset(); }
  static bool issued_by(const MutableBlock& b, const ClientImpl* c) { return b.client_.get() == c; }
  static uint32_t incarnation(const MutableBlock& b) { return b.incarnation_; }
  static MutableBlock make_mutable(std::shared_ptr<ClientImpl> c, uint32_t pool,
                                   uint32_t incarnation, pool::BlockRef ref, uint32_t page) {
    return MutableBlock(std::move(c), pool, incarnation, ref.id, ref.generation, page);
  }
  static ImmutableBlock make_immutable(detail::ImmutableEntry* e) { return ImmutableBlock(e); }
  static Result<uint64_t> registered_checksum(const ImmutableBlock& b) {
    const detail::ImmutableSlab* slab = detail::ImmutableSlab::of(b.entry_);
    return slab->client->registered_checksum(slab->pool, slab->incarnation, b.entry_->ref);
  }
};

namespace {

// Owned by an async call's deferred task, so it dies with a future dropped unread: then
// the answer's blocks go back to the daemon when it arrives (Connection::abandon) instead
// of staying held, or active and never evictable, until the client exits. get() disarms it.
struct AnswerGuard {
  std::shared_ptr<ClientImpl> c;
  detail::Call call;
  uint32_t pool = 0;
  bool immutable = false;
  std::shared_ptr<std::vector<MutableBlock>> handed_over;  // register: the caller's blocks
  bool armed = false;
  AnswerGuard() = default;
  AnswerGuard(const AnswerGuard&) = delete;
  AnswerGuard& operator=(const AnswerGuard&) = delete;
  ~AnswerGuard() {
    if (!armed) return;
    // The daemon that got the request is gone: no answer will come, and a reattach may
    // have claimed the caller's blocks back already (as the mutable blocks they still are
    // in our table). Then they are released as any others, through the table, on the
    // connection current now; forgetting them here would leave them held there.
    if (call.conn->gone()) return;
    std::vector<pool::BlockRef> mine;
    if (handed_over) {
      for (auto& b : *handed_over) {
        mine.push_back({b.block_id(), b.generation()});
        PoolAccess::forget(b);  // the answer decides who releases them
      }
      c->forget_mutable(pool, mine);
    }
    call.conn->abandon(call.corr, pool, immutable, std::move(mine));
  }
};

std::shared_ptr<AnswerGuard> guard_for(const std::shared_ptr<ClientImpl>& c,
                                       const Result<detail::Call>& corr, uint32_t pool,
                                       bool immutable) {
  auto g = std::make_shared<AnswerGuard>();
  g->c = c;
  g->pool = pool;
  g->immutable = immutable;
  g->armed = corr.is_ok();
  if (corr) g->call = *corr;
  return g;
}

// The answer half of allocate, shared by the blocking and the async form.
Result<std::vector<MutableBlock>> finish_allocate(const std::shared_ptr<ClientImpl>& c,
                                                  uint32_t pool, uint32_t page,
                                                  const Result<detail::Call>& corr) {
  if (!corr) return corr.status();
  auto r = corr->conn->wait(corr->corr);
  if (!r) return r.status();
  if (r->code != ErrorCode::kOk) return r->status();
  auto inc = c->took(*corr, pool, r->refs, /*immutable=*/false);
  if (!inc) return inc.status();
  std::vector<MutableBlock> out;
  out.reserve(r->refs.size());
  for (auto ref : r->refs) out.push_back(PoolAccess::make_mutable(c, pool, *inc, ref, page));
  return out;
}

Result<std::vector<ImmutableBlock>> finish_match(const std::shared_ptr<ClientImpl>& c,
                                                 uint32_t pool, const Result<detail::Call>& corr,
                                                 std::span<const SequenceHash> hashes) {
  if (!corr) return corr.status();
  auto r = corr->conn->wait(corr->corr);
  if (!r) return r.status();
  if (r->code != ErrorCode::kOk) return r->status();
  auto inc = c->took(*corr, pool, r->refs, /*immutable=*/true);
  if (!inc) return inc.status();
  return make_immutables(c, pool, *inc, r->refs, hashes);
}

}  // namespace

// The blocking forms call the answer half directly: no future's shared state, no copy of
// the request (a few hundred ns of a ~10 us round trip).
Result<std::vector<MutableBlock>> Pool::allocate_blocks(uint32_t count) {
  auto corr = client_->send(Opcode::kAllocate, index_, count, nullptr, 0);
  return finish_allocate(client_, index_, layout().page_size, corr);
}

std::future<Result<std::vector<MutableBlock>>> Pool::allocate_blocks_async(uint32_t count) {
  auto corr = client_->send(Opcode::kAllocate, index_, count, nullptr, 0);
  auto c = client_;
  uint32_t pool = index_;
  uint32_t page = layout().page_size;
  auto guard = guard_for(c, corr, pool, /*immutable=*/false);
  return std::async(std::launch::deferred, [c, pool, page, corr, guard]() {
    guard->armed = false;
    return finish_allocate(c, pool, page, corr);
  });
}

namespace {

// The request half of register, shared by the blocking and the async form: validates the
// caller's blocks, sends them, and keeps them (the daemon decides their fate).
struct RegisterCall {
  Result<detail::Call> corr;
  std::shared_ptr<std::vector<MutableBlock>> keep;
  std::vector<SequenceHash> hashes;
};

// A kRegisterTokens payload (shm/protocol.hpp): header, the items, then each block's tokens
// (committed blocks hold exactly page_size of them).
std::vector<std::byte> register_tokens_payload(std::span<const pool::RegisterItem> items,
                                               std::span<const MutableBlock> blocks,
                                               uint32_t page_size) {
  const auto n = static_cast<uint32_t>(items.size());
  std::vector<std::byte> out(proto::register_extras_bytes(n, page_size));
  const proto::RegisterExtrasHeader h{page_size, 0};
  std::memcpy(out.data(), &h, sizeof(h));
  std::memcpy(out.data() + sizeof(h), items.data(), items.size_bytes());
  std::byte* at = out.data() + sizeof(h) + items.size_bytes();
  for (const MutableBlock& b : blocks) {
    const std::span<const Token> t = b.state().tokens();
    std::memcpy(at, t.data(), std::min<size_t>(t.size(), page_size) * sizeof(Token));
    at += uint64_t{page_size} * sizeof(Token);
  }
  return out;
}

// Where checksums read the blocks' bytes (RegisterOptions::checksum), or nullptr without.
// Checksums are of the bytes as this process sees them now: the block is still ours
// (mutable), so nobody else may be writing it.
Result<const std::byte*> checksum_base(const std::shared_ptr<ClientImpl>& c, uint32_t pool,
                                       const std::string& pool_name,
                                       const RegisterOptions& options) {
  if (!options.checksum) return static_cast<const std::byte*>(nullptr);
  const detail::PoolView& view = c->conn().pools()[pool];
  if (view.is_device())
    return Status(ErrorCode::kUnsupported,
                  "pool '" + pool_name +
                      "' is a device pool: block checksums need a host pool, whose bytes "
                      "kvpoold can read (register without RegisterOptions::checksum)");
  auto b = c->base(pool);
  if (!b) return b.status();
  return static_cast<const std::byte*>(*b);
}

// Block i of a register call: ours, in this pool, still valid after any restart, committed.
Status check_register_block(const std::shared_ptr<ClientImpl>& c, uint32_t pool,
                            const std::string& pool_name, size_t i, const MutableBlock& b) {
  if (!b.valid() || b.pool_index() != pool)
    return Status(ErrorCode::kInvalidArgument,
                  "block " + std::to_string(i) + " does not belong to pool '" + pool_name + "'");
  // A block id means something only to the connection that allocated it: another
  // Client's block (another daemon's, or this daemon's under another slot) would name
  // some other block here.
  if (!PoolAccess::issued_by(b, c.get()))
    return Status(ErrorCode::kInvalidArgument,
                  "block " + std::to_string(i) +
                      " was allocated by another kvpool::Client: a block can be registered only "
                      "through the Client (and pool) that allocated it");
  // A block a restarted kvpoold did not give back: its id may be another's there now.
  if (Status kept =
          c->check_handle(pool, PoolAccess::incarnation(b), {b.block_id(), b.generation()});
      !kept.is_ok())
    return Status(kept.code(), "block " + std::to_string(i) + ": " + kept.message());
  if (!b.state().sequence_hash() || !b.state().block_hash() || !b.state().is_complete())
    return Status(ErrorCode::kInvalidState,
                  "block " + std::to_string(i) +
                      " must be committed (Complete) before register, it is " +
                      std::string(block_state_name(b.state().kind())));
  return Status::ok();
}

RegisterCall send_register(const std::shared_ptr<ClientImpl>& c, uint32_t pool,
                           const std::string& pool_name, std::vector<MutableBlock> blocks,
                           const RegisterOptions& options) {
  std::vector<pool::RegisterItem> items(blocks.size());
  std::vector<SequenceHash> hashes(blocks.size());
  auto base = checksum_base(c, pool, pool_name, options);
  Status bad = base.status();
  const bool known = options.checksum && !options.checksums.empty();
  if (bad.is_ok() && known && options.checksums.size() != blocks.size())
    bad = Status(ErrorCode::kInvalidArgument,
                 std::to_string(options.checksums.size()) + " known checksums for " +
                     std::to_string(blocks.size()) + " blocks (RegisterOptions::checksums)");
  for (size_t i = 0; i < blocks.size() && bad.is_ok(); ++i) {
    const MutableBlock& b = blocks[i];
    bad = check_register_block(c, pool, pool_name, i, b);
    if (!bad.is_ok()) break;
    const SequenceHash seq = *b.state().sequence_hash();
    auto parent = b.state().parent_sequence_hash();
    items[i] = pool::RegisterItem{{b.block_id(), b.generation()},
                                  seq,
                                  *b.state().block_hash(),
                                  parent.value_or(0),
                                  b.priority(),
                                  parent ? 1u : 0u,
                                  kNoChecksum};
    if (known)
      items[i].checksum = options.checksums[i];
    else if (*base != nullptr)
      items[i].checksum = block_checksum(*base, c->conn().pools()[pool].layout, b.block_id());
    hashes[i] = seq;
  }
  auto send = [&]() -> Result<detail::Call> {
    if (!bad.is_ok()) return bad;
    const auto n = static_cast<uint32_t>(items.size());
    if (!options.send_tokens)
      return c->send(Opcode::kRegister, pool, n, items.data(),
                     items.size() * sizeof(pool::RegisterItem));
    const std::vector<std::byte> payload =
        register_tokens_payload(items, blocks, c->conn().pools()[pool].layout.config().page_size);
    return c->send(Opcode::kRegisterTokens, pool, n, payload.data(), payload.size());
  };
  Result<detail::Call> corr = send();
  // The daemon now owns the caller's blocks (registered, or recycled when deduplicated):
  // they are forgotten without releasing once the answer says so. On failure nothing
  // changed daemon-side and the vector's destructor releases them as usual.
  return {std::move(corr), std::make_shared<std::vector<MutableBlock>>(std::move(blocks)),
          std::move(hashes)};
}

Result<std::vector<ImmutableBlock>> finish_register(const std::shared_ptr<ClientImpl>& c,
                                                    uint32_t pool, const RegisterCall& call) {
  if (!call.corr) return call.corr.status();
  auto r = call.corr->conn->wait(call.corr->corr);
  if (!r) return r.status();
  if (r->code != ErrorCode::kOk) return r->status();
  std::vector<pool::BlockRef> handed;
  handed.reserve(call.keep->size());
  for (auto& b : *call.keep) handed.push_back({b.block_id(), b.generation()});
  auto inc = c->registered(*call.corr, pool, handed, r->refs);
  if (!inc) return inc.status();
  for (auto& b : *call.keep) PoolAccess::forget(b);
  return make_immutables(c, pool, *inc, r->refs, call.hashes);
}

}  // namespace

// Blocking: no future's shared state, no task.
Result<std::vector<ImmutableBlock>> Pool::register_blocks(std::vector<MutableBlock> blocks) {
  return register_blocks(std::move(blocks), RegisterOptions{});
}

Result<std::vector<ImmutableBlock>> Pool::register_blocks(std::vector<MutableBlock> blocks,
                                                          const RegisterOptions& options) {
  RegisterCall call = send_register(client_, index_, name(), std::move(blocks), options);
  return finish_register(client_, index_, call);
}

std::future<Result<std::vector<ImmutableBlock>>> Pool::register_blocks_async(
    std::vector<MutableBlock> blocks) {
  return register_blocks_async(std::move(blocks), RegisterOptions{});
}

std::future<Result<std::vector<ImmutableBlock>>> Pool::register_blocks_async(
    std::vector<MutableBlock> blocks, const RegisterOptions& options) {
  auto c = client_;
  uint32_t pool = index_;
  auto call =
      std::make_shared<RegisterCall>(send_register(c, pool, name(), std::move(blocks), options));
  auto guard = guard_for(c, call->corr, pool, /*immutable=*/true);
  guard->handed_over = call->keep;
  return std::async(std::launch::deferred, [c, pool, call, guard]() {
    guard->armed = false;
    return finish_register(c, pool, *call);
  });
}

Result<std::vector<ImmutableBlock>> Pool::match_sequence_hashes(
    std::span<const SequenceHash> hashes) {
  return match_sequence_hashes(hashes, MatchOptions{});
}

Result<std::vector<ImmutableBlock>> Pool::match_sequence_hashes(
    std::span<const SequenceHash> hashes, const MatchOptions& options) {
  const Opcode op = options.onboard ? Opcode::kMatchOnboard : Opcode::kMatch;
  auto corr = client_->send(op, index_, static_cast<uint32_t>(hashes.size()), hashes.data(),
                            hashes.size() * sizeof(SequenceHash));
  return finish_match(client_, index_, corr, hashes);
}

std::future<Result<std::vector<ImmutableBlock>>> Pool::match_sequence_hashes_async(
    std::span<const SequenceHash> hashes) {
  return match_sequence_hashes_async(hashes, MatchOptions{});
}

std::future<Result<std::vector<ImmutableBlock>>> Pool::match_sequence_hashes_async(
    std::span<const SequenceHash> hashes, const MatchOptions& options) {
  auto c = client_;
  uint32_t pool = index_;
  const Opcode op = options.onboard ? Opcode::kMatchOnboard : Opcode::kMatch;
  auto corr = c->send(op, pool, static_cast<uint32_t>(hashes.size()), hashes.data(),
                      hashes.size() * sizeof(SequenceHash));
  // The caller's span may be gone by the time the future is read: keep a copy.
  std::vector<SequenceHash> h(hashes.begin(), hashes.end());
  auto guard = guard_for(c, corr, pool, /*immutable=*/true);
  return std::async(std::launch::deferred, [c, pool, corr, guard, h = std::move(h)]() {
    guard->armed = false;
    return finish_match(c, pool, corr, h);
  });
}

// ---- per-block checksums --------------------------------------------------------------------

Result<std::vector<ChecksumResult>> Pool::verify_blocks(std::span<const ImmutableBlock> blocks) {
  const detail::PoolView& view = client_->conn().pools()[index_];
  if (view.is_device())
    return Status(ErrorCode::kUnsupported,
                  "pool '" + view.name + "' is a device pool: block checksums need a host pool");
  std::vector<pool::BlockRef> refs;
  refs.reserve(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    const ImmutableBlock& b = blocks[i];
    if (!b.valid() || b.pool_index() != index_)
      return Status(
          ErrorCode::kInvalidArgument,
          "block " + std::to_string(i) + " is not a held block of pool '" + view.name + "'");
    refs.push_back({b.block_id(), b.generation()});
  }
  // The daemon hashes at most kCheckSliceBytes per request (it serves every client
  // meanwhile): send as many requests as that takes.
  const uint64_t per = std::max<uint64_t>(
      1, proto::kCheckSliceBytes / std::max<uint64_t>(view.layout.block_bytes(), 1));
  std::vector<ChecksumResult> out;
  out.reserve(refs.size());
  for (size_t at = 0; at < refs.size(); at += per) {
    const auto n = static_cast<uint32_t>(std::min<uint64_t>(per, refs.size() - at));
    auto r =
        client_->call(Opcode::kVerify, index_, n, refs.data() + at, n * sizeof(pool::BlockRef));
    if (!r) return r.status();
    if (r->code != ErrorCode::kOk) return r->status();
    if (r->refs.size() != n)
      return Status(ErrorCode::kProtocolError, "verify answer of " +
                                                   std::to_string(r->refs.size()) +
                                                   " results for " + std::to_string(n) + " blocks");
    for (const pool::BlockRef& word : r->refs) {
      proto::VerifyResult v;
      std::memcpy(&v, &word, sizeof(v));  // the answer's words are VerifyResults
      out.push_back(static_cast<ChecksumResult>(v.outcome));
    }
  }
  return out;
}

Status Pool::check_blocks(std::span<const ImmutableBlock> blocks) {
  auto r = verify_blocks(blocks);
  if (!r) return r.status();
  for (size_t i = 0; i < r->size(); ++i) {
    if ((*r)[i] != ChecksumResult::kMismatch) continue;
    char hash[24];
    std::snprintf(hash, sizeof(hash), "0x%016llx",
                  static_cast<unsigned long long>(blocks[i].sequence_hash()));
    return Status(ErrorCode::kChecksumMismatch,
                  "block " + std::to_string(blocks[i].block_id()) + " (sequence hash " + hash +
                      ") of pool '" + name() +
                      "' no longer matches the checksum it was registered with: kvpoold "
                      "evicted it; drop it and recompute its KV");
  }
  return Status::ok();
}

Result<uint64_t> Pool::registered_checksum(const ImmutableBlock& block) const {
  if (!block.valid() || block.pool_index() != index_)
    return Status(ErrorCode::kInvalidArgument, "block " + std::to_string(block.block_id()) +
                                                   " is not a held block of pool '" + name() + "'");
  return PoolAccess::registered_checksum(block);
}

Result<ScrubStep> Pool::scrub_step(uint32_t start_block, uint64_t byte_budget) {
  if (is_device())
    return Status(ErrorCode::kUnsupported,
                  "pool '" + name() + "' is a device pool: block checksums need a host pool");
  const proto::ScrubRequest rq{start_block, 0, byte_budget};
  auto r = client_->call(Opcode::kScrub, index_, 1, &rq, sizeof(rq));
  if (!r) return r.status();
  if (r->code != ErrorCode::kOk) return r->status();
  // The answer's words: a ScrubSummary, then `reported` ScrubMismatch.
  const size_t bytes = r->refs.size() * sizeof(pool::BlockRef);
  proto::ScrubSummary s{};
  if (bytes < sizeof(s)) return Status(ErrorCode::kProtocolError, "scrub answer too short");
  const auto* p = reinterpret_cast<const std::byte*>(r->refs.data());
  std::memcpy(&s, p, sizeof(s));
  if (bytes != sizeof(s) + uint64_t{s.reported} * sizeof(proto::ScrubMismatch))
    return Status(ErrorCode::kProtocolError, "scrub answer of " + std::to_string(bytes) +
                                                 " bytes for " + std::to_string(s.reported) +
                                                 " mismatches");
  ScrubStep step;
  step.next_block = s.next_block;
  step.checked = s.checked;
  step.mismatches = s.mismatches;
  step.skipped = s.skipped;
  for (uint32_t i = 0; i < s.reported; ++i) {
    proto::ScrubMismatch m;
    std::memcpy(&m, p + sizeof(s) + i * sizeof(m), sizeof(m));
    step.corrupt.push_back({m.block, m.generation, m.sequence_hash});
  }
  return step;
}

namespace {

std::vector<ImmutableBlock> make_immutables(const std::shared_ptr<ClientImpl>& c, uint32_t pool,
                                            uint32_t incarnation,
                                            const std::vector<pool::BlockRef>& refs,
                                            std::span<const SequenceHash> hashes) {
  std::vector<ImmutableBlock> out;
  if (refs.empty()) return out;
  out.reserve(refs.size());
  // One allocation for every handle of the answer; each ImmutableBlock adopts its entry's
  // first copy.
  detail::ImmutableSlab* slab = detail::ImmutableSlab::create(c, pool, incarnation, refs, hashes);
  detail::ImmutableEntry* e = slab->entries();
  for (uint32_t i = 0; i < slab->count; ++i) out.push_back(PoolAccess::make_immutable(&e[i]));
  return out;
}

}  // namespace

// ---- Client ------------------------------------------------------------------------------

Result<Client> Client::connect(std::string_view instance, const ConnectOptions& options) {
  detail::ConnectionOptions o;
  o.runtime_dir = options.runtime_dir;
  o.connect_timeout = options.connect_timeout;
  o.poll_us = options.poll_us;
  o.unresponsive_after = options.unresponsive_after;
  o.pin_host_pools = options.pin_host_pools;
  auto conn = detail::Connection::open(std::string(instance), o);
  if (!conn) return conn.status();
  detail::ReattachPolicy r{options.reattach, options.reattach_timeout};
  return Client(std::make_shared<ClientImpl>(std::move(conn.value()), std::string(instance), o, r));
}

Result<Pool> Client::pool(std::string_view name) const {
  const auto& pools = impl_->conn().pools();
  std::string known;
  for (uint32_t i = 0; i < pools.size(); ++i) {
    // Every pool is named in the "not found" message, so the list is built before the match.
    known += (known.empty() ? "" : ", ") + pools[i].name;
    if (pools[i].name != name) continue;
    if (!pools[i].usable)
      return Status(ErrorCode::kPermissionDenied,
                    "pool '" + std::string(name) + "' is not open to uid " +
                        std::to_string(::getuid()) + " / gid " + std::to_string(::getgid()) +
                        " (its allowed_uids/allowed_gids in the daemon's config)");
    return Pool(impl_, i);
  }
  return Status(ErrorCode::kNotFound,
                "no pool named '" + std::string(name) + "' (this daemon has: " + known + ")");
}

std::vector<std::string> Client::pool_names() const {
  std::vector<std::string> out;
  for (auto& p : impl_->conn().pools()) out.push_back(p.name);
  return out;
}

Status Client::ping() {
  auto r = impl_->call(Opcode::kPing, 0, 0, nullptr, 0);
  if (!r) return r.status();
  return r->status();
}

void Client::flush() { impl_->flush(); }
bool Client::daemon_alive() const { return !impl_->conn().gone(); }
uint32_t Client::slot() const { return impl_->conn().slot(); }

}  // namespace kvpool
