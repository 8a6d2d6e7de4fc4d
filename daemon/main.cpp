// kvpoold: owns a host's KV block memory and registry; workers attach with libkvpool.
//   kvpoold [--config FILE] [--instance NAME] [--runtime-dir DIR] [--log-level LEVEL]
//           [--keep-cache] [--supervise [--supervise-hook CMD]]
//   kvpoold --print-default-config | --version
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "daemon/config.hpp"
#include "daemon/engine.hpp"
#include "daemon/supervise.hpp"
#include "kvpool/core/layout.hpp"
#include "kvpool/core/version.hpp"
#include "kvpool/service/log.hpp"
#include "kvpool/service/notify.hpp"
#include "kvpool/service/signals.hpp"

namespace {

kvpool::daemon::Engine* g_engine = nullptr;

void on_signal(int) {
  if (g_engine) g_engine->request_stop();
}

// What the supervised kvpoold is started with: every argument but the supervisor's own.
std::vector<std::string> child_args(int argc, char** argv) {
  std::vector<std::string> child;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--supervise" || a.rfind("--supervise-hook=", 0) == 0) continue;
    if (a == "--supervise-hook") {
      ++i;
      continue;
    }
    child.push_back(a);
  }
  return child;
}

// Runs the engine until SIGTERM / SIGINT, telling systemd (sd_notify) how it goes.
int serve(const kvpool::daemon::Config& config, bool keep_cache) {
  using namespace kvpool::daemon;
  auto engine = Engine::create(config);
  if (!engine) {
    std::fprintf(stderr, "kvpoold: %s\n", engine.status().to_string().c_str());
    kvpool::service::notify_status("failed: " + engine.status().message());
    return 1;
  }
  g_engine = engine->get();
  (*engine)->keep_cache_on_stop(keep_cache);
  kvpool::service::on_stop_signals(on_signal);
  kvpool::service::ignore_sigpipe();

  EngineHooks hooks;
  hooks.ready = [] { kvpool::service::notify_ready(); };
  hooks.watchdog = [] { kvpool::service::notify_watchdog(); };
  hooks.status = [](const std::string& s) { kvpool::service::notify_status(s); };
  kvpool::Status st = (*engine)->run(hooks);
  kvpool::service::notify_stopping();
  g_engine = nullptr;
  engine->reset();
  if (!st.is_ok()) {
    std::fprintf(stderr, "kvpoold: %s\n", st.to_string().c_str());
    return 1;
  }
  spdlog::info("kvpoold stopped");
  return 0;
}

// --check-config: what the daemon would serve, one line per pool.
void print_config_summary(const kvpool::daemon::Config& c, const std::string& source) {
  uint64_t total = 0;
  std::string lines;
  for (const kvpool::daemon::PoolConfig& p : c.pools) {
    auto layout = kvpool::Layout::create(p.layout);
    const uint64_t bytes = layout ? layout->total_bytes() : 0;
    total += bytes;
    lines +=
        "  pool '" + p.name + "': " +
        (p.storage == kvpool::shm::StorageKind::kHost ? std::string("host")
                                                      : "cuda device " + std::to_string(p.device)) +
        ", " + std::to_string(p.layout.num_blocks) + " blocks of " +
        std::to_string(layout ? layout->block_bytes() : 0) + " bytes (" + std::to_string(bytes) +
        " bytes)\n";
  }
  std::cout << "kvpoold: " << source << " is valid: instance '" << c.instance << "', "
            << c.pools.size() << " pool(s), " << total << " bytes of pool memory\n"
            << lines;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kvpool::daemon;
  CLI::App app{"kvpoold: host-local KV-cache block manager daemon"};
  std::string config_path, instance, runtime_dir, log_level;
  bool print_default = false, keep_cache = false, supervise = false, check_config = false;
  std::string hook;
  app.add_option("-c,--config", config_path, "JSON configuration file");
  app.add_option("--instance", instance, "instance name (overrides the config)");
  app.add_option("--runtime-dir", runtime_dir, "directory of the socket (overrides the config)");
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|critical|off");
  app.add_flag("--keep-cache", keep_cache,
               "on SIGTERM, leave the pools in the supervisor's descriptor store so that the "
               "next kvpoold adopts them (upgrades); a crash always leaves them");
  app.add_flag("--supervise", supervise,
               "run kvpoold as a child and keep its pools across its restarts where systemd "
               "does not (daemon/supervise.hpp)");
  app.add_option("--supervise-hook", hook,
                 "with --supervise: a shell command run before each restart, given the "
                 "stored descriptors (diagnostics, tests)");
  app.add_flag("--print-default-config", print_default,
               "print the built-in configuration and exit");
  app.add_flag("--check-config", check_config,
               "validate the configuration (with --instance/--runtime-dir/--log-level applied) "
               "as kvpoold would at start, print a summary, and exit: 0 valid, 2 not; creates "
               "nothing");
  app.set_version_flag("--version", "kvpoold " + kvpool::version_string(),
                       "print the version and the git commit, and exit");
  CLI11_PARSE(app, argc, argv);

  if (supervise) return run_supervisor(child_args(argc, argv), hook);
  if (print_default) {
    std::cout << config_to_json(default_config()) << "\n";
    return 0;
  }
  kvpool::Result<Config> cfg = config_path.empty() ? kvpool::Result<Config>(default_config())
                                                   : load_config_file(config_path);
  if (!cfg) {
    std::fprintf(stderr, "kvpoold: %s\n", cfg.status().to_string().c_str());
    return 2;
  }
  Config config = std::move(cfg.value());
  if (!instance.empty()) config.instance = instance;
  if (!runtime_dir.empty()) config.runtime_dir = runtime_dir;
  if (!log_level.empty()) config.log_level = log_level;
  if (auto st = validate_config(config); !st.is_ok()) {
    std::fprintf(stderr, "kvpoold: %s\n", st.to_string().c_str());
    return 2;
  }
  if (check_config) {
    print_config_summary(config, config_path.empty() ? "built-in configuration" : config_path);
    return 0;
  }
  const std::string log_to = kvpool::setup_service_log("kvpoold", config.log_level);
  spdlog::info("kvpoold {} starting (instance '{}', logging to {})", kvpool::version_string(),
               config.instance, log_to);

  return serve(config, keep_cache);
}
