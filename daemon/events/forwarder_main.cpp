// kvpool-events: forwards one kvpoold's KV events to NATS for a Dynamo-style KV router.
//   kvpool-events --worker-id W [--instance NAME] [--runtime-dir DIR]
//                 [--nats-url nats://127.0.0.1:4222] [--namespace NS] [--component C]
#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "daemon/events/forwarder.hpp"

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
  app.add_option("--worker-id", o.worker_id, "this worker's id in the router")->required();
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|critical|off")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  o.nats.name = "kvpool-events/" + o.instance;

  auto logger = spdlog::stderr_color_mt("kvpool-events");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  spdlog::set_level(spdlog::level::from_str(log_level));

  Forwarder forwarder(o);
  g_forwarder = &forwarder;
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
