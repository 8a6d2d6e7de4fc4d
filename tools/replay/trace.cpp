#include "trace.hpp"

#include <zlib.h>

#include <unordered_set>

#include <nlohmann/json.hpp>

namespace kvpool::replay {

namespace {

// Reads the whole file through zlib: gzopen reads plain files unchanged too.
Result<std::string> read_all(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return Status(ErrorCode::kNotFound, "cannot open trace '" + path + "': check the path");
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  int err = 0;
  const char* msg = gzerror(f, &err);
  std::string why = msg ? msg : "";
  gzclose(f);
  if (n < 0 || (err != Z_OK && err != Z_STREAM_END))
    return Status(ErrorCode::kInvalidArgument, "cannot read trace '" + path + "': " + why);
  return out;
}

}  // namespace

Result<std::vector<TraceRequest>> load_trace(const std::string& path) {
  auto text = read_all(path);
  if (!text) return text.status();
  std::vector<TraceRequest> out;
  size_t pos = 0, line = 0;
  while (pos < text->size()) {
    size_t end = text->find('\n', pos);
    if (end == std::string::npos) end = text->size();
    std::string_view l(text->data() + pos, end - pos);
    pos = end + 1;
    ++line;
    if (l.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    try {
      auto j = nlohmann::json::parse(l);
      TraceRequest r;
      r.index = static_cast<uint32_t>(out.size());
      r.timestamp_ms = j.at("timestamp").get<uint64_t>();
      r.input_length = j.value("input_length", 0u);
      r.output_length = j.at("output_length").get<uint32_t>();
      r.ids = j.at("hash_ids").get<std::vector<uint64_t>>();
      out.push_back(std::move(r));
    } catch (const std::exception& e) {
      return Status(ErrorCode::kInvalidArgument,
                    "trace '" + path + "' line " + std::to_string(line) +
                        " is not a Mooncake trace record: " + e.what());
    }
  }
  if (out.empty())
    return Status(ErrorCode::kInvalidArgument, "trace '" + path + "' has no requests");
  return out;
}

std::vector<TraceRequest> slice(const std::vector<TraceRequest>& all, size_t from, size_t limit,
                                double span_s) {
  std::vector<TraceRequest> out;
  if (from >= all.size()) return out;
  size_t end = limit ? std::min(all.size(), from + limit) : all.size();
  const uint64_t t0 = all[from].timestamp_ms;
  for (size_t i = from; i < end; ++i) {
    if (span_s > 0 && double(all[i].timestamp_ms - t0) > span_s * 1000) break;
    out.push_back(all[i]);
  }
  return out;
}

TraceFigures trace_figures(const std::vector<TraceRequest>& requests) {
  TraceFigures f;
  std::unordered_set<uint64_t> seen;
  for (const auto& r : requests) {
    ++f.requests;
    f.prompt_blocks += r.ids.size();
    for (uint64_t id : r.ids) f.ceiling_hits += seen.count(id);
    seen.insert(r.ids.begin(), r.ids.end());
  }
  f.distinct_blocks = seen.size();
  if (!requests.empty())
    f.span_s = double(requests.back().timestamp_ms - requests.front().timestamp_ms) / 1000;
  return f;
}

}  // namespace kvpool::replay
