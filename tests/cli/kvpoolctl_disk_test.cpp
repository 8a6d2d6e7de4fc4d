// kvpoolctl status / pools / metrics show a pool's disk tier (issue 28 item 9), against a
// real kvpoold whose pool "g" has a disk tier on a real file (/var/tmp: ext4 here, not a
// tmpfs) and whose pool "h" has none. Every figure is exact: this process registers a known
// number of blocks and waits (with a deadline) until the daemon published their writes.
#include <gtest/gtest.h>
#include <sys/vfs.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "kvpool/client.hpp"
#include "support/daemon_process.hpp"
#include "support/process.hpp"
#include "support/wait.hpp"

namespace kvpool {
namespace {

using namespace testsupport;
using nlohmann::json;
namespace fs = std::filesystem;

constexpr uint64_t kBlockBytes = 16384;  // 2 layers x 2 x 16 tokens x 128 x 2 bytes

json layout() {
  // 4 KiB regions, 4 KiB aligned: O_DIRECT straight from the pool's memory.
  return {{"num_layers", 2},  {"outer_dim", 2},   {"page_size", 16},
          {"inner_dim", 128}, {"dtype_bytes", 2}, {"alignment", 4096}};
}

struct TempDir {
  TempDir() {
    char tmpl[] = "/var/tmp/kvpool-ctl-disk-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string path;
};

class KvpoolctlDisk : public ::testing::Test {
 protected:
  // Pool g: 64 host blocks over `slots` disk slots; pool h: 16 host blocks, no disk.
  void start(uint64_t slots, uint64_t max_inflight_bytes = 0) {
    path_ = dir_.path + "/g.slots";
    json disk = {{"path", path_}, {"num_blocks", slots}, {"direct_io", "on"}};
    if (max_inflight_bytes != 0) disk["max_inflight_bytes"] = max_inflight_bytes;
    json pools =
        json::array({{{"name", "g"}, {"num_blocks", 64}, {"layout", layout()}, {"disk", disk}},
                     {{"name", "h"}, {"num_blocks", 16}, {"layout", layout()}}});
    daemon_ = std::make_unique<DaemonProcess>(
        json{{"max_clients", 4}, {"pools", pools}, {"uid_share_percent", 100}});
    daemon_->start(20s);
    ConnectOptions o;
    o.runtime_dir = daemon_->runtime_dir();
    auto c = Client::connect(daemon_->instance(), o);
    if (!c) throw TestError("connect: " + c.status().to_string());
    client_ = std::make_unique<Client>(std::move(*c));
  }
  void TearDown() override {
    client_.reset();
    if (daemon_) {
      ExitStatus st = daemon_->stop();
      EXPECT_TRUE(st.exited() && st.code() == 0) << daemon_->stderr_text();
    }
  }

  // Registers `n` blocks of one chain in one call and keeps them.
  void register_chain(uint32_t n) {
    auto pool = client_->pool("g");
    if (!pool) throw TestError("pool g: " + pool.status().to_string());
    auto blocks = pool->allocate_blocks(n);
    if (!blocks) throw TestError("allocate: " + blocks.status().to_string());
    std::optional<SequenceHash> parent;
    for (uint32_t i = 0; i < n; ++i) {
      MutableBlock& b = (*blocks)[i];
      std::vector<Token> tokens(16);
      for (uint32_t t = 0; t < 16; ++t) tokens[t] = 1000 * i + t;
      if (!b.init_sequence(7, parent).is_ok() || !b.add_tokens(tokens) || !b.commit().is_ok())
        throw TestError("filling a block failed");
      parent = *b.sequence_hash();
    }
    auto reg = pool->register_blocks(std::move(*blocks));
    if (!reg) throw TestError("register: " + reg.status().to_string());
    for (auto& b : *reg) held_.push_back(std::move(b));
  }

  RunResult ctl(const std::string& command, std::vector<std::string> extra = {}) const {
    std::vector<std::string> argv{KVPOOLCTL_PATH,      command,         "--instance",
                                  daemon_->instance(), "--runtime-dir", daemon_->runtime_dir()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run(argv);
  }
  json ctl_json(const std::string& command) const {
    RunResult r = ctl(command, {"--json"});
    if (r.exit_code != 0) throw TestError(command + " --json: " + r.describe());
    return json::parse(r.out);
  }
  json disk_of(const json& doc, const std::string& pool) const {
    for (const auto& p : doc["pools"])
      if (p["name"] == pool) return p["disk"];
    throw TestError("no pool " + pool + " in " + doc.dump());
  }
  // Waits until status --json shows `written` blocks written to g's disk.
  json wait_written(uint64_t written) const {
    json d;
    wait_until(
        [&] {
          d = disk_of(ctl_json("status"), "g");
          return d["blocks_written"].get<uint64_t>() >= written;
        },
        20s, std::to_string(written) + " blocks written to disk", [&] { return d.dump(); });
    return d;
  }
  // The value of the sample `name{labels}` in the exposition text (-1 when absent).
  static double sample(const std::string& text, const std::string& name_and_labels) {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
      if (line.rfind(name_and_labels + " ", 0) == 0)
        return std::stod(line.substr(name_and_labels.size() + 1));
    return -1;
  }

  TempDir dir_;
  std::string path_;
  std::unique_ptr<DaemonProcess> daemon_;
  std::unique_ptr<Client> client_;
  std::vector<ImmutableBlock> held_;
};

TEST_F(KvpoolctlDisk, StatusPoolsAndMetricsShowTheTierAndItsWrites) {
  start(32);
  register_chain(6);
  json d = wait_written(6);
  EXPECT_EQ(d["path"], path_);
  EXPECT_EQ(d["slots_used"], 6u);
  EXPECT_EQ(d["slots_total"], 32u);
  EXPECT_EQ(d["slot_bytes"], 4096 + kBlockBytes);
  EXPECT_EQ(d["direct_io"], true);  // "direct_io": "on" started, so it runs O_DIRECT
  EXPECT_EQ(d["bytes_written"], 6 * kBlockBytes);
  EXPECT_EQ(d["bytes_read"], 0u);
  EXPECT_EQ(d["write_queue_drops"], 0u);
  EXPECT_EQ(d["checksum_failures"], 0u);
  EXPECT_EQ(d["io_errors"], 0u);
  EXPECT_EQ(d["onboards"], 0u);
  // The engine named is the one the daemon said it started with.
  const std::string engine = d["io_engine"].get<std::string>();
  EXPECT_NE(daemon_->stderr_text().find("(O_DIRECT I/O, " + engine + ")"), std::string::npos)
      << engine << "\n"
      << daemon_->stderr_text();
  EXPECT_TRUE(disk_of(ctl_json("status"), "h").is_null());

  RunResult status = ctl("status");
  ASSERT_EQ(status.exit_code, 0) << status.describe();
  EXPECT_NE(status.out.find("disk of g: " + path_ + ", 6/32 slots, direct I/O on, " + engine),
            std::string::npos)
      << status.out;
  EXPECT_EQ(status.out.find("disk of h"), std::string::npos) << status.out;

  json pools = ctl_json("pools");
  EXPECT_EQ(disk_of(pools, "g")["path"], path_);
  EXPECT_TRUE(disk_of(pools, "h").is_null());
  RunResult table = ctl("pools");
  ASSERT_EQ(table.exit_code, 0) << table.describe();
  EXPECT_TRUE(std::regex_search(
      table.out, std::regex("\ng +" + path_ + " +6 +32 +20480 +on +" + engine + "\n")))
      << table.out;

  RunResult m = ctl("metrics");
  ASSERT_EQ(m.exit_code, 0) << m.describe();
  const std::string g = "{pool=\"g\"}";
  EXPECT_EQ(sample(m.out, "kvpool_disk_slots" + g), 32);
  EXPECT_EQ(sample(m.out, "kvpool_disk_slots_used" + g), 6);
  EXPECT_EQ(sample(m.out, "kvpool_disk_slot_bytes" + g), 20480);
  EXPECT_EQ(sample(m.out, "kvpool_disk_written_bytes_total" + g), 6 * kBlockBytes);
  EXPECT_EQ(sample(m.out, "kvpool_disk_written_blocks_total" + g), 6);
  EXPECT_EQ(sample(m.out, "kvpool_disk_read_bytes_total" + g), 0);
  EXPECT_EQ(sample(m.out, "kvpool_disk_write_queue_drops_total" + g), 0);
  EXPECT_EQ(sample(m.out, "kvpool_disk_checksum_failures_total" + g), 0);
  EXPECT_EQ(sample(m.out, "kvpool_disk_io_errors_total" + g), 0);
  EXPECT_EQ(sample(m.out, "kvpool_disk_onboard_duration_seconds_count" + g), 0);
  EXPECT_EQ(sample(m.out, "kvpool_disk_onboard_duration_seconds_bucket{pool=\"g\",le=\"+Inf\"}"),
            0);
  EXPECT_EQ(sample(m.out, "kvpool_disk_info{pool=\"g\",path=\"" + path_ +
                              "\",direct_io=\"on\",io_engine=\"" + engine + "\"}"),
            1)
      << m.out;
  EXPECT_NE(m.out.find("# TYPE kvpool_disk_onboard_duration_seconds histogram"), std::string::npos);
  // Pool h has no disk tier: no disk sample names it.
  EXPECT_EQ(m.out.find("kvpool_disk_slots{pool=\"h\"}"), std::string::npos) << m.out;
}

// A write queue of 16 (a quarter of the 64-block pool) and one write in flight: of 48 blocks
// registered in one call, the tier queues 16 and drops 32 at once (never waits); with 8
// slots, 8 of the 16 written evict older ones.
TEST_F(KvpoolctlDisk, MetricsCountQueueDropsAndEvictions) {
  start(8, 4096 + kBlockBytes);
  register_chain(48);
  json d = wait_written(16);
  EXPECT_EQ(d["write_queue_drops"], 32u);
  EXPECT_EQ(d["slots_used"], 8u);
  EXPECT_EQ(d["evictions"], 8u);
  RunResult m = ctl("metrics");
  ASSERT_EQ(m.exit_code, 0) << m.describe();
  EXPECT_EQ(sample(m.out, "kvpool_disk_write_queue_drops_total{pool=\"g\"}"), 32);
  EXPECT_EQ(sample(m.out, "kvpool_disk_evictions_total{pool=\"g\"}"), 8);
  EXPECT_EQ(sample(m.out, "kvpool_disk_slots_used{pool=\"g\"}"), 8);
}

}  // namespace
}  // namespace kvpool
