// The progress engine's part in restarts (issue 15): taking over a previous daemon's pools
// at start (daemon/adoption.hpp), publishing who this daemon is, and keeping its segments
// (control, registries, host pools' data) in the supervisor's descriptor store
// (daemon/fd_store.hpp).
#include <spdlog/spdlog.h>

#include "daemon/engine.hpp"
#include "daemon/epoch.hpp"
#include "daemon/fd_store.hpp"
#include "daemon/kept_processes.hpp"

namespace kvpool::daemon {

Result<PoolStorage> Engine::pool_storage_for(const PoolConfig& pc, const Layout& layout,
                                             std::optional<Adoption::Pool>& previous) {
  if (previous) {
    auto adopted = PoolStorage::adopt(config_.instance, pc, layout, std::move(previous->data));
    if (adopted) return adopted;
    spdlog::warn("pool '{}' starts empty, its previous segment cannot be mapped: {}", pc.name,
                 adopted.status().message());
    previous.reset();
  }
  return PoolStorage::create(config_.instance, pc, layout);
}

void Engine::adopt_pool_registry(Adoption& adoption, const Adoption::Pool& previous, uint32_t i,
                                 const pool::PoolCoreConfig& core_config, pool::PoolCore& core) {
  std::vector<pool::AdoptPin> pins;
  auto counts = adoption.adopt_registry(previous, core, keeper_owner(), &pins);
  if (!counts) {
    // The bytes stay (they are this pool's, and every block is free now); nothing of the
    // previous registry is served.
    spdlog::warn("pool '{}' starts empty, its previous registry is not adopted: {}", previous.name,
                 counts.status().message());
    auto fresh = control_.create_pool_core(i, core_config, previous.name);
    if (fresh) core = std::move(fresh.value());
    return;
  }
  previous_.add_pins(i, pins);  // given back when their clients reattach
  shm::PoolInfo& info = control_.pool_info(i);
  info.adopted_blocks = counts->adopted;
  info.adoption_dropped_blocks = counts->dropped;
  shm::RestartInfo& r = ctl_->restart;
  r.adopted_pools += 1;
  r.adopted_blocks += counts->adopted;
  r.adoption_dropped_blocks += counts->dropped;
  spdlog::info(
      "pool '{}': adopted {} registered block(s) from epoch {:016x}; dropped {} whose "
      "registration could not be proven; {} mutable block(s) of clients that are gone are "
      "free; {} block(s) held by clients of the previous daemon that still run are kept out "
      "of circulation until they reattach or exit{}",
      previous.name, counts->adopted, adoption.previous_epoch(), counts->dropped, counts->freed,
      counts->pinned, counts->interrupted ? " (its daemon died inside a pool call)" : "");
}

void Engine::publish_identity(const Adoption& adoption, uint64_t adoption_ns) {
  shm::RestartInfo& r = ctl_->restart;
  r.epoch = new_epoch();
  // The daemon this one succeeds (whose segments the supervisor passed), adopted or not:
  // the next start tells the newer of two stored control segments by it.
  r.previous_epoch = adoption.previous_epoch();
  r.generation_tag = pick_generation_tag(r.epoch, adoption.taken_tags());
  r.adoption_ns = r.adopted_pools != 0 ? adoption_ns : 0;
  control_.set_epoch(r.epoch);
  previous_control_name_ = adoption.previous_control_name();
  previous_registry_names_ = adoption.previous_registry_names();
  previous_kept_name_ = adoption.previous_kept_name();
}

void Engine::store_segments() {
  if (!fd_store_available()) return;
  // Read-only is enough for the next daemon, which only reads it.
  auto ctl = control_.open_readonly_fd();
  bool ok = ctl && fd_store_put(fd_name_control(ctl_->restart.epoch), ctl->get());
  for (uint32_t i = 0; i < pools_.size(); ++i) {
    auto reg = control_.open_registry_fd(i);
    ok = ok && reg &&
         fd_store_put(fd_name_registry(ctl_->restart.epoch, pools_[i].config.name), reg->get());
  }
  for (auto& p : pools_) {
    if (p.storage.kind() != shm::StorageKind::kHost) continue;  // dies with us: nothing to keep
    auto fd = p.storage.client_fd();
    ok = ok && fd && fd_store_put(fd_name_pool(p.config.name), fd->get());
  }
  // Who our keeper keeps blocks for, so that a successor lets them go when those processes
  // exit even if they never come back to us (daemon/kept_processes.hpp).
  const auto kept = previous_.kept_processes();
  auto kept_fd = write_kept(ctl_->restart.epoch, kept);
  ok = ok && kept_fd && fd_store_put(fd_name_kept(ctl_->restart.epoch), kept_fd->get());
  if (!ok) {
    spdlog::warn(
        "could not hand the segments to the supervisor's descriptor store: a restart "
        "will start empty");
    return;
  }
  if (!previous_control_name_.empty()) fd_store_remove(previous_control_name_);
  for (const std::string& name : previous_registry_names_) fd_store_remove(name);
  if (!previous_kept_name_.empty()) fd_store_remove(previous_kept_name_);
  spdlog::debug("segments stored with the supervisor (control '{}')",
                fd_name_control(ctl_->restart.epoch));
}

void Engine::forget_segments() {
  if (!fd_store_available()) return;
  fd_store_remove(fd_name_control(ctl_->restart.epoch));
  for (auto& p : pools_) fd_store_remove(fd_name_registry(ctl_->restart.epoch, p.config.name));
  fd_store_remove(fd_name_kept(ctl_->restart.epoch));
  for (auto& p : pools_)
    if (p.storage.kind() == shm::StorageKind::kHost) fd_store_remove(fd_name_pool(p.config.name));
  spdlog::info("stopped without --keep-cache: the next kvpoold starts empty");
}

}  // namespace kvpool::daemon
