#include "exporter.hpp"

#include <spdlog/spdlog.h>

#include <chrono>

#include "commands.hpp"
#include "control_view.hpp"
#include "metrics.hpp"

namespace kvpool::exporter {

std::string Exporter::scrape() {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<metrics::Family> families;
  uint64_t up = 0;
  try {
    ctl::ControlView v = ctl::open_control(options_.instance, options_.runtime_dir);
    families = metrics::collect(v);
    up = 1;
    if (!last_error_.empty()) spdlog::info("kvpoold of instance '{}' is back", options_.instance);
    last_error_.clear();
  } catch (const std::exception& e) {
    errors_.fetch_add(1, std::memory_order_relaxed);
    if (last_error_ != e.what()) spdlog::warn("scrape: {}", e.what());
    last_error_ = e.what();
  }
  scrapes_.fetch_add(1, std::memory_order_relaxed);
  families.push_back({"kvpool_up",
                      "gauge",
                      "1 when the exporter read the daemon's control segment for this scrape, "
                      "0 when no daemon answered (the other kvpool_ daemon figures are then "
                      "absent).",
                      {{"", {{"kvpool_instance", options_.instance}}, up}}});
  families.push_back(metrics::build_info());
  families.push_back({"kvpool_exporter_scrapes_total",
                      "counter",
                      "Scrapes of /metrics served.",
                      {{"", {}, scrapes_.load(std::memory_order_relaxed)}}});
  families.push_back({"kvpool_exporter_scrape_errors_total",
                      "counter",
                      "Scrapes that could not read the daemon (kvpool_up 0).",
                      {{"", {}, errors_.load(std::memory_order_relaxed)}}});
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  families.push_back({"kvpool_exporter_scrape_duration_seconds",
                      "gauge",
                      "Time this scrape took to read the daemon and build the answer.",
                      {{"", {}, took}}});
  return metrics::to_text(families);
}

http::HttpResponse Exporter::handle(const std::string& path) {
  http::HttpResponse r;
  if (path == "/metrics") {
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = scrape();
  } else if (path == "/") {
    r.body =
        "kvpool-exporter for kvpoold instance '" + options_.instance + "': metrics at /metrics\n";
  } else {
    r.status = 404;
    r.body = "not found: " + path + " (metrics are at /metrics)\n";
  }
  return r;
}

}  // namespace kvpool::exporter
