// kvpool-events: forwards one kvpoold's KV events to a cluster router.
//   kvpool-events --worker-id W [--instance NAME] [--runtime-dir DIR]            (Dynamo, NATS)
//                 [--nats-url nats://127.0.0.1:4222] [--namespace NS] [--component C]
//                 [--topic kv-events|kv_events] [--dp-rank R]
//                 [--residency worker|cache_owner] [--state-source JSON|@FILE]
//                 [--legacy-envelope]
//   kvpool-events --format vllm --zmq-endpoint tcp://127.0.0.1:5557               (vLLM, ZMQ)
//                 [--zmq-replay-endpoint tcp://127.0.0.1:5558] [--zmq-topic T]
//                 [--replay-buffer N] [--dp-rank R] [--vllm-encoding map|array]
//                 [--vllm-block-hashes index|key]
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>

#include "tools/kvpool-events/forwarder.hpp"
#include "tools/kvpool-events/nats_output.hpp"
#include "tools/kvpool-events/vllm_output.hpp"
#ifdef KVPOOL_EVENTS_METRICS
#include "kvpool/service/http_server.hpp"
#include "tools/kvpool-events/forwarder_metrics.hpp"
#endif
#include "kvpool/core/version.hpp"
#include "kvpool/service/log.hpp"
#include "kvpool/service/signals.hpp"

namespace {

kvpool::events::Forwarder* g_forwarder = nullptr;

void on_signal(int) {
  if (g_forwarder) g_forwarder->stop();
}

// --state-source: Dynamo's CacheOwnerId as JSON, inline or @FILE. It must be an object (a
// serde struct in Dynamo: a string there makes Dynamo drop every event, router_event.hpp).
bool load_state_source(const std::string& arg, nlohmann::ordered_json& out, std::string& why) {
  std::string text = arg;
  if (!arg.empty() && arg[0] == '@') {
    std::ifstream in(arg.substr(1));
    if (!in) {
      why = "cannot read " + arg.substr(1);
      return false;
    }
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  out = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (out.is_discarded()) {
    why = "not JSON (give Dynamo's CacheOwnerId as the JSON object Dynamo serialises)";
    return false;
  }
  if (!out.is_object()) {
    why =
        "not a JSON object: Dynamo's CacheOwnerId is a struct (a pool id and a stable "
        "dp slot id), and a plain string would make Dynamo drop every event";
    return false;
  }
  return true;
}

// Everything the command line sets, before it becomes a ForwarderOptions and an output.
struct Cli {
  kvpool::events::ForwarderOptions o;
  std::string format = "dynamo";
  std::string log_level = "info";
  kvpool::events::NatsOutputOptions nats;
  std::string residency = "worker";
  std::string state_source;
  kvpool::events::VllmOutputOptions vllm;
  std::string encoding = "map";
  std::string block_hashes = "index";
  int64_t dp_rank = 0;
  std::string metrics_listen;
};

void add_common_options(CLI::App& app, Cli& c) {
  app.add_option("--instance", c.o.instance, "kvpoold instance")->capture_default_str();
  app.add_option("--runtime-dir", c.o.runtime_dir, "directory of kvpoold's socket");
  app.add_option("--format", c.format, "dynamo (router JSON on NATS) | vllm (msgpack on ZMQ)")
      ->check(CLI::IsMember({"dynamo", "vllm"}))
      ->capture_default_str();
  app.add_option("--dp-rank", c.dp_rank,
                 "data parallel rank (Dynamo dp_rank, vLLM data_parallel_rank)")
      ->check(CLI::Range(int64_t{0}, int64_t{UINT32_MAX}))
      ->capture_default_str();
  app.add_option("--log-level", c.log_level, "trace|debug|info|warn|error|critical|off")
      ->capture_default_str();
#ifdef KVPOOL_EVENTS_METRICS
  app.add_option("--metrics-listen", c.metrics_listen,
                 "serve the forwarder's metrics on http://ADDR/metrics (e.g. 127.0.0.1:9491; "
                 "port 0 picks one; default: off)");
#endif
  app.set_version_flag("--version", "kvpool-events " + kvpool::version_string(),
                       "print the version and the git commit, and exit");
}

void add_dynamo_options(CLI::App& app, Cli& c) {
  // CLI11 converts an empty string to 0, and a unit whose KVPOOL_WORKER_ID is unset passes
  // exactly that: refuse it rather than publish as worker 0 (another host's id, perhaps).
  app.add_option("--worker-id", c.nats.identity.worker_id, "[dynamo] this cache's worker id")
      ->check([](const std::string& v) {
        return v.empty() ? std::string(
                               "is empty: give this host's worker id (under systemd: "
                               "KVPOOL_WORKER_ID in /etc/kvpool/kvpool-events.env)")
                         : std::string();
      });
  app.add_option("--nats-url", c.nats.nats.url, "[dynamo] NATS server")->capture_default_str();
  app.add_option("--namespace", c.nats.ns, "[dynamo] namespace of the subject")
      ->capture_default_str();
  app.add_option("--component", c.nats.component, "[dynamo] component of the subject")
      ->capture_default_str();
  app.add_option("--topic", c.nats.topic,
                 "[dynamo] last part of the subject: kv-events (Dynamo today) or kv_events "
                 "(Dynamo 0.2.1)")
      ->capture_default_str();
  app.add_option("--residency", c.residency,
                 "[dynamo] host pools as one worker's cache (worker) or a shared cache "
                 "(cache_owner, needs --state-source)")
      ->check(CLI::IsMember({"cache_owner", "worker"}))
      ->capture_default_str();
  app.add_option("--state-source", c.state_source,
                 "[dynamo] this cache's CacheOwnerId as Dynamo serialises it: a JSON object, "
                 "inline or @FILE (cache_owner)");
  app.add_flag("--legacy-envelope", c.nats.legacy_envelope,
               "[dynamo] Dynamo 0.2.1's event envelope (no storage_tier, residency, dp_rank)");
}

void add_vllm_options(CLI::App& app, Cli& c) {
  app.add_option("--zmq-endpoint", c.vllm.zmq.endpoint,
                 "[vllm] PUB endpoint to bind (tcp://HOST:PORT or ipc://PATH)");
  app.add_option("--zmq-replay-endpoint", c.vllm.zmq.replay_endpoint,
                 "[vllm] replay ROUTER endpoint to bind; none by default");
  app.add_option("--zmq-topic", c.vllm.zmq.topic, "[vllm] topic frame (vLLM's default: empty)");
  app.add_option("--replay-buffer", c.vllm.zmq.replay_buffer, "[vllm] batches kept for replay")
      ->capture_default_str();
  app.add_option("--vllm-encoding", c.encoding,
                 "[vllm] map (vLLM today) or array (array_like Structs of older vLLM)")
      ->check(CLI::IsMember({"map", "array"}))
      ->capture_default_str();
  app.add_option("--vllm-block-hashes", c.block_hashes,
                 "[vllm] a keyed block (BatchStore) in block_hashes: index (its 64-bit index "
                 "hash, what Dynamo's ZMQ relay decodes) or key (its namespaced key as bytes, "
                 "vLLM's ExternalBlockHash)")
      ->check(CLI::IsMember({"index", "key"}))
      ->capture_default_str();
}

// The output --format names, or null after saying on stderr what the command line lacks.
std::unique_ptr<kvpool::events::EventOutput> make_output(const CLI::App& app, Cli& c) {
  using namespace kvpool::events;
  if (c.format == "dynamo") {
    if (app.count("--worker-id") == 0) {
      std::fprintf(stderr, "kvpool-events: --worker-id is required with --format dynamo\n");
      return nullptr;
    }
    c.nats.nats.name = "kvpool-events/" + c.o.instance;
    c.nats.identity.dp_rank = static_cast<uint32_t>(c.dp_rank);
    c.nats.identity.cache_owner = c.residency == "cache_owner";
    if (c.nats.identity.cache_owner && c.state_source.empty()) {
      std::fprintf(stderr,
                   "kvpool-events: --residency cache_owner needs --state-source (Dynamo refuses "
                   "a cache_owner event without its CacheOwnerId)\n");
      return nullptr;
    }
    if (!c.state_source.empty()) {
      std::string why;
      if (!load_state_source(c.state_source, c.nats.identity.state_source, why)) {
        std::fprintf(stderr, "kvpool-events: --state-source: %s\n", why.c_str());
        return nullptr;
      }
    }
    return std::make_unique<NatsOutput>(c.nats);
  }
  if (app.count("--zmq-endpoint") == 0) {
    std::fprintf(stderr, "kvpool-events: --zmq-endpoint is required with --format vllm\n");
    return nullptr;
  }
  c.vllm.dp_rank = c.dp_rank;
  c.vllm.encoding = c.encoding == "map" ? VllmEncoding::kMap : VllmEncoding::kArray;
  c.vllm.block_hashes = c.block_hashes == "key" ? VllmBlockHashes::kKey : VllmBlockHashes::kIndex;
  return std::make_unique<VllmOutput>(c.vllm);
}

#ifdef KVPOOL_EVENTS_METRICS
// --metrics-listen: the forwarder's figures on /metrics, or a clear error.
kvpool::Result<std::unique_ptr<kvpool::http::HttpServer>> start_metrics(
    const kvpool::events::Forwarder& forwarder, const Cli& c) {
  return kvpool::http::HttpServer::start(
      c.metrics_listen, [&forwarder, &c](const std::string& path) {
        kvpool::http::HttpResponse r;
        if (path != "/metrics") {
          r.status = 404;
          r.body = "not found: " + path + " (metrics are at /metrics)\n";
          return r;
        }
        r.content_type = "text/plain; version=0.0.4; charset=utf-8";
        r.body = kvpool::events::forwarder_metrics_text(forwarder, c.o, c.nats.identity.worker_id);
        return r;
      });
}
#endif

}  // namespace

int main(int argc, char** argv) {
  using namespace kvpool::events;
  CLI::App app{
      "kvpool-events: publishes a kvpoold's KV events for cluster routers "
      "(Dynamo's router JSON on NATS, or vLLM's KVEventBatch on ZMQ)"};
  Cli c;
  add_common_options(app, c);
  add_dynamo_options(app, c);
  add_vllm_options(app, c);
  CLI11_PARSE(app, argc, argv);

  const std::string log_to = kvpool::setup_service_log("kvpool-events", c.log_level);
  spdlog::info("kvpool-events {} starting ({}, logging to {})", kvpool::version_string(), c.format,
               log_to);
  std::unique_ptr<EventOutput> output = make_output(app, c);
  if (!output) return 2;

  Forwarder forwarder(c.o, std::move(output));
  g_forwarder = &forwarder;
#ifdef KVPOOL_EVENTS_METRICS
  std::unique_ptr<kvpool::http::HttpServer> metrics_server;
  if (!c.metrics_listen.empty()) {
    auto s = start_metrics(forwarder, c);
    if (!s) {
      std::fprintf(stderr, "kvpool-events: --metrics-listen: %s\n", s.status().to_string().c_str());
      return 2;
    }
    metrics_server = std::move(s.value());
    spdlog::info("metrics on http://{}/metrics", metrics_server->bound_address());
  }
#endif
  kvpool::service::on_stop_signals(on_signal);
  kvpool::service::ignore_sigpipe();
  kvpool::Status st = forwarder.run();
  g_forwarder = nullptr;
  if (!st.is_ok()) {
    std::fprintf(stderr, "kvpool-events: %s\n", st.to_string().c_str());
    return 1;
  }
  return 0;
}
