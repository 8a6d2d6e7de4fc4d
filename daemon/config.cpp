#include "daemon/config.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "kvpool/core/paths.hpp"
#include "kvpool/shm/event_ring.hpp"

namespace kvpool::daemon {
namespace {

// ordered_json keeps fields in document order, so "the first unknown field" is the first one
// the user wrote and config_to_json prints fields in the order this file documents them.
using Json = nlohmann::ordered_json;

constexpr uint32_t kMaxClients = 4096;
constexpr uint64_t kMinRingBytes = 4096;
constexpr uint64_t kMaxRingBytes = uint64_t{64} << 20;
constexpr uint32_t kMaxPollUs = 100'000;
constexpr size_t kMaxPoolNameChars = 32;
constexpr uint32_t kMaxNumBlocks = uint32_t{1} << 30;
// No host has this much RAM to pin for one pool; a bigger request is a typo in the layout.
constexpr uint64_t kMaxHostPoolBytes = uint64_t{1} << 40;
// cudaMalloc's alignment guarantee (kvpool::cuda::kSlabAlignment).
constexpr uint32_t kMaxDeviceAlignment = 256;
// A config file is a few KiB; the cap keeps a mistaken path (/dev/zero) from eating memory.
// The disk index keeps slot numbers in 32 bits; in-flight bytes are RAM the kernel pins.
constexpr uint64_t kMaxDiskSlots = (uint64_t{1} << 32) - 2;
constexpr uint64_t kMaxDiskInflight = uint64_t{16} << 30;
constexpr size_t kMaxConfigFileBytes = size_t{16} << 20;
constexpr std::array<std::string_view, 7> kLogLevels = {"trace", "debug",    "info", "warn",
                                                        "error", "critical", "off"};

// Messages go to logs and terminals as one line, and may echo user text (field names,
// values), so control characters are written as escapes instead.
std::string one_line(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out;
}

Status config_error(std::string_view path, std::string_view what) {
  return Status(ErrorCode::kConfigError, one_line(std::string(path) + ": " + std::string(what)));
}

// Parsing stops at the first bad field; an exception unwinds the nested readers to
// parse_config, which turns it back into a Status (exceptions never leave this file).
struct ConfigError {
  Status status;
};

[[noreturn]] void fail(std::string_view path, std::string_view what) {
  throw ConfigError{config_error(path, what)};
}

std::string child(std::string_view path, std::string_view key) {
  return path.empty() ? std::string(key) : std::string(path) + "." + std::string(key);
}

std::string element(std::string_view path, size_t index) {
  return std::string(path) + "[" + std::to_string(index) + "]";
}

// What a value is, for "expected X, got Y" messages.
std::string describe(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::object:
      return "an object";
    case Json::value_t::number_integer:
      return "a negative integer (" + j.dump() + ")";
    case Json::value_t::number_unsigned:
      return "an integer (" + j.dump() + ")";
    case Json::value_t::number_float:
      return "a floating-point number (" + j.dump() + ")";
    default:
      return "an unsupported value";
  }
}

std::string join(std::initializer_list<std::string_view> words) {
  std::string out;
  for (std::string_view w : words) {
    if (!out.empty()) out += ", ";
    out += w;
  }
  return out;
}

void expect_object(const Json& j, std::string_view path) {
  if (!j.is_object())
    fail(path.empty() ? "config" : path, "expected an object, got " + describe(j));
}

// Unknown fields are errors rather than ignored: a misspelt "num_blcoks" would otherwise
// silently run with the default.
void reject_unknown_fields(const Json& object, std::string_view path,
                           std::initializer_list<std::string_view> known) {
  for (const auto& item : object.items()) {
    const std::string& key = item.key();
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      throw ConfigError{
          Status(ErrorCode::kConfigError, one_line("unknown field '" + child(path, key) +
                                                   "' (known fields here: " + join(known) + ")"))};
    }
  }
}

std::string read_string(const Json& j, std::string_view path) {
  if (!j.is_string()) fail(path, "expected a string, got " + describe(j));
  return j.get<std::string>();
}

// A non-negative integer no larger than `max` (the range of the field's C++ type; the
// field's own range is checked by validate_config so in-code configs get the same checks).
uint64_t read_uint(const Json& j, std::string_view path, uint64_t max) {
  const std::string range = "an integer in 0.." + std::to_string(max);
  if (j.is_number_unsigned()) {
    const uint64_t v = j.get<uint64_t>();
    if (v > max) fail(path, "expected " + range + ", got " + std::to_string(v));
    return v;
  }
  // nlohmann reads integers beyond u64 as doubles; call them out of range, not "a float".
  if (j.is_number_float() && std::isfinite(j.get<double>()) && j.get<double>() >= 0x1p64) {
    fail(path, "expected " + range + ", got " + j.dump() + " (too large)");
  }
  fail(path, "expected " + range + ", got " + describe(j));
}

uint32_t read_u32(const Json& j, std::string_view path) {
  return static_cast<uint32_t>(read_uint(j, path, std::numeric_limits<uint32_t>::max()));
}

template <typename Id>
std::vector<Id> read_id_list(const Json& j, std::string_view path) {
  if (!j.is_array()) fail(path, "expected an array of integers, got " + describe(j));
  std::vector<Id> ids;
  ids.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    ids.push_back(
        static_cast<Id>(read_uint(j[i], element(path, i), std::numeric_limits<Id>::max())));
  }
  return ids;
}

std::string_view storage_name(shm::StorageKind storage) {
  switch (storage) {
    case shm::StorageKind::kHost:
      return "host";
    case shm::StorageKind::kCuda:
      return "cuda";
  }
  return "unknown";
}

std::string_view kind_name(LayoutKind kind) {
  switch (kind) {
    case LayoutKind::kFullyContiguous:
      return "fully_contiguous";
    case LayoutKind::kLayerSeparate:
      return "layer_separate";
  }
  return "unknown";
}

void read_layout(const Json& j, std::string_view path, LayoutConfig& layout) {
  expect_object(j, path);
  reject_unknown_fields(j, path,
                        {"num_layers", "outer_dim", "page_size", "inner_dim", "dtype_bytes",
                         "alignment", "kind", "dtype"});
  const std::pair<std::string_view, uint32_t*> dims[] = {
      {"num_layers", &layout.num_layers},   {"outer_dim", &layout.outer_dim},
      {"page_size", &layout.page_size},     {"inner_dim", &layout.inner_dim},
      {"dtype_bytes", &layout.dtype_bytes}, {"alignment", &layout.alignment},
  };
  for (const auto& [key, field] : dims) {
    if (auto it = j.find(key); it != j.end()) *field = read_u32(*it, child(path, key));
  }
  if (auto it = j.find("kind"); it != j.end()) {
    const std::string kind_path = child(path, "kind");
    const std::string kind = read_string(*it, kind_path);
    if (kind == "fully_contiguous") {
      layout.kind = LayoutKind::kFullyContiguous;
    } else if (kind == "layer_separate") {
      layout.kind = LayoutKind::kLayerSeparate;
    } else {
      fail(kind_path, "must be \"fully_contiguous\" or \"layer_separate\", got \"" + kind + "\"");
    }
  }
}

// "dtype" names the element type; it sets dtype_bytes, or must agree with the one given.
void read_dtype(const Json& layout, std::string_view path, PoolConfig& pool) {
  auto it = layout.find("dtype");
  if (it == layout.end()) return;
  const std::string dtype_path = child(path, "dtype");
  const std::string name = read_string(*it, dtype_path);
  auto d = parse_dtype(name);
  if (!d)
    fail(dtype_path,
         "must be \"fp16\", \"bf16\", \"fp32\", \"fp8_e4m3\" or \"u8\", got \"" + name + "\"");
  const uint32_t bytes = dtype_bytes(*d);
  if (layout.contains("dtype_bytes") && pool.layout.dtype_bytes != bytes)
    fail(dtype_path, "\"" + name + "\" has " + std::to_string(bytes) + "-byte elements, but " +
                         child(path, "dtype_bytes") + " is " +
                         std::to_string(pool.layout.dtype_bytes));
  pool.layout.dtype_bytes = bytes;
  pool.dtype = *d;
}

DiskConfig read_disk(const Json& j, std::string_view path) {
  expect_object(j, path);
  reject_unknown_fields(
      j, path, {"path", "num_blocks", "bytes", "direct_io", "max_inflight_bytes", "admit", "io"});
  DiskConfig d;
  d.enabled = true;
  if (auto it = j.find("path"); it != j.end()) d.path = read_string(*it, child(path, "path"));
  if (auto it = j.find("num_blocks"); it != j.end())
    d.num_blocks = read_uint(*it, child(path, "num_blocks"), kMaxDiskSlots);
  if (auto it = j.find("bytes"); it != j.end())
    d.bytes = read_uint(*it, child(path, "bytes"), std::numeric_limits<uint64_t>::max());
  if (auto it = j.find("direct_io"); it != j.end()) {
    const std::string v = read_string(*it, child(path, "direct_io"));
    if (v == "auto") {
      d.direct_io = DirectIo::kAuto;
    } else if (v == "on") {
      d.direct_io = DirectIo::kOn;
    } else if (v == "off") {
      d.direct_io = DirectIo::kOff;
    } else {
      fail(child(path, "direct_io"), "must be \"auto\", \"on\" or \"off\", got \"" + v + "\"");
    }
  }
  if (auto it = j.find("max_inflight_bytes"); it != j.end())
    d.max_inflight_bytes = read_uint(*it, child(path, "max_inflight_bytes"), kMaxDiskInflight);
  if (auto it = j.find("admit"); it != j.end()) {
    const std::string v = read_string(*it, child(path, "admit"));
    if (v == "all") {
      d.admit = DiskAdmit::kAll;
    } else if (v == "second_hit") {
      d.admit = DiskAdmit::kSecondHit;
    } else {
      fail(child(path, "admit"), "must be \"all\" or \"second_hit\", got \"" + v + "\"");
    }
  }
  if (auto it = j.find("io"); it != j.end()) {
    const std::string v = read_string(*it, child(path, "io"));
    if (v == "auto") {
      d.io = DiskIoEngine::kAuto;
    } else if (v == "io_uring") {
      d.io = DiskIoEngine::kIoUring;
    } else if (v == "threads") {
      d.io = DiskIoEngine::kThreads;
    } else {
      fail(child(path, "io"), "must be \"auto\", \"io_uring\" or \"threads\", got \"" + v + "\"");
    }
  }
  return d;
}

PoolConfig read_pool(const Json& j, std::string_view path, const PoolConfig& defaults) {
  expect_object(j, path);
  reject_unknown_fields(
      j, path,
      {"name", "storage", "device", "num_blocks", "max_holds", "layout", "allowed_uids",
       "allowed_gids", "hash_scheme", "huge_pages", "numa_node", "disk"});
  PoolConfig pool = defaults;
  if (auto it = j.find("allowed_uids"); it != j.end())
    pool.allowed_uids = read_id_list<uid_t>(*it, child(path, "allowed_uids"));
  if (auto it = j.find("allowed_gids"); it != j.end())
    pool.allowed_gids = read_id_list<gid_t>(*it, child(path, "allowed_gids"));
  if (auto it = j.find("name"); it != j.end()) pool.name = read_string(*it, child(path, "name"));
  if (auto it = j.find("storage"); it != j.end()) {
    const std::string storage_path = child(path, "storage");
    const std::string storage = read_string(*it, storage_path);
    if (storage == "host") {
      pool.storage = shm::StorageKind::kHost;
    } else if (storage == "cuda") {
      pool.storage = shm::StorageKind::kCuda;
    } else {
      fail(storage_path, "must be \"host\" or \"cuda\", got \"" + storage + "\"");
    }
  }
  // Whether a device belongs here depends on "storage", which validate_config checks.
  if (auto it = j.find("device"); it != j.end()) {
    pool.device = static_cast<int32_t>(
        read_uint(*it, child(path, "device"), std::numeric_limits<int32_t>::max()));
  }
  if (auto it = j.find("num_blocks"); it != j.end()) {
    pool.layout.num_blocks = read_u32(*it, child(path, "num_blocks"));
  }
  if (auto it = j.find("max_holds"); it != j.end()) {
    pool.max_holds = read_u32(*it, child(path, "max_holds"));
  }
  if (auto it = j.find("layout"); it != j.end()) {
    read_layout(*it, child(path, "layout"), pool.layout);
    read_dtype(*it, child(path, "layout"), pool);
  }
  if (auto it = j.find("hash_scheme"); it != j.end()) {
    const std::string scheme_path = child(path, "hash_scheme");
    const std::string name = read_string(*it, scheme_path);
    auto scheme = parse_hash_scheme(name);
    if (!scheme)
      fail(scheme_path, "must be \"dynamo-0.2\" or \"dynamo-router\", got \"" + name + "\"");
    pool.hash_scheme = *scheme;
  }
  if (auto it = j.find("huge_pages"); it != j.end()) {
    const std::string hp_path = child(path, "huge_pages");
    pool.huge_pages = read_string(*it, hp_path);
    if (pool.huge_pages == "off") pool.huge_pages.clear();
    if (!pool.huge_pages.empty() && pool.huge_pages != "transparent" && pool.huge_pages[0] != '/')
      fail(hp_path,
           "must be \"off\", \"transparent\" or the absolute path of a hugetlbfs "
           "mount (e.g. \"/dev/hugepages\"), got \"" +
               pool.huge_pages + "\"");
    if (pool.storage != shm::StorageKind::kHost)
      fail(hp_path, "applies to host pools only (a cuda pool's memory is the GPU's)");
  }
  if (auto it = j.find("numa_node"); it != j.end()) {
    pool.numa_node = static_cast<int32_t>(
        read_uint(*it, child(path, "numa_node"), std::numeric_limits<int32_t>::max()));
    if (pool.storage != shm::StorageKind::kHost)
      fail(child(path, "numa_node"), "applies to host pools only");
  }
  if (auto it = j.find("disk"); it != j.end()) {
    if (pool.storage != shm::StorageKind::kHost)
      fail(child(path, "disk"),
           "applies to host pools only (the daemon reads and writes the "
           "block bytes)");
    pool.disk = read_disk(*it, child(path, "disk"));
  }
  return pool;
}

void read_quota(const Json& j, std::string_view path, pool::OwnerQuota& q) {
  expect_object(j, path);
  reject_unknown_fields(
      j, path, {"max_mutable_blocks", "max_references", "max_refs_per_block", "max_priority"});
  if (auto it = j.find("max_mutable_blocks"); it != j.end())
    q.max_mutable_blocks = read_u32(*it, child(path, "max_mutable_blocks"));
  if (auto it = j.find("max_references"); it != j.end())
    q.max_references = read_uint(*it, child(path, "max_references"), uint64_t{1} << 40);
  if (auto it = j.find("max_refs_per_block"); it != j.end())
    q.max_refs_per_block = read_u32(*it, child(path, "max_refs_per_block"));
  if (auto it = j.find("max_priority"); it != j.end())
    q.max_priority = read_u32(*it, child(path, "max_priority"));
}

Config read_config(const Json& root) {
  expect_object(root, "");
  // Renamed fields get an error that says what replaced them, not "unknown field".
  if (root.contains("spin_iterations"))
    fail("spin_iterations",
         "was replaced by \"poll_us\" (how long the engine polls after a request, in "
         "microseconds; default 50): remove spin_iterations and set poll_us if needed");
  reject_unknown_fields(root, "",
                        {"instance", "runtime_dir", "max_clients", "ring_bytes", "poll_us",
                         "log_level", "allowed_uids", "allowed_gids", "pools", "event_ring_slots",
                         "max_clients_per_uid", "max_pending_connections", "max_pending_per_uid",
                         "attach_timeout_ms", "quota", "uid_share_percent"});
  const Config defaults = default_config();
  Config c = defaults;
  if (auto it = root.find("instance"); it != root.end()) c.instance = read_string(*it, "instance");
  if (auto it = root.find("runtime_dir"); it != root.end()) {
    c.runtime_dir = read_string(*it, "runtime_dir");
  }
  if (auto it = root.find("max_clients"); it != root.end()) {
    c.max_clients = read_u32(*it, "max_clients");
  }
  if (auto it = root.find("ring_bytes"); it != root.end()) {
    c.ring_bytes = read_uint(*it, "ring_bytes", std::numeric_limits<uint64_t>::max());
  }
  if (auto it = root.find("poll_us"); it != root.end()) c.poll_us = read_u32(*it, "poll_us");
  if (auto it = root.find("max_clients_per_uid"); it != root.end())
    c.max_clients_per_uid = read_u32(*it, "max_clients_per_uid");
  if (auto it = root.find("uid_share_percent"); it != root.end())
    c.uid_share_percent = read_u32(*it, "uid_share_percent");
  if (auto it = root.find("max_pending_connections"); it != root.end())
    c.max_pending_connections = read_u32(*it, "max_pending_connections");
  if (auto it = root.find("max_pending_per_uid"); it != root.end())
    c.max_pending_per_uid = read_u32(*it, "max_pending_per_uid");
  if (auto it = root.find("attach_timeout_ms"); it != root.end())
    c.attach_timeout_ms = read_u32(*it, "attach_timeout_ms");
  if (auto it = root.find("quota"); it != root.end()) read_quota(*it, "quota", c.quota);
  if (auto it = root.find("log_level"); it != root.end()) {
    c.log_level = read_string(*it, "log_level");
  }
  if (auto it = root.find("allowed_uids"); it != root.end()) {
    c.allowed_uids = read_id_list<uid_t>(*it, "allowed_uids");
  }
  if (auto it = root.find("allowed_gids"); it != root.end()) {
    c.allowed_gids = read_id_list<gid_t>(*it, "allowed_gids");
  }
  if (auto it = root.find("event_ring_slots"); it != root.end()) {
    c.event_ring_slots = read_u32(*it, "event_ring_slots");
  }
  if (auto it = root.find("pools"); it != root.end()) {
    if (!it->is_array()) fail("pools", "expected an array of pool objects, got " + describe(*it));
    // Fields a pool leaves out take the built-in pool's values.
    const PoolConfig& pool_defaults = defaults.pools.front();
    c.pools.clear();
    for (size_t i = 0; i < it->size(); ++i) {
      c.pools.push_back(read_pool((*it)[i], element("pools", i), pool_defaults));
    }
  }
  return c;
}

// nlohmann keeps the last of two equal keys without a word; a repeated field is almost always
// an editing mistake, so the parse callback records the first repeat with its path.
class DuplicateKeyCheck {
 public:
  bool on_event(Json::parse_event_t event, const Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
        frames_.push_back(Frame{});
        break;
      case Json::parse_event_t::array_start:
        frames_.push_back(Frame{});
        frames_.back().is_array = true;
        break;
      case Json::parse_event_t::key: {
        Frame& top = frames_.back();
        top.key = parsed.get<std::string>();
        if (!top.keys.insert(top.key).second && error_.empty()) {
          error_ = "duplicate field '" + current_path() + "' (each field may appear only once)";
        }
        break;
      }
      case Json::parse_event_t::object_end:
      case Json::parse_event_t::array_end:
        frames_.pop_back();
        element_done();
        break;
      case Json::parse_event_t::value:
        element_done();
        break;
    }
    return true;
  }
  const std::string& error() const { return error_; }

 private:
  struct Frame {
    bool is_array = false;
    size_t index = 0;  // arrays: the element being read
    std::string key;   // objects: the field being read
    std::set<std::string> keys;
  };

  void element_done() {
    if (!frames_.empty() && frames_.back().is_array) ++frames_.back().index;
  }

  std::string current_path() const {
    std::string path;
    for (const Frame& f : frames_) path = f.is_array ? element(path, f.index) : child(path, f.key);
    return path;
  }

  std::vector<Frame> frames_;
  std::string error_;
};

// nlohmann's what() starts with "[json.exception.parse_error.101] "; the rest (with line
// and column) is what a person needs.
std::string json_error_text(const nlohmann::json::exception& e) {
  std::string_view what = e.what();
  if (what.starts_with("[json.exception.")) {
    if (size_t end = what.find("] "); end != std::string_view::npos) what.remove_prefix(end + 2);
  }
  return std::string(what);
}

Status validate_layout(const PoolConfig& pool, const std::string& path) {
  Result<Layout> layout = Layout::create(pool.layout);
  if (!layout.is_ok()) {
    // Layout says "layout <field> <problem>"; point at the config field instead.
    const Status status = layout.status();  // status() returns a copy; keep it alive
    std::string_view msg = status.message();
    constexpr std::string_view kPrefix = "layout ";
    if (msg.starts_with(kPrefix)) {
      std::string_view rest = msg.substr(kPrefix.size());
      const std::string_view field = rest.substr(0, rest.find(' '));
      static constexpr std::array<std::string_view, 8> kFields = {
          "num_blocks", "num_layers",  "outer_dim", "page_size",
          "inner_dim",  "dtype_bytes", "alignment", "kind"};
      if (std::find(kFields.begin(), kFields.end(), field) != kFields.end() &&
          field.size() < rest.size()) {
        const std::string field_path =
            field == "num_blocks" ? child(path, field) : child(child(path, "layout"), field);
        return config_error(field_path, rest.substr(field.size() + 1));
      }
    }
    return config_error(child(path, "layout"), msg);
  }
  if (pool.storage == shm::StorageKind::kHost && layout->total_bytes() > kMaxHostPoolBytes) {
    return config_error(path, "impossible size: host pool '" + pool.name + "' needs " +
                                  std::to_string(layout->total_bytes()) + " bytes (" +
                                  std::to_string(layout->total_bytes() >> 30) +
                                  " GiB), over the 1 TiB limit (" +
                                  std::to_string(kMaxHostPoolBytes) +
                                  " bytes); lower num_blocks or the layout dimensions");
  }
  return Status::ok();
}

bool valid_pool_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxPoolNameChars) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
}

Status validate_disk(const PoolConfig& pool, const std::string& path) {
  const DiskConfig& d = pool.disk;
  if (!d.enabled) return Status::ok();
  const std::string dp = child(path, "disk");
  if (pool.storage != shm::StorageKind::kHost)
    return config_error(dp, "applies to host pools only");
  if ((d.num_blocks == 0) == (d.bytes == 0))
    return config_error(dp, "give exactly one of \"num_blocks\" (slots) and \"bytes\" (> 0)");
  if (d.num_blocks > kMaxDiskSlots)
    return config_error(child(dp, "num_blocks"),
                        "must be at most " + std::to_string(kMaxDiskSlots));
  if (!d.path.empty() && d.path[0] != '/')
    return config_error(child(dp, "path"), "must be an absolute path, got \"" + d.path + "\"");
  if (d.max_inflight_bytes > kMaxDiskInflight)
    return config_error(child(dp, "max_inflight_bytes"),
                        "must be at most " + std::to_string(kMaxDiskInflight));
  return Status::ok();
}

Status validate_pool(const PoolConfig& pool, const std::string& path) {
  KVPOOL_RETURN_IF_ERROR(validate_disk(pool, path));
  if (!valid_pool_name(pool.name)) {
    return config_error(child(path, "name"),
                        "must be 1 to 32 characters of [A-Za-z0-9_-], got '" + pool.name + "'");
  }
  switch (pool.storage) {
    case shm::StorageKind::kHost:
      if (pool.device != -1) {
        return config_error(child(path, "device"), "only cuda pools take a device (got " +
                                                       std::to_string(pool.device) +
                                                       "); remove it or set \"storage\": \"cuda\"");
      }
      break;
    case shm::StorageKind::kCuda:
      if (pool.device < 0) {
        return config_error(child(path, "device"),
                            "cuda pools need a device: a CUDA ordinal >= 0 (got " +
                                std::to_string(pool.device) + ")");
      }
      // A slab's base is what cudaMalloc returns: 256-byte aligned, no more is promised.
      if (pool.layout.alignment > kMaxDeviceAlignment) {
        return config_error(child(child(path, "layout"), "alignment"),
                            "cuda pools take an alignment of at most " +
                                std::to_string(kMaxDeviceAlignment) +
                                " bytes (what cudaMalloc guarantees), got " +
                                std::to_string(pool.layout.alignment));
      }
      break;
    default:
      return config_error(
          child(path, "storage"),
          "must be host or cuda (got " + std::to_string(static_cast<uint32_t>(pool.storage)) + ")");
  }
  if (pool.layout.num_blocks < 1 || pool.layout.num_blocks > kMaxNumBlocks) {
    return config_error(child(path, "num_blocks"),
                        "must be 1.." + std::to_string(kMaxNumBlocks) + " (got " +
                            std::to_string(pool.layout.num_blocks) + ")");
  }
  return validate_layout(pool, path);
}

}  // namespace

Config default_config() {
  Config c;
  PoolConfig pool;
  pool.name = "g2";
  pool.storage = shm::StorageKind::kHost;
  pool.device = -1;
  pool.layout = LayoutConfig{.num_blocks = 1024,
                             .num_layers = 2,
                             .outer_dim = 2,
                             .page_size = 16,
                             .inner_dim = 128,
                             .dtype_bytes = 2,
                             .alignment = 256,
                             .kind = LayoutKind::kFullyContiguous};
  c.pools.push_back(pool);
  return c;
}

namespace {

// The daemon-wide allow-lists name real ids.
Status validate_allowed_ids(const Config& c) {
  // (uid_t)-1 is the kernel's "no id" marker; listing it would match nobody or everybody.
  for (size_t i = 0; i < c.allowed_uids.size(); ++i) {
    if (c.allowed_uids[i] == static_cast<uid_t>(-1)) {
      return config_error(element("allowed_uids", i),
                          std::to_string(c.allowed_uids[i]) + " is not a valid uid");
    }
  }
  for (size_t i = 0; i < c.allowed_gids.size(); ++i) {
    if (c.allowed_gids[i] == static_cast<gid_t>(-1)) {
      return config_error(element("allowed_gids", i),
                          std::to_string(c.allowed_gids[i]) + " is not a valid gid");
    }
  }
  return Status::ok();
}

// Each pool on its own (validate_pool), and no two with one name.
Status validate_pools(const Config& c) {
  if (c.pools.empty() || c.pools.size() > kMaxPools) {
    return config_error("pools", "must list 1 to " + std::to_string(kMaxPools) + " pools (got " +
                                     std::to_string(c.pools.size()) + ")");
  }
  for (size_t i = 0; i < c.pools.size(); ++i) {
    const std::string path = element("pools", i);
    KVPOOL_RETURN_IF_ERROR(validate_pool(c.pools[i], path));
    for (size_t k = 0; k < i; ++k) {
      if (c.pools[k].name == c.pools[i].name) {
        return config_error(child(path, "name"), "duplicate pool name '" + c.pools[i].name +
                                                     "' (also pools[" + std::to_string(k) +
                                                     "]); pool names must be unique");
      }
    }
  }
  return Status::ok();
}

}  // namespace

Status validate_config(const Config& c) {
  if (Status s = validate_instance_name(c.instance); !s.is_ok()) {
    return config_error("instance", s.message());
  }
  if (c.max_clients < 1 || c.max_clients > kMaxClients) {
    return config_error("max_clients", "must be 1.." + std::to_string(kMaxClients) + " (got " +
                                           std::to_string(c.max_clients) + ")");
  }
  if (c.ring_bytes < kMinRingBytes || c.ring_bytes > kMaxRingBytes ||
      !std::has_single_bit(c.ring_bytes)) {
    return config_error("ring_bytes", "must be a power of two in " + std::to_string(kMinRingBytes) +
                                          ".." + std::to_string(kMaxRingBytes) + " (got " +
                                          std::to_string(c.ring_bytes) + ")");
  }
  if (c.poll_us > kMaxPollUs) {
    return config_error("poll_us", "must be 0.." + std::to_string(kMaxPollUs) + " (got " +
                                       std::to_string(c.poll_us) + ")");
  }
  if (c.uid_share_percent < 1 || c.uid_share_percent > 100) {
    return config_error("uid_share_percent", "must be 1..100 (100: no per-uid cap), got " +
                                                 std::to_string(c.uid_share_percent));
  }
  if (c.max_clients_per_uid > c.max_clients) {
    return config_error("max_clients_per_uid",
                        "must be 0 (uid_share_percent of max_clients) or at most max_clients (" +
                            std::to_string(c.max_clients) + "), got " +
                            std::to_string(c.max_clients_per_uid));
  }
  if (c.max_pending_connections < 1 || c.max_pending_per_uid < 1 ||
      c.max_pending_per_uid > c.max_pending_connections) {
    return config_error("max_pending_per_uid",
                        "need 1 <= max_pending_per_uid <= max_pending_connections (got " +
                            std::to_string(c.max_pending_per_uid) + " and " +
                            std::to_string(c.max_pending_connections) + ")");
  }
  if (c.attach_timeout_ms < 10 || c.attach_timeout_ms > 600'000) {
    return config_error("attach_timeout_ms",
                        "must be 10..600000 (got " + std::to_string(c.attach_timeout_ms) + ")");
  }
  if (c.quota.max_refs_per_block < 1 ||
      uint64_t{c.quota.max_refs_per_block} * c.max_clients >= (uint64_t{1} << 32)) {
    return config_error("quota.max_refs_per_block",
                        "must be at least 1 and max_clients x max_refs_per_block below 2^32, so "
                        "that no reference count can wrap (got " +
                            std::to_string(c.quota.max_refs_per_block) + " x " +
                            std::to_string(c.max_clients) + ")");
  }
  if (std::find(kLogLevels.begin(), kLogLevels.end(), c.log_level) == kLogLevels.end()) {
    return config_error("log_level",
                        "must be one of trace, debug, info, warn, error, critical, off (got \"" +
                            c.log_level + "\")");
  }
  KVPOOL_RETURN_IF_ERROR(validate_allowed_ids(c));
  if (c.event_ring_slots != 0 && !shm::check_event_ring_capacity(c.event_ring_slots).is_ok()) {
    return config_error("event_ring_slots", "must be 0 (no event ring) or a power of two in 2.." +
                                                std::to_string(shm::kEventRingMaxCapacity) +
                                                " (got " + std::to_string(c.event_ring_slots) +
                                                ")");
  }
  return validate_pools(c);
}

Result<Config> parse_config(const std::string& json_text) {
  DuplicateKeyCheck duplicates;
  try {
    const Json root =
        Json::parse(json_text, [&duplicates](int, Json::parse_event_t event, Json& parsed) {
          return duplicates.on_event(event, parsed);
        });
    if (!duplicates.error().empty()) {
      return Status(ErrorCode::kConfigError, one_line(duplicates.error()));
    }
    Config config = read_config(root);
    KVPOOL_RETURN_IF_ERROR(validate_config(config));
    return config;
  } catch (const ConfigError& e) {
    return e.status;
  } catch (const nlohmann::json::parse_error& e) {
    return Status(ErrorCode::kConfigError, one_line("invalid JSON: " + json_error_text(e)));
  } catch (const nlohmann::json::exception& e) {
    // Every type is checked before it is read, so this is a backstop, not an expected path.
    return Status(ErrorCode::kConfigError, one_line("config: " + json_error_text(e)));
  }
}

Result<Config> load_config_file(const std::string& path) {
  const std::string where = "config file '" + path + "'";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return Status(ErrorCode::kNotFound, one_line(where + " does not exist"));
    if (err == EACCES) {
      return Status(ErrorCode::kPermissionDenied,
                    one_line(where + " is not readable by this user (permission denied)"));
    }
    return io_error("open " + where, err);
  }
  std::string text;
  char buf[64 * 1024];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return io_error("read " + where, err);
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxConfigFileBytes) {
      ::close(fd);
      return Status(ErrorCode::kConfigError,
                    one_line(where + " is larger than " + std::to_string(kMaxConfigFileBytes) +
                             " bytes; is this the right file?"));
    }
  }
  ::close(fd);
  Result<Config> config = parse_config(text);
  if (!config.is_ok()) {
    return Status(config.status().code(), where + ": " + config.status().message());
  }
  return config;
}

namespace {
Json disk_json(const DiskConfig& d) {
  Json j;
  if (!d.path.empty()) j["path"] = d.path;
  if (d.num_blocks != 0) j["num_blocks"] = d.num_blocks;
  if (d.bytes != 0) j["bytes"] = d.bytes;
  j["direct_io"] = d.direct_io == DirectIo::kOn    ? "on"
                   : d.direct_io == DirectIo::kOff ? "off"
                                                   : "auto";
  if (d.max_inflight_bytes != 0) j["max_inflight_bytes"] = d.max_inflight_bytes;
  j["admit"] = d.admit == DiskAdmit::kSecondHit ? "second_hit" : "all";
  j["io"] = d.io == DiskIoEngine::kIoUring   ? "io_uring"
            : d.io == DiskIoEngine::kThreads ? "threads"
                                             : "auto";
  return j;
}
}  // namespace

std::string config_to_json(const Config& c) {
  Json pools = Json::array();
  for (const PoolConfig& p : c.pools) {
    Json pool;
    pool["name"] = p.name;
    pool["storage"] = storage_name(p.storage);
    // Host pools normally carry device -1, which the schema has no spelling for; a host pool
    // with another device is invalid, and printing it lets parse_config say so.
    if (p.storage != shm::StorageKind::kHost || p.device != -1) pool["device"] = p.device;
    pool["num_blocks"] = p.layout.num_blocks;
    pool["max_holds"] = p.max_holds;
    if (!p.allowed_uids.empty()) pool["allowed_uids"] = p.allowed_uids;
    if (!p.allowed_gids.empty()) pool["allowed_gids"] = p.allowed_gids;
    pool["hash_scheme"] = std::string(hash_scheme_name(p.hash_scheme));
    // Printed only when set, so the default config (and systemd/kvpoold.json) stays as is.
    if (!p.huge_pages.empty()) pool["huge_pages"] = p.huge_pages;
    if (p.numa_node >= 0) pool["numa_node"] = p.numa_node;
    if (p.disk.enabled) pool["disk"] = disk_json(p.disk);
    pool["layout"] = Json{{"num_layers", p.layout.num_layers},   {"outer_dim", p.layout.outer_dim},
                          {"page_size", p.layout.page_size},     {"inner_dim", p.layout.inner_dim},
                          {"dtype_bytes", p.layout.dtype_bytes}, {"alignment", p.layout.alignment},
                          {"kind", kind_name(p.layout.kind)}};
    if (p.dtype != DType::kUnspecified) pool["layout"]["dtype"] = dtype_name(p.dtype);
    pools.push_back(std::move(pool));
  }
  Json root;
  root["instance"] = c.instance;
  root["runtime_dir"] = c.runtime_dir;
  root["max_clients"] = c.max_clients;
  root["ring_bytes"] = c.ring_bytes;
  root["poll_us"] = c.poll_us;
  root["log_level"] = c.log_level;
  root["allowed_uids"] = c.allowed_uids;
  root["allowed_gids"] = c.allowed_gids;
  root["pools"] = std::move(pools);
  root["event_ring_slots"] = c.event_ring_slots;
  root["max_clients_per_uid"] = c.max_clients_per_uid;
  root["uid_share_percent"] = c.uid_share_percent;
  root["max_pending_connections"] = c.max_pending_connections;
  root["max_pending_per_uid"] = c.max_pending_per_uid;
  root["attach_timeout_ms"] = c.attach_timeout_ms;
  root["quota"] = Json{{"max_mutable_blocks", c.quota.max_mutable_blocks},
                       {"max_references", c.quota.max_references},
                       {"max_refs_per_block", c.quota.max_refs_per_block},
                       {"max_priority", c.quota.max_priority}};
  // Replace rather than throw on invalid UTF-8: this may print a config built in code.
  return root.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

bool uid_share_applies(const Config& c) {
  // One allowed uid has nobody to share with: its workers may take everything.
  return c.uid_share_percent < 100 && c.allowed_uids.size() != 1;
}

uint32_t clients_per_uid(const Config& c) {
  if (c.max_clients_per_uid != 0) return c.max_clients_per_uid;
  if (!uid_share_applies(c)) return 0;
  return std::max<uint32_t>(
      1, static_cast<uint32_t>(uint64_t{c.max_clients} * c.uid_share_percent / 100));
}

uint32_t blocks_per_uid(const Config& c, uint32_t num_blocks) {
  if (!uid_share_applies(c)) return 0;
  return std::max<uint32_t>(
      1, static_cast<uint32_t>(uint64_t{num_blocks} * c.uid_share_percent / 100));
}

}  // namespace kvpool::daemon
