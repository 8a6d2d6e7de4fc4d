// How long a restarted kvpoold takes to be READY with many adopted blocks (issue 15), against
// a `kvpoold --supervise` it starts: fills a pool of tiny blocks with registered blocks,
// kill -9s the daemon, and times until the next one (started by the supervisor) answers
// READY, beside a start with nothing to adopt (a SIGTERM without --keep-cache).
//   ./build/tests/bench/kvpool_adoption_bench [--blocks N] [--runs R]
// Default 1M blocks of 8 bytes (the cost is per block record, not per KV byte: adoption
// reads no KV byte). Prints figures; no thresholds (a figure for the README, not a test).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "kvpool/client.hpp"
#include "kvpool/shm/handshake.hpp"

using namespace kvpool;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint32_t kBatch = 256;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

struct Daemon {
  pid_t supervisor = -1;
  std::string dir;
  std::string instance = "adopt" + std::to_string(getpid());
};

Daemon start(uint32_t blocks, const char* kvpoold) {
  Daemon d;
  char tmpl[] = "/tmp/kvpool-bench-XXXXXX";
  d.dir = mkdtemp(tmpl);
  const std::string cfg = d.dir + "/kvpoold.json";
  // One layer, one region, one token of 8 one-byte elements: 8 bytes a block.
  std::ofstream(cfg) << "{\"instance\":\"" << d.instance << "\",\"runtime_dir\":\"" << d.dir
                     << "\",\"log_level\":\"warn\",\"ring_bytes\":1048576,\"pools\":[{\"name\":"
                        "\"bench\",\"num_blocks\":"
                     << blocks << ",\"max_holds\":" << 4 * kBatch
                     << ",\"layout\":{\"num_layers\":1,\"outer_dim\":1,\"page_size\":1,"
                        "\"inner_dim\":8,\"dtype_bytes\":1,\"alignment\":8}}]}";
  d.supervisor = fork();
  if (d.supervisor == 0) {
    execl(kvpoold, kvpoold, "--supervise", "--config", cfg.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return d;
}

// The serving daemon's control segment once one of another epoch than `old` is ready.
shm::ControlReader wait_next(const Daemon& d, uint64_t old) {
  const auto deadline = Clock::now() + std::chrono::seconds(300);
  while (Clock::now() < deadline) {
    auto r = shm::observe(d.instance, d.dir);
    if (r && r->epoch() != old) return std::move(r.value());
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // polls the socket
  }
  std::fprintf(stderr, "no kvpoold became ready\n");
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  uint32_t blocks = 1u << 20;
  int runs = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--blocks")) blocks = static_cast<uint32_t>(std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--runs")) runs = std::atoi(argv[i + 1]);
  }
  const char* kvpoold = std::getenv("KVPOOLD");
  if (!kvpoold) kvpoold = KVPOOLD_PATH;
  Daemon d = start(blocks, kvpoold);
  auto first = wait_next(d, 0);
  {
    ConnectOptions o;
    o.runtime_dir = d.dir;
    auto client = Client::connect(d.instance, o);
    if (!client) {
      std::fprintf(stderr, "connect: %s\n", client.status().to_string().c_str());
      return 1;
    }
    auto pool = client->pool("bench");
    const auto t0 = Clock::now();
    std::vector<Token> token(1);
    for (uint32_t done = 0; done < blocks;) {
      const uint32_t n = std::min(kBatch, blocks - done);
      auto fresh = pool->allocate_blocks(n);
      if (!fresh) {
        std::fprintf(stderr, "allocate: %s\n", fresh.status().to_string().c_str());
        return 1;
      }
      for (uint32_t i = 0; i < n; ++i) {
        auto& b = (*fresh)[i];
        token[0] = done + i;
        std::memcpy(*b.address(0, 0), &token[0], sizeof(Token));
        (void)b.init_sequence(1337);
        (void)b.add_tokens(token);
        (void)b.commit();
      }
      auto reg = pool->register_blocks(std::move(*fresh));
      if (!reg) {
        std::fprintf(stderr, "register: %s\n", reg.status().to_string().c_str());
        return 1;
      }
      done += n;
    }
    client->flush();
    std::printf("filled %u registered blocks in %.1f s\n", blocks, ms_since(t0) / 1000);
  }
  uint64_t epoch = first.epoch();
  pid_t pid = static_cast<pid_t>(first.header().daemon_pid);
  std::vector<double> adopt_ms, ready_ms;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = Clock::now();
    ::kill(pid, SIGKILL);
    auto next = wait_next(d, epoch);
    ready_ms.push_back(ms_since(t0));
    const shm::RestartInfo* ri = next.restart();
    adopt_ms.push_back(static_cast<double>(ri->adoption_ns) / 1e6);
    std::printf(
        "kill -9 -> READY of the next kvpoold: %8.1f ms (adoption inside it %7.1f ms); "
        "adopted %llu, dropped %llu, inactive now %u\n",
        ready_ms.back(), adopt_ms.back(), static_cast<unsigned long long>(ri->adopted_blocks),
        static_cast<unsigned long long>(ri->adoption_dropped_blocks),
        next.arena(0).counts().inactive);
    epoch = next.epoch();
    pid = static_cast<pid_t>(next.header().daemon_pid);
  }
  // The same pool started empty: a stop without --keep-cache.
  const auto t0 = Clock::now();
  ::kill(pid, SIGTERM);
  auto empty = wait_next(d, epoch);
  std::printf("SIGTERM -> READY of an empty kvpoold:   %8.1f ms (inactive now %u)\n", ms_since(t0),
              empty.arena(0).counts().inactive);
  ::kill(d.supervisor, SIGTERM);
  int st = 0;
  waitpid(d.supervisor, &st, 0);
  std::filesystem::remove_all(d.dir);
  return 0;
}
