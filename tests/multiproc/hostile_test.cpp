// Hostile clients against the real kvpoold: a client that scribbles over its own request
// ring, one that stops reading its answers, one of a uid or gid the config does not allow,
// and one that tries to write through the read-only control segment. Each is refused,
// stalled or cut off on its own; the daemon lives on and nobody else notices.
// (Malformed records, foreign and stale handles and request floods: daemon_client_test.cpp.)
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "client_helpers.hpp"
#include "harness.hpp"
#include "kvpool/shm/ring.hpp"

namespace kvpool::mptest {
namespace {

// The request ring of a raw connection, as the client process maps it.
struct RawRing {
  shm::RingHeader* header;
  std::byte* data;
  uint64_t capacity;
};

RawRing request_ring(RawConnection& c) {
  shm::ClientHeader* h = c.client_header();
  auto* base = reinterpret_cast<std::byte*>(h);
  auto* rh = reinterpret_cast<shm::RingHeader*>(base + h->request_offset);
  return {rh, reinterpret_cast<std::byte*>(rh) + sizeof(shm::RingHeader), h->ring_capacity};
}

// One way of breaking the ring's rules, applied at the producer's current tail.
struct Corruption {
  const char* name;
  void (*apply)(const RawRing& r, uint64_t tail);
};

void put_header(const RawRing& r, uint64_t tail, uint32_t length, uint32_t type) {
  shm::RecordHeader h{length, type};
  std::memcpy(r.data + tail % r.capacity, &h, sizeof(h));
}

const Corruption kCorruptions[] = {
    {"torn record: a header longer than what is published",
     [](const RawRing& r, uint64_t tail) {
       put_header(r, tail, 4096, static_cast<uint32_t>(Opcode::kPing));
       r.header->tail.store(tail + 16, std::memory_order_release);
     }},
    {"tail a lap and more ahead of head",
     [](const RawRing& r, uint64_t tail) {
       r.header->tail.store(tail + 4 * r.capacity, std::memory_order_release);
     }},
    {"tail behind head",
     [](const RawRing& r, uint64_t tail) {
       r.header->tail.store(tail - 8, std::memory_order_release);
     }},
    {"tail not 8-aligned",
     [](const RawRing& r, uint64_t tail) {
       put_header(r, tail, 24, static_cast<uint32_t>(Opcode::kPing));
       r.header->tail.store(tail + 3, std::memory_order_release);
     }},
    {"random bytes published as records",
     [](const RawRing& r, uint64_t tail) {
       std::mt19937_64 rng(20261202);
       for (uint64_t i = 0; i < 512; i += 8) {
         uint64_t x = rng();
         std::memcpy(r.data + (tail + i) % r.capacity, &x, sizeof(x));
       }
       put_header(r, tail, 0xFFFFFFF0u, static_cast<uint32_t>(rng()));  // huge length
       r.header->tail.store(tail + 512, std::memory_order_release);
     }},
    {"a header shorter than itself",
     [](const RawRing& r, uint64_t tail) {
       put_header(r, tail, 4, static_cast<uint32_t>(Opcode::kPing));
       r.header->tail.store(tail + 8, std::memory_order_release);
     }},
};

class RingGarbage : public ::testing::TestWithParam<Corruption> {};

TEST_P(RingGarbage, DisconnectsOnlyTheScribblerAndReturnsItsBlocks) {
  const Corruption& corruption = GetParam();
  DaemonProcess d(test_config(nlohmann::json::array({host_pool("g", 16)})));
  d.start();
  auto v = d.view();
  WorkerProcess h(d, "holder", {"--mutable", "1", "--register", "1"});
  h.expect_line("READY");
  h.expect_line("HOLDING");
  Client good = connect_client(d);

  auto bad = open_connection(d);
  const uint32_t bad_slot = bad->slot();
  auto a = must_call(*bad, Opcode::kAllocate, 0, 2, nullptr, 0);
  ASSERT_EQ(a.code, ErrorCode::kOk) << a.message;
  ASSERT_TRUE(counts_match(v.counts(), Want{12, 3, 1, 0})) << v.describe();
  const uint64_t dc0 = stat_of(v.stats().disconnects);

  // Every request so far was answered; the daemon consumes a record just after answering
  // it, so wait for head == tail, then scribble from there.
  RawRing ring = request_ring(*bad);
  const uint64_t tail = ring.header->tail.load(std::memory_order_acquire);
  wait_until([&] { return ring.header->head.load(std::memory_order_acquire) == tail; }, 5s,
             "the daemon to consume the allocate record");
  corruption.apply(ring, tail);

  // The daemon looks at the ring when it next runs; the good client's pings wake it.
  wait_until(
      [&] {
        (void)good.ping();
        return stat_of(v.stats().disconnects) == dc0 + 1 &&
               v.slot(bad_slot).state.load() == static_cast<uint32_t>(shm::SlotState::kFree);
      },
      10s, std::string("the scribbler to be disconnected (") + corruption.name + ")",
      [&] { return v.describe(); });
  wait_counts(v, Want{14, 1, 1, 0});  // its two blocks came back, the holder's stayed

  ASSERT_TRUE(d.running()) << d.stderr_text();
  EXPECT_TRUE(d.stderr_gets("request ring corrupt")) << d.stderr_text();
  EXPECT_EQ(stat_of(v.stats().reclaimed_clients), 0u);
  EXPECT_TRUE(good.ping().is_ok());
  EXPECT_EQ(h.command("verify"), "OK regions=4");
  Pool gp = pool_of(good);
  auto more = gp.allocate_blocks(3);
  EXPECT_TRUE(more) << more.status().to_string();
  auto r = bad->call(Opcode::kPing, 0, 0, nullptr, 0);
  ASSERT_FALSE(r) << "the scribbler is still served";
  EXPECT_EQ(r.status().code(), ErrorCode::kDisconnected) << r.status().to_string();
  EXPECT_TRUE(contains(r.status().message(), "request ring corrupt")) << r.status().message();
  expect_invariants(v);
}

INSTANTIATE_TEST_SUITE_P(Hostile, RingGarbage, ::testing::ValuesIn(kCorruptions),
                         [](const ::testing::TestParamInfo<Corruption>& i) {
                           return "Corruption" + std::to_string(i.index);
                         });

TEST(Hostile, AClientThatStopsReadingItsAnswersStallsOnlyItself) {
  DaemonProcess d(test_config(nlohmann::json::array({host_pool("g", 16)})));
  d.start();
  auto v = d.view();
  Client good = connect_client(d);
  Pool gp = pool_of(good);
  auto lazy = open_connection(d);

  // Pings until the request ring is full: the daemon answers until the response ring is
  // full, then leaves the lazy client's requests where they are.
  constexpr uint64_t kFirst = 5'000'000;
  uint64_t sent = 0;
  for (; sent < 1'000'000; ++sent) {
    proto::RequestHeader rh{kFirst + sent, 0, 0};
    Status st = lazy->send_raw(static_cast<uint32_t>(Opcode::kPing), &rh, sizeof(rh));
    if (st.code() == ErrorCode::kResourceExhausted) break;
    ASSERT_TRUE(st.is_ok()) << st.to_string();
  }
  ASSERT_LT(sent, 1'000'000u) << "the request ring never filled";
  ASSERT_GT(sent, 10u);

  // Everyone else is served as usual meanwhile.
  for (int i = 0; i < 50; ++i) {
    auto blocks = gp.allocate_blocks(2);
    ASSERT_TRUE(blocks) << "round " << i << ": " << blocks.status().to_string();
    ASSERT_TRUE(good.ping().is_ok());
  }
  ASSERT_TRUE(d.running()) << d.stderr_text();
  EXPECT_EQ(stat_of(v.stats().disconnects), 0u) << "a slow reader is not a hostile one";

  // Once it reads, every answer is there, in order, and it is served again.
  for (uint64_t i = 0; i < sent; ++i) {
    auto r = lazy->wait(kFirst + i);
    ASSERT_TRUE(r) << "answer " << i << " of " << sent << ": " << r.status().to_string();
    ASSERT_EQ(r->code, ErrorCode::kOk) << r->message;
  }
  auto again = lazy->call(Opcode::kAllocate, 0, 1, nullptr, 0);
  ASSERT_TRUE(again) << again.status().to_string();
  EXPECT_EQ(again->code, ErrorCode::kOk) << again->message;
  expect_invariants(v);
}

// Lets a process of another user reach the test daemon's socket (the harness makes the
// folder 0700 and the daemon the socket 0660, as they should be in production).
void open_up_socket(const DaemonProcess& d) {
  ASSERT_EQ(::chmod(d.dir().c_str(), 0755), 0) << std::strerror(errno);
  ASSERT_EQ(::chmod(d.socket_path().c_str(), 0666), 0) << std::strerror(errno);
}

TEST(Hostile, UidsAndGidsOutsideTheConfiguredListsAreRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run workers as other users";
  auto cfg = test_config(nlohmann::json::array({host_pool("g", 16)}));
  cfg["allowed_uids"] = {0, kNobody};
  cfg["allowed_gids"] = {0};
  DaemonProcess d(cfg);
  d.start();
  open_up_socket(d);
  auto v = d.view();
  const uint64_t refused0 = stat_of(v.stats().refused_attaches);

  struct Case {
    std::string uid, gid;
    bool refused;
  };
  const Case cases[] = {
      {std::to_string(kNobody), std::to_string(kNobody), true},  // the gid is not allowed
      {std::to_string(kNobody - 1), "0", true},                  // the uid is not allowed
      {std::to_string(kNobody), "0", false},                     // both allowed
  };
  uint64_t refusals = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE("uid " + c.uid + " gid " + c.gid);
    WorkerProcess w(d, "holder",
                    {"--as-gid", c.gid, "--as-uid", c.uid, "--mutable", "1", "--register", "0"});
    if (c.refused) {
      std::string line = w.expect_line("ERR PermissionDenied");
      EXPECT_TRUE(contains(line, "uid " + c.uid + " / gid " + c.gid)) << line;
      EXPECT_TRUE(contains(line, "allowed_uids/allowed_gids")) << line;
      auto st = w.wait_exit(10s);
      ASSERT_TRUE(st);
      EXPECT_EQ(st->code(), 1) << st->describe();
      ++refusals;
      wait_until([&] { return stat_of(v.stats().refused_attaches) == refused0 + refusals; }, 5s,
                 "the daemon to count the refusal", [&] { return v.describe(); });
      EXPECT_EQ(v.clients(), 0u);
    } else {
      const uint32_t slot = std::stoul(field(w.expect_line("READY"), "slot"));
      w.expect_line("HOLDING");
      EXPECT_EQ(v.slot(slot).uid.load(), kNobody);
      EXPECT_TRUE(counts_match(v.counts(), Want{15, 1, 0, 0})) << v.describe();
      w.send_line("exit");
      ASSERT_TRUE(w.wait_exit(10s));
      wait_counts(v, Want{16, 0, 0, 0});
    }
  }
  ASSERT_TRUE(d.running()) << d.stderr_text();
}

TEST(Hostile, TheControlSegmentIsReadOnlyInClients) {
  DaemonProcess d(test_config(nlohmann::json::array({host_pool("g", 16)})));
  d.start();
  auto v = d.view();
  auto c = open_connection(d);
  const shm::ControlHeader& ctl = c->control();
  const uint64_t magic = ctl.magic;
  const auto* target = &ctl.stats.requests;
  const uint64_t requests = stat_of(*target);

  // In a child (a copy of this client's mappings): making the mapping writable fails, and a
  // plain store faults. The child's SIGSEGV handler is reset so that a sanitizer runtime's
  // own handler does not turn the fault into an exit code.
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0) << std::strerror(errno);
  if (pid == 0) {
    ::signal(SIGSEGV, SIG_DFL);
    auto page = reinterpret_cast<uintptr_t>(&ctl) & ~uintptr_t{4095};
    if (::mprotect(reinterpret_cast<void*>(page), 4096, PROT_READ | PROT_WRITE) == 0) ::_exit(10);
    *const_cast<volatile uint64_t*>(reinterpret_cast<const volatile uint64_t*>(&ctl.magic)) = 0;
    ::_exit(11);  // the store went through
  }
  int ws = 0;
  ASSERT_EQ(::waitpid(pid, &ws, 0), pid);
  ASSERT_FALSE(WIFEXITED(ws) && WEXITSTATUS(ws) == 10) << "mprotect(PROT_WRITE) succeeded";
  ASSERT_FALSE(WIFEXITED(ws) && WEXITSTATUS(ws) == 11) << "a store through the mapping succeeded";
  ASSERT_TRUE(WIFSIGNALED(ws)) << "status " << ws;
  EXPECT_EQ(WTERMSIG(ws), SIGSEGV);

  // The daemon's view is untouched and it goes on serving this client.
  EXPECT_EQ(v.header().magic, magic);
  EXPECT_EQ(ctl.magic, magic);
  EXPECT_EQ(stat_of(*target), requests);
  EXPECT_EQ(must_call(*c, Opcode::kPing, 0, 0, nullptr, 0).code, ErrorCode::kOk);
  EXPECT_EQ(stat_of(*target), requests + 1);
  ASSERT_TRUE(d.running()) << d.stderr_text();
}

}  // namespace
}  // namespace kvpool::mptest
