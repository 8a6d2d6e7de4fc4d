// Tenant isolation (issue 27, item 1): two real uids, each allowed one pool of one kvpoold,
// see nothing of the other's pool: not its registry (hashes), not its events or token ids,
// not its clients, neither in what libkvpool maps for them nor through kvpoolctl or
// kvpool-exporter. (kvpool-events: tests/events/tenant_events_test.cpp.) Needs root (the
// test becomes the two uids); skips otherwise.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <regex>

#include "harness.hpp"

namespace kvpool::mptest {
namespace {

constexpr uid_t kUidA = 61001;
constexpr uid_t kUidB = 61002;
constexpr uint64_t kTokensA = 711000;  // token ids of A's blocks start here
constexpr uint64_t kTokensB = 822000;

// `v` as it lies in memory (little-endian), in hex.
std::string hex_le(uint64_t v, size_t bytes) {
  std::string s;
  char b[3];
  for (size_t i = 0; i < bytes; ++i) {
    std::snprintf(b, sizeof(b), "%02x", static_cast<unsigned>((v >> (8 * i)) & 0xFF));
    s += b;
  }
  return s;
}

// What a tenant left in kvpoold: its registered blocks' sequence hashes and its first
// block's token ids, as byte strings to look for in memory (hashes, then the tokens).
struct Traces {
  std::vector<uint64_t> hashes;
  uint64_t token_base = 0;
  pid_t pid = -1;
  std::string needles() const {
    std::string s;
    for (uint64_t h : hashes) s += hex_le(h, 8) + " ";
    for (uint64_t t = token_base; t < token_base + 4; ++t) s += hex_le(t, 4);  // page 4
    return s;
  }
  size_t count() const { return hashes.size() + 1; }
};

// A holder worker of `uid` on `pool`: one mutable block, two registered blocks whose token
// ids go to the event ring.
std::unique_ptr<WorkerProcess> tenant(const DaemonProcess& d, uid_t uid, const std::string& pool,
                                      uint64_t tokens, Traces* t) {
  auto w = std::make_unique<WorkerProcess>(
      d, "holder",
      std::vector<std::string>{"--as-gid", std::to_string(uid), "--as-uid", std::to_string(uid),
                               "--pool", pool, "--mutable", "1", "--register", "2", "--token-base",
                               std::to_string(tokens), "--send-tokens", "1"});
  w->expect_line("READY");
  const std::string held = w->expect_line("HOLDING");
  t->hashes = parse_list(field(held, "hashes"));
  t->token_base = tokens;
  t->pid = w->pid();
  return w;
}

// "0,1,2" for the first n indices from `from`.
std::string indices(size_t from, size_t n) {
  std::string s;
  for (size_t i = from; i < from + n; ++i) {  // piecewise: g++ 12 -O3's false -Wrestrict
    if (!s.empty()) s += ',';
    s += std::to_string(i);
  }
  return s;
}

// Whether `text` holds `word` as a whole word (a number inside a longer one does not count).
bool has_word(const std::string& text, const std::string& word) {
  return std::regex_search(text, std::regex("(^|[^0-9A-Za-z_-])" + word + "($|[^0-9A-Za-z_-])"));
}

// What a uid reads of the daemon through every tool: kvpoolctl's commands and one scrape of
// kvpool-exporter, run as that uid, their outputs joined.
std::string tools_as(const DaemonProcess& d, uid_t uid) {
  const std::vector<std::string> as{"/usr/bin/setpriv", "--reuid=" + std::to_string(uid),
                                    "--regid=" + std::to_string(uid), "--clear-groups"};
  const std::vector<std::string> where{"--instance", d.instance(), "--runtime-dir",
                                       d.runtime_dir()};
  std::vector<std::vector<std::string>> cmds{
      {KVPOOLCTL_PATH, "status", "--json"}, {KVPOOLCTL_PATH, "clients", "--json"},
      {KVPOOLCTL_PATH, "pools", "--json"},  {KVPOOLCTL_PATH, "events", "--all", "--json"},
      {KVPOOLCTL_PATH, "metrics"},          {KVPOOLCTL_PATH, "check", "--json"},
      {KVPOOLCTL_PATH, "top", "-n", "1"}};
#ifdef KVPOOL_EXPORTER_PATH
  cmds.push_back({KVPOOL_EXPORTER_PATH, "--once"});
#endif
  std::string all;
  for (const std::vector<std::string>& cmd : cmds) {
    std::vector<std::string> argv = as;
    argv.insert(argv.end(), cmd.begin(), cmd.end());
    argv.insert(argv.end(), where.begin(), where.end());
    RunResult r = run(argv, 30s);
    EXPECT_EQ(r.exit_code, 0) << cmd[1] << " as uid " << uid << ": " << r.describe();
    all += "--- " + cmd[1] + "\n" + r.out;
  }
  return all;
}

void expect_sees(const std::string& out, const Traces& t, uid_t uid, const std::string& pool,
                 bool sees, const std::string& who) {
  EXPECT_EQ(has_word(out, pool), sees) << who << " / pool name " << pool << ":\n" << out;
  EXPECT_EQ(has_word(out, std::to_string(t.pid)), sees) << who << " / pid " << t.pid << ":\n"
                                                        << out;
  EXPECT_EQ(has_word(out, std::to_string(uid)), sees) << who << " / uid " << uid << ":\n" << out;
  for (uint64_t h : t.hashes)
    EXPECT_EQ(has_word(out, std::to_string(h)), sees) << who << " / hash " << h << ":\n" << out;
  EXPECT_EQ(has_word(out, std::to_string(t.token_base)), sees)
      << who << " / token " << t.token_base << ":\n"
      << out;
}

TEST(TenantIsolation, EachUidSeesNothingOfTheOtherUidsPoolThroughTheLibraryOrAnyTool) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to become two uids";
  auto pools = nlohmann::json::array({host_pool("tenant-a", 16), host_pool("tenant-b", 16)});
  pools[0]["allowed_uids"] = {kUidA};
  pools[1]["allowed_uids"] = {kUidB};
  DaemonProcess d(test_config(pools));
  d.start();
  // Let both uids reach the socket (the harness makes it 0660 root:root).
  ASSERT_EQ(::chmod(d.socket_path().c_str(), 0666), 0);
  ASSERT_EQ(::chmod(d.dir().c_str(), 0755), 0);
  Traces ta, tb;
  auto a = tenant(d, kUidA, "tenant-a", kTokensA, &ta);
  auto b = tenant(d, kUidB, "tenant-b", kTokensB, &tb);
  ASSERT_EQ(ta.hashes.size(), 2u);
  ASSERT_EQ(tb.hashes.size(), 2u);

  // Through the library: every byte kvpoold let each worker map (control, registry, client
  // and pool segments) holds its own pool's hashes and token ids and none of the other's.
  const std::string needles = ta.needles() + " " + tb.needles();
  const std::string own_a = indices(0, ta.count()), own_b = indices(ta.count(), tb.count());
  EXPECT_EQ(field(a->command("scan-mapped " + needles), "found"), own_a);
  EXPECT_EQ(field(b->command("scan-mapped " + needles), "found"), own_b);

  // Through every tool, run as each uid: its own pool, clients, hashes and tokens; nothing
  // of the other's, not even the pool's name.
  const std::string seen_by_a = tools_as(d, kUidA);
  expect_sees(seen_by_a, ta, kUidA, "tenant-a", true, "uid A, own");
  expect_sees(seen_by_a, tb, kUidB, "tenant-b", false, "uid A, other's");
  const std::string seen_by_b = tools_as(d, kUidB);
  expect_sees(seen_by_b, tb, kUidB, "tenant-b", true, "uid B, own");
  expect_sees(seen_by_b, ta, kUidA, "tenant-a", false, "uid A, other's");
  // Root (the operator) reads both.
  auto [st, root_clients] = d.run_ctl({"clients", "--json"});
  EXPECT_TRUE(has_word(root_clients, std::to_string(ta.pid))) << root_clients;
  EXPECT_TRUE(has_word(root_clients, std::to_string(tb.pid))) << root_clients;
}

}  // namespace
}  // namespace kvpool::mptest
