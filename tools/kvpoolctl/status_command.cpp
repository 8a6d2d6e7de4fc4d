// kvpoolctl status [--instance NAME] [--runtime-dir DIR] [--json]
#include <cstdio>
#include <cstring>
#include <iostream>

#include "commands.hpp"
#include "control_view.hpp"
#include "kvpool/core/hash.hpp"
#include "kvpool/core/version.hpp"
#include "kvpool/shm/handshake.hpp"

namespace kvpool {
namespace ctl {

ControlView open_control(const std::string& instance, const std::string& runtime_dir) {
  // Validated once, completely (offsets, lengths, arenas): see shm/control_segment.hpp.
  auto control = shm::observe(instance, runtime_dir);
  if (!control) {
    if (control.status().code() == ErrorCode::kNotFound)
      throw CommandError("no kvpoold is running for instance '" + instance + "' (" +
                         control.status().message() + ")");
    throw CommandError(control.status());
  }
  ControlView v;
  v.control = std::move(control.value());  // the mapping stays put: the pointers below hold
  v.header = &v.control.header();
  for (uint32_t i = 0; i < v.control.num_pools(); ++i) {
    if (!v.control.has_pool(i)) continue;  // closed to this caller: nothing of it is shown
    v.pool_infos.push_back(&v.control.pool_info(i));
    v.pools.push_back(v.control.arena(i));
    v.pool_index.push_back(i);
  }
  return v;
}

nlohmann::json status_json(const ControlView& v) {
  const auto& h = *v.header;
  auto rl = [](const auto& a) { return a.load(std::memory_order_relaxed); };
  uint32_t clients = 0;
  for (uint32_t i = 0; i < h.max_clients; ++i)
    clients += rl(v.slot(i).state) != static_cast<uint32_t>(shm::SlotState::kFree);
  nlohmann::json j;
  j["instance"] = std::string(h.instance);
  j["daemon_pid"] = h.daemon_pid;
  // Empty from daemons that predate the field (its bytes were reserved zeros).
  std::string version(h.daemon_version, strnlen(h.daemon_version, sizeof(h.daemon_version)));
  j["daemon_version"] = version.empty() ? "unknown" : version;
  j["kvpoolctl_version"] = kvpool::version_string();
  // Layout 3.1: the daemon's start epoch and what it adopted from its predecessor.
  if (const shm::RestartInfo* r = v.control.restart()) {
    char epoch[24];
    std::snprintf(epoch, sizeof(epoch), "%016llx", static_cast<unsigned long long>(r->epoch));
    j["epoch"] = epoch;
    std::snprintf(epoch, sizeof(epoch), "%016llx",
                  static_cast<unsigned long long>(r->previous_epoch));
    j["previous_epoch"] = r->previous_epoch != 0 ? nlohmann::json(epoch) : nlohmann::json();
    j["generation_tag"] = r->generation_tag;
    j["adopted_pools"] = r->adopted_pools;
    j["adopted_blocks"] = r->adopted_blocks;
    j["adoption_dropped_blocks"] = r->adoption_dropped_blocks;
    j["adoption_seconds"] = static_cast<double>(r->adoption_ns) / 1e9;
  }
  j["clients"] = clients;
  j["max_clients"] = h.max_clients;
  j["reclaimed_clients"] = rl(h.stats.reclaimed_clients);
  j["reclaimed_blocks"] = rl(h.stats.reclaimed_blocks);
  j["requests"] = rl(h.stats.requests);
  j["protocol_errors"] = rl(h.stats.protocol_errors);
  j["disconnects"] = rl(h.stats.disconnects);
  j["pools"] = nlohmann::json::array();
  for (size_t i = 0; i < v.pools.size(); ++i) {
    const auto& p = v.pools[i];
    auto c = p.counts();
    const auto& s = p.stats();
    const auto scheme = static_cast<HashScheme>(v.pool_infos[i]->hash_scheme);
    j["pools"].push_back({{"name", p.name()},
                          {"hash_scheme", std::string(hash_scheme_name(scheme))},
                          {"total_blocks", c.total},
                          {"free_blocks", c.free},
                          {"mutable_blocks", c.mutable_blocks},
                          {"active_blocks", c.active},
                          {"inactive_blocks", c.inactive},
                          {"allocations", rl(s.allocations)},
                          {"evictions", rl(s.evictions)},
                          {"registrations", rl(s.registrations)},
                          {"match_queries", rl(s.match_queries)},
                          {"match_hits", rl(s.match_hits)},
                          {"rejected_handles", rl(s.rejected_handles)},
                          {"adopted_blocks", v.pool_infos[i]->adopted_blocks},
                          {"adoption_dropped_blocks", v.pool_infos[i]->adoption_dropped_blocks}});
    // Layout 4.1: the pool's disk tier (null: none).
    const shm::DiskTierInfo* d = disk_info(v, i);
    j["pools"].back()["disk"] = d ? disk_json(*d) : nlohmann::json();
  }
  return j;
}

}  // namespace ctl

void add_status_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("status", "pool and client counts of a running kvpoold");
  auto instance = std::make_shared<std::string>("default");
  auto runtime_dir = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  cmd->add_option("--instance", *instance, "daemon instance")->capture_default_str();
  cmd->add_option("--runtime-dir", *runtime_dir, "directory of the daemon's socket");
  cmd->add_flag("--json", *json, "print JSON");
  cmd->callback([=] {
    ctl::ControlView v = ctl::open_control(*instance, *runtime_dir);
    nlohmann::json j = ctl::status_json(v);
    if (*json) {
      std::cout << j.dump(2) << "\n";
      return;
    }
    std::printf(
        "instance %s (pid %lld, kvpoold %s): %u client(s), reclaimed %llu client(s) / %llu "
        "block(s)\n",
        j["instance"].get<std::string>().c_str(),
        static_cast<long long>(j["daemon_pid"].get<int64_t>()),
        j["daemon_version"].get<std::string>().c_str(), j["clients"].get<uint32_t>(),
        static_cast<unsigned long long>(j["reclaimed_clients"].get<uint64_t>()),
        static_cast<unsigned long long>(j["reclaimed_blocks"].get<uint64_t>()));
    if (j.contains("epoch")) {
      std::printf("epoch %s", j["epoch"].get<std::string>().c_str());
      if (j["previous_epoch"].is_string())
        std::printf(", adopted %llu block(s) in %u pool(s) from epoch %s (%llu dropped)",
                    static_cast<unsigned long long>(j["adopted_blocks"].get<uint64_t>()),
                    j["adopted_pools"].get<uint32_t>(),
                    j["previous_epoch"].get<std::string>().c_str(),
                    static_cast<unsigned long long>(j["adoption_dropped_blocks"].get<uint64_t>()));
      std::printf("\n");
    }
    std::printf("%-12s %10s %10s %10s %10s %10s %14s %14s  %s\n", "pool", "total", "free",
                "mutable", "active", "inactive", "match_queries", "match_hits", "hash_scheme");
    for (auto& p : j["pools"]) {
      std::printf("%-12s %10u %10u %10u %10u %10u %14llu %14llu  %s\n",
                  p["name"].get<std::string>().c_str(), p["total_blocks"].get<uint32_t>(),
                  p["free_blocks"].get<uint32_t>(), p["mutable_blocks"].get<uint32_t>(),
                  p["active_blocks"].get<uint32_t>(), p["inactive_blocks"].get<uint32_t>(),
                  static_cast<unsigned long long>(p["match_queries"].get<uint64_t>()),
                  static_cast<unsigned long long>(p["match_hits"].get<uint64_t>()),
                  p["hash_scheme"].get<std::string>().c_str());
    }
    for (auto& p : j["pools"]) {
      if (p["disk"].is_null()) continue;
      const auto& d = p["disk"];
      auto u = [&](const char* k) { return static_cast<unsigned long long>(d[k].get<uint64_t>()); };
      std::printf(
          "disk of %s: %s, %llu/%llu slots, direct I/O %s, %s; written %llu B, read %llu B, "
          "queue drops %llu, checksum failures %llu, I/O errors %llu, onboards %llu (mean "
          "%.3f ms)\n",
          p["name"].get<std::string>().c_str(), d["path"].get<std::string>().c_str(),
          u("slots_used"), u("slots_total"), d["direct_io"].get<bool>() ? "on" : "off",
          d["io_engine"].get<std::string>().c_str(), u("bytes_written"), u("bytes_read"),
          u("write_queue_drops"), u("checksum_failures"), u("io_errors"), u("onboards"),
          d["onboard_mean_seconds"].get<double>() * 1e3);
    }
  });
}

}  // namespace kvpool
