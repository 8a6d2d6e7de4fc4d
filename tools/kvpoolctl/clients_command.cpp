// kvpoolctl clients [--instance NAME] [--runtime-dir DIR] [--json]
// One row per attached (or attaching, or suspect) client slot: who it is, how much it has
// asked, and how many blocks it holds right now across all pools.

#include <cstdio>
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "control_view.hpp"
#include "kvpool/core/clock.hpp"

namespace kvpool {
namespace {

std::string age_text(double seconds) {
  char buf[32];
  auto s = static_cast<uint64_t>(seconds);
  if (s < 60) {
    std::snprintf(buf, sizeof(buf), "%.1fs", seconds);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof(buf), "%llum%02llus", static_cast<unsigned long long>(s / 60),
                  static_cast<unsigned long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%lluh%02llum", static_cast<unsigned long long>(s / 3600),
                  static_cast<unsigned long long>(s / 60 % 60));
  }
  return buf;
}

nlohmann::json clients_json(const ctl::ControlView& v) {
  auto rl = [](const auto& a) { return a.load(std::memory_order_relaxed); };
  const uint64_t now = now_ns(CLOCK_REALTIME);
  nlohmann::json out = nlohmann::json::array();
  for (uint32_t slot = 0; slot < v.header->max_clients; ++slot) {
    const shm::SlotInfo& si = v.slot(slot);
    uint32_t state = si.state.load(std::memory_order_acquire);
    if (state == static_cast<uint32_t>(shm::SlotState::kFree)) continue;
    uint64_t attached = rl(si.attach_time_ns);
    double age = attached != 0 && now > attached ? static_cast<double>(now - attached) / 1e9 : 0.0;
    uint64_t mutable_blocks = 0, held_blocks = 0, held_refs = 0;
    nlohmann::json per_pool = nlohmann::json::object();
    for (const auto& p : v.pools) {
      ctl::SlotHoldings h = ctl::slot_holdings(p, slot);
      mutable_blocks += h.mutable_blocks;
      held_blocks += h.held_blocks;
      held_refs += h.held_refs;
      per_pool[p.name()] = h.mutable_blocks + h.held_blocks;
    }
    out.push_back({{"slot", slot},
                   {"generation", rl(si.generation)},
                   {"pid", rl(si.pid)},
                   {"uid", rl(si.uid)},
                   {"state", ctl::slot_state_name(state)},
                   {"requests", rl(si.requests)},
                   {"protocol_errors", rl(si.protocol_errors)},
                   {"rejected_handles", rl(si.rejected_handles)},
                   {"match_hits", rl(si.match_hits)},
                   {"blocks_held", mutable_blocks + held_blocks},
                   {"mutable_blocks", mutable_blocks},
                   {"registered_blocks_held", held_blocks},
                   {"references_held", held_refs},
                   {"blocks_held_by_pool", per_pool},
                   {"attach_time_unix_ns", attached},
                   {"age_seconds", age}});
  }
  return out;
}

void run_clients(const ctl::ViewOptions& o) {
  ctl::ControlView v = ctl::open_control(o.instance, o.runtime_dir);
  nlohmann::json clients = clients_json(v);
  if (o.json) {
    std::cout << nlohmann::json{{"instance", std::string(v.header->instance)},
                                {"max_clients", v.header->max_clients},
                                {"clients", clients}}
                     .dump(2)
              << "\n";
    return;
  }
  if (clients.empty()) {
    std::cout << "no clients attached to instance '" << v.header->instance << "' (0 of "
              << v.header->max_clients << " slots in use)\n";
    return;
  }
  std::vector<std::vector<std::string>> rows{
      {"slot", "pid", "uid", "state", "requests", "protocol_errors", "blocks_held", "age"}};
  for (const auto& c : clients) {
    rows.push_back({std::to_string(c["slot"].get<uint32_t>()),
                    std::to_string(c["pid"].get<int32_t>()),
                    std::to_string(c["uid"].get<uint32_t>()), c["state"].get<std::string>(),
                    std::to_string(c["requests"].get<uint64_t>()),
                    std::to_string(c["protocol_errors"].get<uint64_t>()),
                    std::to_string(c["blocks_held"].get<uint64_t>()),
                    age_text(c["age_seconds"].get<double>())});
  }
  std::cout << ctl::format_table(rows);
}

}  // namespace

void add_clients_command(CLI::App& app) {
  auto opts = std::make_shared<ctl::ViewOptions>();
  auto* cmd = app.add_subcommand(
      "clients",
      "attached clients: slot, pid, uid, state, requests, protocol errors, blocks "
      "held, age");
  ctl::add_view_options(cmd, *opts);
  cmd->callback([opts] { run_clients(*opts); });
}

}  // namespace kvpool
