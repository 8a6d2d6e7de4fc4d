// kvpoolctl subcommands. Each add_*_command registers one subcommand and its callback on
// the top-level app; main() only wires them up, so adding a command touches no other one.
//
// A callback reports a failure by throwing CommandError: main() prints it as one line and
// exits 1. (CLI11 runs callbacks inside parse(), so a throw is the only way out of one.)
#pragma once

#include <CLI/CLI.hpp>

#include <stdexcept>
#include <string>

#include "kvpool/core/status.hpp"

namespace kvpool {

class CommandError : public std::runtime_error {
 public:
  explicit CommandError(const std::string& message) : std::runtime_error(message) {}
  explicit CommandError(const Status& status) : std::runtime_error(status.to_string()) {}
};

// kvpoolctl hash [--salt S] [--page-size P] [--json] TOKEN...
void add_hash_command(CLI::App& app);
// kvpoolctl status [--instance NAME] [--runtime-dir DIR] [--json]
void add_status_command(CLI::App& app);

}  // namespace kvpool
