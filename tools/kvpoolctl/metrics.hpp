// The kvpool_* metric families of a running daemon, read from its control segment: what
// `kvpoolctl metrics` prints and what kvpool-exporter serves on /metrics. One collector, so
// the two never disagree on a name or a meaning.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "control_view.hpp"

namespace kvpool::metrics {

using Labels = std::vector<std::pair<std::string, std::string>>;
using Value = std::variant<uint64_t, double>;

struct Sample {
  std::string suffix;  // "_bucket", "_sum", "_count" for histograms, else ""
  Labels labels;
  Value value;
};

struct Family {
  std::string name;  // with the kvpool_ prefix
  std::string type;  // gauge | counter | histogram
  std::string help;
  std::vector<Sample> samples;
};

// kvpool_build_info{version, git_commit} 1: the program serving the metrics.
Family build_info();
// Every daemon, pool and client family (docs/operations.md: "kvpoolctl").
std::vector<Family> collect(const ctl::ControlView& v);

// Prometheus text exposition format 0.0.4.
std::string to_text(const std::vector<Family>& families);
nlohmann::json to_json(const std::vector<Family>& families);

// Shortest text that reads back as the same double ("0.25", "1e-06", "+Inf" is the caller's).
std::string format_double(double v);

}  // namespace kvpool::metrics
