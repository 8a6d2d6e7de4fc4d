// kvpool-peer: the peer tier's agent; runs beside kvpoold on each host (docs/peers.md).
#include <signal.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "directory.hpp"
#include "kvpool/service/log.hpp"
#include "service.hpp"

namespace {
kvpool::peer::Service* g_service = nullptr;
void on_signal(int) {
  if (g_service != nullptr) g_service->request_stop();
}
}  // namespace

int main(int argc, char** argv) {
  using namespace kvpool::peer;
  PeerOptions o;
  CLI::App app{"kvpool-peer: fetch KV blocks this host lacks from other hosts' kvpoold (UCX)"};
  app.add_option("--instance", o.instance, "the local kvpoold's instance");
  app.add_option("--runtime-dir", o.runtime_dir, "the local kvpoold's runtime directory");
  app.add_option("--name", o.name, "this peer's name (default: the host name)");
  app.add_option("--listen", o.listen, "ip:port to serve exported pools on (none: serve nothing)");
  app.add_option("--advertise", o.advertise, "ip:port other hosts dial (default: --listen)");
  app.add_option("--export", o.exports, "a pool peers may fetch from (repeat)");
  app.add_option("--key-file", o.key_file, "the cluster key (mode 0600, >= 16 bytes)")->required();
  app.add_option("--max-deadline-ms", o.max_deadline_ms, "longest deadline a fetch may ask");
  app.add_option("--auth-timeout-ms", o.auth_timeout_ms, "time a peer has to authenticate");
  app.add_option("--max-serves", o.max_serves, "transfers served at once");
  app.add_option("--nats", o.nats_url, "NATS URL for discovery (none: requests name the holder)");
  app.add_option("--namespace", o.nats_namespace, "[nats] namespace of the subjects");
  app.add_option("--component", o.nats_component, "[nats] component of the subjects");
  app.add_option("--worker-id", o.worker_id, "[nats] this host's kvpool-events --worker-id");
  app.add_option("--announce-ms", o.announce_ms, "[nats] announcement period");
  app.add_option("--peer-timeout-ms", o.peer_timeout_ms, "[nats] drop a peer silent this long");
  app.add_option("--index-capacity", o.index_capacity, "[nats] sequence hashes remembered");
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error");
  CLI11_PARSE(app, argc, argv);
  kvpool::setup_service_log("kvpool-peer", log_level);

  auto key = ClusterKey::load(o.key_file);
  if (!key) {
    spdlog::error("{}", key.status().message());
    return 2;
  }
  auto service = Service::create(o, std::move(*key));
  if (!service) {
    spdlog::error("kvpool-peer: {}", service.status().message());
    return 1;
  }
  std::unique_ptr<Directory> directory;
  std::unique_ptr<Discovery> discovery;
  if (!o.nats_url.empty()) {
    directory = std::make_unique<Directory>(o.index_capacity, o.peer_timeout_ms,
                                            static_cast<int64_t>(o.worker_id));
    std::map<std::string, uint64_t> exported;
    for (const auto& p : (*service)->pools())
      if (p.exported) exported[p.name] = p.fingerprint;
    o.name = (*service)->name();
    auto d = Discovery::start(o, *directory, (*service)->epoch(), exported);
    if (!d) {
      spdlog::error("kvpool-peer: NATS: {}", d.status().message());
      return 1;
    }
    discovery = std::move(*d);
    (*service)->set_directory(directory.get());
    (*service)->set_fetched_hook(
        [d = discovery.get()](const std::string& ev) { d->publish_fetched(ev); });
  }
  g_service = service->get();
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  kvpool::Status s = (*service)->run();
  discovery.reset();
  g_service = nullptr;
  if (!s.is_ok()) {
    spdlog::error("kvpool-peer: {}", s.message());
    return 1;
  }
  return 0;
}
