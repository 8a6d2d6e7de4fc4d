// Tenant isolation through kvpool-events (issue 27, item 1): one kvpoold with a pool per
// uid, one forwarder run as each uid, a real nats-server and the router demo. A forwarder
// publishes only the pools its uid may use: the router learns each tenant's prefixes from
// that tenant's forwarder alone. Label `nats`; skipped without nats-server or root.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "events_testbed.hpp"

namespace kvpool::evtest {
namespace {

constexpr uid_t kUidA = 61001;
constexpr uid_t kUidB = 62002;
constexpr int64_t kWorkerA = 101;
constexpr int64_t kWorkerB = 202;
const std::string kA = std::to_string(kWorkerA);
const std::string kB = std::to_string(kWorkerB);

std::string describe(const std::map<std::string, uint32_t>& m) {
  std::string s = "{";
  for (auto& [k, v] : m) s += k + ":" + std::to_string(v) + " ";
  return s + "}";
}

TEST(TenantEvents, AForwarderRunAsOneUidPublishesOnlyThePoolsThatUidMayUse) {
  if (nats_server_binary().empty()) GTEST_SKIP() << "nats-server is not installed";
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to become two uids";
  char tmpl[] = "/tmp/kvpool-tenant-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  NatsServer nats(dir);
  nats.start();
  auto pools = nlohmann::json::array(
      {testsupport::host_pool("tenant-a", 16), testsupport::host_pool("tenant-b", 16)});
  pools[0]["allowed_uids"] = {kUidA};
  pools[1]["allowed_uids"] = {kUidB};
  DaemonProcess d(testsupport::test_config(pools));
  d.start();
  ASSERT_EQ(::chmod(d.socket_path().c_str(), 0666), 0);
  ASSERT_EQ(::chmod(d.dir().c_str(), 0755), 0);
  const Subject subject{"tenant" + std::to_string(::getpid()), "kvpool"};
  ForwarderProcess fa(d, nats.url(), subject, kWorkerA), fb(d, nats.url(), subject, kWorkerB);
  fa.run_as(kUidA);
  fb.run_as(kUidB);
  fa.start();
  fb.start();
  RouterProcess router(nats.url(), subject, 4, kDynamoSeed, dir + "/router.stderr");
  auto logs = [&] { return "--- A\n" + fa.stderr_text() + "--- B\n" + fb.stderr_text(); };
  auto wait_for = [&](const std::vector<Token>& tokens, const std::map<std::string, uint32_t>& want,
                      const std::string& what) {
    std::map<std::string, uint32_t> seen;
    wait_until([&] { return (seen = router.overlap(tokens)) == want; }, 20s, what,
               [&] { return describe(seen) + " want " + describe(want) + "\n" + logs(); });
  };
  wait_for(token_range(1, 8), {{kA, 0}, {kB, 0}}, "both forwarders known to the router");

  // Each tenant registers two blocks (8 tokens) in its own pool, as its own uid.
  auto tenant = [&](uid_t uid, const std::string& pool, Token base) {
    auto w = std::make_unique<mptest::WorkerProcess>(
        d, "holder",
        std::vector<std::string>{"--as-gid", std::to_string(uid), "--as-uid", std::to_string(uid),
                                 "--pool", pool, "--mutable", "1", "--register", "2", "--salt",
                                 std::to_string(kDynamoSeed), "--token-base", std::to_string(base),
                                 "--send-tokens", "1"});
    w->expect_line("READY");
    w->expect_line("HOLDING");
    return w;
  };
  auto a = tenant(kUidA, "tenant-a", 711000);
  auto b = tenant(kUidB, "tenant-b", 822000);
  // A's prefix reaches the router from A's forwarder only, B's from B's only (the other
  // forwarder got no descriptor of that pool's registry, so it never saw the events).
  wait_for(token_range(711000, 8), {{kA, 2}, {kB, 0}}, "tenant A's blocks, from A only");
  wait_for(token_range(822000, 8), {{kA, 0}, {kB, 2}}, "tenant B's blocks, from B only");
  EXPECT_EQ(router.size()["errors"], 0u);
  if (!HasFailure()) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvpool::evtest
