// The disk tier's events end to end (issue 28 item 8): a real kvpoold whose pool has a disk
// tier (a slot file on the real file system), a real kvpool-events, and a real consumer:
// nats-server with a raw subscriber reading Dynamo's RouterEvent JSON, or the vLLM-format
// Python subscriber (vllm_subscriber.py) on ZMQ. Blocks are registered, written behind,
// evicted from a small disk, and the consumer must see host Stored, then disk Stored for the
// same hashes (storage_tier "disk" / medium "DISK"), and disk Removed for the evicted slots,
// while the host tier's events stay what they were. Every wait is on a condition.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <nats/nats.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <set>
#include <sstream>

#include "events_testbed.hpp"
#include "examples/router_demo/router_index.hpp"
#include "tools/kvpool-events/router_event.hpp"

namespace kvpool::evtest {
namespace {

constexpr uint32_t kPage = 4;
constexpr uint32_t kHostBlocks = 64;
constexpr uint32_t kDiskSlots = 8;
constexpr int64_t kWorker = 77;
const char* kPython = "/usr/bin/python3";

// A directory on the real file system (/var/tmp is no tmpfs here), removed unless a test failed.
struct TempDir {
  explicit TempDir(const char* tmpl_text) {
    std::string t = tmpl_text;
    if (!::mkdtemp(t.data())) throw HarnessError("mkdtemp " + std::string(tmpl_text));
    path = t;
  }
  std::string path;
  bool keep = false;
  ~TempDir() {
    if (keep) {
      std::fprintf(stderr, "logs kept in %s\n", path.c_str());
    } else {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  }
};

// One host pool "g" of kHostBlocks blocks (page 4) with a disk tier of `slots` slots in `file`.
nlohmann::json disk_events_config(const std::string& file, uint32_t slots = kDiskSlots,
                                  uint32_t ring_slots = 65536) {
  auto pool = mptest::host_pool("g", kHostBlocks, kPage);
  pool["disk"] = {{"path", file}, {"num_blocks", slots}};
  auto c = mptest::test_config(nlohmann::json::array({pool}));
  c["event_ring_slots"] = ring_slots;
  return c;
}

std::vector<uint64_t> chain_of(const std::vector<Token>& tokens) {
  auto seq = TokenBlockSequence::create(tokens, kPage, kDynamoSeed);
  if (!seq) throw HarnessError(seq.status().to_string());
  return seq->sequence_hashes();
}

Client connect(const DaemonProcess& d) {
  ConnectOptions o;
  o.runtime_dir = d.runtime_dir();
  auto c = Client::connect(d.instance(), o);
  if (!c) throw HarnessError("connect: " + c.status().to_string());
  return std::move(c.value());
}

// ---- Dynamo: RouterEvent JSON on NATS --------------------------------------------------

struct Inbox {
  std::mutex mu;
  std::vector<std::string> msgs;
  static void on_msg(natsConnection*, natsSubscription*, natsMsg* m, void* self) {
    auto* in = static_cast<Inbox*>(self);
    std::lock_guard lk(in->mu);
    in->msgs.emplace_back(natsMsg_GetData(m), static_cast<size_t>(natsMsg_GetDataLength(m)));
    natsMsg_Destroy(m);
  }
  std::vector<events::RouterEvent> events() {
    std::lock_guard lk(mu);
    std::vector<events::RouterEvent> out;
    for (const auto& s : msgs) {
      auto e = events::parse_router_event(s);
      if (!e) throw HarnessError("not a router event: " + s);
      out.push_back(*e);
    }
    return out;
  }
};

// What the messages say each tier holds now, and where each hash was first stored per tier.
struct TierView {
  std::map<std::string, std::set<uint64_t>> held;        // tier -> hashes
  std::map<std::string, std::map<uint64_t, size_t>> at;  // tier -> hash -> message index
  std::map<std::string, std::multiset<uint64_t>> removed;
  std::map<std::string, std::multiset<uint64_t>> stored;
};

TierView view_of(const std::vector<events::RouterEvent>& evs) {
  TierView v;
  for (size_t i = 0; i < evs.size(); ++i) {
    const auto& e = evs[i];
    switch (e.kind) {
      case events::RouterEvent::Kind::kStored:
        for (const auto& b : e.blocks) {
          v.held[e.storage_tier].insert(b.block_hash);
          v.stored[e.storage_tier].insert(b.block_hash);
          v.at[e.storage_tier].emplace(b.block_hash, i);
        }
        break;
      case events::RouterEvent::Kind::kRemoved:
        for (uint64_t h : e.block_hashes) {
          v.held[e.storage_tier].erase(h);
          v.removed[e.storage_tier].insert(h);
        }
        break;
      case events::RouterEvent::Kind::kCleared:
        v.held[e.storage_tier].clear();
        break;
    }
  }
  return v;
}

// The value of gauge `name` on kvpool-events' /metrics (its address from its log), by a
// plain HTTP/1.0 GET over loopback; -1 when the page does not have it.
int64_t forwarder_gauge(const ForwarderProcess& f, const std::string& name) {
  const std::string log = f.stderr_text();
  const std::string mark = "metrics on http://";
  const auto at = log.find(mark);
  if (at == std::string::npos) throw HarnessError("no metrics address in: " + log);
  const auto hp = log.substr(at + mark.size(), log.find('/', at + mark.size()) - at - mark.size());
  const int port = std::stoi(hp.substr(hp.rfind(':') + 1));
  shm::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0)
    throw HarnessError("connect to the metrics port " + std::to_string(port));
  const std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (::write(fd.get(), req.data(), req.size()) != static_cast<ssize_t>(req.size()))
    throw HarnessError("write to the metrics port");
  std::string page;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd.get(), buf, sizeof(buf))) > 0;)
    page.append(buf, static_cast<size_t>(n));
  const auto line = page.find("\n" + name + " ");
  if (line == std::string::npos) return -1;
  return std::stoll(page.substr(line + name.size() + 2));
}

bool holds_all(const std::set<uint64_t>& s, const std::vector<uint64_t>& hashes) {
  for (uint64_t h : hashes)
    if (!s.count(h)) return false;
  return true;
}

class DiskEventsNats : public ::testing::Test {
 protected:
  void SetUp() override {
    if (nats_server_binary().empty())
      GTEST_SKIP() << "nats-server is not installed (apt install nats-server): skipped";
    dir_ = std::make_unique<TempDir>("/var/tmp/kvpool-diskev-XXXXXX");
    subject_ = {"d" + std::to_string(::getpid()), "kvpool"};
    nats_ = std::make_unique<NatsServer>(dir_->path);
    nats_->start();
    ASSERT_EQ(natsConnection_ConnectTo(&nc_, nats_->url().c_str()), NATS_OK);
    const std::string subject =
        "namespace." + subject_.ns + ".component." + subject_.component + ".kv-events";
    ASSERT_EQ(natsConnection_Subscribe(&sub_, nc_, subject.c_str(), &Inbox::on_msg, &inbox_),
              NATS_OK);
    ASSERT_EQ(natsConnection_FlushTimeout(nc_, 5000), NATS_OK);
  }
  void TearDown() override {
    fwd_.reset();
    daemon_.reset();
    if (sub_) natsSubscription_Destroy(sub_);
    if (nc_) natsConnection_Destroy(nc_);
    nats_.reset();
    if (dir_ && HasFailure()) dir_->keep = true;
  }

  void start_daemon(uint32_t slots = kDiskSlots, uint32_t ring_slots = 65536) {
    daemon_ = std::make_unique<DaemonProcess>(
        disk_events_config(dir_->path + "/g.slots", slots, ring_slots));
    daemon_->start();
  }
  void start_forwarder() {
    fwd_ = std::make_unique<ForwarderProcess>(*daemon_, nats_->url(), subject_, kWorker);
    fwd_->add_args({"--metrics-listen", "127.0.0.1:0"});
    fwd_->start();
  }

  // Waits until `pred` holds for what the subscriber received; returns it.
  template <typename Pred>
  std::vector<events::RouterEvent> wait_events(Pred pred, const std::string& what) {
    std::vector<events::RouterEvent> evs;
    wait_until([&] { return pred(evs = inbox_.events()); }, 30s, what,
               [&] {
                 std::string s = std::to_string(evs.size()) + " message(s)";
                 if (fwd_) s += "; kvpool-events:\n" + fwd_->stderr_text();
                 if (daemon_) s += "\nkvpoold:\n" + daemon_->stderr_text();
                 return s;
               });
    return evs;
  }

  std::unique_ptr<TempDir> dir_;
  Subject subject_;
  std::unique_ptr<NatsServer> nats_;
  natsConnection* nc_ = nullptr;
  natsSubscription* sub_ = nullptr;
  Inbox inbox_;
  std::unique_ptr<DaemonProcess> daemon_;
  std::unique_ptr<ForwarderProcess> fwd_;
};

TEST_F(DiskEventsNats, HostStoredThenDiskStoredThenDiskRemovedWhenTheDiskEvicts) {
  start_daemon();
  start_forwarder();
  // At start: a clear of the host tier and of the disk tier (the pool has one).
  auto evs = wait_events(
      [](const auto& e) {
        std::set<std::string> cleared;
        for (const auto& x : e)
          if (x.kind == events::RouterEvent::Kind::kCleared) cleared.insert(x.storage_tier);
        return cleared == std::set<std::string>{"host_pinned", "disk"};
      },
      "the start's cleared of both tiers");

  Client client = connect(*daemon_);
  auto pool = client.pool("g");
  ASSERT_TRUE(pool.is_ok());
  // 1. A chain of 4 blocks: host Stored at once, disk Stored once they are durable.
  const auto ta = token_range(1000, 4 * kPage);
  const auto a = chain_of(ta);
  (void)register_tokens(*pool, ta, kDynamoSeed);  // references dropped: inactive, evictable
  evs = wait_events([&](const auto& e) { return holds_all(view_of(e).held["disk"], a); },
                    "the 4 blocks stored on disk");
  TierView v = view_of(evs);
  for (uint64_t h : a) {
    ASSERT_TRUE(v.at["host_pinned"].count(h)) << h;
    EXPECT_LT(v.at["host_pinned"][h], v.at["disk"][h]) << "host Stored first, then disk";
  }
  // The disk message is Dynamo's stored event of the chain, tier "disk", parent null.
  for (const auto& e : evs) {
    if (e.storage_tier != "disk" || e.kind != events::RouterEvent::Kind::kStored) continue;
    EXPECT_EQ(e.worker_id, kWorker);
    EXPECT_EQ(e.residency_domain, "worker");
    EXPECT_EQ(e.hash_scheme, "dynamo-0.2");
    if (e.blocks.front().block_hash == a[0]) {
      EXPECT_EQ(e.parent_hash, std::nullopt);
    }
  }

  // 2. A chain of 6 more: the disk holds 8, so 2 written slots of the first chain (the least
  // recently used) are evicted: Removed from the disk tier only.
  const auto tb = token_range(5000, 6 * kPage);
  const auto b = chain_of(tb);
  (void)register_tokens(*pool, tb, kDynamoSeed);
  evs = wait_events(
      [&](const auto& e) {
        TierView w = view_of(e);
        return holds_all(w.held["disk"], b) && w.removed["disk"].size() >= 2;
      },
      "the 6 blocks on disk and 2 disk slots evicted");
  v = view_of(evs);
  EXPECT_EQ(v.held["disk"].size(), kDiskSlots);
  EXPECT_EQ(v.removed["disk"].size(), 2u);
  for (uint64_t h : v.removed["disk"]) {
    EXPECT_TRUE(std::find(a.begin(), a.end(), h) != a.end()) << "evicted " << h << " is not A's";
    EXPECT_FALSE(v.held["disk"].count(h));
  }
  // The host tier's events are as before: every block stored once, nothing removed.
  EXPECT_EQ(v.held["host_pinned"].size(), a.size() + b.size());
  EXPECT_EQ(v.stored["host_pinned"].size(), a.size() + b.size());
  EXPECT_TRUE(v.removed["host_pinned"].empty());
  EXPECT_EQ(v.stored["disk"].size(), a.size() + b.size());  // each written block once

  // 3. Host memory evicts everything: host Removed for all 10; the router still finds
  // the second chain on disk (a KV-aware router knows what this worker can onboard).
  evict_all(*pool, kHostBlocks);
  evs = wait_events([&](const auto& e) { return view_of(e).held["host_pinned"].empty(); },
                    "host Removed for every block");
  events::RouterIndex index;
  for (const auto& e : evs) index.apply(e);
  EXPECT_EQ(index.overlaps(b).at(kWorker), b.size());
  for (uint64_t h : b) EXPECT_TRUE(index.holds_in(kWorker, h, "disk"));
  for (uint64_t h : b) EXPECT_FALSE(index.holds_in(kWorker, h, "host_pinned"));
}

// A cold start (kill -9, then a new kvpoold without the old one's memory): the new daemon
// rebuilds its disk index from the file and announces it first thing, as one batch of disk
// Stored records in its ring; kvpool-events attaches to the new daemon, clears both tiers at
// the router and re-announces what is on disk (from those records), not the lost host blocks.
TEST_F(DiskEventsNats, AColdStartReannouncesTheDiskIndexRebuiltFromTheFile) {
  start_daemon();
  start_forwarder();
  const auto ta = token_range(2000, 5 * kPage);
  const auto a = chain_of(ta);
  {
    Client client = connect(*daemon_);
    auto pool = client.pool("g");
    ASSERT_TRUE(pool.is_ok());
    (void)register_tokens(*pool, ta, kDynamoSeed);
    (void)wait_events([&](const auto& e) { return holds_all(view_of(e).held["disk"], a); },
                      "the 5 blocks stored on disk");
  }
  daemon_->kill(SIGKILL);
  daemon_->restart();  // no supervisor: nothing adopted, host memory starts empty
  auto evs = wait_events(
      [&](const auto& e) {
        size_t disk_clears = 0;
        for (const auto& x : e)
          disk_clears += x.kind == events::RouterEvent::Kind::kCleared && x.storage_tier == "disk";
        TierView v = view_of(e);
        return disk_clears >= 2 && v.held["host_pinned"].empty() &&
               v.held["disk"] == std::set<uint64_t>(a.begin(), a.end());
      },
      "cleared, then the 5 disk blocks again, after the cold start");
  // The new daemon's ring: its first records are the rebuilt index, one batch, parents first.
  auto [st, out] = daemon_->run_ctl({"events", "--all", "--json"});
  ASSERT_TRUE(st.exited() && st.code() == 0) << st.describe();
  std::istringstream in(out);
  std::vector<nlohmann::json> recs;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) recs.push_back(nlohmann::json::parse(line));
  ASSERT_GE(recs.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(recs[i]["event_id"], i + 1) << recs[i].dump();
    EXPECT_EQ(recs[i]["type"], "stored") << recs[i].dump();
    EXPECT_EQ(recs[i]["tier"], "disk") << recs[i].dump();
    EXPECT_EQ(recs[i]["batch_id"], 1) << recs[i].dump();
    EXPECT_EQ(recs[i]["batch_size"], a.size()) << recs[i].dump();
    EXPECT_EQ(recs[i]["sequence_hash"].get<uint64_t>(), a[i]) << "parents first";
  }
}

// The disk index is not in shared memory: kvpool-events keeps it from the disk records it
// read. A router that asks for a resync after the ring went round many times (its first
// records long overwritten) still gets the disk blocks written at the start.
TEST_F(DiskEventsNats, AResyncAfterTheRingWentRoundStillAnnouncesTheOldDiskBlocks) {
  constexpr uint32_t kRing = 64;
  start_daemon(256, kRing);
  start_forwarder();
  Client client = connect(*daemon_);
  auto pool = client.pool("g");
  ASSERT_TRUE(pool.is_ok());
  const auto ta = token_range(3000, 4 * kPage);
  const auto a = chain_of(ta);
  (void)register_tokens(*pool, ta, kDynamoSeed);
  (void)wait_events([&](const auto& e) { return holds_all(view_of(e).held["disk"], a); },
                    "the first chain stored on disk");
  // Chains one after another, each forwarded before the next (the forwarder never falls a
  // lap behind), until the daemon's ring has gone round several times.
  std::vector<uint64_t> last;
  for (uint32_t c = 0; c < 3 * kRing / 8 + 2; ++c) {
    const auto t = token_range(100000 + c * 1000, 4 * kPage);
    last = chain_of(t);
    (void)register_tokens(*pool, t, kDynamoSeed);
    (void)wait_events([&](const auto& e) { return holds_all(view_of(e).held["disk"], last); },
                      "chain " + std::to_string(c) + " stored on disk");
  }
  auto [st, out] = daemon_->run_ctl({"events", "--all", "--json"});
  ASSERT_TRUE(st.exited() && st.code() == 0) << st.describe();
  // `kvpoolctl events --all` from id 1: the ring tells it how many it no longer holds.
  const auto first = nlohmann::json::parse(out.substr(0, out.find('\n')));
  ASSERT_TRUE(first.contains("lost")) << first.dump();
  ASSERT_GT(first["lost"].get<uint64_t>(), uint64_t{kRing})
      << "the ring no longer holds the first chain's records";
  // A router (re)connects and asks: cleared, then host and disk as they are now.
  const size_t before = inbox_.events().size();
  const std::string resync =
      "namespace." + subject_.ns + ".component." + subject_.component + ".kv-events.resync";
  ASSERT_EQ(natsConnection_PublishString(nc_, resync.c_str(), "{}"), NATS_OK);
  auto evs = wait_events(
      [&](const auto& e) {
        if (e.size() <= before) return false;
        const std::vector<events::RouterEvent> after(e.begin() + static_cast<long>(before),
                                                     e.end());
        return holds_all(view_of(after).held["disk"], a) &&
               holds_all(view_of(after).held["disk"], last);
      },
      "the resync's disk blocks, the first chain's included");
  const std::vector<events::RouterEvent> after(evs.begin() + static_cast<long>(before), evs.end());
  EXPECT_EQ(after.front().kind, events::RouterEvent::Kind::kCleared);
  EXPECT_EQ(fwd_->stderr_text().find("lost before their disk-tier part"), std::string::npos)
      << "the forwarder kept up: its view is exact";
  // Its metrics say the same (gauges are stored once per round of its loop). The resync may
  // still be on its way when both chains are in (it comes in batches): what it told is
  // counted afresh on every look, and matches the gauge once the last batch is in.
  int64_t told = 0, gauge = -1;
  wait_until(
      [&] {
        const auto all = inbox_.events();
        const std::vector<events::RouterEvent> since(all.begin() + static_cast<long>(before),
                                                     all.end());
        told = static_cast<int64_t>(view_of(since).held["disk"].size());
        gauge = forwarder_gauge(*fwd_, "kvpool_events_disk_blocks");
        return forwarder_gauge(*fwd_, "kvpool_events_disk_view_partial") == 0 && gauge == told;
      },
      10s,
      "kvpool_events_disk_blocks to equal the disk blocks the resync told, disk_view_partial 0",
      [&] {
        return "told " + std::to_string(told) + ", kvpool_events_disk_blocks " +
               std::to_string(gauge);
      });
}

// A forwarder that starts after the daemon's ring went round has lost the start of the
// disk tier's history: it says so, and what it tells the router about the disk is a
// subset of what is on disk (never a block that is not there).
TEST_F(DiskEventsNats, AForwarderThatMissedTheStartTellsOnlyBlocksStillOnDisk) {
  constexpr uint32_t kRing = 64, kSlots = 16;
  start_daemon(kSlots, kRing);
  Client client = connect(*daemon_);
  auto pool = client.pool("g");
  ASSERT_TRUE(pool.is_ok());
  // Chains of 4, each written before the next: the disk (16 slots, LRU) ends with the last 4.
  std::vector<std::vector<uint64_t>> chains;
  for (uint32_t c = 0; c < 3 * kRing / 8; ++c) {
    const auto t = token_range(200000 + c * 1000, 4 * kPage);
    chains.push_back(chain_of(t));
    (void)register_tokens(*pool, t, kDynamoSeed);
    const uint64_t want = 4u * (c + 1);
    uint64_t written = 0;
    wait_until(
        [&] {
          written = daemon_->ctl_status()["pools"][0]["disk"]["blocks_written"].get<uint64_t>();
          return written == want;
        },
        20s, "chain " + std::to_string(c) + " written", [&] { return std::to_string(written); });
  }
  std::set<uint64_t> on_disk;
  for (size_t c = chains.size() - kSlots / 4; c < chains.size(); ++c)
    on_disk.insert(chains[c].begin(), chains[c].end());
  start_forwarder();
  auto evs = wait_events(
      [&](const auto& e) {
        size_t clears = 0;
        for (const auto& x : e) clears += x.kind == events::RouterEvent::Kind::kCleared;
        return clears >= 2 && holds_all(view_of(e).held["disk"], chains.back());
      },
      "the forwarder's start resync, the last chain on disk included");
  const std::set<uint64_t> told = view_of(evs).held["disk"];
  for (uint64_t h : told) EXPECT_TRUE(on_disk.count(h)) << h << " told but not on disk";
  EXPECT_NE(fwd_->stderr_text().find("lost before their disk-tier part"), std::string::npos)
      << fwd_->stderr_text();
  // The resync may still be on its way (it comes in batches): what it told is counted afresh
  // on every look, and matches the gauge once the last batch is in.
  int64_t told_now = 0, gauge = -1;
  wait_until(
      [&] {
        told_now = static_cast<int64_t>(view_of(inbox_.events()).held["disk"].size());
        gauge = forwarder_gauge(*fwd_, "kvpool_events_disk_blocks");
        return forwarder_gauge(*fwd_, "kvpool_events_disk_view_partial") == 1 && gauge == told_now;
      },
      10s, "kvpool_events_disk_blocks to equal the disk blocks told, disk_view_partial 1",
      [&] {
        return "told " + std::to_string(told_now) + ", kvpool_events_disk_blocks " +
               std::to_string(gauge);
      });
  // A named view: a range-for over a member of a temporary would read freed memory.
  TierView final_view = view_of(inbox_.events());
  for (uint64_t h : final_view.held["disk"])
    EXPECT_TRUE(on_disk.count(h)) << h << " told but not on disk";
}

// ---- vLLM: KVEventBatch msgpack on ZMQ -----------------------------------------------------

bool python_has_modules() {
  const std::string cmd = std::string(kPython) + " -c 'import zmq, msgpack' 2>/dev/null";
  return std::system(cmd.c_str()) == 0;
}

TEST(DiskEventsVllm, BlockStoredAndRemovedOfMediumDisk) {
  if (!python_has_modules()) GTEST_SKIP() << "/usr/bin/python3 lacks zmq or msgpack: skipped";
  TempDir dir("/var/tmp/kvpool-diskev-XXXXXX");
  const std::string pub = "tcp://127.0.0.1:" + std::to_string(free_loopback_port());
  const std::string replay = "tcp://127.0.0.1:" + std::to_string(free_loopback_port());
  DaemonProcess daemon(disk_events_config(dir.path + "/g.slots"));
  daemon.start();
  auto err = open_log(dir.path + "/sub.stderr");
  ChildProcess sub;
  sub.spawn({kPython, VLLM_SUBSCRIBER_PATH, "subscribe", "--endpoint", pub, "--replay", replay,
             "--out", dir.path + "/batches.jsonl"},
            child_environment(), -1, -1, err.get());
  auto ferr = open_log(dir.path + "/events.stderr");
  ChildProcess fwd;
  fwd.spawn({KVPOOL_EVENTS_PATH, "--format", "vllm", "--instance", daemon.instance(),
             "--runtime-dir", daemon.runtime_dir(), "--zmq-endpoint", pub, "--zmq-replay-endpoint",
             replay, "--log-level", "info"},
            child_environment(), -1, -1, ferr.get());
  struct Stop {
    ChildProcess& sub;
    ChildProcess& fwd;
    ~Stop() {
      sub.kill(SIGTERM);
      if (!sub.wait_exit(5s)) sub.kill_and_reap();
      fwd.kill_and_reap();
    }
  } stop{sub, fwd};

  // Per medium: the hashes stored now, the removed ones, and each hash's first BlockStored.
  struct Media {
    std::map<std::string, std::set<int64_t>> held, removed;
    std::map<std::string, std::map<int64_t, size_t>> at;
  };
  auto media = [&]() {
    if (!sub.running())
      throw HarnessError("the subscriber exited: " + read_file(dir.path + "/sub.stderr"));
    Media m;
    std::istringstream in(read_file(dir.path + "/batches.jsonl"));
    size_t n = 0;
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded()) break;  // a line being written
      for (const auto& e : j["events"]) {
        ++n;
        const std::string medium =
            e.contains("medium") && e["medium"].is_string() ? e["medium"].get<std::string>() : "";
        if (e["type"] == "AllBlocksCleared") m.held.clear();
        if (e["type"] == "BlockStored")
          for (int64_t h : e["block_hashes"]) {
            m.held[medium].insert(h);
            m.at[medium].emplace(h, n);
          }
        if (e["type"] == "BlockRemoved")
          for (int64_t h : e["block_hashes"]) {
            m.held[medium].erase(h);
            m.removed[medium].insert(h);
          }
      }
    }
    return m;
  };
  auto wait_media = [&](auto pred, const std::string& what) {
    Media m;
    wait_until([&] { return pred(m = media()); }, 30s, what,
               [&] {
                 return read_file(dir.path + "/events.stderr") +
                        read_file(dir.path + "/sub.stderr");
               });
    return m;
  };
  auto signed_of = [](const std::vector<uint64_t>& v) {
    std::vector<int64_t> out;
    for (uint64_t h : v) out.push_back(static_cast<int64_t>(h));
    return out;
  };
  auto has_all = [](const std::set<int64_t>& s, const std::vector<int64_t>& v) {
    for (int64_t h : v)
      if (!s.count(h)) return false;
    return true;
  };

  Client client = connect(daemon);
  auto pool = client.pool("g");
  ASSERT_TRUE(pool.is_ok());
  const auto a = signed_of(chain_of(token_range(1000, 4 * kPage)));
  (void)register_tokens(*pool, token_range(1000, 4 * kPage), kDynamoSeed);
  Media m = wait_media(
      [&](const Media& m) {
        return has_all(m.held.count("DISK") ? m.held.at("DISK") : std::set<int64_t>{}, a);
      },
      "BlockStored of medium DISK for the 4 blocks");
  for (int64_t h : a) {
    ASSERT_TRUE(m.at["CPU"].count(h)) << h;
    EXPECT_LT(m.at["CPU"][h], m.at["DISK"][h]) << "CPU first, then DISK";
  }
  const auto b = signed_of(chain_of(token_range(5000, 6 * kPage)));
  (void)register_tokens(*pool, token_range(5000, 6 * kPage), kDynamoSeed);
  m = wait_media(
      [&](const Media& m) {
        return m.held.count("DISK") && has_all(m.held.at("DISK"), b) && m.removed.count("DISK") &&
               m.removed.at("DISK").size() >= 2;
      },
      "the 6 blocks on disk and 2 disk slots removed");
  EXPECT_EQ(m.held["DISK"].size(), kDiskSlots);
  EXPECT_EQ(m.removed["DISK"].size(), 2u);
  for (int64_t h : m.removed["DISK"]) EXPECT_TRUE(std::find(a.begin(), a.end(), h) != a.end()) << h;
  EXPECT_EQ(m.held["CPU"].size(), a.size() + b.size());
  EXPECT_TRUE(m.removed["CPU"].empty());
  if (HasFailure()) dir.keep = true;
}

}  // namespace
}  // namespace kvpool::evtest
