// kvpoolctl peers [--instance NAME] [--runtime-dir DIR] [--json]
// The peer tier on this host (kvpool-peer, docs/peers.md): the peers it talks to, what it
// fetched from and served to each, failures by cause, and what it pins for peers now.
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "control_view.hpp"
#include "kvpool/core/paths.hpp"
#include "kvpool/peer/local_request.hpp"
#include "kvpool/shm/unix_socket.hpp"

namespace kvpool {
namespace {

nlohmann::json ask_status(const ctl::ViewOptions& o) {
  std::string dir = o.runtime_dir;
  if (dir.empty()) {
    auto found = find_runtime_dir(o.instance);
    if (!found) throw CommandError(found.status());
    dir = *found;
  }
  const std::string path = peer::peer_socket_path(dir, o.instance);
  auto fd = shm::connect_unix(path);
  if (!fd)
    throw CommandError("no kvpool-peer answers on " + path +
                       " (the peer tier is off on this host, or kvpool-peer is not running)");
  const uint32_t magic = peer::kLocalStatusMagic;
  if (Status s = shm::send_message(fd->get(), {reinterpret_cast<const std::byte*>(&magic), 4});
      !s.is_ok())
    throw CommandError(s);
  std::vector<std::byte> buf(1 << 20);
  auto n = shm::recv_message(fd->get(), buf, nullptr, 5000);
  if (!n) throw CommandError(n.status());
  auto j = nlohmann::json::parse(reinterpret_cast<const char*>(buf.data()),
                                 reinterpret_cast<const char*>(buf.data()) + *n, nullptr, false);
  if (j.is_discarded()) throw CommandError("kvpool-peer answered something that is not JSON");
  return j;
}

void run_peers(const ctl::ViewOptions& o) {
  nlohmann::json j = ask_status(o);
  if (o.json) {
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::cout << "kvpool-peer '" << j.value("name", "") << "' listening on " << j.value("listen", "")
            << ", " << j.value("blocks_pinned_for_peers", 0) << " block(s) pinned for peers, "
            << j.value("fetches_in_flight", 0) << " fetch(es) in flight\n";
  std::vector<std::vector<std::string>> rows{{"peer", "fetches", "blocks_in", "bytes_in",
                                              "failures", "avg_ms", "serves", "blocks_out",
                                              "bytes_out", "auth_fail"}};
  for (const auto& [name, p] : j["peers"].items()) {
    uint64_t failures = 0;
    std::string causes;
    for (const auto& [cause, n] : p["failures"].items())
      if (n.get<uint64_t>() > 0) {
        failures += n.get<uint64_t>();
        causes += (causes.empty() ? "" : ",") + cause + "=" + std::to_string(n.get<uint64_t>());
      }
    const uint64_t lc = p["latency_count"].get<uint64_t>();
    char avg[32] = "-";
    if (lc > 0)
      std::snprintf(avg, sizeof(avg), "%.2f", p["latency_ns_sum"].get<double>() / lc / 1e6);
    rows.push_back({name, std::to_string(p["fetches"].get<uint64_t>()),
                    std::to_string(p["blocks_fetched"].get<uint64_t>()),
                    std::to_string(p["bytes_fetched"].get<uint64_t>()),
                    failures == 0 ? "0" : std::to_string(failures) + " (" + causes + ")", avg,
                    std::to_string(p["serves"].get<uint64_t>()),
                    std::to_string(p["blocks_served"].get<uint64_t>()),
                    std::to_string(p["bytes_served"].get<uint64_t>()),
                    std::to_string(p["auth_failures"].get<uint64_t>())});
  }
  std::cout << ctl::format_table(rows);
}

}  // namespace

void add_peers_command(CLI::App& app) {
  auto opts = std::make_shared<ctl::ViewOptions>();
  auto* cmd = app.add_subcommand(
      "peers", "the peer tier (kvpool-peer): peers, blocks fetched and served, failures");
  ctl::add_view_options(cmd, *opts);
  cmd->callback([opts] { run_peers(*opts); });
}

}  // namespace kvpool
