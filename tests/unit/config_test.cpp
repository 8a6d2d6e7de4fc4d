#include "daemon/config.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace kvpool::daemon {
namespace {

// Every config error must be kConfigError, one line, and name the field it is about.
void expect_config_error(const std::string& json, const std::string& needle) {
  SCOPED_TRACE(json);
  Result<Config> r = parse_config(json);
  ASSERT_FALSE(r.is_ok()) << "parsed, expected an error mentioning " << needle;
  EXPECT_EQ(r.status().code(), ErrorCode::kConfigError) << r.status().to_string();
  EXPECT_NE(r.status().message().find(needle), std::string::npos)
      << "message: " << r.status().message() << "\nexpected to contain: " << needle;
  EXPECT_EQ(r.status().message().find('\n'), std::string::npos) << r.status().message();
}

// A one-pool config whose pool body is `pool` (JSON object members, without braces).
std::string with_pool(const std::string& pool) { return R"({"pools": [{)" + pool + "}]}"; }

TEST(Config, DefaultIsValidAndMatchesTheDocumentedShape) {
  Config c = default_config();
  ASSERT_TRUE(validate_config(c).is_ok()) << validate_config(c).to_string();
  EXPECT_EQ(c.instance, "default");
  EXPECT_EQ(c.runtime_dir, "");
  ASSERT_EQ(c.pools.size(), 1u);
  const PoolConfig& p = c.pools[0];
  EXPECT_EQ(p.name, "g2");
  EXPECT_EQ(p.storage, shm::StorageKind::kHost);
  EXPECT_EQ(p.device, -1);
  EXPECT_EQ(p.layout, (LayoutConfig{.num_blocks = 1024,
                                    .num_layers = 2,
                                    .outer_dim = 2,
                                    .page_size = 16,
                                    .inner_dim = 128,
                                    .dtype_bytes = 2,
                                    .alignment = 256,
                                    .kind = LayoutKind::kFullyContiguous}));
}

TEST(Config, DefaultRoundTrips) {
  const Config c = default_config();
  Result<Config> back = parse_config(config_to_json(c));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string() << "\n" << config_to_json(c);
  EXPECT_EQ(*back, c);
}

TEST(Config, EmptyObjectIsTheDefault) {
  Result<Config> r = parse_config("{}");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(*r, default_config());
}

constexpr const char* kFullConfig = R"({
  "instance": "prod.a-1",
  "runtime_dir": "/run/kvpool-test",
  "max_clients": 128,
  "ring_bytes": 1048576,
  "poll_us": 0,
  "log_level": "debug",
  "allowed_uids": [0, 1000],
  "allowed_gids": [27],
  "event_ring_slots": 1024,
  "max_clients_per_uid": 8,
  "max_pending_connections": 32,
  "max_pending_per_uid": 4,
  "attach_timeout_ms": 2000,
  "quota": {"max_mutable_blocks": 100, "max_references": 5000, "max_refs_per_block": 16,
            "max_priority": 50},
  "pools": [
    {"name": "host_g2", "storage": "host", "num_blocks": 4096, "max_holds": 10000,
     "allowed_uids": [1000], "allowed_gids": [27, 28],
     "layout": {"num_layers": 32, "outer_dim": 1, "page_size": 32, "inner_dim": 64,
                "dtype_bytes": 4, "alignment": 4096, "kind": "layer_separate"}},
    {"name": "gpu-1", "storage": "cuda", "device": 1, "num_blocks": 8}
  ]
})";

TEST(Config, FullConfigParsesEveryField) {
  Result<Config> r = parse_config(kFullConfig);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const Config& c = *r;
  EXPECT_EQ(c.instance, "prod.a-1");
  EXPECT_EQ(c.runtime_dir, "/run/kvpool-test");
  EXPECT_EQ(c.max_clients, 128u);
  EXPECT_EQ(c.ring_bytes, 1048576u);
  EXPECT_EQ(c.poll_us, 0u);
  EXPECT_EQ(c.max_clients_per_uid, 8u);
  EXPECT_EQ(c.max_pending_connections, 32u);
  EXPECT_EQ(c.max_pending_per_uid, 4u);
  EXPECT_EQ(c.attach_timeout_ms, 2000u);
  EXPECT_EQ(c.quota.max_mutable_blocks, 100u);
  EXPECT_EQ(c.quota.max_references, 5000u);
  EXPECT_EQ(c.quota.max_refs_per_block, 16u);
  EXPECT_EQ(c.quota.max_priority, 50u);
  EXPECT_EQ(c.pools[0].allowed_uids, (std::vector<uid_t>{1000}));
  EXPECT_EQ(c.pools[0].allowed_gids, (std::vector<gid_t>{27, 28}));
  EXPECT_EQ(c.log_level, "debug");
  EXPECT_EQ(c.allowed_uids, (std::vector<uid_t>{0, 1000}));
  EXPECT_EQ(c.allowed_gids, (std::vector<gid_t>{27}));
  EXPECT_EQ(c.event_ring_slots, 1024u);
  ASSERT_EQ(c.pools.size(), 2u);

  const PoolConfig& h = c.pools[0];
  EXPECT_EQ(h.name, "host_g2");
  EXPECT_EQ(h.storage, shm::StorageKind::kHost);
  EXPECT_EQ(h.device, -1);
  EXPECT_EQ(h.max_holds, 10000u);
  EXPECT_EQ(h.layout, (LayoutConfig{.num_blocks = 4096,
                                    .num_layers = 32,
                                    .outer_dim = 1,
                                    .page_size = 32,
                                    .inner_dim = 64,
                                    .dtype_bytes = 4,
                                    .alignment = 4096,
                                    .kind = LayoutKind::kLayerSeparate}));

  // Fields a pool leaves out come from the built-in pool.
  const PoolConfig& g = c.pools[1];
  EXPECT_EQ(g.name, "gpu-1");
  EXPECT_EQ(g.storage, shm::StorageKind::kCuda);
  EXPECT_EQ(g.device, 1);
  EXPECT_EQ(g.max_holds, 0u);
  LayoutConfig expected = default_config().pools[0].layout;
  expected.num_blocks = 8;
  EXPECT_EQ(g.layout, expected);
}

TEST(Config, FullConfigRoundTrips) {
  Result<Config> r = parse_config(kFullConfig);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const std::string json = config_to_json(*r);
  Result<Config> back = parse_config(json);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string() << "\n" << json;
  EXPECT_EQ(*back, *r);
  EXPECT_EQ(config_to_json(*back), json);
}

TEST(Config, UnknownFieldsNameTheirPath) {
  expect_config_error(R"({"instanse": "x"})", "unknown field 'instanse'");
  expect_config_error(with_pool(R"("name": "a", "layot": {})"), "unknown field 'pools[0].layot'");
  expect_config_error(with_pool(R"("layout": {"pagesize": 16})"),
                      "unknown field 'pools[0].layout.pagesize'");
  // A layout field does not belong at the pool level, nor num_blocks inside the layout.
  expect_config_error(with_pool(R"("page_size": 16)"), "unknown field 'pools[0].page_size'");
  expect_config_error(with_pool(R"("layout": {"num_blocks": 16})"),
                      "unknown field 'pools[0].layout.num_blocks'");
}

TEST(Config, DuplicateFieldsAreErrors) {
  expect_config_error(R"({"max_clients": 1, "max_clients": 2})", "duplicate field 'max_clients'");
  expect_config_error(
      R"({"pools": [{"name": "a"}, {"name": "b", "num_blocks": 1, "num_blocks": 2}]})",
      "duplicate field 'pools[1].num_blocks'");
}

TEST(Config, WrongTypesNameThePathAndTheExpectedType) {
  expect_config_error("[]", "config: expected an object");
  expect_config_error(R"({"instance": 5})", "instance: expected a string");
  expect_config_error(R"({"runtime_dir": null})", "runtime_dir: expected a string");
  expect_config_error(R"({"max_clients": "64"})", "max_clients: expected an integer");
  expect_config_error(R"({"max_clients": 64.0})", "max_clients: expected an integer");
  expect_config_error(R"({"max_clients": -1})", "max_clients: expected an integer");
  expect_config_error(R"({"max_clients": 4294967296})", "max_clients: expected an integer");
  expect_config_error(R"({"ring_bytes": 18446744073709551616})", "ring_bytes: expected an integer");
  expect_config_error(R"({"log_level": true})", "log_level: expected a string");
  expect_config_error(R"({"allowed_uids": 5})", "allowed_uids: expected an array");
  expect_config_error(R"({"allowed_uids": [1, -2]})", "allowed_uids[1]: expected an integer");
  expect_config_error(R"({"allowed_gids": ["wheel"]})", "allowed_gids[0]: expected an integer");
  expect_config_error(R"({"pools": {}})", "pools: expected an array");
  expect_config_error(R"({"pools": [7]})", "pools[0]: expected an object");
  expect_config_error(with_pool(R"("num_blocks": 1.5)"),
                      "pools[0].num_blocks: expected an integer");
  expect_config_error(with_pool(R"("storage": 1)"), "pools[0].storage: expected a string");
  expect_config_error(with_pool(R"("layout": [])"), "pools[0].layout: expected an object");
  expect_config_error(with_pool(R"("layout": {"inner_dim": "128"})"),
                      "pools[0].layout.inner_dim: expected an integer");
  expect_config_error(with_pool(R"("storage": "cuda", "device": -1)"),
                      "pools[0].device: expected an integer");
}

TEST(Config, OutOfRangeScalarsNameTheirField) {
  expect_config_error(R"({"instance": ""})", "instance:");
  expect_config_error(R"({"instance": "a/b"})", "instance:");
  expect_config_error(R"({"max_clients": 0})", "max_clients: must be 1..4096");
  expect_config_error(R"({"max_clients": 4097})", "max_clients: must be 1..4096");
  expect_config_error(R"({"ring_bytes": 2048})", "ring_bytes: must be a power of two");
  expect_config_error(R"({"ring_bytes": 134217728})", "ring_bytes: must be a power of two");
  expect_config_error(R"({"ring_bytes": 12288})", "ring_bytes: must be a power of two");
  expect_config_error(R"({"poll_us": 100001})", "poll_us: must be 0..100000");
  expect_config_error(R"({"spin_iterations": 200})",
                      "spin_iterations: was replaced by \"poll_us\"");
  expect_config_error(R"({"max_clients": 8, "max_clients_per_uid": 9})",
                      "max_clients_per_uid: must be 0 (uid_share_percent of max_clients) or at "
                      "most max_clients (8)");
  expect_config_error(R"({"max_pending_connections": 4, "max_pending_per_uid": 5})",
                      "max_pending_per_uid: need 1 <= max_pending_per_uid");
  expect_config_error(R"({"attach_timeout_ms": 1})", "attach_timeout_ms: must be 10..600000");
  expect_config_error(R"({"max_clients": 4096, "quota": {"max_refs_per_block": 1048576}})",
                      "quota.max_refs_per_block: must be at least 1 and max_clients x");
  expect_config_error(R"({"quota": {"max_refs_per_block": 0}})",
                      "quota.max_refs_per_block: must be at least 1");
  expect_config_error(R"({"quota": {"max_blocks": 1}})", "quota.max_blocks");
  expect_config_error(R"({"log_level": "verbose"})", "log_level: must be one of");
  expect_config_error(R"({"allowed_uids": [4294967295]})", "allowed_uids[0]:");

  Config edge = default_config();
  edge.max_clients = 4096;
  edge.ring_bytes = 64u << 20;
  edge.poll_us = 100'000;
  edge.log_level = "off";
  EXPECT_TRUE(validate_config(edge).is_ok()) << validate_config(edge).to_string();
  edge.ring_bytes = 4096;
  edge.max_clients = 1;
  EXPECT_TRUE(validate_config(edge).is_ok()) << validate_config(edge).to_string();
}

TEST(Config, EventRingSlotsDefaultZeroAndPowersOfTwo) {
  EXPECT_EQ(default_config().event_ring_slots, 65536u);
  EXPECT_NE(config_to_json(default_config()).find("\"event_ring_slots\": 65536"), std::string::npos)
      << config_to_json(default_config());
  Result<Config> off = parse_config(R"({"event_ring_slots": 0})");
  ASSERT_TRUE(off.is_ok()) << off.status().to_string();
  EXPECT_EQ(off->event_ring_slots, 0u);  // 0: no ring
  Result<Config> big = parse_config(R"({"event_ring_slots": 16777216})");
  ASSERT_TRUE(big.is_ok()) << big.status().to_string();
  EXPECT_EQ(big->event_ring_slots, 16777216u);
  Result<Config> back = parse_config(config_to_json(*big));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->event_ring_slots, 16777216u);

  expect_config_error(R"({"event_ring_slots": 1000})",
                      "event_ring_slots: must be 0 (no event ring) or a power of two in "
                      "2..16777216 (got 1000)");
  expect_config_error(R"({"event_ring_slots": 1})",
                      "event_ring_slots: must be 0 (no event ring) or a power of two");
  expect_config_error(R"({"event_ring_slots": 33554432})", "event_ring_slots: must be 0");
  expect_config_error(R"({"event_ring_slots": "64"})", "event_ring_slots: expected an integer");
  expect_config_error(R"({"event_ring_slots": -1})", "event_ring_slots: expected an integer");
  Config c = default_config();
  c.event_ring_slots = 3;
  EXPECT_EQ(validate_config(c).code(), ErrorCode::kConfigError);
}

TEST(Config, PoolErrorsNameThePool) {
  expect_config_error(R"({"pools": []})", "pools: must list 1 to 16 pools (got 0)");
  std::string many = R"({"pools": [)";
  for (int i = 0; i < 17; ++i)
    many += (i ? ", " : "") + std::string(R"({"name": "p)") + std::to_string(i) + R"("})";
  expect_config_error(many + "]}", "pools: must list 1 to 16 pools (got 17)");

  expect_config_error(with_pool(R"("name": "")"), "pools[0].name: must be 1 to 32 characters");
  expect_config_error(with_pool(R"("name": "a.b")"), "pools[0].name:");
  expect_config_error(with_pool(R"("name": ")" + std::string(33, 'x') + "\""), "pools[0].name:");
  expect_config_error(R"({"pools": [{"name": "a"}, {"name": "a"}]})",
                      "pools[1].name: duplicate pool name 'a'");
  expect_config_error(with_pool(R"("storage": "gpu")"), "pools[0].storage: must be");
  expect_config_error(with_pool(R"("storage": "cuda")"), "pools[0].device: cuda pools need");
  expect_config_error(with_pool(R"("storage": "host", "device": 0)"),
                      "pools[0].device: only cuda pools");
  expect_config_error(with_pool(R"("device": 0)"), "pools[0].device: only cuda pools");
  expect_config_error(with_pool(R"("num_blocks": 0)"),
                      "pools[0].num_blocks: must be 1..1073741824");
  expect_config_error(with_pool(R"("num_blocks": 1073741825)"), "pools[0].num_blocks:");
  expect_config_error(with_pool(R"("layout": {"kind": "paged"})"), "pools[0].layout.kind: must be");
}

TEST(Config, LayoutErrorsAreLayoutsOwnWithTheFieldPath) {
  expect_config_error(with_pool(R"("layout": {"page_size": 0})"),
                      "pools[0].layout.page_size: must be > 0");
  expect_config_error(with_pool(R"("layout": {"outer_dim": 3})"), "pools[0].layout.outer_dim:");
  expect_config_error(with_pool(R"("layout": {"dtype_bytes": 3})"), "pools[0].layout.dtype_bytes:");
  expect_config_error(R"({"pools": [{"name": "a"}, {"name": "b", "layout": {"alignment": 48}}]})",
                      "pools[1].layout.alignment: must be a power of two");
}

TEST(Config, ImpossibleHostPoolSizeIsRejectedWithTheBytes) {
  // 2^30 blocks of 16 KiB: 16 TiB of host memory.
  expect_config_error(with_pool(R"("num_blocks": 1073741824)"), "pools[0]: impossible size");
  expect_config_error(with_pool(R"("num_blocks": 1073741824)"), "17592186044416 bytes");
  // Exactly 1 TiB is allowed; device pools are bounded by the device, not this check.
  EXPECT_TRUE(parse_config(with_pool(R"("num_blocks": 67108864)")).is_ok());
  EXPECT_TRUE(parse_config(with_pool(R"("storage": "cuda", "device": 0, "num_blocks": 1073741824)"))
                  .is_ok());
}

TEST(Config, ValidateConfigChecksCodeBuiltConfigs) {
  Config c = default_config();
  c.pools[0].layout.kind = static_cast<LayoutKind>(7);
  Status s = validate_config(c);
  EXPECT_EQ(s.code(), ErrorCode::kConfigError);
  EXPECT_NE(s.message().find("pools[0].layout.kind"), std::string::npos) << s.message();

  c = default_config();
  c.pools[0].storage = static_cast<shm::StorageKind>(9);
  s = validate_config(c);
  EXPECT_EQ(s.code(), ErrorCode::kConfigError);
  EXPECT_NE(s.message().find("pools[0].storage"), std::string::npos) << s.message();

  // An invalid config still prints, and the printed form is rejected for the same reason.
  c = default_config();
  c.pools[0].device = 3;
  Result<Config> back = parse_config(config_to_json(c));
  ASSERT_FALSE(back.is_ok());
  EXPECT_NE(back.status().message().find("pools[0].device"), std::string::npos);
}

TEST(Config, JsonSyntaxErrorsGiveLineAndColumn) {
  Result<Config> r = parse_config("{\n  \"max_clients\": 64,\n}");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kConfigError);
  EXPECT_NE(r.status().message().find("line 3"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("column"), std::string::npos) << r.status().message();
  EXPECT_EQ(r.status().message().find('\n'), std::string::npos) << r.status().message();
}

TEST(Config, ControlCharactersInEchoedTextStayOnOneLine) {
  expect_config_error(R"({"bad\nkey": 1})", "unknown field 'bad\\nkey'");
  expect_config_error(with_pool(R"("name": "a\nb")"), "pools[0].name:");
}

class ConfigFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kvpool_config_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (const std::string& f : files_) std::remove(f.c_str());
    rmdir(dir_.c_str());
  }
  std::string write(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    files_.push_back(path);
    return path;
  }

  std::string dir_;
  std::vector<std::string> files_;
};

TEST_F(ConfigFile, ConfigFileNotFoundNamesThePath) {
  const std::string path = dir_ + "/missing.json";
  Result<Config> r = load_config_file(path);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
}

TEST_F(ConfigFile, ConfigFileLoadsAndReportsErrorsWithThePath) {
  Result<Config> ok = load_config_file(write("good.json", kFullConfig));
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  EXPECT_EQ(ok->instance, "prod.a-1");

  const std::string bad = write("bad.json", "{\n  \"pools\": [\n    {\"name\": \"a\",}\n  ]\n}\n");
  Result<Config> r = load_config_file(bad);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kConfigError);
  EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("line 3"), std::string::npos) << r.status().message();

  const std::string typo = write("typo.json", with_pool(R"("layot": {})"));
  r = load_config_file(typo);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("pools[0].layot"), std::string::npos);
}

}  // namespace
}  // namespace kvpool::daemon
