// The progress engine's part in restarts (issue 15): keeping its segments (control,
// registries, host pools' data) in the supervisor's descriptor store (daemon/fd_store.hpp).
// What the predecessor handed over, and who this daemon is, are daemon/succession.hpp's.
#include <spdlog/spdlog.h>

#include "daemon/engine.hpp"
#include "daemon/fd_store.hpp"
#include "daemon/kept_processes.hpp"

namespace kvpool::daemon {

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
  const auto kept = succession_.clients().kept_processes();
  auto kept_fd = write_kept(ctl_->restart.epoch, kept);
  ok = ok && kept_fd && fd_store_put(fd_name_kept(ctl_->restart.epoch), kept_fd->get());
  if (!ok) {
    spdlog::warn(
        "could not hand the segments to the supervisor's descriptor store: a restart "
        "will start empty");
    return;
  }
  succession_.forget_predecessor();
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
