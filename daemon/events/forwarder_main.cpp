// kvpool-events: forwards one kvpoold's KV events to NATS for a Dynamo-style KV router.
//   kvpool-events --worker-id W [--instance NAME] [--runtime-dir DIR]
//                 [--nats-url nats://127.0.0.1:4222] [--namespace NS] [--component C]
#include <signal.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "daemon/events/forwarder.hpp"
#ifdef KVPOOL_EVENTS_METRICS
#include "daemon/events/forwarder_metrics.hpp"
#include "http_server.hpp"
#endif
#include "kvpool/core/version.hpp"
#include "service_log.hpp"

namespace {

kvpool::events::Forwarder* g_forwarder = nullptr;

void on_signal(int) {
  if (g_forwarder) g_forwarder->stop();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kvpool::events;
  CLI::App app{"kvpool-events: publishes a kvpoold's KV events to NATS (Dynamo router format)"};
  ForwarderOptions o;
  std::string log_level = "info";
  app.add_option("--instance", o.instance, "kvpoold instance")->capture_default_str();
  app.add_option("--runtime-dir", o.runtime_dir, "directory of kvpoold's socket");
  app.add_option("--nats-url", o.nats.url, "NATS server")->capture_default_str();
  app.add_option("--namespace", o.ns, "Dynamo namespace of the subject")->capture_default_str();
  app.add_option("--component", o.component, "Dynamo component of the subject")
      ->capture_default_str();
  // CLI11 converts an empty string to 0, and a unit whose KVPOOL_WORKER_ID is unset passes
  // exactly that: refuse it rather than publish as worker 0 (another host's id, perhaps).
  app.add_option("--worker-id", o.worker_id, "this worker's id in the router")
      ->required()
      ->check([](const std::string& v) {
        return v.empty() ? std::string(
                               "is empty: give this host's worker id (under systemd: "
                               "KVPOOL_WORKER_ID in /etc/kvpool/kvpool-events.env)")
                         : std::string();
      });
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|critical|off")
      ->capture_default_str();
  std::string metrics_listen;
#ifdef KVPOOL_EVENTS_METRICS
  app.add_option("--metrics-listen", metrics_listen,
                 "serve the forwarder's metrics on http://ADDR/metrics (e.g. 127.0.0.1:9491; "
                 "port 0 picks one; default: off)");
#endif
  app.set_version_flag("--version", "kvpool-events " + kvpool::version_string(),
                       "print the version and the git commit, and exit");
  CLI11_PARSE(app, argc, argv);
  o.nats.name = "kvpool-events/" + o.instance;

  const std::string log_to = kvpool::setup_service_log("kvpool-events", log_level);
  spdlog::info("kvpool-events {} starting (worker {}, logging to {})", kvpool::version_string(),
               o.worker_id, log_to);

  Forwarder forwarder(o);
  g_forwarder = &forwarder;
#ifdef KVPOOL_EVENTS_METRICS
  std::unique_ptr<kvpool::http::HttpServer> metrics_server;
  if (!metrics_listen.empty()) {
    auto s =
        kvpool::http::HttpServer::start(metrics_listen, [&forwarder, &o](const std::string& path) {
          kvpool::http::HttpResponse r;
          if (path != "/metrics") {
            r.status = 404;
            r.body = "not found: " + path + " (metrics are at /metrics)\n";
            return r;
          }
          r.content_type = "text/plain; version=0.0.4; charset=utf-8";
          r.body = forwarder_metrics_text(forwarder, o);
          return r;
        });
    if (!s) {
      std::fprintf(stderr, "kvpool-events: --metrics-listen: %s\n", s.status().to_string().c_str());
      return 2;
    }
    metrics_server = std::move(s.value());
    spdlog::info("metrics on http://{}/metrics", metrics_server->bound_address());
  }
#endif
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  kvpool::Status st = forwarder.run();
  g_forwarder = nullptr;
  if (!st.is_ok()) {
    std::fprintf(stderr, "kvpool-events: %s\n", st.to_string().c_str());
    return 1;
  }
  return 0;
}
