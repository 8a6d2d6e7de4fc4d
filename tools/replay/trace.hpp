// A Mooncake-format request trace (one JSON object per line: timestamp in ms, input_length,
// output_length, hash_ids) loaded whole, plain or gzip-compressed, and the figures that
// depend only on the trace: distinct blocks and the infinite-cache prefix hit ceiling.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvpool/core/status.hpp"

namespace kvpool::replay {

struct TraceRequest {
  uint32_t index = 0;          // line number in the whole trace (0-based)
  uint64_t timestamp_ms = 0;   // arrival, ms since the trace's start
  uint32_t input_length = 0;   // tokens
  uint32_t output_length = 0;  // tokens
  std::vector<uint64_t> ids;   // one per 512-token block; equal ids = equal prefix chains
};

// Every request of `path` (".gz" read through zlib), in file order.
Result<std::vector<TraceRequest>> load_trace(const std::string& path);

// Requests [from, from + limit) (limit 0: to the end), then only those that arrive within
// `span_s` seconds of trace time after the first taken (span_s <= 0: no bound).
std::vector<TraceRequest> slice(const std::vector<TraceRequest>& all, size_t from, size_t limit,
                                double span_s);

struct TraceFigures {
  uint64_t requests = 0;
  uint64_t prompt_blocks = 0;
  uint64_t distinct_blocks = 0;
  uint64_t ceiling_hits = 0;  // blocks an infinite prefix cache would have matched
  double span_s = 0;          // first to last arrival, trace time
  double ceiling() const {
    return prompt_blocks ? double(ceiling_hits) / double(prompt_blocks) : 0;
  }
};

// An infinite cache matches block k of a request when its id was seen in an earlier
// request (ids chain, so a seen id means its whole prefix was seen). Order as given.
TraceFigures trace_figures(const std::vector<TraceRequest>& requests);

}  // namespace kvpool::replay
