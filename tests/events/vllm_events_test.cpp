// kvpool-events --format vllm end to end: a real kvpoold, a real kvpool-events, and a
// subscriber written as a vLLM-format consumer writes one (vllm_subscriber.py: Python,
// python3-zmq, python3-msgpack) that decodes every batch into vLLM's event structures and
// refuses anything vLLM's msgspec Structs would not take. This test registers and evicts
// blocks through libkvpool and checks what the subscriber decoded: the hashes (signed
// 64-bit), fields, medium, sequence numbers, replay, a lap of the event ring and a daemon
// restart. Every wait is on a condition with a deadline.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "events_testbed.hpp"
#include "kvpool/batch_store.hpp"

namespace kvpool::evtest {
namespace {

constexpr uint32_t kPage = 4;
const char* kPython = "/usr/bin/python3";

bool python_has_modules() {
  const std::string cmd = std::string(kPython) + " -c 'import zmq, msgpack' 2>/dev/null";
  return std::system(cmd.c_str()) == 0;
}

std::set<int64_t> signed_hashes(const std::vector<Token>& tokens) {
  auto seq = TokenBlockSequence::create(tokens, kPage, kDynamoSeed);
  std::set<int64_t> out;
  for (uint64_t h : seq->sequence_hashes()) out.insert(static_cast<int64_t>(h));
  return out;
}

std::vector<int64_t> signed_chain(const std::vector<Token>& tokens) {
  auto seq = TokenBlockSequence::create(tokens, kPage, kDynamoSeed);
  std::vector<int64_t> out;
  for (uint64_t h : seq->sequence_hashes()) out.push_back(static_cast<int64_t>(h));
  return out;
}

class VllmEvents : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!python_has_modules())
      GTEST_SKIP() << "/usr/bin/python3 lacks zmq or msgpack (apt install python3-zmq "
                      "python3-msgpack): the vLLM-format end-to-end tests are skipped";
    char tmpl[] = "/tmp/kvpool-vllm-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    pub_ = "tcp://127.0.0.1:" + std::to_string(free_loopback_port());
    replay_ = "tcp://127.0.0.1:" + std::to_string(free_loopback_port());
  }
  void TearDown() override {
    if (sub_) {
      sub_->kill(SIGTERM);
      if (!sub_->wait_exit(5s)) sub_->kill_and_reap();
    }
    if (fwd_) fwd_->kill_and_reap();
    daemon_.reset();
    if (HasFailure()) {
      std::fprintf(stderr, "kvpool-events stderr:\n%s\nsubscriber stderr:\n%s\nlogs kept in %s\n",
                   read_file(dir_ + "/events.stderr").c_str(),
                   read_file(dir_ + "/sub.stderr").c_str(), dir_.c_str());
    } else if (!dir_.empty()) {
      std::filesystem::remove_all(dir_);
    }
  }

  void start(uint32_t blocks, uint32_t ring_slots, std::vector<std::string> extra_args = {}) {
    start_with(events_config(blocks, ring_slots), std::move(extra_args));
  }
  // `bytes_hashes`: the subscriber takes bytes in block_hashes too (vLLM's ExternalBlockHash).
  void start_with(nlohmann::json config, std::vector<std::string> extra_args,
                  bool bytes_hashes = false) {
    daemon_ = std::make_unique<DaemonProcess>(std::move(config));
    daemon_->start();
    // The subscriber first: it connects before the PUB socket is bound and fills what it
    // missed (the start's AllBlocksCleared, sent before its subscription took hold) by replay.
    auto err = open_log(dir_ + "/sub.stderr");
    sub_ = std::make_unique<ChildProcess>();
    std::vector<std::string> sub_argv{
        kPython, VLLM_SUBSCRIBER_PATH,   "subscribe", "--endpoint", pub_, "--replay", replay_,
        "--out", dir_ + "/batches.jsonl"};
    if (bytes_hashes) sub_argv.push_back("--bytes-hashes");
    sub_->spawn(sub_argv, child_environment(), -1, -1, err.get());
    auto ferr = open_log(dir_ + "/events.stderr");
    fwd_ = std::make_unique<ChildProcess>();
    std::vector<std::string> argv{KVPOOL_EVENTS_PATH,
                                  "--format",
                                  "vllm",
                                  "--instance",
                                  daemon_->instance(),
                                  "--runtime-dir",
                                  daemon_->runtime_dir(),
                                  "--zmq-endpoint",
                                  pub_,
                                  "--zmq-replay-endpoint",
                                  replay_,
                                  "--log-level",
                                  "info"};
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    fwd_->spawn(argv, child_environment(), -1, -1, ferr.get());
  }

  // Every batch the subscriber decoded so far, in sequence order. A subscriber that exited
  // (a decode error: exit 3) fails the test at once with its message.
  std::vector<nlohmann::json> batches() {
    if (!sub_->running())
      throw HarnessError("the subscriber exited: " + read_file(dir_ + "/sub.stderr"));
    std::vector<nlohmann::json> out;
    std::istringstream in(read_file(dir_ + "/batches.jsonl"));
    for (std::string line; std::getline(in, line);) {
      if (line.empty()) continue;
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded()) break;  // a line being written
      out.push_back(std::move(j));
    }
    return out;
  }

  // Waits until `pred` holds for the batches; returns them.
  template <typename Pred>
  std::vector<nlohmann::json> wait_batches(Pred pred, const std::string& what,
                                           std::chrono::milliseconds timeout = 20s) {
    std::vector<nlohmann::json> b;
    wait_until([&] { return pred(b = batches()); }, timeout, what);
    return b;
  }

  // Index of the last batch whose first event is AllBlocksCleared, or -1.
  static int last_clear(const std::vector<nlohmann::json>& b) {
    for (int i = static_cast<int>(b.size()) - 1; i >= 0; --i)
      for (const auto& e : b[i]["events"])
        if (e["type"] == "AllBlocksCleared") return i;
    return -1;
  }

  static size_t clears(const std::vector<nlohmann::json>& b) {
    size_t n = 0;
    for (const auto& batch : b)
      for (const auto& e : batch["events"]) n += e["type"] == "AllBlocksCleared";
    return n;
  }

  // Hashes the stream says are stored now (after the last AllBlocksCleared), per medium.
  static std::set<int64_t> stored_now(const std::vector<nlohmann::json>& b) {
    std::set<int64_t> s;
    const int from = std::max(last_clear(b), 0);
    for (size_t i = static_cast<size_t>(from); i < b.size(); ++i) {
      for (const auto& e : b[i]["events"]) {
        if (e["type"] == "AllBlocksCleared") s.clear();
        if (e["type"] == "BlockStored")
          for (int64_t h : e["block_hashes"]) s.insert(h);
        if (e["type"] == "BlockRemoved")
          for (int64_t h : e["block_hashes"]) s.erase(h);
      }
    }
    return s;
  }

  static void expect_consecutive(const std::vector<nlohmann::json>& b) {
    for (size_t i = 0; i < b.size(); ++i)
      ASSERT_EQ(b[i]["seq"].get<uint64_t>(), i) << "batch " << i << ": " << b[i].dump();
  }

  Client connect() {
    ConnectOptions o;
    o.runtime_dir = daemon_->runtime_dir();
    auto c = Client::connect(daemon_->instance(), o);
    if (!c) throw HarnessError(c.status().to_string());
    return std::move(c.value());
  }

  std::string dir_, pub_, replay_;
  std::unique_ptr<DaemonProcess> daemon_;
  std::unique_ptr<ChildProcess> sub_, fwd_;
};

TEST_F(VllmEvents, StoredRemovedAndReplayDecodeAsVllmsStructs) {
  start(64, 65536);
  // 1. At start: AllBlocksCleared under sequence 0, kvpool's hash scheme beside it.
  auto b = wait_batches([](auto& b) { return !b.empty(); }, "the start's AllBlocksCleared");
  ASSERT_EQ(b[0]["seq"], 0);
  ASSERT_EQ(b[0]["events"].size(), 1u);
  EXPECT_EQ(b[0]["events"][0]["type"], "AllBlocksCleared");
  EXPECT_EQ(b[0]["dp_rank"], 0);
  EXPECT_EQ(b[0]["hash_scheme"], "dynamo-0.2");
  EXPECT_GT(b[0]["ts"].get<double>(), 1.7e9);  // seconds since the epoch, like time.time()

  // 2. One register call of a 3-block chain: one BlockStored, every field as vLLM's.
  Client client = connect();
  auto pool = client.pool("g");
  ASSERT_TRUE(pool.is_ok());
  const auto tokens = token_range(1u << 30, 3 * kPage);  // large ids: some hashes go negative
  const auto chain = signed_chain(tokens);
  {
    auto held = register_tokens(*pool, tokens, kDynamoSeed);
    b = wait_batches([&](auto& b) { return stored_now(b) == signed_hashes(tokens); },
                     "the BlockStored of the registered chain");
    const nlohmann::json* stored = nullptr;
    for (const auto& batch : b)
      for (const auto& e : batch["events"])
        if (e["type"] == "BlockStored") stored = &e;
    ASSERT_NE(stored, nullptr);
    EXPECT_EQ((*stored)["block_hashes"].get<std::vector<int64_t>>(), chain);
    EXPECT_TRUE((*stored)["parent_block_hash"].is_null());
    EXPECT_EQ((*stored)["token_ids"], nlohmann::json::array());
    EXPECT_EQ((*stored)["block_size"], kPage);
    EXPECT_TRUE((*stored)["lora_id"].is_null());
    EXPECT_EQ((*stored)["medium"], "CPU");
    EXPECT_TRUE((*stored)["lora_name"].is_null());
  }
  // 3. Evicted: BlockRemoved of each (medium CPU), the stream's view empty again.
  client.flush();
  evict_all(*pool, 64);
  b = wait_batches([](auto& b) { return stored_now(b).empty() && b.size() >= 3; },
                   "the BlockRemoved of the evicted chain");
  std::set<int64_t> removed;
  for (const auto& batch : b)
    for (const auto& e : batch["events"])
      if (e["type"] == "BlockRemoved") {
        EXPECT_EQ(e["medium"], "CPU");
        for (int64_t h : e["block_hashes"]) removed.insert(h);
      }
  EXPECT_EQ(removed, signed_hashes(tokens));
  expect_consecutive(b);

  // 4. Replay from sequence 1: the same batches again, then the end marker.
  const std::string out = dir_ + "/replay.jsonl";
  ChildProcess rp;
  auto err = open_log(dir_ + "/replay.stderr");
  rp.spawn(
      {kPython, VLLM_SUBSCRIBER_PATH, "replay", "--replay", replay_, "--start", "1", "--out", out},
      child_environment(), -1, -1, err.get());
  auto st = rp.wait_exit(20s);
  ASSERT_TRUE(st.has_value()) << "replay did not finish";
  ASSERT_TRUE(st->exited() && st->code() == 0)
      << st->describe() << ": " << read_file(dir_ + "/replay.stderr");
  std::istringstream in(read_file(out));
  std::vector<nlohmann::json> replayed;
  for (std::string line; std::getline(in, line);) replayed.push_back(nlohmann::json::parse(line));
  ASSERT_FALSE(replayed.empty());
  EXPECT_EQ(replayed.back(), nlohmann::json({{"end", true}}));
  replayed.pop_back();
  b = batches();
  ASSERT_GE(replayed.size(), b.size() - 1);
  for (size_t i = 0; i + 1 < b.size(); ++i) {
    EXPECT_EQ(replayed[i]["seq"], b[i + 1]["seq"]);
    EXPECT_EQ(replayed[i]["events"], b[i + 1]["events"]) << "batch " << i + 1;
  }
}

TEST_F(VllmEvents, ALapOfTheRingIsAClearAndTheWholeRegistryAgain) {
  start(256, 64);  // a ring of 64 records: 160 registrations lap it
  wait_batches([](auto& b) { return clears(b) == 1; }, "the start's AllBlocksCleared");
  Client client = connect();
  auto pool = client.pool("g");
  ASSERT_TRUE(pool.is_ok());
  // Hold the forwarder still while the daemon writes 160 records into 64 slots.
  fwd_->kill(SIGSTOP);
  std::vector<std::vector<ImmutableBlock>> held;
  std::set<int64_t> expected;
  RegisterOptions with_tokens;
  with_tokens.send_tokens = true;
  for (Token c = 0; c < 40; ++c) {
    const auto t = token_range(1000 * (c + 1), 4 * kPage);
    held.push_back(register_tokens(*pool, t, kDynamoSeed, with_tokens));
    for (int64_t h : signed_hashes(t)) expected.insert(h);
  }
  fwd_->kill(SIGCONT);
  auto b = wait_batches([&](auto& b) { return clears(b) >= 2 && stored_now(b) == expected; },
                        "AllBlocksCleared and the 160 registered blocks after the lap");
  expect_consecutive(b);
  EXPECT_NE(read_file(dir_ + "/events.stderr").find("fell a lap"), std::string::npos);
  // The resync tells the registry, which keeps no token ids: none, though they were sent.
  for (size_t i = static_cast<size_t>(last_clear(b)); i < b.size(); ++i)
    for (const auto& e : b[i]["events"]) {
      if (e["type"] == "BlockStored") {
        EXPECT_EQ(e["token_ids"], nlohmann::json::array());
      }
    }
}

TEST_F(VllmEvents, ADaemonRestartIsAClearWithSequenceNumbersGoingOn) {
  start(64, 65536);
  {
    Client c = connect();
    auto pool = c.pool("g");
    auto held = register_tokens(*pool, token_range(5, 2 * kPage), kDynamoSeed);
    wait_batches([&](auto& b) { return stored_now(b) == signed_hashes(token_range(5, 2 * kPage)); },
                 "the first daemon's blocks");
    daemon_->kill(SIGKILL);
    ASSERT_TRUE(daemon_->wait_exit(10s).has_value());
  }
  const size_t before = batches().size();
  daemon_->restart();
  // The forwarder notices, attaches to the new daemon and clears: the old blocks are gone.
  auto b = wait_batches([&](auto& b) { return b.size() > before && clears(b) >= 2; },
                        "AllBlocksCleared after the daemon restart", 30s);
  EXPECT_TRUE(stored_now(b).empty());
  Client c2 = connect();
  auto pool = c2.pool("g");
  const auto fresh = token_range(77, 3 * kPage);
  auto held = register_tokens(*pool, fresh, kDynamoSeed);
  b = wait_batches([&](auto& b) { return stored_now(b) == signed_hashes(fresh); },
                   "the new daemon's blocks");
  expect_consecutive(b);  // one stream: sequence numbers went on, never back to 0
  EXPECT_GT(b.back()["seq"].get<uint64_t>(), before - 1);
}

// RegisterOptions::send_tokens: the BlockStored of that register call carries the exact token
// ids, block after block; a register without it carries none (a resync carries none either:
// ALapOfTheRing... below).
TEST_F(VllmEvents, TokenIdsTravelWhenTheClientSendsThem) {
  start(64, 65536);
  wait_batches([](auto& b) { return clears(b) == 1; }, "the start's AllBlocksCleared");
  Client client = connect();
  auto pool = client.pool("g");
  ASSERT_TRUE(pool.is_ok());
  RegisterOptions with_tokens;
  with_tokens.send_tokens = true;
  // Ids above 2^31 and a 0: they must come through as the unsigned ints vLLM sends.
  std::vector<Token> sent = token_range(0xFFFFFFF0u, 3 * kPage);
  sent[1] = 0;
  const auto plain = token_range(900, 2 * kPage);
  auto held = register_tokens(*pool, sent, kDynamoSeed, with_tokens);
  auto held2 = register_tokens(*pool, plain, kDynamoSeed);
  std::set<int64_t> both = signed_hashes(sent);
  for (int64_t h : signed_hashes(plain)) both.insert(h);
  auto b = wait_batches([&](auto& b) { return stored_now(b) == both; },
                        "the BlockStored of both register calls");
  std::vector<nlohmann::json> stored;
  for (const auto& batch : b)
    for (const auto& e : batch["events"])
      if (e["type"] == "BlockStored") stored.push_back(e);
  ASSERT_EQ(stored.size(), 2u) << b.back().dump();
  EXPECT_EQ(stored[0]["block_hashes"].get<std::vector<int64_t>>(), signed_chain(sent));
  EXPECT_EQ(stored[0]["token_ids"].get<std::vector<uint64_t>>(),
            std::vector<uint64_t>(sent.begin(), sent.end()));
  EXPECT_EQ(stored[1]["block_hashes"].get<std::vector<int64_t>>(), signed_chain(plain));
  EXPECT_EQ(stored[1]["token_ids"], nlohmann::json::array());
}

// A hash as the subscriber wrote it: "b:" + hex of bytes, or "i:" + the signed integer.
std::string hash_name(const nlohmann::json& h) {
  if (h.is_object()) return "b:" + h["bytes"].get<std::string>();
  return "i:" + std::to_string(h.get<int64_t>());
}

std::string hex(std::string_view bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

// The namespaced key a BatchStore keeps (docs/batch-store.md): u32 LE namespace length,
// namespace, key.
std::string namespaced(const std::string& ns, const std::string& key) {
  std::string out(4, '\0');
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((ns.size() >> (8 * i)) & 0xFF);
  return out + ns + key;
}

// Names (hash_name) the stream says are stored now in medium CPU.
std::set<std::string> names_now(const std::vector<nlohmann::json>& b) {
  std::set<std::string> s;
  for (const auto& batch : b)
    for (const auto& e : batch["events"]) {
      if (e["type"] == "AllBlocksCleared") s.clear();
      if (e["type"] == "BlockStored")
        for (const auto& h : e["block_hashes"]) s.insert(hash_name(h));
      if (e["type"] == "BlockRemoved")
        for (const auto& h : e["block_hashes"]) s.erase(hash_name(h));
    }
  return s;
}

// Names removed by the BlockRemoved events of the stream, in order.
std::vector<std::string> removed_names(const std::vector<nlohmann::json>& b) {
  std::vector<std::string> out;
  for (const auto& batch : b)
    for (const auto& e : batch["events"])
      if (e["type"] == "BlockRemoved")
        for (const auto& h : e["block_hashes"]) out.push_back(hash_name(h));
  return out;
}

// --vllm-block-hashes key: a BatchStore's keys reach a vLLM-format subscriber as the exact
// bytes of each namespaced key (msgpack bin, decoded as vLLM's ExternalBlockHash = bytes |
// int: vllm/distributed/kv_events.py at 0181ea3173e5, vllm/v1/core/kv_cache_utils.py at
// 001cabc1be16), in BlockStored after a set and in BlockRemoved after a delete and after an
// eviction; a store with event_keys off is named by its index hash, as any block.
TEST_F(VllmEvents, BatchStoreKeysReachTheSubscriberAsBytesInStoredAndRemoved) {
  // A byte pool of 8 blocks of 512 bytes (a FullyContiguous host pool the store can use).
  auto config = mptest::test_config(nlohmann::json::array({{{"name", "kv"},
                                                            {"num_blocks", 8},
                                                            {"layout",
                                                             {{"num_layers", 1},
                                                              {"outer_dim", 1},
                                                              {"page_size", 1},
                                                              {"inner_dim", 512},
                                                              {"dtype_bytes", 1},
                                                              {"alignment", 64}}}}}));
  config["event_ring_slots"] = 4096;
  start_with(config, {"--vllm-block-hashes", "key"}, /*bytes_hashes=*/true);
  wait_batches([](auto& b) { return clears(b) == 1; }, "the start's AllBlocksCleared");
  Client client = connect();
  BatchStoreOptions o;
  o.key_namespace = "vllm";
  o.max_key_bytes = 64;
  auto store = BatchStore::open(client, "kv", o);
  ASSERT_TRUE(store.is_ok()) << store.status().to_string();

  // vLLM-shaped keys: 32 hash bytes (0x00 and 0xff among them) + a 4-byte big-endian group.
  std::vector<std::string> keys;
  for (int k = 0; k < 3; ++k) {
    std::string key(36, '\0');
    for (int i = 0; i < 32; ++i) key[i] = static_cast<char>((k * 97 + i * 61) & 0xFF);
    key[35] = static_cast<char>(k);
    keys.push_back(key);
  }
  auto name = [](const std::string& key) { return "b:" + hex(namespaced("vllm", key)); };
  auto run = [&](BatchOp op, const std::vector<std::string>& ks, bool with_values) {
    std::vector<KeyBytes> kb;
    std::vector<std::vector<std::byte>> values;
    std::vector<IoBuffer> bufs;
    for (const auto& k : ks) {
      kb.push_back(key_bytes(k));
      if (!with_values) continue;
      values.emplace_back(100, static_cast<std::byte>(k[0]));
    }
    for (auto& v : values) bufs.push_back({v.data(), v.size()});
    auto id = store->submit(op, kb, bufs);
    if (!id) throw HarnessError(id.status().to_string());
    auto c = store->wait(*id, 20s);
    if (!c) throw HarnessError(c.status().to_string());
    for (KeyResult r : c->results)
      if (r != KeyResult::kOk) throw HarnessError("a key of the batch was not ok");
  };

  // 1. A set of three keys: three BlockStored, each named by its exact namespaced key.
  run(BatchOp::kSet, keys, true);
  auto b = wait_batches(
      [&](auto& b) {
        return names_now(b) == std::set<std::string>{name(keys[0]), name(keys[1]), name(keys[2])};
      },
      "the BlockStored of the three keys");
  for (const auto& batch : b)
    for (const auto& e : batch["events"])
      if (e["type"] == "BlockStored") {
        EXPECT_TRUE(e["parent_block_hash"].is_null());  // a store's blocks have no parent
        EXPECT_EQ(e["medium"], "CPU");
      }

  // kvpoolctl events --json shows the same keys (hex: JSON has no bytes).
  {
    auto [st, out] = daemon_->run_ctl({"events", "--json"});
    ASSERT_TRUE(st.exited() && st.code() == 0) << st.describe();
    std::set<std::string> shown;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) {
      const auto e = nlohmann::json::parse(line);
      if (e["type"] == "stored" && e.contains("key_hex")) shown.insert(e["key_hex"]);
    }
    EXPECT_EQ(shown, (std::set<std::string>{hex(namespaced("vllm", keys[0])),
                                            hex(namespaced("vllm", keys[1])),
                                            hex(namespaced("vllm", keys[2]))}))
        << out;
  }

  // 2. A delete: BlockRemoved names the key's bytes.
  run(BatchOp::kDelete, {keys[1]}, false);
  b = wait_batches([&](auto& b) { return removed_names(b).size() == 1; }, "the delete's Removed");
  EXPECT_EQ(removed_names(b), std::vector<std::string>{name(keys[1])});

  // 3. An eviction: eight new keys need the whole pool; keys 0 and 2 are evicted and their
  // BlockRemoved names them by their bytes too (from the Stored the forwarder sent).
  std::vector<std::string> more;
  for (int k = 0; k < 8; ++k) more.push_back("lmcache@model@" + std::to_string(k));
  run(BatchOp::kSet, more, true);
  b = wait_batches([&](auto& b) { return removed_names(b).size() == 3; }, "the evictions");
  const auto removed = removed_names(b);
  EXPECT_EQ(std::set<std::string>(removed.begin() + 1, removed.end()),
            (std::set<std::string>{name(keys[0]), name(keys[2])}));
  std::set<std::string> now;
  for (const auto& k : more) now.insert(name(k));
  b = wait_batches([&](auto& b) { return names_now(b) == now; }, "the eight new keys stored");

  // 4. A store with event_keys off: its blocks go by their index hash (signed 64 bits).
  store->close();
  BatchStoreOptions plain = o;
  plain.key_namespace = "plain";
  plain.event_keys = false;
  auto quiet = BatchStore::open(client, "kv", plain);
  ASSERT_TRUE(quiet.is_ok()) << quiet.status().to_string();
  const std::string k = "no-key-in-events";
  std::vector<std::byte> v(10, std::byte{1});
  const KeyBytes kb[1] = {key_bytes(k)};
  const IoBuffer buf[1] = {{v.data(), v.size()}};
  auto id = quiet->submit(BatchOp::kSet, kb, buf);
  ASSERT_TRUE(id.is_ok());
  ASSERT_TRUE(quiet->wait(*id, 20s).is_ok());
  const std::string by_index =
      "i:" + std::to_string(static_cast<int64_t>(quiet->index_hash(kb[0])));
  wait_batches([&](auto& b) { return names_now(b).count(by_index) == 1; },
               "the plain store's block by index hash");
  expect_consecutive(batches());
}

// The subscriber is strict: the array form of older vLLM is not what today's Structs
// decode, and it says so (so the tests above would catch a stream vLLM could not read).
TEST_F(VllmEvents, TheSubscriberRefusesWhatTodaysVllmStructsWouldNotDecode) {
  start(64, 65536, {"--vllm-encoding", "array"});
  auto st = sub_->wait_exit(20s);
  ASSERT_TRUE(st.has_value()) << "the subscriber accepted the array form";
  EXPECT_TRUE(st->exited() && st->code() == 3) << st->describe();
  EXPECT_NE(read_file(dir_ + "/sub.stderr").find("KVEventBatch must be a map"), std::string::npos)
      << read_file(dir_ + "/sub.stderr");
}

TEST(VllmHashVectors, DynamoRouterSchemeMatchesAnIndependentImplementation) {
  const std::string cmd = std::string(kPython) + " -c 'import xxhash' 2>/dev/null";
  if (std::system(cmd.c_str()) != 0)
    GTEST_SKIP() << "/usr/bin/python3 lacks xxhash (apt install python3-xxhash)";
  const std::string run = std::string(kPython) + " " + VLLM_SUBSCRIBER_PATH +
                          " hash-vectors --kvpoolctl " + KVPOOLCTL_PATH;
  EXPECT_EQ(std::system(run.c_str()), 0) << run;
}

}  // namespace
}  // namespace kvpool::evtest
