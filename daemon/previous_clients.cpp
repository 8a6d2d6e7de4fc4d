#include "daemon/previous_clients.hpp"

#include <poll.h>
#include <spdlog/spdlog.h>

#include <string>

namespace kvpool::daemon {

PreviousClients::PreviousClients(uint64_t epoch, std::vector<Adoption::LiveClient> clients,
                                 uint32_t keeper, size_t num_pools, uint32_t previous_keeper)
    : epoch_(epoch), keeper_(keeper), previous_keeper_(previous_keeper), holders_(num_pools) {
  for (auto& c : clients) {
    const bool inherited = c.inherited;  // it cannot reclaim: finished from the start
    clients_.push_back(Client{std::move(c), {}, inherited});
    clients_.back().pins.resize(num_pools);
  }
}

std::vector<KeptProcess> PreviousClients::kept_processes() const {
  std::vector<KeptProcess> out;
  for (const Client& c : clients_)
    if (c.who.start_ticks != 0) out.push_back({c.who.pid, c.who.uid, c.who.start_ticks});
  return out;
}

void PreviousClients::add_pins(uint32_t pool, std::span<const pool::AdoptPin> pins) {
  for (const pool::AdoptPin& p : pins) {
    if (p.owner == previous_keeper_) {
      // The previous keeper's: kept while any process it kept blocks for runs (each is a
      // holder that settles when it exits). With none named (a list that was missing or
      // unusable), one holder that never settles: the block stays kept.
      bool named = false;
      for (Client& c : clients_) {
        if (!c.who.inherited) continue;
        if (c.pins[pool].emplace(p.id, Pin{p.generation, p.references, PinState::kLost}).second)
          ++holders_[pool][p.id];
        named = true;
      }
      if (!named) ++holders_[pool][p.id];
      continue;
    }
    Client* c = find(p.owner);
    if (c == nullptr) {
      ++holders_[pool][p.id];  // cannot happen: adoption pins only live owners' blocks
      continue;
    }
    auto [it, fresh] = c->pins[pool].emplace(p.id, Pin{p.generation, p.references});
    if (!fresh || p.references > kMaxClaimableReferences) {
      // A hold record for a block this slot also owned mutable, or a count no client can
      // hold, can only come from a half-written arena: nothing of it is handed back (kept
      // until the process exits, as a lost pin is).
      it->second.state = PinState::kLost;
      if (!fresh) continue;
    }
    ++holders_[pool][p.id];
  }
}

PreviousClients::Client* PreviousClients::find(uint32_t slot) {
  for (auto& c : clients_)
    if (c.who.slot == slot && !c.who.inherited) return &c;
  return nullptr;
}

Status PreviousClients::reclaim(uint32_t owner, pid_t pid, uid_t uid, const proto::ReclaimHeader& h,
                                std::span<pool::PoolCore* const> cores, uint32_t pool,
                                std::span<const proto::ReclaimItem> items, pool::BlockRef* lost,
                                uint32_t* lost_count) {
  *lost_count = 0;
  if (h.previous_epoch != epoch_ || epoch_ == 0)
    return Status(ErrorCode::kNotFound,
                  "this kvpoold did not take over from the daemon of epoch " +
                      std::to_string(h.previous_epoch) +
                      ": nothing held under it was kept (its blocks are gone; match again)");
  Client* c = find(h.previous_slot);
  pollfd alive{c ? c->who.pidfd.get() : -1, POLLIN, 0};
  auto refuse = [&](const std::string& why) {
    return Status(ErrorCode::kPermissionDenied, "slot " + std::to_string(h.previous_slot) +
                                                    " of the previous kvpoold: " + why +
                                                    "; nothing to give back");
  };
  if (c == nullptr)
    return refuse("no client that still ran when this kvpoold adopted its pools held it");
  if (c->who.slot_generation != h.previous_slot_generation)
    return refuse("it was held under generation " + std::to_string(c->who.slot_generation) +
                  ", not " + std::to_string(h.previous_slot_generation));
  if (c->who.pid != pid || c->who.uid != uid)
    return refuse("it was held by pid " + std::to_string(c->who.pid) + " uid " +
                  std::to_string(c->who.uid) + ", not by this process (pid " + std::to_string(pid) +
                  " uid " + std::to_string(uid) + ")");
  if (::poll(&alive, 1, 0) != 0)
    return refuse("the process that held it has exited (this pid is another process's)");
  if (c->finished)
    return Status(ErrorCode::kInvalidState, "slot " + std::to_string(h.previous_slot) +
                                                " of the previous kvpoold was reclaimed already");
  pool::PoolCore& core = *cores[pool];
  for (const proto::ReclaimItem& it : items) {
    auto p = c->pins[pool].find(it.block.id);
    bool ok =
        p != c->pins[pool].end() && p->second.state == PinState::kOpen &&
        p->second.generation == it.block.generation &&
        (it.references == 0 ? p->second.references == 0
                            : p->second.references != 0 && it.references <= p->second.references);
    if (ok) ok = core.hand_over(keeper_, owner, it.block, it.references).is_ok();
    if (!ok) {
      lost[(*lost_count)++] = it.block;
      // Kept until the process exits: it may still read the block through its mapping.
      if (p != c->pins[pool].end() && p->second.state == PinState::kOpen)
        p->second.state = PinState::kLost;
      continue;
    }
    p->second.state = PinState::kClaimed;
    settle(core, pool, it.block.id);
  }
  if ((h.flags & proto::kReclaimFinal) != 0) {
    // The client said all it holds: what it did not claim is nobody's any more.
    const uint32_t n = settle_all(*c, cores, PinState::kOpen);
    c->finished = true;
    spdlog::info(
        "previous client in slot {} (pid {}) reattached in slot {}: {} block(s) kept "
        "for it that it no longer holds are back in circulation",
        c->who.slot, c->who.pid, owner, n);
  }
  return Status::ok();
}

uint32_t PreviousClients::settle(pool::PoolCore& core, uint32_t pool, uint32_t id) {
  auto h = holders_[pool].find(id);
  if (h == holders_[pool].end() || --h->second > 0) return 0;
  holders_[pool].erase(h);
  return core.release_kept(keeper_, id) ? 1 : 0;
}

uint32_t PreviousClients::settle_all(Client& c, std::span<pool::PoolCore* const> cores,
                                     PinState which) {
  uint32_t returned = 0;
  for (uint32_t pool = 0; pool < c.pins.size() && pool < cores.size(); ++pool) {
    for (auto& [id, pin] : c.pins[pool]) {
      if (pin.state != which) continue;
      pin.state = PinState::kSettled;
      returned += settle(*cores[pool], pool, id);
    }
  }
  return returned;
}

uint32_t PreviousClients::reap(std::span<pool::PoolCore* const> cores) {
  uint32_t returned = 0;
  std::erase_if(clients_, [&](Client& c) {
    pollfd p{c.who.pidfd.get(), POLLIN, 0};
    if (::poll(&p, 1, 0) == 0) return false;  // still runs
    uint32_t n = settle_all(c, cores, PinState::kOpen);
    n += settle_all(c, cores, PinState::kLost);
    if (c.who.inherited) {
      spdlog::info(
          "process {} that missed a restart has exited: {} block(s) kept for it are back in "
          "circulation",
          c.who.pid, n);
    } else {
      spdlog::info(
          "previous client in slot {} (pid {}) has exited{}: {} block(s) kept for it are back "
          "in circulation",
          c.who.slot, c.who.pid, c.finished ? "" : " without reattaching", n);
    }
    returned += n;
    return true;
  });
  return returned;
}

}  // namespace kvpool::daemon
