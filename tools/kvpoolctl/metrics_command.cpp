// kvpoolctl metrics [--instance NAME] [--runtime-dir DIR] [--json]
// Prometheus text exposition format (version 0.0.4), every name prefixed kvpool_, per-pool
// figures labelled pool="<name>" (metrics.hpp). For node_exporter's textfile collector or a
// scrape wrapper; kvpool-exporter serves the same families over HTTP. --json prints them as
// JSON.
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "control_view.hpp"
#include "metrics.hpp"

namespace kvpool {
namespace {

void run_metrics(const ctl::ViewOptions& o) {
  ctl::ControlView v = ctl::open_control(o.instance, o.runtime_dir);
  std::vector<metrics::Family> families = metrics::collect(v);
  families.push_back(metrics::build_info());
  if (o.json) {
    std::cout << nlohmann::json{{"instance", std::string(v.header->instance)},
                                {"metrics", metrics::to_json(families)}}
                     .dump(2)
              << "\n";
  } else {
    std::cout << metrics::to_text(families);
  }
}

}  // namespace

void add_metrics_command(CLI::App& app) {
  auto opts = std::make_shared<ctl::ViewOptions>();
  auto* cmd = app.add_subcommand(
      "metrics", "Prometheus text exposition of pool, client and request metrics (kvpool_*)");
  ctl::add_view_options(cmd, *opts);
  cmd->callback([opts] { run_metrics(*opts); });
}

}  // namespace kvpool
