// kvpoolctl scrub [--instance NAME] [--runtime-dir DIR] [--pool NAME] [--json]
// Has kvpoold check every registered block that carries a checksum (registered with
// RegisterOptions::checksum) against its bytes, one bounded step per request, so that the
// engine keeps serving its clients between steps. A block whose bytes changed is evicted
// by the daemon (no later match returns it) and named here; exit 1 if there was one.
//
// Unlike the other daemon-reading commands, this one attaches as a client: the check runs
// in the daemon, which alone may decide that a block is corrupt. Host pools only; device
// pools are listed as skipped.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "control_view.hpp"
#include "kvpool/client.hpp"

namespace kvpool {
namespace {

struct ScrubOptions {
  ctl::ViewOptions view;
  std::string pool;  // "": every pool this client may use
};

struct PoolScrub {
  std::string name;
  std::string skipped_why;  // not scrubbed: device pool, closed to this user
  uint64_t checked = 0;
  uint64_t mismatches = 0;
  uint64_t skipped = 0;  // registered without a checksum
  uint64_t steps = 0;
  std::vector<ScrubMismatch> corrupt;
};

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

PoolScrub scrub_pool(Client& client, const std::string& name) {
  PoolScrub r;
  r.name = name;
  auto pool = client.pool(name);
  if (!pool) {
    r.skipped_why = pool.status().message();
    return r;
  }
  if (pool->is_device()) {
    r.skipped_why = "device pool: block checksums need a host pool";
    return r;
  }
  const uint32_t n = pool->layout().num_blocks;
  for (uint32_t start = 0; start < n;) {
    auto step = pool->scrub_step(start);
    if (!step) throw CommandError("pool '" + name + "': " + step.status().to_string());
    r.checked += step->checked;
    r.mismatches += step->mismatches;
    r.skipped += step->skipped;
    ++r.steps;
    r.corrupt.insert(r.corrupt.end(), step->corrupt.begin(), step->corrupt.end());
    start = step->next_block;
  }
  return r;
}

void run_scrub(const ScrubOptions& o) {
  ConnectOptions co;
  co.runtime_dir = o.view.runtime_dir;
  auto client = Client::connect(o.view.instance, co);
  if (!client)
    throw CommandError("cannot attach to kvpoold instance '" + o.view.instance +
                       "': " + client.status().to_string());
  std::vector<std::string> names;
  if (!o.pool.empty()) {
    names.push_back(o.pool);
  } else {
    names = client->pool_names();
  }
  std::vector<PoolScrub> results;
  uint64_t mismatches = 0;
  for (const auto& name : names) {
    results.push_back(scrub_pool(*client, name));
    mismatches += results.back().mismatches;
  }
  if (!o.pool.empty() && !results.front().skipped_why.empty())
    throw CommandError("pool '" + o.pool + "': " + results.front().skipped_why);

  if (o.view.json) {
    nlohmann::json pools = nlohmann::json::array();
    for (const auto& r : results) {
      nlohmann::json corrupt = nlohmann::json::array();
      for (const auto& c : r.corrupt)
        corrupt.push_back({{"block", c.block_id},
                           {"generation", c.generation},
                           {"sequence_hash", c.sequence_hash}});
      nlohmann::json skipped_why = nullptr;
      if (!r.skipped_why.empty()) skipped_why = r.skipped_why;
      pools.push_back({{"name", r.name},
                       {"checked", r.checked},
                       {"mismatches", r.mismatches},
                       {"without_checksum", r.skipped},
                       {"requests", r.steps},
                       {"not_scrubbed", skipped_why},
                       {"corrupt", corrupt}});
    }
    std::cout << nlohmann::json{{"instance", o.view.instance},
                                {"ok", mismatches == 0},
                                {"mismatches", mismatches},
                                {"pools", pools}}
                     .dump(2)
              << "\n";
  } else {
    for (const auto& r : results) {
      if (!r.skipped_why.empty()) {
        std::cout << "pool '" << r.name << "': not scrubbed (" << r.skipped_why << ")\n";
        continue;
      }
      for (const auto& c : r.corrupt)
        std::cout << "pool '" << r.name << "': block " << c.block_id << " (sequence hash "
                  << hex(c.sequence_hash) << ") failed its checksum: evicted\n";
      std::cout << "pool '" << r.name << "': " << r.checked << " checked, " << r.mismatches
                << " mismatch" << (r.mismatches == 1 ? "" : "es") << ", " << r.skipped
                << " without checksum\n";
    }
  }
  if (mismatches != 0)
    throw CommandError(mismatches == 1 ? std::string("1 block failed its checksum and was evicted")
                                       : std::to_string(mismatches) +
                                             " blocks failed their checksums and were evicted");
  if (!o.view.json) std::cout << "scrub: ok, every checksummed block matches its bytes\n";
}

}  // namespace

void add_scrub_command(CLI::App& app) {
  auto opts = std::make_shared<ScrubOptions>();
  auto* cmd = app.add_subcommand(
      "scrub",
      "have kvpoold check every checksummed block against its bytes (host pools), evicting "
      "the corrupt ones; exit 1 if any");
  ctl::add_view_options(cmd, opts->view);
  cmd->add_option("--pool", opts->pool, "only this pool");
  cmd->callback([opts] { run_scrub(*opts); });
}

}  // namespace kvpool
