// kvpool-exporter: serves a kvpoold's metrics over HTTP for Prometheus to scrape.
//   kvpool-exporter [--instance NAME] [--runtime-dir DIR] [--listen 127.0.0.1:9490]
//                   [--log-level LEVEL] | --once | --version
// A process of its own, so the daemon never serves the network: it reads the control
// segment read-only per scrape, like kvpoolctl, and follows daemon restarts by itself.
#include <signal.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "exporter.hpp"
#include "kvpool/core/version.hpp"
#include "kvpool/service/http_server.hpp"
#include "kvpool/service/log.hpp"
#include "kvpool/service/signals.hpp"

int main(int argc, char** argv) {
  using namespace kvpool::exporter;
  CLI::App app{"kvpool-exporter: serves a kvpoold's metrics on HTTP /metrics for Prometheus"};
  ExporterOptions o;
  std::string listen = "127.0.0.1:9490";
  std::string log_level = "info";
  bool once = false;
  app.add_option("--instance", o.instance, "kvpoold instance")->capture_default_str();
  app.add_option("--runtime-dir", o.runtime_dir,
                 "directory of kvpoold's socket (default: where kvpoold puts it)");
  app.add_option("--listen", listen,
                 "address:port to serve on (loopback by default; 0.0.0.0:PORT or [::]:PORT for "
                 "every interface; port 0 picks a free one)")
      ->capture_default_str();
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|critical|off")
      ->capture_default_str();
  app.add_flag("--once", once, "print one scrape on stdout and exit (no HTTP)");
  app.set_version_flag("--version", "kvpool-exporter " + kvpool::version_string(),
                       "print the version and the git commit, and exit");
  CLI11_PARSE(app, argc, argv);

  const std::string log_to = kvpool::setup_service_log("kvpool-exporter", log_level);
  Exporter exporter(o);
  if (once) {
    std::cout << exporter.scrape();
    return 0;
  }

  // Block the stop signals before the server's thread starts, so only sigwait sees them.
  const sigset_t stop = kvpool::service::block_stop_signals();
  kvpool::service::ignore_sigpipe();

  auto server = kvpool::http::HttpServer::start(
      listen, [&exporter](const std::string& path) { return exporter.handle(path); });
  if (!server) {
    std::fprintf(stderr, "kvpool-exporter: %s\n", server.status().to_string().c_str());
    return 1;
  }
  spdlog::info("kvpool-exporter {} serving instance '{}' on http://{}/metrics (logging to {})",
               kvpool::version_string(), o.instance, (*server)->bound_address(), log_to);
  int sig = 0;
  sigwait(&stop, &sig);
  spdlog::info("kvpool-exporter stopping (signal {})", sig);
  return 0;
}
