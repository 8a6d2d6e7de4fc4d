// kvpool-exporter's pages: /metrics reads the daemon's control segment read-only on every
// scrape (the observe handshake kvpoolctl uses) and renders metrics.hpp's families, plus
// kvpool_up and the exporter's own figures. A daemon that is down or restarting is a
// kvpool_up 0 answer, not an HTTP error, so Prometheus records the gap.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "kvpool/service/http_server.hpp"

namespace kvpool::exporter {

struct ExporterOptions {
  std::string instance = "default";
  std::string runtime_dir;  // "" -> where kvpoold puts it
};

class Exporter {
 public:
  explicit Exporter(ExporterOptions options) : options_(std::move(options)) {}
  // "/metrics": the exposition; "/": a line naming it; anything else 404.
  http::HttpResponse handle(const std::string& path);
  // The /metrics body (also what `kvpool-exporter --once` prints).
  std::string scrape();

 private:
  ExporterOptions options_;
  std::atomic<uint64_t> scrapes_{0};
  std::atomic<uint64_t> errors_{0};
  std::string last_error_;  // logged once per change, not on every failed scrape
};

}  // namespace kvpool::exporter
