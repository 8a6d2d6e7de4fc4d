// copy_blocks bandwidth between a device pool and a host pool, through a real kvpoold:
// device -> host and host -> device, pinned (pin_host_pools) and pageable host memory,
// 64 KiB and 2 MiB blocks, consecutive ids (merged into large copies) and scattered ids
// (one copy per block). Prints GB/s (1e9 bytes/s) per case.
//   ./build/tests/bench/kvpool_copy_bench [--mib-per-copy N] [--min-seconds S]
// Needs a CUDA device; exits 77 (skipped) without one. Starts its own kvpoold.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kvpool/client.hpp"
#include "kvpool/cuda/device.hpp"

using namespace kvpool;
using Clock = std::chrono::steady_clock;

namespace {

struct Size {
  const char* label;
  const char* device_pool;
  const char* host_pool;
};
constexpr Size kSizes[] = {{"64KiB", "d64k", "h64k"}, {"2MiB", "d2m", "h2m"}};

struct Daemon {
  pid_t pid = -1;
  std::string dir;
  std::string instance = "copybench" + std::to_string(getpid());
};

// 64 KiB blocks: 2 layers x K,V x 16 tokens x 512 x 2 B; 2 MiB: 4 layers x K,V x 16 x 8192 x 2 B.
std::string pool_json(const char* name, bool device, uint32_t blocks, uint32_t layers,
                      uint32_t inner) {
  std::string s = std::string("{\"name\":\"") + name + "\",";
  if (device) s += "\"storage\":\"cuda\",\"device\":0,";
  s += "\"num_blocks\":" + std::to_string(blocks) +
       ",\"layout\":{\"num_layers\":" + std::to_string(layers) +
       ",\"outer_dim\":2,\"page_size\":16,\"inner_dim\":" + std::to_string(inner) +
       ",\"dtype_bytes\":2,\"alignment\":256}}";
  return s;
}

Daemon start_daemon(const char* kvpoold, uint32_t blocks64k, uint32_t blocks2m) {
  Daemon d;
  char tmpl[] = "/tmp/kvpool-copybench-XXXXXX";
  d.dir = mkdtemp(tmpl);
  std::string cfg = d.dir + "/kvpoold.json";
  std::ofstream(cfg) << "{\"instance\":\"" << d.instance << "\",\"runtime_dir\":\"" << d.dir
                     << "\",\"log_level\":\"warn\",\"pools\":["
                     << pool_json("d64k", true, blocks64k, 2, 512) << ","
                     << pool_json("h64k", false, blocks64k, 2, 512) << ","
                     << pool_json("d2m", true, blocks2m, 4, 8192) << ","
                     << pool_json("h2m", false, blocks2m, 4, 8192) << "]}";
  d.pid = fork();
  if (d.pid == 0) {
    execl(kvpoold, kvpoold, "--config", cfg.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return d;
}

void stop_daemon(const Daemon& d) {
  kill(d.pid, SIGTERM);
  waitpid(d.pid, nullptr, 0);
  std::string rm = "rm -rf " + d.dir;
  if (std::system(rm.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", d.dir.c_str());
}

Result<Client> connect_with_retry(const Daemon& d, bool pin) {
  ConnectOptions o;
  o.runtime_dir = d.dir;
  o.pin_host_pools = pin;
  auto deadline = Clock::now() + std::chrono::seconds(60);
  while (true) {
    auto c = Client::connect(d.instance, o);
    if (c || Clock::now() > deadline || c.status().code() != ErrorCode::kNotFound) return c;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // waiting for start-up only
    int status = 0;
    if (waitpid(d.pid, &status, WNOHANG) == d.pid)
      return Status(ErrorCode::kDaemonGone, "kvpoold exited during start-up (see its stderr)");
  }
}

[[noreturn]] void fail(const std::string& what, const Status& st) {
  std::fprintf(stderr, "copy bench: %s: %s\n", what.c_str(), st.to_string().c_str());
  std::exit(1);
}

// GB/s of copying ids[] of `from` to ids[] of `to`, best of repetitions over min_seconds.
double measure(const Pool& from, const Pool& to, const std::vector<uint32_t>& from_ids,
               const std::vector<uint32_t>& to_ids, uint64_t block_bytes, double min_seconds) {
  auto once = [&] {
    auto t0 = Clock::now();
    if (Status st = copy_blocks(from, from_ids, to, to_ids, nullptr); !st.is_ok())
      fail("copy_blocks", st);
    if (Status st = cuda::synchronize(nullptr); !st.is_ok()) fail("synchronize", st);
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  once();  // warm-up: first touch, lazy IPC open
  double best = 1e30, total = 0;
  int reps = 0;
  while (reps < 3 || (total < min_seconds && reps < 50)) {
    double t = once();
    best = std::min(best, t);
    total += t;
    ++reps;
  }
  return static_cast<double>(from_ids.size() * block_bytes) / best / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t mib = 256;
  double min_seconds = 0.25;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--mib-per-copy")) mib = std::strtoull(argv[i + 1], nullptr, 10);
    if (!std::strcmp(argv[i], "--min-seconds")) min_seconds = std::atof(argv[i + 1]);
  }
  if (cuda::device_count() == 0) {
    std::printf("copy bench skipped: no CUDA device visible (%s)\n",
                cuda::no_device_reason().c_str());
    return 77;
  }
  const uint32_t blocks64k = static_cast<uint32_t>(std::max<uint64_t>(1, (mib << 20) / (64 << 10)));
  const uint32_t blocks2m = static_cast<uint32_t>(std::max<uint64_t>(1, (mib << 20) / (2 << 20)));
  const char* kvpoold = std::getenv("KVPOOLD");
  if (!kvpoold) kvpoold = KVPOOLD_PATH;
  Daemon d = start_daemon(kvpoold, blocks64k, blocks2m);
  auto pinned = connect_with_retry(d, true);
  if (!pinned) {
    stop_daemon(d);
    fail("connect (pin_host_pools)", pinned.status());
  }
  auto pageable = connect_with_retry(d, false);
  if (!pageable) {
    stop_daemon(d);
    fail("connect", pageable.status());
  }

  std::printf(
      "kvpool copy_blocks bandwidth, GB/s (1e9 B/s), best of >= 3 copies of %llu MiB,\n"
      "device 0 (%s) <-> host pool; consecutive ids merge into one copy,\n"
      "scattered ids (a random permutation) are one copy per block\n\n",
      static_cast<unsigned long long>(mib),
      cuda::uuid_string(cuda::device_uuid(0).value()).c_str());
  std::printf("%-7s %-9s %-12s %10s %10s\n", "block", "host", "ids", "D->H", "H->D");
  std::mt19937 rng(42);
  for (const Size& size : kSizes) {
    // Blocks are held by the pinned client; both clients copy the same ids (copy_blocks
    // moves bytes by id, the pageable client's mapping is simply not registered).
    Pool dp = *pinned->pool(size.device_pool);
    Pool hp = *pinned->pool(size.host_pool);
    const uint32_t n = dp.layout().num_blocks;
    auto dev_blocks = dp.allocate_blocks(n);
    auto host_blocks = hp.allocate_blocks(n);
    if (!dev_blocks || !host_blocks) fail("allocate", dev_blocks.status());
    std::vector<uint32_t> dev_ids, host_ids;
    for (auto& b : *dev_blocks) dev_ids.push_back(b.block_id());
    for (auto& b : *host_blocks) host_ids.push_back(b.block_id());
    std::sort(dev_ids.begin(), dev_ids.end());
    std::sort(host_ids.begin(), host_ids.end());
    std::vector<uint32_t> scattered = host_ids;
    std::shuffle(scattered.begin(), scattered.end(), rng);
    const uint64_t block_bytes = uint64_t{2} * dp.layout().num_layers * dp.layout().page_size *
                                 dp.layout().inner_dim * dp.layout().dtype_bytes;
    for (bool pin : {true, false}) {
      Client& c = pin ? *pinned : *pageable;
      Pool cd = *c.pool(size.device_pool);
      Pool ch = *c.pool(size.host_pool);
      for (bool scatter : {false, true}) {
        const std::vector<uint32_t>& hids = scatter ? scattered : host_ids;
        double d2h = measure(cd, ch, dev_ids, hids, block_bytes, min_seconds);
        double h2d = measure(ch, cd, hids, dev_ids, block_bytes, min_seconds);
        std::printf("%-7s %-9s %-12s %10.1f %10.1f\n", size.label, pin ? "pinned" : "pageable",
                    scatter ? "scattered" : "consecutive", d2h, h2d);
        std::fflush(stdout);
      }
    }
  }
  // Blocks went back with each size; disconnect (closing the IPC mappings) before stopping.
  pinned = Status(ErrorCode::kDisconnected, "done");
  pageable = Status(ErrorCode::kDisconnected, "done");
  stop_daemon(d);
  return 0;
}
