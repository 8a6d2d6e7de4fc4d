#include "daemon/adoption.hpp"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cstring>
#include <span>

#include "daemon/kept_processes.hpp"
#include "kvpool/core/layout.hpp"
#include "kvpool/pool/previous_arena.hpp"
#include "kvpool/shm/fields.hpp"
#include "kvpool/shm/unix_socket.hpp"

namespace kvpool::daemon {
namespace {

bool starts_with(const std::string& s, const char* prefix) {
  return s.compare(0, std::strlen(prefix), prefix) == 0;
}

bool has_restart_info(const shm::ControlHeader& h) {
  return h.layout_major == shm::kLayoutMajor &&
         h.header_bytes >= offsetof(shm::ControlHeader, restart) + sizeof(shm::RestartInfo);
}

}  // namespace

namespace {

// A control segment the supervisor kept, graded (its header is set: it is kvpool's), with
// the epochs that say which daemon made it.
struct StoredControl {
  std::string name;
  shm::GradedControl graded;
  uint64_t epoch = 0, previous = 0;
};

// Sorts the supervisor's descriptors: pool data segments into `data` (by pool name),
// registry segments (header checked) into `registries`, control segments returned; anything
// else is dropped from the store.
std::vector<StoredControl> sort_stored(std::vector<InheritedFd> fds,
                                       std::map<std::string, shm::UniqueFd>& data,
                                       std::vector<Adoption::StoredRegistry>& registries,
                                       std::map<std::string, shm::UniqueFd>& kept) {
  std::vector<StoredControl> controls;
  for (InheritedFd& f : fds) {
    if (starts_with(f.name, kFdNameKeptPrefix)) {
      kept[f.name] = std::move(f.fd);
    } else if (starts_with(f.name, kFdNamePoolPrefix)) {
      data[f.name.substr(std::strlen(kFdNamePoolPrefix))] = std::move(f.fd);
    } else if (starts_with(f.name, kFdNameRegistryPrefix)) {
      auto seg = shm::Segment::map_fd(std::move(f.fd), /*writable=*/false);
      auto h = seg ? shm::check_registry(*seg) : Result<const shm::RegistryHeader*>(seg.status());
      if (!h) {
        spdlog::warn("stored descriptor '{}' is not a usable registry segment ({}); dropping it",
                     f.name, h.status().message());
        fd_store_remove(f.name);
        continue;
      }
      registries.push_back({f.name, std::move(seg.value())});
    } else if (starts_with(f.name, kFdNameControlPrefix)) {
      auto seg = shm::Segment::map_fd(std::move(f.fd), /*writable=*/false);
      shm::GradedControl g;
      if (seg) g = shm::ControlReader::open_graded(std::move(*seg), shm::ControlOpener::kSuccessor);
      if (g.header == nullptr) {
        spdlog::warn("stored descriptor '{}' is not a kvpool control segment; dropping it", f.name);
        fd_store_remove(f.name);
        continue;
      }
      const shm::ControlHeader* h = g.header;
      StoredControl c{f.name, std::move(g)};
      if (has_restart_info(*h)) {
        c.epoch = h->restart.epoch;
        c.previous = h->restart.previous_epoch;
      }
      controls.push_back(std::move(c));
    } else {
      spdlog::warn("stored descriptor '{}' is none of kvpoold's; dropping it", f.name);
      fd_store_remove(f.name);
    }
  }
  return controls;
}

// Two control segments: a daemon stored its own and died before it removed its
// predecessor's. The newest is the one no other names as its predecessor; the older one
// describes a registry that has changed since, and is dropped from the store.
size_t drop_superseded(const std::vector<StoredControl>& controls) {
  size_t newest = 0;
  for (size_t i = 0; i < controls.size(); ++i) {
    bool superseded = false;
    for (size_t k = 0; k < controls.size(); ++k)
      superseded |= k != i && controls[i].epoch != 0 && controls[k].previous == controls[i].epoch;
    if (!superseded) newest = i;
  }
  for (size_t i = 0; i < controls.size(); ++i) {
    if (i == newest) continue;
    spdlog::info("dropping the superseded control segment '{}'", controls[i].name);
    fd_store_remove(controls[i].name);
  }
  return newest;
}

}  // namespace

Adoption Adoption::prepare(std::vector<InheritedFd> fds) {
  Adoption a;
  std::vector<StoredControl> controls =
      sort_stored(std::move(fds), a.data_, a.registries_, a.kept_);
  if (controls.empty()) {
    if (!a.data_.empty())
      spdlog::warn("{} stored pool segment(s) but no control segment: every pool starts empty",
                   a.data_.size());
    return a;
  }
  const size_t newest = drop_superseded(controls);
  StoredControl& c = controls[newest];
  const shm::ControlHeader& h = *c.graded.header;
  a.previous_control_name_ = c.name;
  if (has_restart_info(h) && h.restart.generation_tag != 0) a.tags_.set(h.restart.generation_tag);
  // The graded open (shm/control_segment.hpp) checked this build's exact layout, every
  // part within the segment, and that its daemon is gone.
  if (c.graded.grade != shm::ControlGrade::kDead) {
    spdlog::warn("the previous control segment is unusable ({}): every pool starts empty",
                 c.graded.why.message());
    return a;
  }
  a.previous_epoch_ = c.epoch;
  a.keep_registries_of(c.epoch, h.max_clients);
  // Its clients that still run (a pidfd that is not readable: the process has not exited).
  // A pid reused by an unrelated process keeps some blocks out of circulation longer, and
  // could claim them back only as the same uid (daemon/previous_clients.cpp). Each pool's
  // registry segment lists the clients that could use it; a client that could use none
  // held nothing.
  // Owner max_clients is the previous daemon's keeper: what it kept for clients of the
  // daemon before it that had not come back. Those may still run, and who they are died
  // with that daemon: it stays out of circulation (under our keeper, never handed back).
  a.live_owners_.assign(h.max_clients + 1, 0);
  a.previous_keeper_ = h.max_clients;
  for (uint32_t i = 0; i < h.max_clients; ++i) {
    const shm::SlotInfo* slot = nullptr;
    for (const StoredRegistry& r : a.registries_) {
      const auto* slots = reinterpret_cast<const shm::SlotInfo*>(
          r.segment.as<const char>() + r.segment.as<const shm::RegistryHeader>()->slots_offset);
      if (slots[i].state.load(std::memory_order_relaxed) !=
          static_cast<uint32_t>(shm::SlotState::kFree))
        slot = &slots[i];
    }
    const int32_t pid = slot ? slot->pid.load(std::memory_order_relaxed) : 0;
    if (pid <= 0) continue;
    auto fd = shm::pidfd_open(pid);
    pollfd p{fd ? fd->get() : -1, POLLIN, 0};
    if (!fd || ::poll(&p, 1, 0) != 0) continue;  // gone already
    // Its pid may name another process now, one that took it while no daemon ran: the start
    // time the predecessor recorded tells them apart (0: a 4.0 daemon's slot, pid alone).
    const uint64_t recorded = slot->start_ticks.load(std::memory_order_relaxed);
    const uint64_t now = process_start_ticks(pid).value_or(0);
    if (recorded != 0 && now != recorded) {
      spdlog::info(
          "slot {}'s client (pid {}) is gone: pid {} now names another process (started at "
          "tick {}, the client at {}); what it held is returned",
          i, pid, pid, now, recorded);
      continue;
    }
    a.live_owners_[i] = 1;
    a.live_clients_.push_back({i, slot->generation.load(std::memory_order_relaxed), pid,
                               slot->uid.load(std::memory_order_relaxed), std::move(fd.value()),
                               now});
  }
  a.live_owners_[h.max_clients] = a.inherit_kept(h, c.epoch) ? 1 : 0;
  // Lists of other daemons than the adopted one describe keepers nobody adopts now.
  for (auto& [name, fd] : a.kept_)
    if (name != a.previous_kept_name_) fd_store_remove(name);
  a.kept_.clear();
  a.previous_ = std::move(c.graded.reader);
  spdlog::info("found the control segment of kvpoold epoch {:016x} (pid {}) and {} pool segment(s)",
               a.previous_epoch_, h.daemon_pid, a.data_.size());
  return a;
}

bool Adoption::inherit_kept(const shm::ControlHeader& h, uint64_t epoch) {
  // A daemon that adopted nothing kept nothing for anyone.
  if (!has_restart_info(h) || h.restart.previous_epoch == 0) return false;
  auto it = kept_.find(fd_name_kept(epoch));
  if (it == kept_.end()) {
    // Written by every daemon that adopted since issue 27: missing, we cannot name who the
    // blocks were kept for, and they stay kept (safe, not free).
    spdlog::warn(
        "the previous kvpoold left no list of the processes its keeper kept blocks for: "
        "those blocks stay out of circulation until kvpoold starts without its cache");
    return true;
  }
  previous_kept_name_ = it->first;
  auto list = read_kept(it->second.get(), epoch);
  if (!list) {
    spdlog::warn(
        "the previous kvpoold's kept-process list is unusable ({}): the blocks it "
        "kept stay out of circulation until kvpoold starts without its cache",
        list.status().message());
    return true;
  }
  size_t alive = 0;
  for (const KeptProcess& p : *list) {
    auto fd = open_if_same_process(p);
    if (!fd) continue;  // exited (or its pid is another process's now): nothing to keep
    live_clients_.push_back({h.max_clients, 0, p.pid, p.uid, std::move(*fd), p.start_ticks, true});
    ++alive;
  }
  spdlog::info(
      "the previous kvpoold kept blocks for {} process(es) that missed a restart; {} "
      "still run{}",
      list->size(), alive, alive ? ": their blocks stay kept until they exit" : "");
  return alive > 0;
}

std::optional<Adoption::Pool> Adoption::take(const PoolConfig& pc) {
  auto it = data_.find(pc.name);
  if (!has_previous() || it == data_.end()) return std::nullopt;
  auto empty = [&](const std::string& why) {
    spdlog::warn("pool '{}' starts empty, the previous daemon's is not adopted: {}", pc.name, why);
    return std::nullopt;
  };
  std::span<const shm::PoolInfo> infos = previous_.pool_infos();
  const shm::PoolInfo* info = nullptr;
  uint32_t index = 0;
  for (uint32_t i = 0; i < infos.size(); ++i)
    if (strnlen(infos[i].name, shm::kNameBytes) < shm::kNameBytes && pc.name == infos[i].name) {
      info = &infos[i];
      index = i;
    }
  if (info == nullptr) return empty("its control segment has no pool of that name");
  const shm::RegistryHeader* reg = nullptr;
  for (const StoredRegistry& r : registries_) {
    const auto* rh = r.segment.as<const shm::RegistryHeader>();
    if (rh->pool == index && strnlen(rh->name, shm::kNameBytes) < shm::kNameBytes &&
        pc.name == rh->name)
      reg = rh;
  }
  if (reg == nullptr) return empty("no registry segment of it was kept");
  if (pc.storage != shm::StorageKind::kHost ||
      info->storage != static_cast<uint32_t>(shm::StorageKind::kHost))
    return empty("only host pools are adopted");
  if (!(info->layout == pc.layout))
    return empty(
        "the layout changed (blocks " + std::to_string(info->layout.num_blocks) + " -> " +
        std::to_string(pc.layout.num_blocks) + ", layers " +
        std::to_string(info->layout.num_layers) + " -> " + std::to_string(pc.layout.num_layers) +
        ", page " + std::to_string(info->layout.page_size) + " -> " +
        std::to_string(pc.layout.page_size) + ", inner " + std::to_string(info->layout.inner_dim) +
        " -> " + std::to_string(pc.layout.inner_dim) + ", ...)");
  if (info->dtype != static_cast<uint32_t>(pc.dtype)) return empty("the dtype changed");
  if (info->hash_scheme != static_cast<uint32_t>(pc.hash_scheme))
    return empty("the hash scheme changed");
  auto layout = Layout::create(pc.layout);
  if (!layout) return empty(layout.status().message());
  struct stat st {};
  if (info->data_bytes != layout->total_bytes() || ::fstat(it->second.get(), &st) != 0 ||
      static_cast<uint64_t>(st.st_size) < info->data_bytes)
    return empty("its data segment is smaller than its layout");
  // check_registry proved the arena lies within its segment.
  const void* arena = reinterpret_cast<const char*>(reg) + reg->arena_offset;
  const uint64_t arena_bytes = reg->arena_bytes;
  // Hostile input: every header field bounded, every table sound, and (when its writer died
  // between calls) every invariant; the message names what is wrong.
  auto prev = pool::open_previous_arena(arena, arena_bytes, pc.name);
  if (!prev) return empty("its arena is unusable (" + prev.status().message() + ")");
  if (prev->num_blocks() != pc.layout.num_blocks) return empty("its arena has another block count");
  // One owner per client slot, the keeper and the disk tier (Engine::init): another
  // max_owners (which alignment padding can hide from validate()) would make live_owners_ and
  // the keeper name the wrong owners. The disk tier's owner is never live: what it held
  // (blocks being written or read) goes back like a dead client's.
  if (prev->header().max_owners != previous_.max_clients() + 2)
    return empty("its arena header field max_owners is " +
                 std::to_string(prev->header().max_owners) + ", its daemon had max_clients " +
                 std::to_string(previous_.max_clients()) + " (and the keeper and the disk tier)");
  Pool p;
  p.name = pc.name;
  p.arena = arena;
  p.arena_bytes = arena_bytes;
  p.interrupted = prev->interrupted();
  p.data = std::move(it->second);
  data_.erase(it);
  return p;
}

void Adoption::keep_registries_of(uint64_t epoch, uint32_t max_clients) {
  std::vector<StoredRegistry> kept;
  for (StoredRegistry& r : registries_) {
    const auto* h = r.segment.as<const shm::RegistryHeader>();
    if (h->epoch == epoch && epoch != 0 && h->max_clients == max_clients) {
      kept.push_back(std::move(r));
      continue;
    }
    spdlog::info("dropping the registry segment '{}' of another daemon", r.name);
    fd_store_remove(r.name);
  }
  registries_ = std::move(kept);
}

std::vector<std::string> Adoption::previous_registry_names() const {
  std::vector<std::string> names;
  for (const StoredRegistry& r : registries_) names.push_back(r.name);
  return names;
}

void Adoption::release_unused() {
  for (auto& [name, fd] : data_) {
    spdlog::info("dropping the previous daemon's segment of pool '{}'", name);
    fd_store_remove(fd_name_pool(name));
  }
  data_.clear();  // closes them
}

Result<pool::AdoptCounts> Adoption::adopt_registry(const Pool& p, pool::PoolCore& core,
                                                   uint32_t keeper,
                                                   std::vector<pool::AdoptPin>* pins) {
  auto prev = pool::open_previous_arena(p.arena, p.arena_bytes, p.name);
  if (!prev) return prev.status();
  auto counts = core.adopt_registry(*prev, live_owners_, keeper, pins);
  if (!counts) return counts.status();
  for (uint32_t id = 0; id < core.num_blocks(); ++id)
    tags_.set(pool::generation_tag_of(core.block(id).generation));
  tags_.reset(0);  // 0 is never a daemon's tag
  return counts;
}

}  // namespace kvpool::daemon
