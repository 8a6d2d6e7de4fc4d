// KV events end to end: blocks registered (and then evicted) through kvpoold, through its
// event ring, kvpool-events, a real nats-server, into a router's index (kvpool-router-demo's
// code: NatsLink + parse_router_event + RouterIndex, in this process so the clock is one);
// and, in the same run from the same ring, kvpool-events --format vllm -> ZMQ PUB -> a SUB
// socket in this process that decodes the msgpack KVEventBatches into a hash set (what a
// vLLM-format indexer does).
//   ./build/tests/events/kvpool_events_bench [--blocks N] [--chain K] [--send-tokens]
// Prints block events per second for the stored and the removed phase of both paths;
// target >= 100k/s, and the ZMQ path >= the NATS path. --send-tokens registers with
// RegisterOptions::send_tokens (the ZMQ consumer then checks every block's token ids); the
// register call's latency is printed either way, so two runs tell what the tokens cost.
// Needs nats-server (apt install nats-server); starts and stops everything itself.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include <zmq.h>

#define MSGPACK_NO_BOOST
#include <atomic>
#include <msgpack.hpp>
#include <thread>
#include <unordered_set>

#include "events_testbed.hpp"
#include "examples/router_demo/router_index.hpp"
#include "tools/kvpool-events/nats_link.hpp"
#include "tools/kvpool-events/router_event.hpp"

using namespace kvpool;
using namespace kvpool::evtest;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int64_t kWorker = 1;

struct Router {
  std::mutex mu;
  events::RouterIndex index;
  uint64_t messages = 0;
  uint64_t errors = 0;
  size_t total() {
    std::lock_guard lk(mu);
    return index.total_blocks();
  }
  bool knows_worker() {
    std::lock_guard lk(mu);
    return index.sizes().count(kWorker) != 0;
  }
};

// A vLLM-format consumer: SUB socket, msgpack decode, a set of the hashes stored now.
class ZmqIndex {
 public:
  explicit ZmqIndex(const std::string& endpoint) : ctx_(zmq_ctx_new()) {
    sub_ = zmq_socket(ctx_, ZMQ_SUB);
    int hwm = 0;  // unbounded: the figure must not lose batches on our side
    zmq_setsockopt(sub_, ZMQ_RCVHWM, &hwm, sizeof(hwm));
    zmq_setsockopt(sub_, ZMQ_SUBSCRIBE, "", 0);
    if (zmq_connect(sub_, endpoint.c_str()) != 0)
      throw HarnessError("zmq_connect " + endpoint + ": " + zmq_strerror(zmq_errno()));
    thread_ = std::thread([this] { run(); });
  }
  ~ZmqIndex() {
    stop_ = true;
    thread_.join();
    zmq_close(sub_);
    zmq_ctx_term(ctx_);
  }
  size_t total() const { return total_.load(); }
  uint64_t batches() const { return batches_.load(); }
  uint64_t clears() const { return clears_.load(); }
  uint64_t gaps() const { return gaps_.load(); }
  uint64_t blocks_with_tokens() const { return with_tokens_.load(); }
  uint64_t bad_tokens() const { return bad_tokens_.load(); }

 private:
  void run() {
    int timeout = 50;
    zmq_setsockopt(sub_, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
    std::string frames[3];
    while (!stop_) {
      size_t n = 0;
      bool more = true;
      while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, sub_, 0) < 0) {
          zmq_msg_close(&m);
          if (n == 0) break;
          continue;
        }
        if (n < 3) frames[n].assign(static_cast<char*>(zmq_msg_data(&m)), zmq_msg_size(&m));
        ++n;
        more = zmq_msg_more(&m) != 0;
        zmq_msg_close(&m);
      }
      if (n != 3) continue;
      uint64_t seq = 0;
      for (char c : frames[1]) seq = (seq << 8) | static_cast<uint8_t>(c);
      if (have_seq_ && seq != next_seq_) ++gaps_;
      have_seq_ = true;
      next_seq_ = seq + 1;
      apply(frames[2]);
    }
  }
  void apply(const std::string& payload) {
    msgpack::object_handle oh = msgpack::unpack(payload.data(), payload.size());
    const msgpack::object& batch = oh.get();
    for (uint32_t i = 0; i < batch.via.map.size; ++i) {
      if (batch.via.map.ptr[i].key.as<std::string>() != "events") continue;
      const msgpack::object& evs = batch.via.map.ptr[i].val;
      for (uint32_t j = 0; j < evs.via.array.size; ++j) {
        const msgpack::object& e = evs.via.array.ptr[j];
        const std::string type = e.via.map.ptr[0].val.as<std::string>();
        if (type == "AllBlocksCleared") {
          hashes_.clear();
          ++clears_;
          continue;
        }
        const msgpack::object& hs = e.via.map.ptr[1].val;  // block_hashes: first after the tag
        if (type == "BlockStored") count_tokens(e, hs.via.array.size);
        for (uint32_t k = 0; k < hs.via.array.size; ++k) {
          const int64_t h = hs.via.array.ptr[k].as<int64_t>();
          if (type == "BlockStored") {
            hashes_.insert(h);
          } else {
            hashes_.erase(h);
          }
        }
      }
    }
    ++batches_;
    total_.store(hashes_.size());
  }

  // BlockStored: token_ids (4th field), block_size (5th). The bench's blocks hold runs of
  // consecutive ids, so a block whose ids are not one run got another block's (or garbage).
  void count_tokens(const msgpack::object& e, uint32_t blocks) {
    const msgpack::object& ids = e.via.map.ptr[3].val;
    const uint32_t page = e.via.map.ptr[4].val.as<uint32_t>();
    if (ids.via.array.size == 0 || page == 0) return;
    if (ids.via.array.size != uint64_t{blocks} * page) {
      bad_tokens_ += blocks;
      return;
    }
    for (uint32_t b = 0; b < blocks; ++b) {
      const uint32_t first = ids.via.array.ptr[b * page].as<uint32_t>();
      bool run = true;
      for (uint32_t t = 1; t < page; ++t)
        run = run && ids.via.array.ptr[b * page + t].as<uint32_t>() == first + t;
      ++(run ? with_tokens_ : bad_tokens_);
    }
  }

  void* ctx_;
  void* sub_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::unordered_set<int64_t> hashes_;
  std::atomic<size_t> total_{0};
  std::atomic<uint64_t> batches_{0}, clears_{0}, gaps_{0}, with_tokens_{0}, bad_tokens_{0};
  bool have_seq_ = false;
  uint64_t next_seq_ = 0;
};

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  uint32_t blocks = 200'000;
  uint32_t chain = 64;  // blocks per register call (one stored message each)
  RegisterOptions register_options;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--send-tokens")) register_options.send_tokens = true;
    if (i + 1 >= argc) continue;
    if (!std::strcmp(argv[i], "--blocks")) blocks = static_cast<uint32_t>(std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--chain")) chain = static_cast<uint32_t>(std::atoi(argv[i + 1]));
  }
  if (nats_server_binary().empty()) {
    std::fprintf(stderr,
                 "kvpool_events_bench: nats-server is not installed (apt install nats-server)\n");
    return 77;
  }
  char tmpl[] = "/tmp/kvpool-evbench-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  try {
    NatsServer nats(dir);
    nats.start();
    // A tiny block layout: the bench is about the registry and its events, not block bytes.
    auto pool_json = mptest::host_pool("g", blocks, 16);
    pool_json["layout"] = {{"num_layers", 1}, {"outer_dim", 1},   {"page_size", 16},
                           {"inner_dim", 1},  {"dtype_bytes", 1}, {"alignment", 16}};
    auto config = mptest::test_config(nlohmann::json::array({pool_json}));
    config["log_level"] = "warn";
    config["poll_us"] = 50;
    config["event_ring_slots"] = 1u << 20;  // no laps: the figure is the steady path
    DaemonProcess daemon(config);
    daemon.start();
    Subject subject{"bench", "kvpool"};
    Router router;
    events::NatsOptions no;
    no.url = nats.url();
    no.name = "kvpool-events-bench";
    auto link = events::NatsLink::connect(no);
    if (!link) throw HarnessError(link.status().to_string());
    Status sub = (*link)->subscribe(events::kv_events_subject(subject.ns, subject.component),
                                    [&router](std::string_view data) {
                                      auto e = events::parse_router_event(data);
                                      std::lock_guard lk(router.mu);
                                      ++router.messages;
                                      if (!e) {
                                        ++router.errors;
                                        return;
                                      }
                                      router.index.apply(*e);
                                    });
    if (!sub.is_ok()) throw HarnessError(sub.to_string());
    wait_until([&] { return (*link)->connected(); }, 10s, "the bench's NATS connection");
    ForwarderProcess fwd(daemon, nats.url(), subject, kWorker);
    fwd.start();

    // Subscribed before the forwarder starts: its start-up resync ("cleared") says it is up.
    wait_until([&] { return router.knows_worker(); }, 20s, "the forwarder's first message",
               [&] { return fwd.stderr_text(); });

    // The vLLM path beside it, reading the same ring.
    const int zmq_port = free_loopback_port();
    const std::string zmq_ep = "tcp://127.0.0.1:" + std::to_string(zmq_port);
    ZmqIndex zindex(zmq_ep);
    ChildProcess zfwd;
    auto zlog = open_log(dir + "/zmq-events.stderr");
    zfwd.spawn(
        {KVPOOL_EVENTS_PATH, "--format", "vllm", "--instance", daemon.instance(), "--runtime-dir",
         daemon.runtime_dir(), "--zmq-endpoint", zmq_ep, "--log-level", "info"},
        child_environment(), -1, -1, zlog.get());
    // Its start-up AllBlocksCleared may go out before our subscription holds (nothing is
    // lost for the figures: the pool is empty then); wait until it listens.
    wait_until([&] { return accepts_tcp(zmq_port); }, 20s, "kvpool-events --format vllm to bind");

    ConnectOptions co;
    co.runtime_dir = daemon.runtime_dir();
    auto client = Client::connect(daemon.instance(), co);
    if (!client) throw HarnessError(client.status().to_string());
    auto pool = client->pool("g");
    if (!pool) throw HarnessError(pool.status().to_string());
    const uint32_t page = pool->page_size();

    // `blocks` blocks as chains of `chain` blocks, one register call (one message) each.
    std::vector<Token> tokens(page);
    // Register calls alone (not allocate, not filling blocks): what send_tokens costs.
    std::vector<double> register_us;
    auto register_all = [&](uint32_t seed) {
      for (uint32_t done = 0; done < blocks;) {
        const uint32_t k = std::min(chain, blocks - done);
        auto mb = pool->allocate_blocks(k);
        if (!mb) throw HarnessError("allocate: " + mb.status().to_string());
        std::optional<SequenceHash> parent;
        for (uint32_t i = 0; i < k; ++i) {
          for (uint32_t t = 0; t < page; ++t) tokens[t] = seed + (done + i) * 131 + t;
          auto& b = (*mb)[i];
          (void)b.init_sequence(0, parent);
          (void)b.add_tokens(tokens);
          (void)b.commit();
          parent = *b.sequence_hash();
        }
        const auto r0 = Clock::now();
        auto imm = pool->register_blocks(std::move(*mb), register_options);
        register_us.push_back(seconds_since(r0) * 1e6);
        if (!imm) throw HarnessError("register: " + imm.status().to_string());
        done += k;
      }
      client->flush();
    };
    // Every block evicted: the whole pool allocated (in chunks), then given back.
    std::vector<MutableBlock> hold;
    hold.reserve(blocks);
    auto evict_all = [&] {
      for (uint32_t done = 0; done < blocks;) {
        const uint32_t k = std::min<uint32_t>(4096, blocks - done);
        auto mb = pool->allocate_blocks(k);
        if (!mb) throw HarnessError("allocate (evict): " + mb.status().to_string());
        for (auto& b : *mb) hold.push_back(std::move(b));
        done += k;
      }
    };
    auto router_has_all = [&] {
      wait_until([&] { return router.total() >= blocks; }, 120s, "the router to hold every block",
                 [&] { return std::to_string(router.total()) + " of " + std::to_string(blocks); });
    };
    auto router_empty = [&] {
      wait_until([&] { return router.total() == 0; }, 120s, "the router to drop every block",
                 [&] { return std::to_string(router.total()) + " left"; });
    };
    std::printf(
        "kvpool_events_bench: %u blocks, register calls of %u blocks (one stored message each), "
        "page %u, token ids %s\n",
        blocks, chain, page, register_options.send_tokens ? "sent" : "not sent");

    // ---- live: events flow while the daemon produces them --------------------------------
    auto t = Clock::now();
    register_all(0);
    const double produce_s = seconds_since(t);
    router_has_all();
    const double stored_s = seconds_since(t);
    t = Clock::now();
    evict_all();
    const double evict_s = seconds_since(t);
    router_empty();
    const double removed_s = seconds_since(t);
    hold.clear();
    std::printf(
        "  live stored : daemon done after %.3f s, router has all after %.3f s -> %.0f block "
        "events/s\n",
        produce_s, stored_s, blocks / stored_s);
    std::printf(
        "  live removed: daemon done after %.3f s, router empty after %.3f s -> %.0f block "
        "events/s\n",
        evict_s, removed_s, blocks / removed_s);

    // ---- backlog: the events wait in the ring (forwarder stopped), then drain -------------
    // This is the event path alone (ring -> kvpool-events -> NATS -> index), without the
    // producer's own pace in the figure.
    // Both forwarders read the same ring; each drains the same backlog alone.
    wait_until([&] { return zindex.total() == 0 && zindex.batches() > 0; }, 60s,
               "the ZMQ consumer to follow the live phase",
               [&] { return std::to_string(zindex.total()) + " held"; });
    fwd.kill(SIGSTOP);
    zfwd.kill(SIGSTOP);
    register_all(7'000'000);
    t = Clock::now();
    zfwd.kill(SIGCONT);
    wait_until([&] { return zindex.total() >= blocks; }, 120s,
               "the ZMQ consumer to hold every block",
               [&] { return std::to_string(zindex.total()) + " of " + std::to_string(blocks); });
    const double zmq_stored_s = seconds_since(t);
    t = Clock::now();
    fwd.kill(SIGCONT);
    router_has_all();
    const double drain_stored_s = seconds_since(t);
    fwd.kill(SIGSTOP);
    zfwd.kill(SIGSTOP);
    evict_all();
    t = Clock::now();
    zfwd.kill(SIGCONT);
    wait_until([&] { return zindex.total() == 0; }, 120s, "the ZMQ consumer to drop every block",
               [&] { return std::to_string(zindex.total()) + " left"; });
    const double zmq_removed_s = seconds_since(t);
    t = Clock::now();
    fwd.kill(SIGCONT);
    router_empty();
    const double drain_removed_s = seconds_since(t);
    hold.clear();
    const double stored_rate = blocks / drain_stored_s, removed_rate = blocks / drain_removed_s;
    std::printf("  ring->router stored : %.3f s -> %.0f block events/s\n", drain_stored_s,
                stored_rate);
    std::printf("  ring->router removed: %.3f s -> %.0f block events/s\n", drain_removed_s,
                removed_rate);
    const double zs = blocks / zmq_stored_s, zr = blocks / zmq_removed_s;
    std::printf("  ring->ZMQ (vLLM msgpack) stored : %.3f s -> %.0f block events/s (%.2fx NATS)\n",
                zmq_stored_s, zs, zs / stored_rate);
    std::printf("  ring->ZMQ (vLLM msgpack) removed: %.3f s -> %.0f block events/s (%.2fx NATS)\n",
                zmq_removed_s, zr, zr / removed_rate);
    std::printf(
        "  ZMQ consumer: %llu batches, %llu AllBlocksCleared, %llu sequence gaps, %llu blocks "
        "with token ids (%llu with wrong ones)\n",
        static_cast<unsigned long long>(zindex.batches()),
        static_cast<unsigned long long>(zindex.clears()),
        static_cast<unsigned long long>(zindex.gaps()),
        static_cast<unsigned long long>(zindex.blocks_with_tokens()),
        static_cast<unsigned long long>(zindex.bad_tokens()));
    std::sort(register_us.begin(), register_us.end());
    double sum = 0;
    for (double u : register_us) sum += u;
    if (!register_us.empty())
      std::printf(
          "  register call (%u blocks, token ids %s): mean %.1f us, p50 %.1f us, p99 %.1f us "
          "(%.2f us per block; %zu calls)\n",
          chain, register_options.send_tokens ? "sent" : "not sent", sum / register_us.size(),
          register_us[register_us.size() / 2], register_us[register_us.size() * 99 / 100],
          sum / register_us.size() / chain, register_us.size());
    zfwd.kill(SIGTERM);
    (void)zfwd.wait_exit(10s);
    std::printf(
        "  router: %llu messages, %llu parse errors; ring->router target >= 100000 block "
        "events/s: %s\n",
        static_cast<unsigned long long>(router.messages),
        static_cast<unsigned long long>(router.errors),
        stored_rate >= 100'000 && removed_rate >= 100'000 ? "met" : "NOT met");

    // ---- what send_tokens costs a register call: with and without, interleaved --------------
    // Forwarders stopped (the ring holds the records), so both modes see the same machine.
    fwd.kill(SIGSTOP);
    std::vector<double> us[2];
    const uint32_t rounds = std::min<uint32_t>(2000, blocks / (2 * chain));
    for (uint32_t r = 0; r < rounds; ++r) {
      for (int mode = 0; mode < 2; ++mode) {
        auto mb = pool->allocate_blocks(chain);
        if (!mb) throw HarnessError("allocate (a/b): " + mb.status().to_string());
        std::optional<SequenceHash> parent;
        for (uint32_t i = 0; i < chain; ++i) {
          for (uint32_t t = 0; t < page; ++t)
            tokens[t] = 50'000'000 + (r * 2 + mode) * 7919 + i * 31 + t;
          auto& b = (*mb)[i];
          (void)b.init_sequence(0, parent);
          (void)b.add_tokens(tokens);
          (void)b.commit();
          parent = *b.sequence_hash();
        }
        RegisterOptions o;
        o.send_tokens = mode == 1;
        const auto r0 = Clock::now();
        auto imm = pool->register_blocks(std::move(*mb), o);
        us[mode].push_back(seconds_since(r0) * 1e6);
        if (!imm) throw HarnessError("register (a/b): " + imm.status().to_string());
      }
    }
    fwd.kill(SIGCONT);
    for (int mode = 0; mode < 2; ++mode) {
      auto& v = us[mode];
      if (v.empty()) continue;
      std::sort(v.begin(), v.end());
      double total = 0;
      for (double u : v) total += u;
      std::printf(
          "  register a/b (%u blocks of %u tokens, interleaved), token ids %-8s: mean %.1f us, "
          "p50 %.1f us, p90 %.1f us (%zu calls)\n",
          chain, page, mode ? "sent" : "not sent", total / v.size(), v[v.size() / 2],
          v[v.size() * 9 / 10], v.size());
    }

    fwd.stop();
    const std::string log = fwd.stderr_text();
    if (std::getenv("KVPOOL_BENCH_LOG")) std::printf("%s", log.c_str());
    if (auto at = log.rfind("events "); at != std::string::npos)
      std::printf("  kvpool-events: %s", log.substr(at).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvpool_events_bench: %s (logs in %s)\n", e.what(), dir.c_str());
    return 1;
  }
  std::filesystem::remove_all(dir);
  return 0;
}
