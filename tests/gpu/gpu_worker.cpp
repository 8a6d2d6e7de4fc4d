// The worker process of the GPU tests: a real libkvpool client using device pools, started
// with fork + exec by the test (CUDA state does not survive a fork), driven by a scenario on
// its command line and a line protocol on stdin/stdout (tests/multiproc/harness.hpp).
//
//   kvpool_gpu_worker --instance I --runtime-dir D <scenario> [--key value ...] [args]
//
// It first prints "READY slot=<n> pid=<pid>" (or "ERR <Code> <message>" and exits 1), then:
//   write --pool P --blocks N --salt S --token-base B [--mutable M]
//       allocates N blocks of device pool P, fills them with one chained token sequence,
//       writes each region's pattern (pattern.hpp, keyed by the block's sequence hash) with
//       a kernel, registers them, allocates M more blocks and fills those too (kept
//       mutable), and prints "REGISTERED hashes=h1,.. ids=i1,.. mutable=j1,..".
//   read --pool P h1 h2 ...
//       matches the hashes, prints "MATCHED n=<k> ids=..", checks every region of every
//       matched block with a kernel: "VERIFIED regions=<r>" or "ERR Mismatch ...".
//   roundtrip --device-pool D --host-pool H --blocks N [--pin 1]
//       fills N device blocks with kernels; copy_blocks device -> host (ids as allocated,
//       so runs merge), checks the host bytes on the CPU; zeroes N other device blocks and
//       copies host -> device in reverse order (one block per run), checks them with a
//       kernel; copies device -> device and checks; checks copy_blocks' refusals. Prints
//       "ROUNDTRIP blocks=N regions=R" or "ERR ...". --pin 1 connects with pin_host_pools.
// Then it serves commands on stdin until "exit" or EOF:
//   ping -> "OK"; verify -> "OK regions=<r>" (re-checks its registered blocks);
//   release -> drops every block it holds -> "OK"; exit -> exits 0.
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kvpool/client.hpp"
#include "kvpool/core/layout.hpp"
#include "pattern.hpp"

using namespace kvpool;
using kvpool::gputest::pattern_word;
using kvpool::gputest::region_seed;

namespace {

void say(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

[[noreturn]] void die(const Status& st) {
  say("ERR " + std::string(error_code_name(st.code())) + " " + st.message());
  std::exit(1);
}

[[noreturn]] void die(const std::string& code, const std::string& message) {
  say("ERR " + code + " " + message);
  std::exit(1);
}

void check_cuda(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess)
    die("Cuda", what + ": " + cudaGetErrorName(e) + " " + cudaGetErrorString(e));
}

template <typename T>
T must(Result<T> r) {
  if (!r) die(r.status());
  return std::move(r).value();
}

std::string join(const std::vector<uint64_t>& v) {
  std::string s;
  // Two appends, not `"," + std::to_string(...)`: g++ 12 -O3 (Release) reports a false
  // -Wrestrict inside that operator+ (GCC bug 105329).
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}

struct Regions {
  uint32_t layers, outer;
  uint64_t words;  // 8-byte words per region
};

Regions regions_of(const Pool& pool) {
  const LayoutConfig& c = pool.layout();
  uint64_t bytes = uint64_t{c.page_size} * c.inner_dim * c.dtype_bytes;
  if (bytes % 8 != 0) die("BadLayout", "region bytes must be a multiple of 8");
  return {c.num_layers, c.outer_dim, bytes / 8};
}

// Fills every region of a block through `address` with the pattern of `key`.
template <typename Block>
void fill_block(const Pool& pool, const Block& b, uint64_t key, cudaStream_t stream) {
  Regions r = regions_of(pool);
  for (uint32_t l = 0; l < r.layers; ++l)
    for (uint32_t o = 0; o < r.outer; ++o) {
      void* p = const_cast<std::byte*>(must(b.address(l, o)));
      check_cuda(static_cast<cudaError_t>(
                     gputest::launch_fill(p, r.words, region_seed(key, l, o), stream)),
                 "fill kernel");
    }
}

// Counts mismatching words of every region of each block; returns regions checked.
struct Check {
  uint64_t regions = 0;
  unsigned long long mismatches = 0;
};

class DeviceChecker {
 public:
  DeviceChecker() {
    check_cuda(cudaMalloc(&counter_, sizeof(unsigned long long)), "cudaMalloc counter");
    check_cuda(cudaMemset(counter_, 0, sizeof(unsigned long long)), "cudaMemset counter");
    // The memset may still run; kernels on a non-blocking stream would not wait for it.
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  ~DeviceChecker() { (void)cudaFree(counter_); }
  template <typename Block>
  void add(const Pool& pool, const Block& b, uint64_t key, cudaStream_t stream) {
    Regions r = regions_of(pool);
    for (uint32_t l = 0; l < r.layers; ++l)
      for (uint32_t o = 0; o < r.outer; ++o) {
        const void* p = must(b.address(l, o));
        check_cuda(static_cast<cudaError_t>(
                       gputest::launch_check(p, r.words, region_seed(key, l, o), counter_, stream)),
                   "check kernel");
        ++regions_;
      }
  }
  Check finish(cudaStream_t stream) {
    check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    Check c;
    c.regions = regions_;
    check_cuda(cudaMemcpy(&c.mismatches, counter_, sizeof(c.mismatches), cudaMemcpyDeviceToHost),
               "read counter");
    check_cuda(cudaMemset(counter_, 0, sizeof(unsigned long long)), "cudaMemset counter");
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    regions_ = 0;
    return c;
  }

 private:
  unsigned long long* counter_ = nullptr;
  uint64_t regions_ = 0;
};

struct Args {
  std::string instance, runtime_dir, scenario;
  std::map<std::string, std::string> opts;
  std::vector<std::string> rest;
  std::string get(const std::string& k, const std::string& d = "") const {
    auto it = opts.find(k);
    return it == opts.end() ? d : it->second;
  }
  uint64_t num(const std::string& k, uint64_t d) const {
    auto it = opts.find(k);
    return it == opts.end() ? d : std::stoull(it->second);
  }
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s.rfind("--", 0) == 0 && i + 1 < argc) {
      std::string key = s.substr(2), val = argv[++i];
      if (key == "instance")
        a.instance = val;
      else if (key == "runtime-dir")
        a.runtime_dir = val;
      else
        a.opts[key] = val;
    } else if (a.scenario.empty()) {
      a.scenario = s;
    } else {
      a.rest.push_back(s);
    }
  }
  return a;
}

// Blocks of one chained sequence: block i holds tokens base+page*i ...
std::vector<MutableBlock> fill_sequence(Pool& pool, uint32_t n, Salt salt, uint32_t base) {
  auto blocks = must(pool.allocate_blocks(n));
  std::optional<SequenceHash> parent;
  const uint32_t page = pool.page_size();
  for (uint32_t i = 0; i < n; ++i) {
    MutableBlock& b = blocks[i];
    if (Status st = b.init_sequence(salt, parent); !st.is_ok()) die(st);
    std::vector<Token> t(page);
    for (uint32_t k = 0; k < page; ++k) t[k] = base + page * i + k;
    (void)must(b.add_tokens(t));
    if (Status st = b.commit(); !st.is_ok()) die(st);
    parent = must(b.sequence_hash());
  }
  return blocks;
}

struct State {
  std::optional<Pool> pool;
  std::vector<ImmutableBlock> registered;
  std::vector<MutableBlock> mutables;
};

void scenario_write(Client& client, const Args& a, State& st) {
  Pool& pool = st.pool.emplace(must(client.pool(a.get("pool"))));
  if (!pool.is_device()) die("NotDevice", "pool '" + pool.name() + "' is not a device pool");
  const int dev = must(pool.cuda_device());
  check_cuda(cudaSetDevice(dev), "cudaSetDevice");
  auto blocks = fill_sequence(pool, static_cast<uint32_t>(a.num("blocks", 4)), a.num("salt", 0),
                              static_cast<uint32_t>(a.num("token-base", 1)));
  for (auto& b : blocks) fill_block(pool, b, must(b.sequence_hash()), nullptr);
  // Registered blocks must hold their bytes before anyone can match them.
  check_cuda(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
  st.registered = must(pool.register_blocks(std::move(blocks)));
  std::vector<uint64_t> hashes, ids, mut;
  for (auto& b : st.registered) {
    hashes.push_back(b.sequence_hash());
    ids.push_back(b.block_id());
  }
  st.mutables = must(pool.allocate_blocks(static_cast<uint32_t>(a.num("mutable", 0))));
  for (auto& b : st.mutables) {
    fill_block(pool, b, 0xC0FFEE00ull + b.block_id(), nullptr);
    mut.push_back(b.block_id());
  }
  check_cuda(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
  say("REGISTERED hashes=" + join(hashes) + " ids=" + join(ids) + " mutable=" + join(mut));
}

Check verify_registered(const State& st) {
  DeviceChecker checker;
  for (auto& b : st.registered) checker.add(*st.pool, b, b.sequence_hash(), nullptr);
  return checker.finish(nullptr);
}

void scenario_read(Client& client, const Args& a, State& st) {
  Pool& pool = st.pool.emplace(must(client.pool(a.get("pool"))));
  const int dev = must(pool.cuda_device());
  check_cuda(cudaSetDevice(dev), "cudaSetDevice");
  std::vector<SequenceHash> hashes;
  for (auto& h : a.rest) hashes.push_back(std::stoull(h));
  st.registered = must(pool.match_sequence_hashes(hashes));
  std::vector<uint64_t> ids;
  for (auto& b : st.registered) ids.push_back(b.block_id());
  say("MATCHED n=" + std::to_string(st.registered.size()) + " ids=" + join(ids));
  Check c = verify_registered(st);
  if (c.mismatches != 0)
    die("Mismatch", std::to_string(c.mismatches) + " words differ in " + std::to_string(c.regions) +
                        " regions");
  say("VERIFIED regions=" + std::to_string(c.regions));
}

std::vector<uint32_t> ids_of(const std::vector<MutableBlock>& v) {
  std::vector<uint32_t> out;
  for (auto& b : v) out.push_back(b.block_id());
  return out;
}

void expect_refused(Status st, ErrorCode code, const std::string& what) {
  if (st.code() != code)
    die("WrongAnswer",
        what + ": expected " + std::string(error_code_name(code)) + ", got " + st.to_string());
}

void scenario_roundtrip(Client& client, const Args& a) {
  Pool dpool = must(client.pool(a.get("device-pool")));
  Pool hpool = must(client.pool(a.get("host-pool")));
  if (!dpool.is_device() || hpool.is_device())
    die("WrongPools", "need a device pool and a host pool");
  const int dev = must(dpool.cuda_device());
  check_cuda(cudaSetDevice(dev), "cudaSetDevice");
  cudaStream_t stream;
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  const uint32_t n = static_cast<uint32_t>(a.num("blocks", 8));
  auto src = must(dpool.allocate_blocks(n));
  auto host = must(hpool.allocate_blocks(n));
  auto back = must(dpool.allocate_blocks(n));
  auto other = must(dpool.allocate_blocks(n));
  const Regions r = regions_of(dpool);
  auto key = [](uint32_t k) { return 0x5EED0000ull + k; };
  for (uint32_t k = 0; k < n; ++k) fill_block(dpool, src[k], key(k), stream);
  // Destination device blocks start zeroed: stale bytes from an earlier test cannot pass.
  for (auto* set : {&back, &other})
    for (auto& b : *set)
      for (uint32_t l = 0; l < r.layers; ++l)
        for (uint32_t o = 0; o < r.outer; ++o)
          check_cuda(cudaMemsetAsync(must(b.address(l, o)), 0, r.words * 8, stream), "memset");

  // device -> host, ids as allocated (consecutive runs merge).
  auto src_ids = ids_of(src), host_ids = ids_of(host);
  if (Status st = copy_blocks(dpool, src_ids, hpool, host_ids, stream); !st.is_ok()) die(st);
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  uint64_t host_bad = 0, regions = 0;
  for (uint32_t k = 0; k < n; ++k)
    for (uint32_t l = 0; l < r.layers; ++l)
      for (uint32_t o = 0; o < r.outer; ++o) {
        const auto* w = reinterpret_cast<const uint64_t*>(must(host[k].address(l, o)));
        for (uint64_t i = 0; i < r.words; ++i)
          host_bad += w[i] != pattern_word(region_seed(key(k), l, o), i) ? 1 : 0;
        ++regions;
      }
  if (host_bad) die("Mismatch", "device -> host: " + std::to_string(host_bad) + " words differ");

  // host -> device in reverse order: every run is one block.
  std::vector<uint32_t> back_ids = ids_of(back), rev(host_ids.rbegin(), host_ids.rend());
  if (Status st = copy_blocks(hpool, rev, dpool, back_ids, stream); !st.is_ok()) die(st);
  // device -> device.
  auto other_ids = ids_of(other);
  if (Status st = copy_blocks(dpool, src_ids, dpool, other_ids, stream); !st.is_ok()) die(st);
  DeviceChecker checker;
  for (uint32_t k = 0; k < n; ++k) {
    checker.add(dpool, back[k], key(n - 1 - k), stream);
    checker.add(dpool, other[k], key(k), stream);
  }
  Check c = checker.finish(stream);
  if (c.mismatches)
    die("Mismatch", "host -> device / device -> device: " + std::to_string(c.mismatches) +
                        " words differ in " + std::to_string(c.regions) + " regions");

  // Refusals: different counts, an id out of range, a block copied onto itself.
  std::vector<uint32_t> one{src_ids[0]}, none{};
  expect_refused(copy_blocks(dpool, one, hpool, none, stream), ErrorCode::kInvalidArgument,
                 "count mismatch");
  std::vector<uint32_t> far{dpool.layout().num_blocks};
  expect_refused(copy_blocks(dpool, far, hpool, one, stream), ErrorCode::kInvalidArgument,
                 "id out of range");
  expect_refused(copy_blocks(dpool, one, dpool, one, stream), ErrorCode::kInvalidArgument,
                 "self copy");
  check_cuda(cudaStreamDestroy(stream), "cudaStreamDestroy");
  say("ROUNDTRIP blocks=" + std::to_string(n) + " regions=" + std::to_string(regions + c.regions));
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  ConnectOptions o;
  o.runtime_dir = a.runtime_dir;
  o.poll_us = 20;
  o.pin_host_pools = a.num("pin", 0) != 0;
  auto client = Client::connect(a.instance, o);
  if (!client) die(client.status());
  say("READY slot=" + std::to_string(client->slot()) + " pid=" + std::to_string(getpid()));

  State st;
  if (a.scenario == "write") {
    scenario_write(*client, a, st);
  } else if (a.scenario == "read") {
    scenario_read(*client, a, st);
  } else if (a.scenario == "roundtrip") {
    scenario_roundtrip(*client, a);
  } else {
    die("BadScenario", "unknown scenario '" + a.scenario + "'");
  }

  for (std::string line; std::getline(std::cin, line);) {
    if (line == "exit") break;
    if (line == "ping") {
      Status p = client->ping();
      say(p.is_ok() ? "OK" : "ERR " + p.to_string());
    } else if (line == "verify") {
      Check c = verify_registered(st);
      say(c.mismatches == 0 ? "OK regions=" + std::to_string(c.regions)
                            : "ERR Mismatch " + std::to_string(c.mismatches) + " words");
    } else if (line == "release") {
      st.registered.clear();
      st.mutables.clear();
      client->flush();
      say("OK");
    } else {
      say("ERR BadCommand '" + line + "'");
    }
  }
  st.registered.clear();
  st.mutables.clear();
  return 0;
}
