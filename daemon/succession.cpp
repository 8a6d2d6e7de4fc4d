#include "daemon/succession.hpp"

#include <spdlog/spdlog.h>

#include "daemon/epoch.hpp"
#include "kvpool/core/clock.hpp"

namespace kvpool::daemon {

Succession Succession::begin(std::vector<InheritedFd> fds, const std::vector<PoolConfig>& pools,
                             uint32_t keeper) {
  Succession s;
  s.started_ns_ = now_ns(CLOCK_MONOTONIC);
  s.keeper_ = keeper;
  s.adoption_ = Adoption::prepare(std::move(fds));
  s.clients_ = PreviousClients(s.adoption_.previous_epoch(), s.adoption_.take_live_clients(),
                               keeper, pools.size(), s.adoption_.previous_keeper());
  s.taken_.resize(pools.size());
  for (size_t i = 0; i < pools.size(); ++i) s.taken_[i] = s.adoption_.take(pools[i]);
  s.adoption_.release_unused();
  return s;
}

Result<PoolStorage> Succession::storage_for(uint32_t i, const std::string& instance,
                                            const PoolConfig& pc, const Layout& layout) {
  std::optional<Adoption::Pool>& previous = taken_[i];
  if (previous) {
    auto adopted = PoolStorage::adopt(instance, pc, layout, std::move(previous->data));
    if (adopted) return adopted;
    spdlog::warn("pool '{}' starts empty, its previous segment cannot be mapped: {}", pc.name,
                 adopted.status().message());
    previous.reset();
  }
  return PoolStorage::create(instance, pc, layout);
}

void Succession::adopt_registry(uint32_t i, shm::ControlWriter& control,
                                const pool::PoolCoreConfig& core_config, pool::PoolCore& core) {
  if (!taken_[i]) return;
  const Adoption::Pool& previous = *taken_[i];
  std::vector<pool::AdoptPin> pins;
  auto counts = adoption_.adopt_registry(previous, core, keeper_, &pins);
  if (!counts) {
    // The bytes stay (they are this pool's, and every block is free now); nothing of the
    // previous registry is served.
    spdlog::warn("pool '{}' starts empty, its previous registry is not adopted: {}", previous.name,
                 counts.status().message());
    auto fresh = control.create_pool_core(i, core_config, previous.name);
    if (fresh) core = std::move(fresh.value());
    return;
  }
  clients_.add_pins(i, pins);  // given back when their clients reattach
  shm::PoolInfo& info = control.pool_info(i);
  info.adopted_blocks = counts->adopted;
  info.adoption_dropped_blocks = counts->dropped;
  shm::RestartInfo& r = control.header().restart;
  r.adopted_pools += 1;
  r.adopted_blocks += counts->adopted;
  r.adoption_dropped_blocks += counts->dropped;
  spdlog::info(
      "pool '{}': adopted {} registered block(s) from epoch {:016x}; dropped {} whose "
      "registration could not be proven; {} mutable block(s) of clients that are gone are "
      "free; {} block(s) held by clients of the previous daemon that still run are kept out "
      "of circulation until they reattach or exit{}",
      previous.name, counts->adopted, adoption_.previous_epoch(), counts->dropped, counts->freed,
      counts->pinned, counts->interrupted ? " (its daemon died inside a pool call)" : "");
}

void Succession::publish_identity(shm::ControlWriter& control) {
  shm::RestartInfo& r = control.header().restart;
  r.epoch = new_epoch();
  // The daemon this one succeeds (whose segments the supervisor passed), adopted or not:
  // the next start tells the newer of two stored control segments by it.
  r.previous_epoch = adoption_.previous_epoch();
  r.generation_tag = pick_generation_tag(r.epoch, adoption_.taken_tags());
  r.adoption_ns = r.adopted_pools != 0 ? now_ns(CLOCK_MONOTONIC) - started_ns_ : 0;
  control.set_epoch(r.epoch);
  previous_control_name_ = adoption_.previous_control_name();
  previous_registry_names_ = adoption_.previous_registry_names();
  previous_kept_name_ = adoption_.previous_kept_name();
  taken_.clear();
  adoption_ = Adoption();  // the predecessor's mappings go; the store keeps them until ours is
}

void Succession::forget_predecessor() const {
  if (!previous_control_name_.empty()) fd_store_remove(previous_control_name_);
  for (const std::string& name : previous_registry_names_) fd_store_remove(name);
  if (!previous_kept_name_.empty()) fd_store_remove(previous_kept_name_);
}

}  // namespace kvpool::daemon
