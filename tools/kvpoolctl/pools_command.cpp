// kvpoolctl pools [--instance NAME] [--runtime-dir DIR] [--json]
// The pools a daemon serves, as configured: storage, device, layout, sizes.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <string_view>

#include "commands.hpp"
#include "control_view.hpp"
#include "kvpool/core/dtype.hpp"
#include "kvpool/core/layout.hpp"

namespace kvpool {
namespace {

std::string human_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  size_t u = 0;
  while (v >= 1024.0 && u + 1 < std::size(units)) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

nlohmann::json pools_json(const ctl::ControlView& v) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < v.pool_infos.size(); ++i) {
    const shm::PoolInfo& info = *v.pool_infos[i];
    const LayoutConfig& l = info.layout;
    auto layout = Layout::create(l);
    uint64_t block_bytes = layout ? layout->block_bytes() : 0;
    nlohmann::json device = nullptr;
    if (info.device >= 0) device = info.device;
    // The configured element type ("bf16", ...); null for a pool given dtype_bytes alone.
    nlohmann::json dtype = nullptr;
    if (std::string_view name = dtype_name(static_cast<DType>(info.dtype)); !name.empty())
      dtype = std::string(name);
    out.push_back({{"index", i},
                   {"name", v.pools[i].name()},
                   {"storage", ctl::storage_name(info.storage)},
                   {"device", device},
                   {"num_blocks", l.num_blocks},
                   {"layout",
                    {{"kind", ctl::layout_kind_config_name(l.kind)},
                     {"num_layers", l.num_layers},
                     {"outer_dim", l.outer_dim},
                     {"page_size", l.page_size},
                     {"inner_dim", l.inner_dim},
                     {"dtype_bytes", l.dtype_bytes},
                     {"dtype", dtype},
                     {"alignment", l.alignment}}},
                   {"block_bytes", block_bytes},
                   {"total_bytes", info.data_bytes},
                   {"shm_name", std::string(info.shm_name)},
                   {"arena_bytes", info.arena_bytes}});
    const shm::DiskTierInfo* d = ctl::disk_info(v, i);
    out.back()["disk"] = d ? ctl::disk_json(*d) : nlohmann::json();
  }
  return out;
}

void run_pools(const ctl::ViewOptions& o) {
  ctl::ControlView v = ctl::open_control(o.instance, o.runtime_dir);
  nlohmann::json pools = pools_json(v);
  if (o.json) {
    std::cout
        << nlohmann::json{{"instance", std::string(v.header->instance)}, {"pools", pools}}.dump(2)
        << "\n";
    return;
  }
  std::vector<std::vector<std::string>> rows{{"pool", "storage", "device", "blocks", "dtype",
                                              "layout", "block_bytes", "total_bytes", "total"}};
  for (const auto& p : pools) {
    const auto& l = p["layout"];
    // kind layers x outer x page x inner x dtype: the shape of one block.
    std::string shape = l["kind"].get<std::string>() + " " +
                        std::to_string(l["num_layers"].get<uint32_t>()) + "x" +
                        std::to_string(l["outer_dim"].get<uint32_t>()) + "x" +
                        std::to_string(l["page_size"].get<uint32_t>()) + "x" +
                        std::to_string(l["inner_dim"].get<uint32_t>()) + "x" +
                        std::to_string(l["dtype_bytes"].get<uint32_t>()) + "B";
    rows.push_back({p["name"].get<std::string>(), p["storage"].get<std::string>(),
                    p["device"].is_null() ? "-" : std::to_string(p["device"].get<int32_t>()),
                    std::to_string(p["num_blocks"].get<uint32_t>()),
                    l["dtype"].is_null() ? "-" : l["dtype"].get<std::string>(), shape,
                    std::to_string(p["block_bytes"].get<uint64_t>()),
                    std::to_string(p["total_bytes"].get<uint64_t>()),
                    human_bytes(p["total_bytes"].get<uint64_t>())});
  }
  std::cout << ctl::format_table(rows);
  std::cout << "(layout: kind layers x outer x page_size x inner_dim x dtype bytes)\n";
  std::vector<std::vector<std::string>> disks{
      {"pool", "disk_path", "slots_used", "slots_total", "slot_bytes", "direct_io", "io_engine"}};
  for (const auto& p : pools) {
    if (p["disk"].is_null()) continue;
    const auto& d = p["disk"];
    disks.push_back({p["name"].get<std::string>(), d["path"].get<std::string>(),
                     std::to_string(d["slots_used"].get<uint64_t>()),
                     std::to_string(d["slots_total"].get<uint64_t>()),
                     std::to_string(d["slot_bytes"].get<uint64_t>()),
                     d["direct_io"].get<bool>() ? "on" : "off", d["io_engine"].get<std::string>()});
  }
  if (disks.size() > 1) std::cout << "\n" << ctl::format_table(disks);
}

}  // namespace

void add_pools_command(CLI::App& app) {
  auto opts = std::make_shared<ctl::ViewOptions>();
  auto* cmd = app.add_subcommand(
      "pools",
      "pools of a running kvpoold: storage, device, dtype, layout, block and total bytes, "
      "disk tier");
  ctl::add_view_options(cmd, *opts);
  cmd->callback([opts] { run_pools(*opts); });
}

}  // namespace kvpool
