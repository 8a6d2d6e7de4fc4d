// kvpoolctl: read-only views of a running daemon, and hashing for debugging.
#include <CLI/CLI.hpp>

#include <exception>
#include <functional>
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
  kvpool::add_peers_command(app);

  // A first word that is neither an option nor a subcommand is a mistyped subcommand: say
  // so, and list the ones there are (CLI11 alone answers "A subcommand is required").
  if (argc > 1 && argv[1][0] != '-') {
    const std::function<bool(CLI::App*)> all = [](CLI::App*) { return true; };
    std::string known;
    bool found = false;
    for (CLI::App* sub : app.get_subcommands(all)) {
      known += (known.empty() ? "" : ", ") + sub->get_name();
      found = found || sub->check_name(argv[1]);
    }
    if (!found) {
      std::cerr << "kvpoolctl: error: unknown subcommand '" << argv[1] << "' (one of: " << known
                << "; run with --help for usage)\n";
      return 1;
    }
  }
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
