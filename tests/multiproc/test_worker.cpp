// The worker process of the multi-process tests: a real libkvpool client, driven by a
// scenario on its command line and a line protocol on stdin/stdout.
//
//   kvpool_test_worker --instance I --runtime-dir D <scenario> [--key value ...] [args]
//
// It first prints "READY slot=<n> pid=<pid>" (or "ERR <Code> <message>" and exits 1), then:
//   writer --pool P --blocks N --salt S --token-base B
//       allocates N blocks, fills them with one chained token sequence (block i holds tokens
//       B+4i..), writes a byte pattern derived from each block's sequence hash into every
//       (layer, outer) region, registers them and prints
//       "REGISTERED hashes=h1,h2,.. ids=i1,i2,..".
//   reader --pool P h1 h2 ...
//       matches the hashes, prints "MATCHED n=<k> ids=.. hashes=..", then checks the pattern
//       bytes of every region of every matched block: "VERIFIED regions=<r>" or "ERR ...".
//   holder --pool P --mutable M --register K --salt S --token-base B [--match h1,h2]
//       allocates M blocks and keeps them mutable, registers K filled blocks, matches the
//       given hashes, and prints
//       "HOLDING mutable=ids registered=ids hashes=hs matched=ids".
//   busy --pool P [--threads T] [--pattern 1]
//       allocate / fill / register / match / release as fast as it can, forever, keeping a
//       few blocks across iterations; prints "WORKING" once it has done some of each. Exits
//       3 when the daemon is gone, 4 on an error that should never happen. --pattern 1:
//       writes each block's pattern (as writer does) before registering it.
// Global options: --as-gid G --as-uid U drop to that group / user before attaching.
// Then (all but busy) it serves commands on stdin until "exit" or EOF:
//   ping     -> "OK us=<t>" | "ERR <Code> us=<t> <message>"  (t: the call's duration)
//   verify   -> "OK regions=<r>" | "ERR ..."   (the pattern of every block it holds)
//   release  -> drops every block it holds, flushes the releases -> "OK"
//   scribble-immutable -> "WRITING", then a write through its first immutable block's
//               address (which must fault: "WROTE" means it did not)
//   exit     -> exits 0 after a clean detach
#include <grp.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "kvpool/client.hpp"
#include "kvpool/core/layout.hpp"

using namespace kvpool;

namespace {

std::mutex g_out_mutex;

void say(const std::string& line) {
  std::lock_guard lk(g_out_mutex);
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

[[noreturn]] void die(const Status& st, int code = 1) {
  say("ERR " + std::string(error_code_name(st.code())) + " " + st.message());
  std::exit(code);
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

std::vector<uint64_t> parse_list(const std::string& csv) {
  std::vector<uint64_t> out;
  size_t pos = 0;
  while (pos < csv.size()) {
    size_t end = csv.find(',', pos);
    if (end == std::string::npos) end = csv.size();
    if (end > pos) out.push_back(std::stoull(csv.substr(pos, end - pos)));
    pos = end + 1;
  }
  return out;
}

uint64_t splitmix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The pattern of region `region` of the block whose sequence hash is `h`: word k is
// splitmix(h ^ region << 56 ^ k). Any other block, region or offset gives other bytes.
uint64_t pattern_word(uint64_t h, uint32_t region, uint64_t k) {
  return splitmix(h ^ (uint64_t{region} << 56) ^ k);
}

struct Region {
  uint32_t layer, outer, index;
};

std::vector<Region> regions(const LayoutConfig& l) {
  std::vector<Region> out;
  for (uint32_t layer = 0; layer < l.num_layers; ++layer)
    for (uint32_t o = 0; o < l.outer_dim; ++o) out.push_back({layer, o, layer * l.outer_dim + o});
  return out;
}

uint64_t region_bytes(const LayoutConfig& l) {
  return uint64_t{l.page_size} * l.inner_dim * l.dtype_bytes;
}

Status write_pattern(const Pool& pool, MutableBlock& b, uint64_t h) {
  const uint64_t bytes = region_bytes(pool.layout());
  for (auto r : regions(pool.layout())) {
    auto a = b.address(r.layer, r.outer);
    if (!a) return a.status();
    for (uint64_t k = 0; k * 8 + 8 <= bytes; ++k) {
      uint64_t w = pattern_word(h, r.index, k);
      std::memcpy(*a + k * 8, &w, 8);
    }
  }
  return Status::ok();
}

// Checks every region of `b`; returns the regions checked.
Result<uint64_t> check_pattern(const Pool& pool, const ImmutableBlock& b) {
  const uint64_t bytes = region_bytes(pool.layout());
  uint64_t checked = 0;
  for (auto r : regions(pool.layout())) {
    auto a = b.address(r.layer, r.outer);
    if (!a) return a.status();
    for (uint64_t k = 0; k * 8 + 8 <= bytes; ++k) {
      uint64_t w;
      std::memcpy(&w, *a + k * 8, 8);
      if (w != pattern_word(b.sequence_hash(), r.index, k))
        return Status(ErrorCode::kInternal,
                      "block " + std::to_string(b.block_id()) + " (hash " +
                          std::to_string(b.sequence_hash()) + ") layer " + std::to_string(r.layer) +
                          " outer " + std::to_string(r.outer) + " word " + std::to_string(k) +
                          " differs from the writer's pattern");
    }
    ++checked;
  }
  return checked;
}

// Fills `blocks` with one chained sequence: block i gets tokens base + i*page .. + page-1,
// salt `salt`, parent = the previous block's sequence hash. Writes each block's pattern.
Result<std::vector<uint64_t>> fill_chain(const Pool& pool, std::vector<MutableBlock>& blocks,
                                         uint64_t salt, uint64_t base, bool pattern = true) {
  std::vector<uint64_t> hashes;
  std::optional<SequenceHash> parent;
  const uint32_t page = pool.page_size();
  for (size_t i = 0; i < blocks.size(); ++i) {
    MutableBlock& b = blocks[i];
    KVPOOL_RETURN_IF_ERROR(b.init_sequence(salt, parent));
    std::vector<Token> tokens(page);
    for (uint32_t j = 0; j < page; ++j) tokens[j] = static_cast<Token>(base + i * page + j);
    auto n = b.add_tokens(tokens);
    if (!n) return n.status();
    KVPOOL_RETURN_IF_ERROR(b.commit());
    auto h = b.sequence_hash();
    if (!h) return h.status();
    if (pattern) KVPOOL_RETURN_IF_ERROR(write_pattern(pool, b, *h));
    hashes.push_back(*h);
    parent = *h;
  }
  return hashes;
}

std::vector<uint64_t> ids_of(const std::vector<ImmutableBlock>& v) {
  std::vector<uint64_t> out;
  for (auto& b : v) out.push_back(b.block_id());
  return out;
}

struct Args {
  std::string instance, runtime_dir, scenario;
  std::map<std::string, std::string> opts;
  std::vector<std::string> positional;
  std::string get(const std::string& k, const std::string& def = "") const {
    auto it = opts.find(k);
    return it == opts.end() ? def : it->second;
  }
  uint64_t num(const std::string& k, uint64_t def) const {
    auto it = opts.find(k);
    return it == opts.end() ? def : std::stoull(it->second);
  }
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s.starts_with("--") && i + 1 < argc) {
      std::string v = argv[++i];
      if (s == "--instance")
        a.instance = v;
      else if (s == "--runtime-dir")
        a.runtime_dir = v;
      else
        a.opts[s.substr(2)] = v;
    } else if (a.scenario.empty()) {
      a.scenario = s;
    } else {
      a.positional.push_back(s);
    }
  }
  return a;
}

// What a worker holds between commands.
struct Holdings {
  std::vector<MutableBlock> mut;
  std::vector<ImmutableBlock> imm;
};

// "scan-mapped HEX HEX ...": looks for each byte string (hex, as it lies in memory) in every
// shared mapping of this process that came from kvpoold (its memfds: control, registry,
// client and pool segments), i.e. in everything the daemon let this process read. Answers
// "OK found=<indices of the strings found, comma-separated> mappings=<memfd mappings read>".
std::string scan_mapped(const std::string& args) {
  std::vector<std::string> needles;
  std::istringstream in(args);
  for (std::string hex; in >> hex;) {
    std::string bytes;
    for (size_t i = 0; i + 1 < hex.size(); i += 2)
      bytes.push_back(static_cast<char>(std::stoul(hex.substr(i, 2), nullptr, 16)));
    needles.push_back(bytes);
  }
  std::ifstream maps("/proc/self/maps");
  std::set<size_t> found;
  uint32_t mappings = 0;
  for (std::string line; std::getline(maps, line);) {
    if (line.find("memfd:") == std::string::npos) continue;
    unsigned long lo = 0, hi = 0;
    char perms[5] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %4s", &lo, &hi, perms) != 3 || perms[0] != 'r') continue;
    ++mappings;
    std::string_view mem(reinterpret_cast<const char*>(lo), hi - lo);
    for (size_t k = 0; k < needles.size(); ++k)
      if (!needles[k].empty() && mem.find(needles[k]) != std::string_view::npos) found.insert(k);
  }
  std::string list;
  for (size_t k : found) {  // piecewise: g++ 12 -O3's false -Wrestrict on "," + string
    if (!list.empty()) list += ',';
    list += std::to_string(k);
  }
  return "OK found=" + list + " mappings=" + std::to_string(mappings);
}

void serve(Client& client, const Pool& pool, Holdings& held) {
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line == "exit") break;
    if (line == "ping") {
      auto t0 = std::chrono::steady_clock::now();
      Status st = client.ping();
      auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                    std::chrono::steady_clock::now() - t0)
                    .count();
      if (st.is_ok())
        say("OK us=" + std::to_string(us));
      else
        say("ERR " + std::string(error_code_name(st.code())) + " us=" + std::to_string(us) + " " +
            st.message());
    } else if (line == "verify") {
      uint64_t regions_checked = 0;
      Status bad;
      for (auto& b : held.imm) {
        auto r = check_pattern(pool, b);
        if (!r) {
          bad = r.status();
          break;
        }
        regions_checked += *r;
      }
      if (bad.is_ok())
        say("OK regions=" + std::to_string(regions_checked));
      else
        say("ERR " + std::string(error_code_name(bad.code())) + " " + bad.message());
    } else if (line == "scribble-immutable") {
      // A buggy worker writing through a registered block's (const) address: the mapping
      // behind it is read-only, so this process faults here and nobody's KV changes.
      if (held.imm.empty()) {
        say("ERR InvalidState no immutable block held");
        continue;
      }
      auto a = held.imm.front().address(0, 0);
      if (!a) {
        say("ERR " + std::string(error_code_name(a.status().code())) + " " + a.status().message());
        continue;
      }
      say("WRITING");
      // The fault is the expected outcome: die of it plainly (a sanitizer's handler would
      // report it as a bug and exit instead).
      ::signal(SIGSEGV, SIG_DFL);
      volatile auto* p = const_cast<std::byte*>(*a);
      *p = std::byte{0x5A};
      say("WROTE");
    } else if (line.rfind("scan-mapped ", 0) == 0) {
      say(scan_mapped(line.substr(12)));
    } else if (line == "release") {
      held.mut.clear();
      held.imm.clear();
      client.flush();
      say("OK");
    } else {
      say("ERR InvalidArgument unknown command '" + line + "'");
    }
  }
  // Clean detach: handles go first (their releases are flushed), then the client.
  held.mut.clear();
  held.imm.clear();
}

// Allocates, registers and matches in a loop on `threads` threads until killed. Without
// `reattach`, exits 3 when the daemon dies. With it (ConnectOptions::reattach), a call the
// death interrupted is dropped and the loop goes on with the next daemon; each time, the
// immutable blocks it kept across the restart are checked byte for byte (exit 1 if one
// differs) and "REATTACHED" is said once per thread.
int run_busy(Client& client, const Pool& shared_pool, uint32_t threads, bool pattern,
             bool reattach) {
  std::atomic<uint64_t> rounds{0};
  std::atomic<bool> announced{false};
  auto fatal = [](const Status& st) {
    if (st.code() == ErrorCode::kDaemonGone || st.code() == ErrorCode::kDisconnected) std::_Exit(3);
    std::fprintf(stderr, "busy worker: unexpected error %s\n", st.to_string().c_str());
    std::_Exit(4);
  };
  auto body = [&](uint32_t t) {
    Pool pool = shared_pool;
    std::mt19937_64 rng(static_cast<uint64_t>(::getpid()) * 977 + t);
    std::deque<ImmutableBlock> keep_imm;
    std::deque<MutableBlock> keep_mut;
    uint64_t done = 0;
    bool interrupted = false;  // a call failed with kDaemonGone; the next reattaches
    // Survivable with reattach: the death of the daemon, and a handle the restarted
    // daemon did not give back (it proved nothing about it).
    auto survive = [&](const Status& st) {
      if (!reattach) return false;
      if (st.code() == ErrorCode::kDaemonGone) {
        interrupted = true;
        return true;
      }
      return st.code() == ErrorCode::kInvalidHandle;
    };
    while (true) {
      if (interrupted) {
        // Reattaches (waits for the next daemon). The ping itself is a call in flight: a
        // daemon killed again before it answers fails it with kDaemonGone too, and the
        // next ping reattaches to the one after. Only a run of them means none came back.
        Status st = client.ping();
        for (int tries = 1; !st.is_ok() && st.code() == ErrorCode::kDaemonGone && tries < 8;
             ++tries)
          st = client.ping();
        if (!st.is_ok()) fatal(st);
        interrupted = false;
        if (pattern) {
          for (auto& b : keep_imm) {
            auto r = check_pattern(pool, b);
            if (!r && r.status().code() != ErrorCode::kInvalidHandle) {
              std::fprintf(stderr, "busy worker: after a reattach: %s\n",
                           r.status().to_string().c_str());
              std::_Exit(1);
            }
          }
        }
        say("REATTACHED");
      }
      const uint32_t n = 1 + static_cast<uint32_t>(rng() % 4);
      auto blocks = (rng() & 1) ? pool.allocate_blocks(n) : pool.allocate_blocks_async(n).get();
      if (!blocks) {
        if (blocks.status().code() == ErrorCode::kNotEnoughBlocks) {
          keep_imm.clear();
          keep_mut.clear();
          continue;
        }
        if (survive(blocks.status())) continue;
        fatal(blocks.status());
      }
      // One block stays mutable for a while; the rest become a registered chain.
      if (rng() % 3 == 0) {
        keep_mut.push_back(std::move(blocks->back()));
        blocks->pop_back();
        if (keep_mut.size() > 2) keep_mut.pop_front();
      }
      // A small token space (base among 8 values) so registrations dedup and matches hit.
      auto hashes = fill_chain(pool, *blocks, 4242, (rng() % 8) * 1000, pattern);
      if (!hashes) {
        if (survive(hashes.status())) continue;
        fatal(hashes.status());
      }
      auto reg = (rng() & 1) ? pool.register_blocks(std::move(*blocks))
                             : pool.register_blocks_async(std::move(*blocks)).get();
      if (!reg) {
        if (survive(reg.status())) continue;
        fatal(reg.status());
      }
      for (auto& b : *reg) keep_imm.push_back(b);
      std::vector<SequenceHash> q = *hashes;
      q.push_back(rng());  // a miss ends the prefix
      auto m =
          (rng() & 1) ? pool.match_sequence_hashes(q) : pool.match_sequence_hashes_async(q).get();
      if (!m) {
        if (survive(m.status())) continue;
        fatal(m.status());
      }
      for (auto& b : *m) keep_imm.push_back(b);
      while (keep_imm.size() > 6) keep_imm.pop_front();
      if (++done % 16 == 0) {
        Status st = client.ping();
        if (!st.is_ok() && !survive(st)) fatal(st);
      }
      if (rounds.fetch_add(1) + 1 >= 20 && !announced.exchange(true)) say("WORKING");
    }
  };
  std::vector<std::thread> ts;
  for (uint32_t t = 0; t < threads; ++t) ts.emplace_back(body, t);
  for (auto& t : ts) t.join();  // never: the threads loop until killed
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse_args(argc, argv);
  // --as-gid G / --as-uid U: attach as another user (the test runs as root), to show that
  // the daemon's allowed_uids / allowed_gids refuse it.
  if (auto g = a.get("as-gid"); !g.empty()) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(static_cast<gid_t>(std::stoul(g))) != 0)
      die(Status(ErrorCode::kPermissionDenied,
                 "cannot become gid " + g + ": " + std::strerror(errno)));
  }
  if (auto u = a.get("as-uid"); !u.empty()) {
    if (::setuid(static_cast<uid_t>(std::stoul(u))) != 0)
      die(Status(ErrorCode::kPermissionDenied,
                 "cannot become uid " + u + ": " + std::strerror(errno)));
  }
  ConnectOptions opts;
  opts.runtime_dir = a.runtime_dir;
  opts.connect_timeout = std::chrono::milliseconds(10000);
  opts.poll_us = 20;
  // Off unless asked (--reattach 1): most scenarios assert what a worker sees while no
  // daemon runs.
  opts.reattach = a.get("reattach", "0") == "1";
  opts.reattach_timeout = std::chrono::milliseconds(a.num("reattach-ms", 15000));
  auto client = Client::connect(a.instance, opts);
  if (!client) die(client.status());
  auto pool = client->pool(a.get("pool", "g"));
  if (!pool) die(pool.status());
  say("READY slot=" + std::to_string(client->slot()) + " pid=" + std::to_string(::getpid()));

  Holdings held;
  if (a.scenario == "writer") {
    auto blocks = pool->allocate_blocks(static_cast<uint32_t>(a.num("blocks", 3)));
    if (!blocks) die(blocks.status());
    auto hashes = fill_chain(*pool, *blocks, a.num("salt", 1337), a.num("token-base", 1));
    if (!hashes) die(hashes.status());
    auto reg = pool->register_blocks(std::move(*blocks));
    if (!reg) die(reg.status());
    held.imm = std::move(*reg);
    say("REGISTERED hashes=" + join(*hashes) + " ids=" + join(ids_of(held.imm)));
  } else if (a.scenario == "reader") {
    std::vector<SequenceHash> hashes;
    for (auto& p : a.positional) hashes.push_back(std::stoull(p));
    auto m = pool->match_sequence_hashes(hashes);
    if (!m) die(m.status());
    held.imm = std::move(*m);
    std::vector<uint64_t> got;
    for (auto& b : held.imm) got.push_back(b.sequence_hash());
    say("MATCHED n=" + std::to_string(held.imm.size()) + " ids=" + join(ids_of(held.imm)) +
        " hashes=" + join(got));
    uint64_t checked = 0;
    for (auto& b : held.imm) {
      auto r = check_pattern(*pool, b);
      if (!r) die(r.status());
      checked += *r;
    }
    say("VERIFIED regions=" + std::to_string(checked));
  } else if (a.scenario == "holder") {
    auto muts = pool->allocate_blocks(static_cast<uint32_t>(a.num("mutable", 2)));
    if (!muts) die(muts.status());
    held.mut = std::move(*muts);
    std::vector<uint64_t> mut_ids, hashes;
    for (auto& b : held.mut) mut_ids.push_back(b.block_id());
    std::vector<uint64_t> reg_ids;
    if (uint64_t k = a.num("register", 2); k > 0) {
      auto blocks = pool->allocate_blocks(static_cast<uint32_t>(k));
      if (!blocks) die(blocks.status());
      auto h = fill_chain(*pool, *blocks, a.num("salt", 99), a.num("token-base", 5000));
      if (!h) die(h.status());
      hashes = *h;
      // --send-tokens 1: the blocks' token ids go to the pool's event ring (its token area).
      RegisterOptions ro;
      ro.send_tokens = a.num("send-tokens", 0) != 0;
      auto reg = pool->register_blocks(std::move(*blocks), ro);
      if (!reg) die(reg.status());
      reg_ids = ids_of(*reg);
      for (auto& b : *reg) held.imm.push_back(b);
    }
    std::vector<uint64_t> matched_ids;
    if (auto list = parse_list(a.get("match")); !list.empty()) {
      auto m = pool->match_sequence_hashes(list);
      if (!m) die(m.status());
      matched_ids = ids_of(*m);
      for (auto& b : *m) held.imm.push_back(b);
    }
    say("HOLDING mutable=" + join(mut_ids) + " registered=" + join(reg_ids) +
        " hashes=" + join(hashes) + " matched=" + join(matched_ids));
  } else if (a.scenario == "busy") {
    return run_busy(*client, *pool, static_cast<uint32_t>(a.num("threads", 2)),
                    a.num("pattern", 0) != 0, opts.reattach);
  } else if (a.scenario != "idle") {
    die(Status(ErrorCode::kInvalidArgument, "unknown scenario '" + a.scenario + "'"));
  }
  serve(*client, *pool, held);
  return 0;
}
