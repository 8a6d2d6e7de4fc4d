// Where a match-64 at an engine's cadence spends its time, split in two: the call (request
// out, answer read, result built) and the release of what it returned. libkvpool (RAII
// handles; dropping the result queues 64 releases and sends them as one record) against
// kvpoold's rings raw (tests/support RawConnection: the same request, then the release
// record posted by hand), alternating call by call in one process against one kvpoold, with
// the caller sleeping the gap (clock_nanosleep) before each call. `--op step` times an
// engine step instead, phase by phase: match-64, allocate-16, commit them (hashing their
// tokens; the raw side hashes the same pages), register-16, and the drop of everything.
// Prints p50s, and under each row a "parked" line: in what share of samples kvpoold was
// parked when each phase ended (so the caller's next request had to wake it), and the
// caller thread's CPU time p50 (its polling for answers included). A benchmark, no
// thresholds (docs/performance.md, "libkvpool against its raw rings at a cadence").
// `--order blocks` runs a gap's libkvpool samples, then its raw ones, instead of
// alternating: alternating, a release libkvpool sends without waking kvpoold is taken up by
// the raw call's wake-up; in blocks, by libkvpool's own next call, as an engine that is
// kvpoold's only caller meets it.
// `--max-clients N` sets kvpoold's slot count (default 64; the engine's pass used to look
// at every slot).
//   kvpool_cadence_split_bench [--op match|step] [--gaps 0,1,5,20] [--samples N] [--reps R]
//                              [--order alternate|blocks] [--max-clients N]
// Starts its own kvpoold (KVPOOLD overrides the binary).
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kvpool/client.hpp"
#include "kvpool/core/clock.hpp"
#include "support/daemon_process.hpp"
#include "support/raw_connection.hpp"

using namespace kvpool;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

constexpr uint32_t kBatch = 64;
constexpr uint32_t kRegistered = 1024;
constexpr uint32_t kStep = 16;  // an engine step's new blocks

double us(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

double p50(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Gap 0 makes no system call, as kvpool_paced_bench: clock_nanosleep(0) still enters the
// kernel, and on this VM it often schedules (kvpoold then parks before the next call).
void nap(double ms) {
  if (ms <= 0) return;
  const auto ns = static_cast<long>(ms * 1e6);
  timespec t{ns / 1'000'000'000, ns % 1'000'000'000};
  while (clock_nanosleep(CLOCK_MONOTONIC, 0, &t, &t) != 0) {
  }
}

// Registers kRegistered pages at priority 1 and returns their hashes (all matchable).
std::vector<uint64_t> fill(Pool& pool) {
  std::vector<uint64_t> hashes;
  auto blocks = pool.allocate_blocks(kRegistered);
  if (!blocks) {
    std::fprintf(stderr, "fill: %s\n", blocks.status().to_string().c_str());
    std::exit(1);
  }
  for (uint32_t i = 0; i < kRegistered; ++i) {
    auto& b = (*blocks)[i];
    std::vector<Token> t(pool.page_size());
    for (size_t k = 0; k < t.size(); ++k) t[k] = static_cast<Token>(i * 131 + k);
    (void)b.init_sequence(0);
    (void)b.add_tokens(t);
    (void)b.commit();
    b.set_priority(1);
    hashes.push_back(*b.sequence_hash());
  }
  auto imm = pool.register_blocks(std::move(*blocks));
  if (!imm) {
    std::fprintf(stderr, "fill: %s\n", imm.status().to_string().c_str());
    std::exit(1);
  }
  return hashes;
}

// One sample as it goes: a time stamp at each phase's end, whether kvpoold was parked then
// (so the next request had to wake it), and the caller thread's CPU time for the whole.
struct Marks {
  const shm::ControlHeader* control = nullptr;
  std::vector<Clock::time_point> t;
  std::vector<uint8_t> parked;
  uint64_t cpu_start = 0;
  void start() {
    t.assign(1, Clock::now());
    parked.clear();
    cpu_start = now_ns(CLOCK_THREAD_CPUTIME_ID);
  }
  void mark() {
    t.push_back(Clock::now());
    // relaxed: a diagnostic read of kvpoold's park word (bit 0: parked), no ordering needed.
    parked.push_back(control->daemon_sleeping.load(std::memory_order_relaxed) & 1u);
  }
};

// p50 of each phase and of the whole; how often kvpoold was parked at each phase's end;
// the caller's CPU time (polling for answers included).
struct Phases {
  std::vector<std::vector<double>> of;
  std::vector<double> all, cpu;
  std::vector<uint32_t> parked;
  void add(const Marks& m) {
    const auto& t = m.t;
    of.resize(t.size() - 1);
    parked.resize(t.size() - 1);
    for (size_t i = 0; i + 1 < t.size(); ++i) {
      of[i].push_back(us(t[i], t[i + 1]));
      parked[i] += m.parked[i];
    }
    all.push_back(us(t.front(), t.back()));
    cpu.push_back(static_cast<double>(now_ns(CLOCK_THREAD_CPUTIME_ID) - m.cpu_start) / 1000.0);
  }
};

[[noreturn]] void fail(const char* what, const Status& s) {
  std::fprintf(stderr, "%s: %s\n", what, s.to_string().c_str());
  std::exit(1);
}

// One page of tokens for step `seed`, block `i`: every step registers new blocks.
std::vector<Token> step_tokens(uint64_t seed, uint32_t i, uint32_t page) {
  std::vector<Token> t(page);
  for (uint32_t k = 0; k < page; ++k) t[k] = static_cast<Token>(seed * 7919 + i * 131 + k);
  return t;
}

// match-64, then (step) allocate-16, fill and commit them, register them; then drop it all.
void lib_sample(Pool& pool, std::span<const uint64_t> q, bool step, uint64_t seed, Marks& t) {
  t.start();
  {
    auto m = pool.match_sequence_hashes(q);
    t.mark();
    if (!m || m->size() != kBatch) fail("libkvpool match", m ? Status::ok() : m.status());
    std::vector<ImmutableBlock> imm;
    if (step) {
      auto a = pool.allocate_blocks(kStep);
      t.mark();
      if (!a) fail("libkvpool allocate", a.status());
      for (uint32_t i = 0; i < kStep; ++i) {
        auto& b = (*a)[i];
        (void)b.init_sequence(seed);
        (void)b.add_tokens(step_tokens(seed, i, pool.page_size()));
        (void)b.commit();
      }
      t.mark();
      auto r = pool.register_blocks(std::move(*a));
      t.mark();
      if (!r) fail("libkvpool register", r.status());
      imm = std::move(*r);
    }
  }  // everything is dropped here: its releases
  t.mark();
}

// The same records through the raw rings: the hashes computed as commit() does, the
// releases posted by hand as one record.
void raw_sample(testsupport::RawConnection& raw, std::span<const uint64_t> q, bool step,
                uint64_t seed, uint32_t page, Marks& t) {
  t.start();
  auto m = raw.call(proto::Opcode::kMatch, 0, kBatch, q.data(), q.size_bytes());
  t.mark();
  if (!m || m->refs.size() != kBatch) fail("raw match", m ? Status::ok() : m.status());
  std::vector<pool::BlockRef> refs = std::move(m->refs);
  if (step) {
    auto a = raw.call(proto::Opcode::kAllocate, 0, kStep, nullptr, 0);
    t.mark();
    if (!a || a->refs.size() != kStep) fail("raw allocate", a ? Status::ok() : a.status());
    std::vector<pool::RegisterItem> items(kStep);
    for (uint32_t i = 0; i < kStep; ++i) {
      const BlockHash h = compute_block_hash(step_tokens(seed, i, page), seed);
      items[i] = {a->refs[i], h, h, 0, 0, 0};
    }
    t.mark();
    auto r =
        raw.call(proto::Opcode::kRegister, 0, kStep, items.data(), items.size() * sizeof(items[0]));
    t.mark();
    if (!r || r->code != ErrorCode::kOk) fail("raw register", r ? r->status() : r.status());
    refs.insert(refs.end(), r->refs.begin(), r->refs.end());
  }
  auto posted = raw.send(proto::Opcode::kReleaseImmutable, 0, static_cast<uint32_t>(refs.size()),
                         refs.data(), refs.size() * sizeof(refs[0]));
  if (!posted) fail("raw release", posted.status());
  t.mark();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<double> gaps = {0, 1, 5, 20};
  int samples = 300, reps = 1;
  bool step = false;
  bool blocks = false;  // --order blocks
  int max_clients = 0;  // 0: kvpoold's default
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--samples")) samples = std::max(1, std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--reps")) reps = std::max(1, std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--op")) step = !std::strcmp(argv[i + 1], "step");
    if (!std::strcmp(argv[i], "--max-clients")) max_clients = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--order")) {
      blocks = !std::strcmp(argv[i + 1], "blocks");
      if (!blocks && std::strcmp(argv[i + 1], "alternate")) {
        std::fprintf(stderr, "--order: '%s' is not alternate or blocks\n", argv[i + 1]);
        return 2;
      }
    }
    if (!std::strcmp(argv[i], "--gaps")) {
      gaps.clear();
      std::stringstream ss(argv[i + 1]);
      for (std::string g; std::getline(ss, g, ',');) gaps.push_back(std::atof(g.c_str()));
    }
  }
  const nlohmann::json layout = {{"num_layers", 1}, {"outer_dim", 1},   {"page_size", 16},
                                 {"inner_dim", 8},  {"dtype_bytes", 2}, {"alignment", 64}};
  nlohmann::json config = {
      {"log_level", "warn"},
      {"pools", nlohmann::json::array(
                    {{{"name", "bench"}, {"num_blocks", 4 * kRegistered}, {"layout", layout}}})}};
  if (max_clients > 0) config["max_clients"] = max_clients;
  const char* kvpoold = std::getenv("KVPOOLD");
  testsupport::DaemonProcess d(config, kvpoold ? kvpoold : KVPOOLD_PATH);
  try {
    d.start(20s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  ConnectOptions o;
  o.runtime_dir = d.runtime_dir();
  auto client = Client::connect(d.instance(), o);
  if (!client) {
    std::fprintf(stderr, "connect: %s\n", client.status().to_string().c_str());
    return 1;
  }
  auto pool = client->pool("bench");
  const std::vector<uint64_t> hashes = fill(*pool);
  client->flush();
  testsupport::RawOptions ro;
  ro.runtime_dir = d.runtime_dir();
  auto raw = testsupport::RawConnection::open(d.instance(), ro);
  if (!raw) {
    std::fprintf(stderr, "raw connect: %s\n", raw.status().to_string().c_str());
    return 1;
  }
  const char* what = step ? "an engine step (match-64, allocate-16, commit, register-16, drop)"
                          : "match-64 + release";
  const char* phases = step ? "match alloc commit reg drop" : "call release";
  std::printf("%s at a cadence, p50 us of %d samples a gap (x%d, %s): %s | all\n", what, samples,
              reps, blocks ? "in blocks" : "alternating", phases);
  std::printf("%8s | %-40s | %-40s | %8s\n", "gap ms", "libkvpool", "raw rings", "lib/raw");
  std::mt19937_64 rng(1);
  Marks t;
  t.control = &(*raw)->control();
  uint64_t seed = 1;
  for (int r = 0; r < reps; ++r)
    for (double gap : gaps) {
      Phases lib, ring;
      // Each side's queries: the same in both orders.
      std::vector<size_t> starts(samples);
      for (auto& st : starts) st = rng() % (hashes.size() - kBatch);
      auto lib_one = [&](int s) {
        nap(gap);
        lib_sample(*pool, {hashes.data() + starts[s], kBatch}, step, seed++, t);
        lib.add(t);
      };
      auto raw_one = [&](int s) {
        nap(gap);
        raw_sample(**raw, {hashes.data() + starts[s], kBatch}, step, seed++, pool->page_size(), t);
        ring.add(t);
      };
      if (blocks) {
        for (int s = 0; s < samples; ++s) lib_one(s);
        for (int s = 0; s < samples; ++s) raw_one(s);
      } else {
        for (int s = 0; s < samples; ++s) {
          lib_one(s);
          raw_one(s);
        }
      }
      auto row = [](const Phases& p) {
        std::string out;
        char cell[32];
        for (const auto& v : p.of) {
          std::snprintf(cell, sizeof(cell), "%6.1f", p50(v));
          out += cell;
        }
        std::snprintf(cell, sizeof(cell), " %8.1f", p50(p.all));
        return out + cell;
      };
      std::printf("%8.1f | %-40s | %-40s | %7.2fx\n", gap, row(lib).c_str(), row(ring).c_str(),
                  p50(ring.all) > 0 ? p50(lib.all) / p50(ring.all) : 0);
      // Below each row: % of samples in which kvpoold was parked when that phase ended, and
      // the caller's CPU time p50 (us; its polling included).
      auto diag = [samples](const Phases& p) {
        std::string out;
        char cell[32];
        for (uint32_t n : p.parked) {
          std::snprintf(cell, sizeof(cell), "%5.0f%%", 100.0 * n / samples);
          out += cell;
        }
        std::snprintf(cell, sizeof(cell), " cpu %5.1f", p50(p.cpu));
        return out + cell;
      };
      std::printf("  parked | %-40s | %-40s |\n", diag(lib).c_str(), diag(ring).c_str());
    }
  raw->reset();
  client->flush();
  d.kill(SIGTERM);
  return d.wait_exit(10s) ? 0 : 1;
}
