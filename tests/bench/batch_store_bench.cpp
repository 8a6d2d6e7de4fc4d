// Batch get/set of 128 pages through kvpool::BatchStore, beside a plain memcpy of the same
// bytes in one process (the limit) and the same batches to a real redis-server over a Unix
// socket with hiredis (what LMCache users run as a remote store). One run, one table:
//
//   kvpool_batch_store_bench [--rounds N] [--pages 128] [--sizes 65536,262144,1048576,2097152]
//
// kvpool set: fresh keys every round (a stored key is not copied again), so each round copies
// every page in and evicts the previous round's. Redis set: the same keys every round (Redis
// copies on every SET). Gets read the last round's keys into the caller's buffers (Redis:
// pipelined GETs, each reply copied into its buffer, as a connector must). Medians of rounds.
#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench_backends.hpp"
#include "kvpool/batch_store.hpp"
#include "kvpool/client.hpp"
#include "support/daemon_process.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using kvpool::BatchOp;

[[noreturn]] void fail(const std::string& m) {
  std::fprintf(stderr, "batch_store_bench: %s\n", m.c_str());
  std::exit(1);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Pages {
  std::vector<std::vector<std::byte>> src, dst;
  Pages(uint32_t n, size_t bytes) : src(n), dst(n) {
    for (uint32_t i = 0; i < n; ++i) {
      src[i].resize(bytes);
      dst[i].resize(bytes);
      for (size_t k = 0; k < bytes; k += 64) src[i][k] = static_cast<std::byte>(i * 31 + k);
    }
  }
};

struct Row {
  double set_ms, get_ms;
};

Row bench_memcpy(Pages& p, uint32_t rounds) {
  std::vector<double> s, g;
  for (uint32_t r = 0; r < rounds; ++r) {
    auto t0 = Clock::now();
    for (size_t i = 0; i < p.src.size(); ++i)
      std::memcpy(p.dst[i].data(), p.src[i].data(), p.src[i].size());
    auto t1 = Clock::now();
    for (size_t i = 0; i < p.src.size(); ++i)
      std::memcpy(p.src[i].data(), p.dst[i].data(), p.src[i].size());
    auto t2 = Clock::now();
    s.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    g.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
  }
  return {median(s), median(g)};
}

Row bench_kvpool(kvpool::BatchStore& store, Pages& p, uint32_t rounds, size_t bytes) {
  std::vector<double> s, g;
  const uint32_t n = static_cast<uint32_t>(p.src.size());
  std::vector<std::string> names(n);
  std::vector<kvpool::KeyBytes> keys(n);
  std::vector<kvpool::IoBuffer> in(n), out(n);
  for (uint32_t i = 0; i < n; ++i) {
    in[i] = {p.src[i].data(), p.src[i].size()};
    out[i] = {p.dst[i].data(), p.dst[i].size()};
  }
  auto run = [&](BatchOp op, std::span<const kvpool::IoBuffer> bufs) {
    auto t0 = Clock::now();
    auto id = store.submit(op, keys, bufs);
    if (!id) fail(id.status().to_string());
    auto c = store.wait(*id, std::chrono::seconds(60));
    if (!c || !c->status.is_ok()) fail(c ? c->status.to_string() : c.status().to_string());
    for (auto r : c->results)
      if (r != kvpool::KeyResult::kOk) fail("a key of a batch was not ok");
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  for (uint32_t r = 0; r < rounds; ++r) {
    for (uint32_t i = 0; i < n; ++i) {
      names[i] = std::string("r")
                     .append(std::to_string(r))
                     .append("-s")
                     .append(std::to_string(bytes))
                     .append("-p")
                     .append(std::to_string(i));
      keys[i] = kvpool::key_bytes(names[i]);
    }
    s.push_back(run(BatchOp::kSet, in));
    g.push_back(run(BatchOp::kGet, out));
  }
  if (p.dst[n - 1] != p.src[n - 1]) fail("kvpool get returned other bytes");
  return {median(s), median(g)};
}

Row bench_redis(const kvpool::bench::RedisServer& server, Pages& p, uint32_t rounds, size_t bytes) {
  redisContext* ctx = nullptr;
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (true) {  // the server may still be starting
    server.check_alive();
    ctx = redisConnectUnix(server.socket_path().c_str());
    if (ctx && !ctx->err) break;
    if (ctx) redisFree(ctx);
    if (Clock::now() > deadline) fail("redis-server did not accept");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const uint32_t n = static_cast<uint32_t>(p.src.size());
  std::vector<std::string> names(n);
  for (uint32_t i = 0; i < n; ++i)
    names[i] =
        std::string("s").append(std::to_string(bytes)).append("-p").append(std::to_string(i));
  std::vector<double> s, g;
  for (uint32_t r = 0; r < rounds; ++r) {
    auto t0 = Clock::now();
    for (uint32_t i = 0; i < n; ++i)
      redisAppendCommand(ctx, "SET %b %b", names[i].data(), names[i].size(), p.src[i].data(),
                         p.src[i].size());
    for (uint32_t i = 0; i < n; ++i) {
      void* reply = nullptr;
      if (redisGetReply(ctx, &reply) != REDIS_OK) fail("redis SET failed");
      freeReplyObject(reply);
    }
    auto t1 = Clock::now();
    for (uint32_t i = 0; i < n; ++i)
      redisAppendCommand(ctx, "GET %b", names[i].data(), names[i].size());
    for (uint32_t i = 0; i < n; ++i) {
      void* reply = nullptr;
      if (redisGetReply(ctx, &reply) != REDIS_OK) fail("redis GET failed");
      auto* rr = static_cast<redisReply*>(reply);
      if (rr->type != REDIS_REPLY_STRING || static_cast<size_t>(rr->len) != bytes)
        fail("redis GET returned something else");
      std::memcpy(p.dst[i].data(), rr->str, bytes);  // into the caller's buffer
      freeReplyObject(reply);
    }
    auto t2 = Clock::now();
    s.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    g.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
  }
  redisFree(ctx);
  return {median(s), median(g)};
}

std::vector<size_t> parse_sizes(const std::string& s) {
  std::vector<size_t> out;
  for (size_t at = 0; at < s.size();) {
    size_t end = s.find(',', at);
    if (end == std::string::npos) end = s.size();
    out.push_back(std::stoull(s.substr(at, end - at)));
    at = end + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  uint32_t rounds = 9, pages = 128;
  std::vector<size_t> sizes = {64 << 10, 256 << 10, 1 << 20, 2 << 20};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--rounds")
      rounds = static_cast<uint32_t>(std::stoul(argv[i + 1]));
    else if (a == "--pages")
      pages = static_cast<uint32_t>(std::stoul(argv[i + 1]));
    else if (a == "--sizes")
      sizes = parse_sizes(argv[i + 1]);
    else
      fail("unknown option " + a + " (--rounds N --pages N --sizes a,b,c)");
  }
  const size_t largest = *std::max_element(sizes.begin(), sizes.end());
  const uint64_t block = kvpool::batch_store_block_bytes(448, largest);
  // Room for one round and a half: each round's set evicts the previous round's keys.
  const uint32_t blocks = pages + pages / 2;
  nlohmann::json pool = {{"name", "kv"},
                         {"num_blocks", blocks},
                         {"layout",
                          {{"num_layers", 1},
                           {"outer_dim", 1},
                           {"page_size", 1},
                           {"inner_dim", block},
                           {"dtype_bytes", 1},
                           {"alignment", 64}}}};
  kvpool::testsupport::DaemonProcess d(
      kvpool::testsupport::test_config(nlohmann::json::array({pool})));
  d.start();
  kvpool::ConnectOptions o;
  o.runtime_dir = d.runtime_dir();
  auto client = kvpool::Client::connect(d.instance(), o);
  if (!client) fail(client.status().to_string());
  auto store = kvpool::BatchStore::open(*client, "kv");
  if (!store) fail(store.status().to_string());
  const std::string redis_bin = kvpool::bench::RedisServer::find_binary();
  if (redis_bin.empty()) fail("no redis-server (scripts/bootstrap.sh installs it)");
  kvpool::bench::RedisServer redis(redis_bin);

  std::printf("batch of %u pages, median of %u rounds; ms per batch (GB/s)\n", pages, rounds);
  std::printf("%-9s %-6s %18s %18s %18s\n", "page", "op", "memcpy", "kvpool", "redis");
  for (size_t bytes : sizes) {
    Pages p(pages, bytes);
    const Row m = bench_memcpy(p, rounds);
    const Row k = bench_kvpool(*store, p, rounds, bytes);
    const Row r = bench_redis(redis, p, rounds, bytes);
    const double gb = static_cast<double>(bytes) * pages / 1e9;
    auto cell = [&](double ms) {
      static char buf[64];
      std::snprintf(buf, sizeof(buf), "%8.3f (%6.2f)", ms, gb / (ms / 1e3));
      return std::string(buf);
    };
    std::printf("%-9zu %-6s %18s %18s %18s\n", bytes, "set", cell(m.set_ms).c_str(),
                cell(k.set_ms).c_str(), cell(r.set_ms).c_str());
    std::printf("%-9zu %-6s %18s %18s %18s\n", bytes, "get", cell(m.get_ms).c_str(),
                cell(k.get_ms).c_str(), cell(r.get_ms).c_str());
  }
  return 0;
}
