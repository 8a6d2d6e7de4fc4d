// kvpoolctl against a real kvpoold: clients, pools, metrics and check (and status), in
// human and --json form, with errors that are one clear line.
//
// The daemon runs with two host pools; this test process attaches through libkvpool and
// holds a known set of blocks, so every figure kvpoolctl prints can be checked exactly.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <atomic>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "kvpool/client.hpp"
#include "kvpool/core/layout.hpp"
#include "kvpool/core/paths.hpp"
#include "kvpool/pool/arena.hpp"
#include "kvpool/shm/cpu_share.hpp"
#include "kvpool/shm/registry_segment.hpp"
#include "kvpool/shm/segment_layout.hpp"
#include "support/daemon_process.hpp"
#include "support/process.hpp"
#include "support/wait.hpp"

namespace kvpool {
namespace {

using namespace testsupport;
using nlohmann::json;

LayoutConfig g2_layout() {
  return LayoutConfig{64, 2, 2, 16, 128, 2, 256, LayoutKind::kFullyContiguous};
}
LayoutConfig g3_layout() {
  return LayoutConfig{32, 3, 1, 4, 64, 4, 512, LayoutKind::kLayerSeparate};
}

json pool_config(const std::string& name, const LayoutConfig& l, const char* dtype = nullptr) {
  json p = {
      {"name", name},
      {"storage", "host"},
      {"num_blocks", l.num_blocks},
      {"layout",
       {{"num_layers", l.num_layers},
        {"outer_dim", l.outer_dim},
        {"page_size", l.page_size},
        {"inner_dim", l.inner_dim},
        {"dtype_bytes", l.dtype_bytes},
        {"alignment", l.alignment},
        {"kind", l.kind == LayoutKind::kFullyContiguous ? "fully_contiguous" : "layer_separate"}}}};
  if (dtype) p["layout"]["dtype"] = dtype;
  return p;
}

// uid_share_percent 100: a test allocates a whole pool (to evict) as its one uid.
json daemon_config(const std::vector<json>& pools) {
  return {{"max_clients", 8}, {"pools", pools}, {"uid_share_percent", 100}};
}

RunResult ctl(const std::vector<std::string>& args) {
  std::vector<std::string> argv{KVPOOLCTL_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  return run(argv);
}

size_t count_lines(const std::string& s) {
  return static_cast<size_t>(std::count(s.begin(), s.end(), '\n'));
}

// ---- the Prometheus text format, strictly -------------------------------------------------

struct ParsedSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value;
};
struct ParsedMetrics {
  std::map<std::string, std::string> types;  // family -> type
  std::vector<ParsedSample> samples;

  // The value of the one sample `name` with exactly these labels; fails the test if absent.
  double get(const std::string& name, const std::map<std::string, std::string>& labels = {}) const {
    for (const auto& s : samples)
      if (s.name == name && s.labels == labels) return s.value;
    ADD_FAILURE() << "no sample " << name << " with the given labels";
    return -1;
  }
};

// Parses exposition text; every violation of the format is a test failure.
ParsedMetrics parse_prometheus(const std::string& text) {
  ParsedMetrics m;
  static const std::regex help_re(R"(^# HELP (kvpool_[a-zA-Z0-9_]*) \S.*$)");
  static const std::regex type_re(R"(^# TYPE (kvpool_[a-zA-Z0-9_]*) (gauge|counter|histogram)$)");
  static const std::regex sample_re(
      R"re(^(kvpool_[a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")*)\})? (\S+)$)re");
  static const std::regex label_re(R"re(([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)")re");
  std::set<std::string> helped;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch mt;
    if (std::regex_match(line, mt, help_re)) {
      EXPECT_TRUE(helped.insert(mt[1]).second) << "second HELP for " << mt[1];
    } else if (std::regex_match(line, mt, type_re)) {
      EXPECT_TRUE(helped.count(mt[1])) << "TYPE before HELP for " << mt[1];
      EXPECT_TRUE(m.types.emplace(mt[1], mt[2]).second) << "second TYPE for " << mt[1];
    } else if (std::regex_match(line, mt, sample_re)) {
      ParsedSample s;
      s.name = mt[1];
      std::string labels = mt[3];
      for (std::sregex_iterator it(labels.begin(), labels.end(), label_re), end; it != end; ++it)
        s.labels[(*it)[1]] = (*it)[2];
      std::string v = mt[4];
      s.value = v == "+Inf" ? INFINITY : std::stod(v);
      // The family is declared before its samples (histograms: name_bucket/_sum/_count).
      std::string family = s.name;
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        std::string sfx = suffix;
        if (family.size() > sfx.size() && family.ends_with(sfx) &&
            m.types.count(family.substr(0, family.size() - sfx.size())) &&
            m.types[family.substr(0, family.size() - sfx.size())] == "histogram")
          family = family.substr(0, family.size() - sfx.size());
      }
      EXPECT_TRUE(m.types.count(family)) << "sample before its TYPE: " << line;
      if (m.types[family] == "counter") {
        EXPECT_TRUE(s.name.ends_with("_total")) << line;
      }
      m.samples.push_back(std::move(s));
    } else {
      ADD_FAILURE() << "not exposition format: '" << line << "'";
    }
  }
  return m;
}

// ---- a daemon with two pools, and this process as its one client ---------------------------

// A fresh daemon per test, so every figure is exact.
class KvpoolctlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_ = std::make_unique<DaemonProcess>(
        daemon_config({pool_config("g2", g2_layout(), "bf16"), pool_config("g3", g3_layout())}));
    daemon_->start(20s);
  }
  void TearDown() override {
    ExitStatus st = daemon_->stop();
    EXPECT_TRUE(st.exited() && st.code() == 0) << daemon_->stderr_text();
  }

  std::vector<std::string> target() const {
    return {"--instance", daemon_->instance(), "--runtime-dir", daemon_->runtime_dir()};
  }
  RunResult ctl_on(const std::string& command, std::vector<std::string> extra = {}) const {
    std::vector<std::string> args{command};
    for (auto& a : target()) args.push_back(a);
    for (auto& a : extra) args.push_back(a);
    return ctl(args);
  }
  json ctl_json(const std::string& command) const {
    RunResult r = ctl_on(command, {"--json"});
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    try {
      return json::parse(r.out);
    } catch (const std::exception& e) {
      ADD_FAILURE() << command << " --json is not JSON: " << e.what() << "\n" << r.out;
      return json();
    }
  }

  // Connects and takes: g2: 3 allocated, 2 of them registered and then matched (2 more
  // references), 1 left mutable; g3: 1 allocated. Blocks held: g2 3, g3 1.
  struct Holdings {
    Client client;
    std::vector<MutableBlock> mutable_blocks;
    std::vector<ImmutableBlock> registered;
    std::vector<ImmutableBlock> matched;
  };
  std::unique_ptr<Holdings> attach_and_hold() const {
    ConnectOptions opts;
    opts.runtime_dir = daemon_->runtime_dir();
    auto c = Client::connect(daemon_->instance(), opts);
    if (!c) throw TestError("connect: " + c.status().to_string());
    auto g2 = c->pool("g2");
    auto g3 = c->pool("g3");
    if (!g2 || !g3) throw TestError("pools g2/g3 missing");
    auto blocks = g2->allocate_blocks(3);
    if (!blocks) throw TestError("allocate: " + blocks.status().to_string());
    std::vector<MutableBlock> to_register;
    std::vector<SequenceHash> hashes;
    std::optional<SequenceHash> parent;
    for (int i = 0; i < 2; ++i) {
      MutableBlock b = std::move((*blocks)[static_cast<size_t>(i)]);
      std::vector<Token> tokens(16);
      for (size_t t = 0; t < tokens.size(); ++t) tokens[t] = static_cast<Token>(100 * i + t);
      if (!b.init_sequence(7, parent).is_ok() || !b.add_tokens(tokens) || !b.commit().is_ok())
        throw TestError("filling a block failed");
      parent = *b.sequence_hash();
      hashes.push_back(*parent);
      to_register.push_back(std::move(b));
    }
    auto h = std::make_unique<Holdings>(Holdings{std::move(*c), {}, {}, {}});
    h->mutable_blocks.push_back(std::move((*blocks)[2]));
    auto reg = g2->register_blocks(std::move(to_register));
    if (!reg) throw TestError("register: " + reg.status().to_string());
    h->registered = std::move(*reg);
    auto hit = g2->match_sequence_hashes(hashes);
    if (!hit || hit->size() != 2) throw TestError("match did not find both blocks");
    h->matched = std::move(*hit);
    auto one = g3->allocate_blocks(1);
    if (!one) throw TestError("allocate g3: " + one.status().to_string());
    h->mutable_blocks.push_back(std::move((*one)[0]));
    return h;
  }

  std::unique_ptr<DaemonProcess> daemon_;
};

TEST_F(KvpoolctlTest, ClientsShowsEachClientAndTheBlocksItHolds) {
  auto held = attach_and_hold();
  json j = ctl_json("clients");
  EXPECT_EQ(j["instance"], daemon_->instance());
  EXPECT_EQ(j["max_clients"], 8);
  ASSERT_EQ(j["clients"].size(), 1u) << j.dump(2);
  const json& c = j["clients"][0];
  EXPECT_EQ(c["slot"], held->client.slot());
  EXPECT_EQ(c["pid"], ::getpid());
  EXPECT_EQ(c["uid"], ::getuid());
  EXPECT_EQ(c["state"], "attached");
  EXPECT_GE(c["requests"].get<uint64_t>(), 4u);  // allocate, register, match, allocate
  EXPECT_EQ(c["protocol_errors"], 0);
  EXPECT_EQ(c["blocks_held"], 4);
  EXPECT_EQ(c["mutable_blocks"], 2);
  EXPECT_EQ(c["registered_blocks_held"], 2);
  // The library holds one daemon reference per block and counts its own copies (register
  // and match of one block by one client): the daemon sees one reference per block.
  EXPECT_EQ(c["references_held"], 2);
  EXPECT_EQ(c["blocks_held_by_pool"], (json{{"g2", 3}, {"g3", 1}}));
  EXPECT_GE(c["age_seconds"].get<double>(), 0.0);
  EXPECT_LT(c["age_seconds"].get<double>(), 600.0);

  RunResult r = ctl_on("clients");
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(count_lines(r.out), 2u) << r.out;  // header + one client
  for (const char* col :
       {"slot", "pid", "uid", "state", "requests", "protocol_errors", "blocks_held", "age"})
    EXPECT_NE(r.out.find(col), std::string::npos) << "no column " << col << ":\n" << r.out;
  std::regex row("\\n *" + std::to_string(held->client.slot()) + " +" + std::to_string(::getpid()) +
                 " +" + std::to_string(::getuid()) + " +attached +[0-9]+ +0 +4 +[0-9.]+[smh]");
  EXPECT_TRUE(std::regex_search(r.out, row)) << r.out;
}

TEST_F(KvpoolctlTest, PoolsListsStorageLayoutAndSizes) {
  json j = ctl_json("pools");
  ASSERT_EQ(j["pools"].size(), 2u) << j.dump(2);
  const std::pair<const char*, LayoutConfig> expected[] = {{"g2", g2_layout()},
                                                           {"g3", g3_layout()}};
  for (size_t i = 0; i < 2; ++i) {
    const json& p = j["pools"][i];
    auto layout = Layout::create(expected[i].second);
    ASSERT_TRUE(layout);
    EXPECT_EQ(p["index"], i);
    EXPECT_EQ(p["name"], expected[i].first);
    EXPECT_EQ(p["storage"], "host");
    EXPECT_TRUE(p["device"].is_null());
    EXPECT_EQ(p["num_blocks"], expected[i].second.num_blocks);
    EXPECT_EQ(p["block_bytes"], layout->block_bytes());
    EXPECT_EQ(p["total_bytes"], layout->total_bytes());
    EXPECT_EQ(p["layout"]["page_size"], expected[i].second.page_size);
    EXPECT_EQ(p["layout"]["num_layers"], expected[i].second.num_layers);
    EXPECT_EQ(p["layout"]["dtype_bytes"], expected[i].second.dtype_bytes);
    EXPECT_EQ(p["layout"]["kind"], i == 0 ? "fully_contiguous" : "layer_separate");
    // The element type: g2 names one, g3 has dtype_bytes alone (issue 27: pools hid it).
    EXPECT_EQ(p["layout"]["dtype"], i == 0 ? json("bf16") : json(nullptr)) << p.dump();
  }
  RunResult r = ctl_on("pools");
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  for (const char* col :
       {"pool", "storage", "device", "dtype", "layout", "block_bytes", "total_bytes"})
    EXPECT_NE(r.out.find(col), std::string::npos) << "no column " << col << ":\n" << r.out;
  EXPECT_TRUE(std::regex_search(
      r.out, std::regex("\\ng2 +host +- +64 +bf16 +fully_contiguous 2x2x16x128x2B +16384 ")))
      << r.out;
  EXPECT_TRUE(std::regex_search(
      r.out, std::regex("\\ng3 +host +- +32 +- +layer_separate 3x1x4x64x4B +3072 ")))
      << r.out;
}

TEST_F(KvpoolctlTest, MetricsArePrometheusTextWithExactFigures) {
  auto held = attach_and_hold();
  RunResult r = ctl_on("metrics");
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  ParsedMetrics m = parse_prometheus(r.out);

  for (const char* name : {"kvpool_blocks", "kvpool_clients_attached", "kvpool_pool_blocks"})
    EXPECT_EQ(m.types[name], "gauge") << name;
  for (const char* name :
       {"kvpool_allocations_total", "kvpool_evictions_total", "kvpool_registrations_total",
        "kvpool_match_queries_total", "kvpool_match_hits_total", "kvpool_rejected_handles_total",
        "kvpool_reclaimed_clients_total", "kvpool_reclaimed_blocks_total", "kvpool_requests_total",
        "kvpool_protocol_errors_total"})
    EXPECT_EQ(m.types[name], "counter") << name;
  EXPECT_EQ(m.types["kvpool_request_duration_seconds"], "histogram");

  EXPECT_EQ(m.get("kvpool_blocks", {{"pool", "g2"}, {"state", "mutable"}}), 1);
  EXPECT_EQ(m.get("kvpool_blocks", {{"pool", "g2"}, {"state", "active"}}), 2);
  double g2_total = 0;
  for (const char* st : {"free", "mutable", "active", "inactive"})
    g2_total += m.get("kvpool_blocks", {{"pool", "g2"}, {"state", st}});
  EXPECT_EQ(g2_total, 64);
  EXPECT_EQ(m.get("kvpool_pool_blocks", {{"pool", "g2"}}), 64);
  EXPECT_EQ(m.get("kvpool_pool_blocks", {{"pool", "g3"}}), 32);
  EXPECT_EQ(m.get("kvpool_allocations_total", {{"pool", "g2"}}), 3);
  EXPECT_EQ(m.get("kvpool_allocations_total", {{"pool", "g3"}}), 1);
  EXPECT_EQ(m.get("kvpool_registrations_total", {{"pool", "g2"}}), 2);
  EXPECT_EQ(m.get("kvpool_match_queries_total", {{"pool", "g2"}}), 2);
  EXPECT_EQ(m.get("kvpool_match_hits_total", {{"pool", "g2"}}), 2);
  EXPECT_EQ(m.get("kvpool_evictions_total", {{"pool", "g2"}}), 0);
  EXPECT_EQ(m.get("kvpool_rejected_handles_total", {{"pool", "g2"}}), 0);
  EXPECT_EQ(m.get("kvpool_clients_attached"), 1);
  // What callers' wait policy reads: kvpoold inherits our affinity; the one client is idle,
  // so once the engine's pass after its last call ran, nobody is in a call.
  EXPECT_EQ(m.types["kvpool_engine_cpus"], "gauge");
  EXPECT_EQ(m.types["kvpool_clients_busy"], "gauge");
  EXPECT_EQ(m.types["kvpool_clients_awake"], "gauge");
  EXPECT_EQ(m.get("kvpool_engine_cpus"), shm::allowed_cpu_count());
  wait_until(
      [&] {
        auto now = parse_prometheus(ctl_on("metrics").out);
        return now.get("kvpool_clients_busy") == 0 && now.get("kvpool_clients_awake") == 0;
      },
      std::chrono::seconds(10),
      "kvpool_clients_busy and kvpool_clients_awake to read 0 with the one client idle");
  EXPECT_EQ(m.get("kvpool_protocol_errors_total"), 0);
  EXPECT_EQ(m.get("kvpool_reclaimed_clients_total"), 0);
  const double requests = m.get("kvpool_requests_total");
  EXPECT_GE(requests, 4);

  // The histogram: increasing bounds, cumulative counts, +Inf == _count == every request
  // processed so far (kvpoolctl's own observe request is no ring record).
  double prev_le = -1, prev_count = 0;
  bool saw_inf = false;
  for (const auto& s : m.samples) {
    if (s.name != "kvpool_request_duration_seconds_bucket") continue;
    ASSERT_EQ(s.labels.size(), 1u);
    double le = s.labels.at("le") == "+Inf" ? INFINITY : std::stod(s.labels.at("le"));
    EXPECT_GT(le, prev_le);
    EXPECT_GE(s.value, prev_count);
    prev_le = le;
    prev_count = s.value;
    saw_inf |= std::isinf(le);
  }
  EXPECT_TRUE(saw_inf);
  EXPECT_EQ(prev_count, m.get("kvpool_request_duration_seconds_count"));
  EXPECT_EQ(prev_count, requests);
  EXPECT_GT(m.get("kvpool_request_duration_seconds_sum"), 0);

  // --json: the same families.
  json j = ctl_json("metrics");
  bool found = false;
  for (const auto& fam : j["metrics"]) {
    EXPECT_TRUE(m.types.count(fam["name"])) << fam["name"];
    if (fam["name"] != "kvpool_blocks") continue;
    EXPECT_EQ(fam["type"], "gauge");
    for (const auto& s : fam["samples"])
      if (s["labels"] == json{{"pool", "g2"}, {"state", "active"}}) {
        EXPECT_EQ(s["value"], 2);
        found = true;
      }
  }
  EXPECT_TRUE(found) << j.dump(2);
}

TEST_F(KvpoolctlTest, CheckPassesOnAHealthyDaemonEvenWhileItWrites) {
  auto held = attach_and_hold();
  RunResult r = ctl_on("check");
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("pool 'g2': ok"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("pool 'g3': ok"), std::string::npos) << r.out;
  json j = ctl_json("check");
  EXPECT_EQ(j["ok"], true) << j.dump(2);
  EXPECT_EQ(j["pools"].size(), 2u);

  // A second client keeps the engine writing (allocate, release, register, match); every
  // check must still find a consistent snapshot and report no violation.
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> ops{0};
  std::thread load([&] {
    ConnectOptions opts;
    opts.runtime_dir = daemon_->runtime_dir();
    auto c = Client::connect(daemon_->instance(), opts);
    if (!c) return;
    auto g2 = c->pool("g2");
    uint64_t salt = 1000;
    while (!stop.load(std::memory_order_relaxed)) {
      auto b = g2->allocate_blocks(4);
      if (!b) break;
      std::vector<MutableBlock> batch;
      for (auto& blk : *b) {
        std::vector<Token> tokens(16, static_cast<Token>(salt));
        (void)blk.init_sequence(++salt);
        (void)blk.add_tokens(tokens);
        (void)blk.commit();
        batch.push_back(std::move(blk));
      }
      auto reg = g2->register_blocks(std::move(batch));
      if (!reg) break;
      ops.fetch_add(1, std::memory_order_relaxed);
    }
  });
  for (int i = 0; i < 10; ++i) {
    RunResult rr = ctl_on("check");
    EXPECT_EQ(rr.exit_code, 0) << "check #" << i << " under load: " << rr.describe();
  }
  stop = true;
  load.join();
  EXPECT_GT(ops.load(), 0u);
}

TEST_F(KvpoolctlTest, StatusStillWorks) {
  json j = ctl_json("status");
  EXPECT_EQ(j["instance"], daemon_->instance());
  EXPECT_EQ(j["pools"].size(), 2u);
}

// ---- events: the event ring, as it is and as it grows ------------------------------------

// A command whose stdout is read line by line while it runs (kvpoolctl events --follow).
class Tail {
 public:
  explicit Tail(const std::vector<std::string>& argv) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) throw TestError("pipe failed");
    fd_ = p[0];
    shm::UniqueFd write_end(p[1]);
    child_.spawn(argv, child_environment(), -1, write_end.get(), 2);
  }
  ~Tail() {
    child_.kill_and_reap();
    ::close(fd_);
  }
  // The next line, or nullopt at the deadline or at EOF.
  std::optional<std::string> line(std::chrono::milliseconds timeout = 10s) {
    auto deadline = Clock::now() + timeout;
    while (true) {
      if (auto nl = buf_.find('\n'); nl != std::string::npos) {
        std::string l = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return l;
      }
      pollfd pfd{fd_, POLLIN, 0};
      if (::poll(&pfd, 1, ms_left(deadline)) != 1) return std::nullopt;
      char b[4096];
      ssize_t n = ::read(fd_, b, sizeof(b));
      if (n <= 0) return std::nullopt;
      buf_.append(b, static_cast<size_t>(n));
    }
  }

 private:
  ChildProcess child_;
  int fd_ = -1;
  std::string buf_;
};

TEST_F(KvpoolctlTest, EventsPrintsTheStoredBatchOfARegisterCall) {
  auto held = attach_and_hold();
  const SequenceHash h0 = held->registered[0].sequence_hash();
  const SequenceHash h1 = held->registered[1].sequence_hash();

  RunResult r = ctl_on("events", {"--json"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  std::vector<json> events;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) events.push_back(json::parse(line));
  ASSERT_EQ(events.size(), 2u) << r.out;
  EXPECT_EQ(events[0]["event_id"], 1);
  EXPECT_EQ(events[1]["event_id"], 2);
  for (const json& e : events) {
    EXPECT_EQ(e["type"], "stored");
    EXPECT_EQ(e["pool"], "g2");
    EXPECT_EQ(e["batch_id"], 1);
    EXPECT_EQ(e["batch_size"], 2);
  }
  EXPECT_EQ(events[0]["sequence_hash"].get<uint64_t>(), h0);
  EXPECT_TRUE(events[0]["parent_hash"].is_null());
  EXPECT_EQ(events[1]["sequence_hash"].get<uint64_t>(), h1);
  EXPECT_EQ(events[1]["parent_hash"].get<uint64_t>(), h0);
  EXPECT_NE(events[1]["block_hash"].get<uint64_t>(), events[0]["block_hash"].get<uint64_t>());

  r = ctl_on("events");
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(count_lines(r.out), 2u) << r.out;
  EXPECT_NE(r.out.find("1 stored  pool=g2 seq=" + std::to_string(h0) + " "), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("parent=" + std::to_string(h0)), std::string::npos) << r.out;
}

// Issue 17, items 8 and 9: the figures operators compare with vLLM and Dynamo KVBM, exact
// for the holdings attach_and_hold() makes (g2: 3 allocated, 2 registered and matched, 1
// mutable; g3: 1 mutable), and the versions of the daemon and of kvpoolctl.
TEST_F(KvpoolctlTest, MetricsGiveTokensUsageBytesClientsAndVersions) {
  auto held = attach_and_hold();
  RunResult r = ctl_on("metrics");
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  ParsedMetrics m = parse_prometheus(r.out);
  const double page = g2_layout().page_size;
  EXPECT_EQ(m.types["kvpool_prefix_cache_queries_tokens_total"], "counter");
  EXPECT_EQ(m.get("kvpool_prefix_cache_queries_tokens_total", {{"pool", "g2"}}), 2 * page);
  EXPECT_EQ(m.get("kvpool_prefix_cache_hits_tokens_total", {{"pool", "g2"}}), 2 * page);
  EXPECT_EQ(m.get("kvpool_prefix_cache_queries_tokens_total", {{"pool", "g3"}}), 0);
  // In use: active 2 + mutable 1 of 64; occupied adds inactive (none yet).
  EXPECT_DOUBLE_EQ(m.get("kvpool_pool_usage_ratio", {{"pool", "g2"}}), 3.0 / 64);
  EXPECT_DOUBLE_EQ(m.get("kvpool_pool_occupancy_ratio", {{"pool", "g2"}}), 3.0 / 64);
  EXPECT_DOUBLE_EQ(m.get("kvpool_pool_usage_ratio", {{"pool", "g3"}}), 1.0 / 32);
  const double g2_bytes = Layout::create(g2_layout())->total_bytes();
  EXPECT_EQ(m.get("kvpool_pool_bytes", {{"pool", "g2"}, {"storage", "host"}}), g2_bytes);
  EXPECT_EQ(m.get("kvpool_pool_block_bytes", {{"pool", "g2"}}),
            static_cast<double>(Layout::create(g2_layout())->block_bytes()));

  // Per client: this process is the only one attached.
  json clients = ctl_json("clients")["clients"];
  ASSERT_EQ(clients.size(), 1u) << clients.dump();
  const std::string slot = std::to_string(clients[0]["slot"].get<uint32_t>());
  const std::string pid = std::to_string(getpid());
  EXPECT_EQ(m.get("kvpool_client_blocks_held", {{"slot", slot}, {"pid", pid}, {"kind", "mutable"}}),
            2);
  EXPECT_EQ(
      m.get("kvpool_client_blocks_held", {{"slot", slot}, {"pid", pid}, {"kind", "registered"}}),
      2);
  // One daemon reference per block the client holds, however many handles it has.
  EXPECT_EQ(m.get("kvpool_client_references_held", {{"slot", slot}, {"pid", pid}}), 2);
  EXPECT_GE(m.get("kvpool_client_requests_total", {{"slot", slot}, {"pid", pid}}), 4);
  EXPECT_EQ(m.types["kvpool_client_requests_total"], "counter");

  // Versions: kvpoolctl --version names the one this build stamped into kvpoold too.
  RunResult v = ctl({"--version"});
  ASSERT_EQ(v.exit_code, 0) << v.describe();
  std::smatch vm;
  ASSERT_TRUE(std::regex_search(v.out, vm, std::regex(R"(^kvpoolctl (\S+) \(git (\S+)\)\n$)")))
      << v.out;
  const std::string version = vm[1], commit = vm[2];
  EXPECT_EQ(m.get("kvpool_build_info", {{"version", version}, {"git_commit", commit}}), 1);
  json st = ctl_json("status");
  EXPECT_EQ(st["daemon_version"], version + " (git " + commit + ")") << st.dump();
  RunResult text = ctl_on("status");
  EXPECT_NE(text.out.find("kvpoold " + version + " (git " + commit + ")"), std::string::npos)
      << text.out;
}

// Issue 17, item 13: `events` prints the last 20 (like tail), --last N and --all change
// that, and --json carries every hash as a decimal string too (jq rounds big numbers).
TEST_F(KvpoolctlTest, EventsPrintTheLastTwentyAndHashesAsStrings) {
  ConnectOptions opts;
  opts.runtime_dir = daemon_->runtime_dir();
  auto c = Client::connect(daemon_->instance(), opts);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  auto g2 = c->pool("g2");
  ASSERT_TRUE(g2.is_ok());
  constexpr int kEvents = 25;  // one register call each: 25 stored events, ids 1..25
  std::vector<ImmutableBlock> keep;
  for (int i = 0; i < kEvents; ++i) {
    auto blocks = g2->allocate_blocks(1);
    ASSERT_TRUE(blocks.is_ok()) << blocks.status().to_string();
    MutableBlock b = std::move((*blocks)[0]);
    std::vector<Token> tokens(g2_layout().page_size, static_cast<Token>(1000 + i));
    ASSERT_TRUE(b.init_sequence(3, std::nullopt).is_ok() && b.add_tokens(tokens) &&
                b.commit().is_ok());
    std::vector<MutableBlock> one;
    one.push_back(std::move(b));
    auto reg = g2->register_blocks(std::move(one));
    ASSERT_TRUE(reg.is_ok()) << reg.status().to_string();
    keep.push_back((*reg)[0]);
  }
  auto ids = [](const std::string& out) {
    std::vector<uint64_t> v;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) v.push_back(std::stoull(line));
    return v;
  };
  RunResult r = ctl_on("events");
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  std::vector<uint64_t> got = ids(r.out);
  ASSERT_EQ(got.size(), 20u) << r.out;
  EXPECT_EQ(got.front(), kEvents - 19u);
  EXPECT_EQ(got.back(), static_cast<uint64_t>(kEvents));
  r = ctl_on("events", {"--last", "3"});
  EXPECT_EQ(ids(r.out), (std::vector<uint64_t>{23, 24, 25})) << r.out;
  r = ctl_on("events", {"--all"});
  EXPECT_EQ(ids(r.out).size(), static_cast<size_t>(kEvents)) << r.out;

  r = ctl_on("events", {"--json", "--last", "1"});
  ASSERT_EQ(count_lines(r.out), 1u) << r.out;
  json e = json::parse(r.out);
  EXPECT_EQ(e["sequence_hash_str"], std::to_string(keep.back().sequence_hash())) << e.dump();
  EXPECT_EQ(e["sequence_hash"].get<uint64_t>(), keep.back().sequence_hash());
  EXPECT_EQ(e["block_hash_str"], std::to_string(e["block_hash"].get<uint64_t>()));
  EXPECT_TRUE(e["parent_hash_str"].is_null());
}

TEST_F(KvpoolctlTest, EventsFollowShowsStoredThenRemovedAsTheyHappen) {
  std::vector<std::string> argv{KVPOOLCTL_PATH, "events", "--follow", "--json"};
  for (auto& a : target()) argv.push_back(a);
  Tail tail(argv);
  auto held = attach_and_hold();
  std::vector<SequenceHash> stored;
  for (int i = 0; i < 2; ++i) {
    auto l = tail.line();
    ASSERT_TRUE(l) << "no stored event " << i;
    json e = json::parse(*l);
    ASSERT_EQ(e["type"], "stored") << *l;
    stored.push_back(e["sequence_hash"].get<uint64_t>());
  }
  EXPECT_EQ(stored[0], held->registered[0].sequence_hash());
  EXPECT_EQ(stored[1], held->registered[1].sequence_hash());

  // Drop every block; allocating the whole pool evicts the two registered ones.
  held->registered.clear();
  held->matched.clear();
  held->mutable_blocks.clear();
  auto g2 = held->client.pool("g2");
  ASSERT_TRUE(g2);
  auto all = g2->allocate_blocks(g2_layout().num_blocks);
  ASSERT_TRUE(all) << all.status().to_string();
  std::set<SequenceHash> removed;
  for (int i = 0; i < 2; ++i) {
    auto l = tail.line();
    ASSERT_TRUE(l) << "no removed event " << i;
    json e = json::parse(*l);
    ASSERT_EQ(e["type"], "removed") << *l;
    EXPECT_EQ(e["pool"], "g2");
    removed.insert(e["sequence_hash"].get<uint64_t>());
  }
  EXPECT_EQ(removed, (std::set<SequenceHash>{stored[0], stored[1]}));
}

// A broken invariant is reported: exit 1, one line naming it (and ok=false in --json).
TEST(KvpoolctlCheck, ReportsACorruptedArena) {
  auto d = std::make_unique<DaemonProcess>(daemon_config({pool_config("g2", g2_layout())}));
  d->start(20s);
  std::vector<std::string> target{"--instance", d->instance(), "--runtime-dir", d->runtime_dir()};
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.end(), target.begin(), target.end());
    return ctl(args);
  };

  RunResult r = with({"clients"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("no clients attached"), std::string::npos) << r.out;
  r = with({"check"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();

  // Scribble on block 5's state, as a bug in the engine would (the engine is idle and
  // block 5 is deep in the free list, so nothing else notices).
  // Pool g2's arena lives in its registry segment (shm/registry_segment.hpp).
  std::string name = control_segment_name(d->instance()) + ".reg.g2";
  int fd = open_memfd_of(d->pid(), name, O_RDWR);
  ASSERT_GE(fd, 0) << name;
  struct stat st {};
  ::fstat(fd, &st);
  auto* base = static_cast<char*>(
      ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ::close(fd);
  ASSERT_NE(base, MAP_FAILED);
  auto* h = reinterpret_cast<shm::RegistryHeader*>(base);
  auto* arena = reinterpret_cast<pool::ArenaHeader*>(base + h->arena_offset);
  auto* blocks =
      reinterpret_cast<pool::BlockMeta*>(reinterpret_cast<char*>(arena) + arena->off_blocks);
  uint8_t saved = blocks[5].state;
  blocks[5].state = 7;

  r = with({"check"});
  EXPECT_EQ(r.exit_code, 1) << r.describe();
  EXPECT_EQ(count_lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("pool 'g2': invariant violated: block 5 has state 7"), std::string::npos)
      << r.err;
  r = with({"check", "--json"});
  EXPECT_EQ(r.exit_code, 1) << r.describe();
  json j = json::parse(r.out);
  EXPECT_EQ(j["ok"], false);
  EXPECT_EQ(j["pools"][0]["violation"], "block 5 has state 7");

  blocks[5].state = saved;
  ::munmap(base, static_cast<size_t>(st.st_size));
  r = with({"check"});
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  ExitStatus status = d->stop();
  EXPECT_TRUE(status.exited() && status.code() == 0) << d->stderr_text();
}

// No daemon, or a bad option: exit 1 and one line saying so, for every subcommand.
TEST(KvpoolctlErrors, OneClearLine) {
  TempDir dir("kvpool-ctl");
  for (const char* cmd : {"status", "clients", "pools", "metrics", "check", "events"}) {
    for (bool as_json : {false, true}) {
      std::vector<std::string> args{cmd, "--instance", "nobody-home", "--runtime-dir", dir.path()};
      if (as_json) args.push_back("--json");
      RunResult r = ctl(args);
      EXPECT_EQ(r.exit_code, 1) << cmd << ": " << r.describe();
      EXPECT_EQ(count_lines(r.err), 1u) << cmd << ": " << r.err;
      EXPECT_NE(r.err.find("kvpoolctl: error: no kvpoold is running for instance 'nobody-home'"),
                std::string::npos)
          << cmd << ": " << r.err;
      EXPECT_EQ(r.out, "") << cmd;
    }
    RunResult r = ctl({cmd, "--no-such-option"});
    EXPECT_EQ(r.exit_code, 1) << cmd << ": " << r.describe();
    EXPECT_EQ(count_lines(r.err), 1u) << cmd << ": " << r.err;
  }
}

}  // namespace
}  // namespace kvpool
