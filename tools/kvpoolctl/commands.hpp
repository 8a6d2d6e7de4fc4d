// kvpoolctl subcommands. Each add_*_command registers one subcommand and its callback on
// the top-level app; main() only wires them up, so adding a command touches no other one.
//
// A callback reports a failure by throwing CommandError: main() prints it as one line and
// exits with its exit_code (1 unless said otherwise). (CLI11 runs callbacks inside parse(),
// so a throw is the only way out of one.)
#pragma once

#include <CLI/CLI.hpp>

#include <stdexcept>
#include <string>

#include "kvpool/core/status.hpp"

namespace kvpool {

class CommandError : public std::runtime_error {
 public:
  explicit CommandError(const std::string& message, int exit_code = 1)
      : std::runtime_error(message), exit_code_(exit_code) {}
  explicit CommandError(const Status& status) : std::runtime_error(status.to_string()) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_ = 1;
};

// kvpoolctl hash [--salt S] [--page-size P] [--json] TOKEN...
void add_hash_command(CLI::App& app);
// kvpoolctl status [--instance NAME] [--runtime-dir DIR] [--json]
void add_status_command(CLI::App& app);
// kvpoolctl clients [--instance NAME] [--runtime-dir DIR] [--json]
void add_clients_command(CLI::App& app);
// kvpoolctl pools [--instance NAME] [--runtime-dir DIR] [--json]
void add_pools_command(CLI::App& app);
// kvpoolctl metrics [--instance NAME] [--runtime-dir DIR] [--json]   (Prometheus text)
void add_metrics_command(CLI::App& app);
// kvpoolctl check [--instance NAME] [--runtime-dir DIR] [--json]   (exit 1 on a violation)
void add_check_command(CLI::App& app);
// kvpoolctl events [--instance NAME] [--runtime-dir DIR] [--json] [--follow] [--new]
void add_events_command(CLI::App& app);
// kvpoolctl top [--instance NAME] [--runtime-dir DIR] [--interval S] [--iterations N]
void add_top_command(CLI::App& app);
// kvpoolctl scrub [--instance NAME] [--runtime-dir DIR] [--pool NAME] [--json]
// (attaches as a client; exit 1 if a block failed its checksum)
void add_scrub_command(CLI::App& app);
// kvpoolctl peers [--instance NAME] [--runtime-dir DIR] [--json]   (asks kvpool-peer)
void add_peers_command(CLI::App& app);

}  // namespace kvpool
