// KV events end to end with a real nats-server: two kvpoold instances stand for two
// workers, each with its kvpool-events forwarder, and kvpool-router-demo is the router.
// Label `nats`; skipped (with a message) where nats-server is not installed.
#include <gtest/gtest.h>
#include <nats/nats.h>
#include <signal.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <set>

#include "events_testbed.hpp"

namespace kvpool::evtest {
namespace {

constexpr Salt kSalt = kDynamoSeed;  // what Dynamo's router hashes with
constexpr uint32_t kPage = 4;
constexpr uint32_t kBlocks = 64;
constexpr int64_t kWorkerA = 101;
constexpr int64_t kWorkerB = 202;
const std::string kA = std::to_string(kWorkerA);
const std::string kB = std::to_string(kWorkerB);

std::string describe(const std::map<std::string, uint32_t>& m) {
  std::string s = "{";
  for (auto& [k, v] : m) s += k + ":" + std::to_string(v) + " ";
  return s + "}";
}

class NatsEvents : public ::testing::Test {
 protected:
  void SetUp() override {
    if (nats_server_binary().empty())
      GTEST_SKIP() << "nats-server is not installed (apt install nats-server): the NATS tests "
                      "of kvpool-events are skipped";
    char tmpl[] = "/tmp/kvpool-nats-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    subject_ = {"t" + std::to_string(::getpid()), "kvpool"};
    nats_ = std::make_unique<NatsServer>(dir_);
    nats_->start();
  }
  void TearDown() override {
    router_.reset();
    fwd_.clear();
    daemons_.clear();
    nats_.reset();
    if (!dir_.empty() && !HasFailure()) std::filesystem::remove_all(dir_);
    if (HasFailure()) std::fprintf(stderr, "logs kept in %s\n", dir_.c_str());
  }

  // Starts `n` workers (daemon + forwarder) and the router.
  // `supervised`: daemon 0 runs as `kvpoold --supervise` (its restarts adopt its pool).
  void start_cluster(int n = 2, uint32_t event_ring_slots = 65536, bool supervised = false) {
    for (int i = 0; i < n; ++i) {
      daemons_.push_back(std::make_unique<DaemonProcess>(events_config(kBlocks, event_ring_slots)));
      if (supervised && i == 0) {
        daemons_.back()->spawn({"--supervise"});
        if (!daemons_.back()->wait_ready(20s))
          throw HarnessError("kvpoold --supervise did not start: " +
                             daemons_.back()->stderr_text());
      } else {
        daemons_.back()->start();
      }
      fwd_.push_back(std::make_unique<ForwarderProcess>(*daemons_.back(), nats_->url(), subject_,
                                                        i == 0 ? kWorkerA : kWorkerB));
      fwd_.back()->start();
    }
    router_ = std::make_unique<RouterProcess>(nats_->url(), subject_, kPage, kSalt,
                                              dir_ + "/router.stderr");
    // Each forwarder announces its worker with "cleared" at start (or on the router's
    // resync request): both workers known, holding nothing.
    wait_for_overlap(token_range(1, 8), {{kA, 0}, {kB, 0}}, "both workers known to the router");
  }

  Client connect(int i) {
    ConnectOptions o;
    o.runtime_dir = daemons_[i]->runtime_dir();
    auto c = Client::connect(daemons_[i]->instance(), o);
    if (!c) throw HarnessError("connect: " + c.status().to_string());
    return std::move(c.value());
  }

  void wait_for_overlap(const std::vector<Token>& tokens,
                        const std::map<std::string, uint32_t>& want, const std::string& what,
                        std::chrono::milliseconds timeout = 20s) {
    std::map<std::string, uint32_t> seen;
    wait_until([&] { return (seen = router_->overlap(tokens)) == want; }, timeout, what,
               [&] {
                 return describe(seen) + " want " + describe(want) + "; forwarder logs:\n" + logs();
               });
  }

  std::string logs() {
    std::string s;
    for (auto& f : fwd_)
      s += "--- worker " + std::to_string(f->worker_id()) + "\n" + f->stderr_text();
    return s;
  }

  std::string dir_;
  Subject subject_;
  std::unique_ptr<NatsServer> nats_;
  std::vector<std::unique_ptr<DaemonProcess>> daemons_;
  std::vector<std::unique_ptr<ForwarderProcess>> fwd_;
  std::unique_ptr<RouterProcess> router_;
};

TEST_F(NatsEvents, APrefixRegisteredOnOneWorkerIsOverlapForThatWorkerOnlyUntilEvicted) {
  start_cluster();
  Client a = connect(0);
  auto pool = a.pool("g");
  ASSERT_TRUE(pool.is_ok());
  const auto prefix = token_range(1, 4 * kPage);  // 4 blocks
  auto held = register_tokens(*pool, prefix, kSalt);
  ASSERT_EQ(held.size(), 4u);

  wait_for_overlap(prefix, {{kA, 4}, {kB, 0}}, "the prefix on worker A only");
  // A longer request sharing the prefix: A holds its first 4 blocks, nobody the rest.
  auto longer = prefix;
  for (Token t : token_range(500, 3 * kPage)) longer.push_back(t);
  wait_for_overlap(longer, {{kA, 4}, {kB, 0}}, "A's 4 leading blocks of a longer request");
  // The same prefix tail with another beginning shares no sequence hash.
  auto other = token_range(2, 4 * kPage);
  wait_for_overlap(other, {{kA, 0}, {kB, 0}}, "no overlap for another prefix");

  // Released, the blocks stay registered (inactive) and matchable: still A's.
  held.clear();
  a.flush();
  wait_for_overlap(prefix, {{kA, 4}, {kB, 0}}, "released blocks still held (inactive)");
  // Needing every block evicts them: Removed events.
  evict_all(*pool, kBlocks);
  wait_for_overlap(prefix, {{kA, 0}, {kB, 0}}, "the evicted prefix gone from worker A");
  auto size = router_->size();
  EXPECT_EQ(size["errors"], 0u) << size.dump();
  EXPECT_EQ(size["workers"][kA], 0u) << size.dump();
}

TEST_F(NatsEvents, AForwarderKilledAndRestartedConverges) {
  start_cluster();
  Client a = connect(0);
  auto pool = a.pool("g");
  ASSERT_TRUE(pool.is_ok());
  const auto p1 = token_range(1, 3 * kPage);
  const auto p2 = token_range(1000, 2 * kPage);
  {
    auto held = register_tokens(*pool, p1, kSalt);
    wait_for_overlap(p1, {{kA, 3}, {kB, 0}}, "p1 on A");
  }
  fwd_[0]->kill9_and_reap();
  // While A's forwarder is gone: p1 is evicted and p2 registered. Nobody tells the router.
  a.flush();
  evict_all(*pool, kBlocks);
  auto held2 = register_tokens(*pool, p2, kSalt);
  EXPECT_EQ(router_->overlap(p1).at(kA), 3u);  // stale, as expected without a forwarder
  fwd_[0]->start();
  wait_for_overlap(p1, {{kA, 0}, {kB, 0}}, "p1 gone after the forwarder's restart");
  wait_for_overlap(p2, {{kA, 2}, {kB, 0}}, "p2 on A after the forwarder's restart");
}

TEST_F(NatsEvents, NatsServerKilledAndRestartedConverges) {
  start_cluster();
  Client a = connect(0);
  Client b = connect(1);
  auto pa = a.pool("g");
  auto pb = b.pool("g");
  ASSERT_TRUE(pa.is_ok() && pb.is_ok());
  const auto p1 = token_range(1, 3 * kPage);
  const auto p2 = token_range(2000, 4 * kPage);
  {
    auto held = register_tokens(*pa, p1, kSalt);
    wait_for_overlap(p1, {{kA, 3}, {kB, 0}}, "p1 on A");
  }
  nats_->kill9();
  // While NATS is down: A evicts p1, B registers p2.
  a.flush();
  evict_all(*pa, kBlocks);
  auto held_b = register_tokens(*pb, p2, kSalt);
  nats_->start();  // same port: forwarders and router reconnect with back-off
  wait_for_overlap(p1, {{kA, 0}, {kB, 0}}, "p1 gone from A after NATS came back", 30s);
  wait_for_overlap(p2, {{kA, 0}, {kB, 4}}, "p2 on B after NATS came back", 30s);
  EXPECT_NE(logs().find("resync"), std::string::npos);
}

TEST_F(NatsEvents, AForwarderLappedByTheRingResyncs) {
  start_cluster(2, /*event_ring_slots=*/8);
  Client a = connect(0);
  auto pool = a.pool("g");
  ASSERT_TRUE(pool.is_ok());
  {
    auto held = register_tokens(*pool, token_range(1, 2 * kPage), kSalt);
    wait_for_overlap(token_range(1, 2 * kPage), {{kA, 2}, {kB, 0}}, "the first prefix on A");
  }
  fwd_[0]->kill(SIGSTOP);
  // Well over 8 events while the forwarder sleeps: it will find itself a lap behind.
  a.flush();
  evict_all(*pool, kBlocks);
  std::vector<ImmutableBlock> keep;
  for (Token base : {100u, 200u, 300u}) {
    auto h = register_tokens(*pool, token_range(base, 4 * kPage), kSalt);
    keep.insert(keep.end(), h.begin(), h.end());
  }
  fwd_[0]->kill(SIGCONT);
  wait_for_overlap(token_range(1, 2 * kPage), {{kA, 0}, {kB, 0}}, "the evicted prefix gone");
  for (Token base : {100u, 200u, 300u})
    wait_for_overlap(token_range(base, 4 * kPage), {{kA, 4}, {kB, 0}}, "a new prefix on A");
  EXPECT_NE(fwd_[0]->stderr_text().find("lap behind"), std::string::npos) << logs();
}

TEST_F(NatsEvents, ARestartedDaemonIsAnEmptyWorker) {
  start_cluster();
  const auto p1 = token_range(1, 2 * kPage);
  {
    Client a = connect(0);
    auto pool = a.pool("g");
    ASSERT_TRUE(pool.is_ok());
    auto held = register_tokens(*pool, p1, kSalt);
    wait_for_overlap(p1, {{kA, 2}, {kB, 0}}, "p1 on A");
  }
  daemons_[0]->kill(SIGTERM);
  daemons_[0]->restart();
  wait_for_overlap(p1, {{kA, 0}, {kB, 0}}, "A empty after its daemon restarted");
  Client a = connect(0);
  auto pool = a.pool("g");
  ASSERT_TRUE(pool.is_ok());
  auto held = register_tokens(*pool, p1, kSalt);
  wait_for_overlap(p1, {{kA, 2}, {kB, 0}}, "p1 on the new daemon of A");
}

// A daemon killed and restarted by its supervisor adopts its pool (docs/restarts.md:
// adoption): the forwarder publishes what the dead daemon's ring still held, attaches to
// the new epoch and, since it adopted every pool and dropped nothing, sends no resync: the
// router's view holds, and it still places the old prefix on the worker.
TEST_F(NatsEvents, AnAdoptingDaemonKeepsItsBlocksAtTheRouter) {
  start_cluster(2, 65536, /*supervised=*/true);
  const auto p1 = token_range(1, 2 * kPage);
  {
    Client a = connect(0);
    auto pool = a.pool("g");
    ASSERT_TRUE(pool.is_ok());
    auto held = register_tokens(*pool, p1, kSalt);
    wait_for_overlap(p1, {{kA, 2}, {kB, 0}}, "p1 on A");
  }
  const auto old = daemons_[0]->view();
  const uint64_t old_epoch = old.header().restart.epoch;
  ASSERT_EQ(::kill(static_cast<pid_t>(old.header().daemon_pid), SIGKILL), 0);
  uint64_t epoch = 0;
  wait_until(
      [&] {
        try {
          epoch = daemons_[0]->view().header().restart.epoch;
        } catch (const HarnessError&) {
          return false;  // between two daemons
        }
        return epoch != old_epoch;
      },
      20s, "the next kvpoold", [&] { return daemons_[0]->stderr_text(); });
  char hex[24];
  std::snprintf(hex, sizeof(hex), "epoch %016llx", static_cast<unsigned long long>(epoch));
  wait_until([&] { return fwd_[0]->stderr_text().find(hex) != std::string::npos; }, 20s,
             "the forwarder on the new daemon", [&] { return logs(); });
  EXPECT_NE(fwd_[0]->stderr_text().find("dropped no block: the routers' view holds, no resync"),
            std::string::npos)
      << logs();
  EXPECT_EQ(fwd_[0]->stderr_text().find("resync (after a gap)"), std::string::npos) << logs();
  // A prefix registered on the new daemon reaches the router after the resync (one
  // publisher, in order): then p1 must be there, re-stored by the resync after its cleared.
  Client a = connect(0);
  auto pool = a.pool("g");
  ASSERT_TRUE(pool.is_ok());
  const auto p2 = token_range(900, 2 * kPage);
  auto held = register_tokens(*pool, p2, kSalt);
  wait_for_overlap(p2, {{kA, 2}, {kB, 0}}, "p2 on the new daemon of A");
  wait_for_overlap(p1, {{kA, 2}, {kB, 0}}, "p1 still on A", 1s);
  // And it is really there: matched from the adopted pool.
  auto hit = pool->match_sequence_hashes(
      TokenBlockSequence::create(p1, kPage, kSalt, pool->hash_scheme())->sequence_hashes());
  ASSERT_TRUE(hit.is_ok());
  EXPECT_EQ(hit->size(), 2u);
}

// ---- the wire format, field for field --------------------------------------------------------

struct Inbox {
  std::mutex mu;
  std::vector<std::string> msgs;
  static void on_msg(natsConnection*, natsSubscription*, natsMsg* m, void* self) {
    auto* in = static_cast<Inbox*>(self);
    std::lock_guard lk(in->mu);
    in->msgs.emplace_back(natsMsg_GetData(m), static_cast<size_t>(natsMsg_GetDataLength(m)));
    natsMsg_Destroy(m);
  }
  size_t size() {
    std::lock_guard lk(mu);
    return msgs.size();
  }
  nlohmann::json at(size_t i) {
    std::lock_guard lk(mu);
    return nlohmann::json::parse(msgs.at(i));
  }
};

std::set<std::string> keys(const nlohmann::json& j) {
  std::set<std::string> k;
  for (auto& [key, v] : j.items()) k.insert(key);
  return k;
}

// The envelope every message has: {"worker_id": int, "event": {"event_id": uint, "data": ...}}.
// Today's RouterEvent (Dynamo's kv-router protocols.rs) from a host pool: storage tier,
// residency as the worker's cache (the default), dp_rank, and kvpool's hash scheme.
const nlohmann::json& data_of(const nlohmann::json& m, int64_t worker, uint64_t* event_id) {
  EXPECT_TRUE(m.is_object()) << m.dump();
  EXPECT_EQ(keys(m), (std::set<std::string>{"worker_id", "storage_tier", "residency_domain",
                                            "event", "hash_scheme"}))
      << m.dump();
  EXPECT_TRUE(m["worker_id"].is_number_integer()) << m.dump();
  EXPECT_EQ(m["worker_id"].get<int64_t>(), worker);
  EXPECT_EQ(m["storage_tier"], "host_pinned") << m.dump();
  // The default residency: the worker's own cache, no state_source (a cache owner needs
  // Dynamo's CacheOwnerId, --state-source; dynamo_schema_test.cpp).
  EXPECT_EQ(m["residency_domain"], "worker") << m.dump();
  EXPECT_EQ(m["hash_scheme"], "dynamo-0.2") << m.dump();
  const auto& ev = m["event"];
  EXPECT_TRUE(ev.is_object());
  EXPECT_EQ(keys(ev), (std::set<std::string>{"event_id", "dp_rank", "data"})) << m.dump();
  EXPECT_EQ(ev["dp_rank"], 0) << m.dump();
  EXPECT_TRUE(ev["event_id"].is_number_unsigned()) << m.dump();
  *event_id = ev["event_id"].get<uint64_t>();
  return ev["data"];
}

TEST_F(NatsEvents, MessagesAreDynamosRouterEventsFieldForField) {
  // A raw subscriber, before any forwarder runs, so it sees every message from the first.
  natsConnection* nc = nullptr;
  ASSERT_EQ(natsConnection_ConnectTo(&nc, nats_->url().c_str()), NATS_OK);
  Inbox inbox;
  natsSubscription* sub = nullptr;
  // Dynamo's subject today: ...kv-events (kv_events with --topic kv_events, Dynamo 0.2.1's).
  const std::string subject =
      "namespace." + subject_.ns + ".component." + subject_.component + ".kv-events";
  ASSERT_EQ(natsConnection_Subscribe(&sub, nc, subject.c_str(), &Inbox::on_msg, &inbox), NATS_OK);
  ASSERT_EQ(natsConnection_FlushTimeout(nc, 5000), NATS_OK);

  daemons_.push_back(std::make_unique<DaemonProcess>(events_config(kBlocks)));
  daemons_[0]->start();
  fwd_.push_back(
      std::make_unique<ForwarderProcess>(*daemons_[0], nats_->url(), subject_, kWorkerA));
  fwd_[0]->start();
  auto wait_msgs = [&](size_t n, const char* what) {
    wait_until([&] { return inbox.size() >= n; }, 20s, what,
               [&] { return std::to_string(inbox.size()) + " message(s); " + logs(); });
  };
  wait_msgs(1, "the forwarder's first message");
  uint64_t id = 0, last_id = 0;
  // 1. At start: "cleared" (a resync of an empty registry).
  auto m0 = inbox.at(0);
  const auto& d0 = data_of(m0, kWorkerA, &id);
  EXPECT_TRUE(d0.is_string()) << m0.dump();
  EXPECT_EQ(d0, "cleared");
  last_id = id;

  // 2. One register call of 3 blocks: one stored message, parent null, the chain in order.
  Client a = connect(0);
  auto pool = a.pool("g");
  ASSERT_TRUE(pool.is_ok());
  const auto tokens = token_range(7, 5 * kPage);
  auto seq = TokenBlockSequence::create(tokens, kPage, kSalt);
  ASSERT_TRUE(seq.is_ok());
  const auto& tb = seq->blocks();
  std::vector<Token> first3(tokens.begin(), tokens.begin() + 3 * kPage);
  auto held = register_tokens(*pool, first3, kSalt);
  wait_msgs(2, "the stored message");
  auto m1 = inbox.at(1);
  const auto& d1 = data_of(m1, kWorkerA, &id);
  EXPECT_GT(id, last_id);
  last_id = id;
  ASSERT_TRUE(d1.is_object()) << m1.dump();
  EXPECT_EQ(keys(d1), (std::set<std::string>{"stored"})) << m1.dump();
  const auto& st = d1["stored"];
  EXPECT_EQ(keys(st), (std::set<std::string>{"parent_hash", "blocks"})) << m1.dump();
  EXPECT_TRUE(st["parent_hash"].is_null()) << m1.dump();
  ASSERT_TRUE(st["blocks"].is_array());
  ASSERT_EQ(st["blocks"].size(), 3u) << m1.dump();
  for (size_t i = 0; i < 3; ++i) {
    const auto& blk = st["blocks"][i];
    EXPECT_EQ(keys(blk), (std::set<std::string>{"block_hash", "tokens_hash"})) << m1.dump();
    ASSERT_TRUE(blk["block_hash"].is_number_unsigned() && blk["tokens_hash"].is_number_unsigned());
    EXPECT_EQ(blk["block_hash"].get<uint64_t>(), tb[i].sequence_hash);  // Dynamo: block_hash
    EXPECT_EQ(blk["tokens_hash"].get<uint64_t>(), tb[i].block_hash);    // Dynamo: tokens_hash
    EXPECT_EQ(blk["block_hash"].get<uint64_t>(), held[i].sequence_hash());
  }

  // 3. Two more blocks of the same sequence: parent_hash is the third block's sequence hash.
  {
    auto more = pool->allocate_blocks(2);
    ASSERT_TRUE(more.is_ok());
    for (size_t i = 0; i < 2; ++i) {
      auto& b = (*more)[i];
      ASSERT_TRUE(b.init_sequence(kSalt, tb[3 + i].parent_sequence_hash).is_ok());
      ASSERT_TRUE(b.add_tokens(tb[3 + i].tokens).is_ok());
      ASSERT_TRUE(b.commit().is_ok());
    }
    auto reg = pool->register_blocks(std::move(*more));
    ASSERT_TRUE(reg.is_ok());
    wait_msgs(3, "the second stored message");
    auto m2 = inbox.at(2);
    const auto& d2 = data_of(m2, kWorkerA, &id);
    EXPECT_GT(id, last_id);
    last_id = id;
    const auto& st2 = d2["stored"];
    ASSERT_TRUE(st2["parent_hash"].is_number_unsigned()) << m2.dump();
    EXPECT_EQ(st2["parent_hash"].get<uint64_t>(), tb[2].sequence_hash);
    ASSERT_EQ(st2["blocks"].size(), 2u);
    EXPECT_EQ(st2["blocks"][0]["block_hash"].get<uint64_t>(), tb[3].sequence_hash);
    EXPECT_EQ(st2["blocks"][1]["tokens_hash"].get<uint64_t>(), tb[4].block_hash);
  }

  // 4. Evicting all five: removed messages whose block_hashes are exactly those five.
  held.clear();
  a.flush();
  evict_all(*pool, kBlocks);
  std::multiset<uint64_t> removed;
  wait_until(
      [&] {
        removed.clear();
        for (size_t i = 3; i < inbox.size(); ++i) {
          auto m = inbox.at(i);
          uint64_t mid = 0;
          const auto& d = data_of(m, kWorkerA, &mid);
          EXPECT_EQ(keys(d), (std::set<std::string>{"removed"})) << m.dump();
          EXPECT_EQ(keys(d["removed"]), (std::set<std::string>{"block_hashes"})) << m.dump();
          for (const auto& h : d["removed"]["block_hashes"]) {
            EXPECT_TRUE(h.is_number_unsigned());
            removed.insert(h.get<uint64_t>());
          }
        }
        return removed.size() >= 5;
      },
      20s, "removed messages for the 5 blocks");
  std::multiset<uint64_t> want;
  for (const auto& b : tb) want.insert(b.sequence_hash);
  EXPECT_EQ(removed, want);
  const size_t after_removed = inbox.size();

  // 5. A router's resync request: "cleared" again (and nothing stored: the pool is empty).
  const std::string resync = subject + ".resync";
  ASSERT_EQ(natsConnection_PublishString(nc, resync.c_str(), "{}"), NATS_OK);
  wait_msgs(after_removed + 1, "the answer to a resync request");
  auto mc = inbox.at(after_removed);
  const auto& dc = data_of(mc, kWorkerA, &id);
  EXPECT_EQ(dc, "cleared") << mc.dump();
  // Event ids keep growing across all messages.
  uint64_t prev = 0;
  for (size_t i = 0; i < inbox.size(); ++i) {
    auto m = inbox.at(i);
    EXPECT_GT(m["event"]["event_id"].get<uint64_t>(), prev);
    prev = m["event"]["event_id"].get<uint64_t>();
  }

  natsSubscription_Destroy(sub);
  natsConnection_Destroy(nc);
}

}  // namespace
}  // namespace kvpool::evtest
