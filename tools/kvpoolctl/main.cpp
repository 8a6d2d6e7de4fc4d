// kvpoolctl: read-only views of a running daemon, and hashing for debugging.
#include <CLI/CLI.hpp>

#include <exception>
#include <iostream>
#include <string>

#include "commands.hpp"
#include "kvpool/core/version.hpp"

int main(int argc, char** argv) {
  CLI::App app("kvpoolctl: inspect a kvpool daemon and compute Dynamo-compatible hashes",
               "kvpoolctl");
  app.require_subcommand(1);
  app.set_version_flag("--version", "kvpoolctl " + kvpool::version_string(),
                       "print the version and the git commit, and exit");
  // One line per failure, so scripts and people see the cause without a wall of text.
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return std::string("kvpoolctl: error: ") + e.what() + " (run with --help for usage)\n";
  });

  kvpool::add_hash_command(app);
  kvpool::add_status_command(app);
  kvpool::add_clients_command(app);
  kvpool::add_pools_command(app);
  kvpool::add_metrics_command(app);
  kvpool::add_check_command(app);
  kvpool::add_events_command(app);
  kvpool::add_top_command(app);
  kvpool::add_scrub_command(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // app.exit prints help or the one-line failure; scripts get a plain 0 or 1.
    return app.exit(e) == 0 ? 0 : 1;
  } catch (const kvpool::CommandError& e) {
    std::cerr << "kvpoolctl: error: " << e.what() << "\n";
    return e.exit_code();
  } catch (const std::exception& e) {
    std::cerr << "kvpoolctl: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
