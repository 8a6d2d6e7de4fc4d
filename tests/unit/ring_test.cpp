#include "kvpool/shm/ring.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "kvpool/shm/segment.hpp"
#include "unit/each_cpu.hpp"

namespace kvpool::shm {
namespace {

using std::chrono::milliseconds;

// A ring placed so that its data area ends exactly at a PROT_NONE guard page and its
// header starts right after another: any read or write outside the ring faults.
class GuardedRing {
 public:
  explicit GuardedRing(size_t capacity) : capacity_(capacity) {
    page_ = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    // [guard][page holding the header at its end][data: capacity][guard]
    bytes_ = page_ + page_ + capacity + page_;
    base_ = static_cast<std::byte*>(
        ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (base_ == MAP_FAILED) std::abort();
    ::mprotect(base_, page_, PROT_NONE);
    ::mprotect(base_ + 2 * page_ + capacity, page_, PROT_NONE);
    memory_ = base_ + 2 * page_ - sizeof(RingHeader);
    Result<RingHeader*> h = init_ring(memory_, ring_bytes(capacity), capacity);
    if (!h) std::abort();
    header_ = *h;
  }
  ~GuardedRing() { ::munmap(base_, bytes_); }
  RingHeader* header() { return header_; }
  std::byte* data() { return memory_ + sizeof(RingHeader); }
  size_t capacity() const { return capacity_; }

 private:
  size_t capacity_;
  size_t page_ = 0;
  size_t bytes_ = 0;
  std::byte* base_ = nullptr;
  std::byte* memory_ = nullptr;
  RingHeader* header_ = nullptr;
};

// Deterministic payload byte i of record `seq`.
std::byte pattern(uint64_t seq, uint32_t i) {
  return static_cast<std::byte>((seq * 131 + i * 7 + (seq >> 8)) & 0xFF);
}

bool send(RingProducer& p, uint64_t seq, uint32_t len) {
  Result<void*> slot = p.try_claim(static_cast<uint32_t>(seq % 1000), len);
  if (!slot || *slot == nullptr) return false;
  auto* out = static_cast<std::byte*>(*slot);
  for (uint32_t i = 0; i < len; ++i) out[i] = pattern(seq, i);
  return true;
}

void expect_record(const RecordView& v, uint64_t seq, uint32_t len) {
  ASSERT_FALSE(v.empty());
  EXPECT_EQ(v.type, seq % 1000);
  ASSERT_EQ(v.payload_len, len);
  for (uint32_t i = 0; i < len; ++i) ASSERT_EQ(v.payload[i], pattern(seq, i)) << "byte " << i;
}

// The consumer sees `tail` published by a (hypothetical) producer.
void set_tail(RingHeader* h, uint64_t tail) { h->tail.store(tail, std::memory_order_release); }

void write_raw_header(std::byte* at, uint32_t length, uint32_t type) {
  RecordHeader h{length, type};
  std::memcpy(at, &h, sizeof(h));
}

void expect_protocol_error(RingConsumer& c) {
  Result<RecordView> r = c.poll();
  ASSERT_FALSE(r.is_ok()) << "corruption accepted";
  EXPECT_EQ(r.status().code(), ErrorCode::kProtocolError) << r.status().to_string();
  // Sticky: a corrupt ring stays refused.
  EXPECT_FALSE(c.poll().is_ok());
}

TEST(Ring, InitChecksCapacityAndMemory) {
  alignas(64) static std::byte buf[ring_bytes(8192)];
  EXPECT_TRUE(init_ring(buf, sizeof(buf), 8192));
  EXPECT_TRUE(init_ring(buf, sizeof(buf), 4096));
  EXPECT_FALSE(init_ring(buf, sizeof(buf), 2048));
  EXPECT_FALSE(init_ring(buf, sizeof(buf), 6000));
  EXPECT_FALSE(init_ring(buf, sizeof(buf), 16384)) << "memory too small";
  EXPECT_FALSE(init_ring(buf + 8, sizeof(buf) - 8, 4096)) << "misaligned";
  EXPECT_FALSE(init_ring(nullptr, sizeof(buf), 4096));
  EXPECT_EQ(max_ring_payload(8192), 4096u - 8u);
}

TEST(Ring, ViewsRefuseACapacityTheHeaderDisagreesWith) {
  GuardedRing ring(8192);
  RingProducer p(ring.header(), 16384);
  EXPECT_EQ(p.try_claim(1, 8).status().code(), ErrorCode::kProtocolError);
  RingConsumer c(ring.header(), 4096);
  EXPECT_EQ(c.poll().status().code(), ErrorCode::kProtocolError);
  RingConsumer bad(ring.header(), 5000);
  EXPECT_EQ(bad.poll().status().code(), ErrorCode::kInvalidArgument);
}

TEST(Ring, RoundTripAndEmpty) {
  GuardedRing ring(4096);
  RingProducer p(ring.header(), 4096);
  RingConsumer c(ring.header(), 4096);
  Result<RecordView> empty = c.poll();
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->empty());

  ASSERT_TRUE(send(p, 7, 13));
  EXPECT_TRUE(c.poll()->empty()) << "nothing is visible before publish";
  p.publish();
  Result<RecordView> r = c.poll();
  ASSERT_TRUE(r) << r.status().to_string();
  expect_record(*r, 7, 13);
  Result<RecordView> again = c.poll();
  ASSERT_TRUE(again);
  EXPECT_EQ(again->payload, r->payload) << "poll repeats until consume";
  c.consume();
  EXPECT_TRUE(c.poll()->empty());
  EXPECT_EQ(ring.header()->head.load(), 24u) << "8 header + 13 payload, rounded to 24";

  // Zero-length payloads are records too.
  Result<void*> z = p.try_claim(5, 0);
  ASSERT_TRUE(z);
  ASSERT_NE(*z, nullptr);
  p.publish();
  Result<RecordView> zr = c.poll();
  ASSERT_TRUE(zr);
  EXPECT_FALSE(zr->empty());
  EXPECT_EQ(zr->payload_len, 0u);
  EXPECT_EQ(zr->type, 5u);
  c.consume();
}

// Each publish notes the producer's CPU tag where the consumer can read it (kvpoold reads a
// client's to learn whether that client waits for kvpoold's own core): 0 before the first,
// then the CPU the producing thread ran on, following it when it moves. A publish with
// nothing claimed changes nothing.
TEST(Ring, PublishNotesTheProducersCpu) {
  GuardedRing ring(4096);
  RingProducer p(ring.header(), 4096);
  RingConsumer c(ring.header(), 4096);
  EXPECT_EQ(c.producer_cpu(), 0u) << "no publish yet";
  if (cpu_tag() == kUnknownCpuTag) GTEST_SKIP() << "sched_getcpu fails here: no CPU to note";
  uint32_t last = 0;
  const bool ran = kvpool::unit_test::on_each_allowed_cpu([&](int cpu) {
    ASSERT_TRUE(send(p, 7, 8));
    p.publish();
    last = static_cast<uint32_t>(cpu) + 1;
    EXPECT_EQ(c.producer_cpu(), last) << "published from CPU " << cpu;
    ASSERT_TRUE(c.poll());
    c.consume();
  });
  if (!ran) GTEST_SKIP() << "sched_getaffinity: " << std::strerror(errno);
  // Nothing claimed: publish() returns at once and leaves the last tag.
  p.publish();
  EXPECT_EQ(c.producer_cpu(), last);
}

// kvpoold takes an answer's claim back when the answer waits for the disk tier: the consumer
// never sees it, and the records claimed after it take its place.
TEST(Ring, CancelledClaimsAreNeverSeen) {
  GuardedRing ring(4096);
  RingProducer p(ring.header(), 4096);
  RingConsumer c(ring.header(), 4096);
  ASSERT_TRUE(send(p, 1, 40));
  p.publish();
  ASSERT_TRUE(send(p, 2, 100));
  ASSERT_TRUE(send(p, 3, 8));
  p.cancel_claims();
  EXPECT_EQ(p.publish(), 0u) << "nothing new to publish";
  ASSERT_TRUE(send(p, 4, 13));
  p.publish();
  for (uint32_t want : {1u, 4u}) {
    Result<RecordView> r = c.poll();
    ASSERT_TRUE(r) << r.status().to_string();
    ASSERT_FALSE(r->empty());
    expect_record(*r, want, want == 1 ? 40 : 13);
    c.consume();
  }
  EXPECT_TRUE(c.poll()->empty());
}

TEST(Ring, WrapAroundWithVariedSizesAndPadding) {
  GuardedRing ring(4096);
  RingProducer p(ring.header(), 4096);
  RingConsumer c(ring.header(), 4096);
  std::mt19937 rng(12345);
  std::vector<uint32_t> lens;  // sizes sent, not yet received
  uint64_t sent = 0, received = 0;
  while (received < 20000) {
    // Produce a burst until full (or burst done), then consume a random number.
    int burst = static_cast<int>(rng() % 8) + 1;
    for (int i = 0; i < burst; ++i) {
      uint32_t len = rng() % 4 == 0 ? rng() % (max_ring_payload(4096) + 1) : rng() % 200;
      if (!send(p, sent, len)) break;
      lens.push_back(len);
      ++sent;
    }
    p.publish();
    int take = static_cast<int>(rng() % 8) + 1;
    for (int i = 0; i < take; ++i) {
      Result<RecordView> r = c.poll();
      ASSERT_TRUE(r) << r.status().to_string();
      if (r->empty()) {
        ASSERT_EQ(received, sent);
        break;
      }
      ASSERT_LT(received, sent);
      expect_record(*r, received, lens[received]);
      c.consume();
      ++received;
    }
  }
  EXPECT_GT(c.padding_skipped(), 100u) << "records of up to capacity/2 must pad often";
  EXPECT_GT(ring.header()->tail.load(), 20u * 4096) << "many laps";
}

TEST(Ring, FullRingReturnsNullAndFreesSpaceOnConsume) {
  GuardedRing ring(4096);
  RingProducer p(ring.header(), 4096);
  RingConsumer c(ring.header(), 4096);
  int n = 0;
  while (send(p, n, 56)) ++n;  // 64-byte records
  EXPECT_EQ(n, 4096 / 64);
  Result<void*> full = p.try_claim(1, 0);
  ASSERT_TRUE(full) << "full is not an error";
  EXPECT_EQ(*full, nullptr);
  p.publish();
  EXPECT_EQ(p.wait_for_space(56, PollPolicy{}, milliseconds(1)), WaitResult::kTimedOut);
  ASSERT_TRUE(c.poll());
  c.consume();
  EXPECT_EQ(p.wait_for_space(56, PollPolicy{}, milliseconds(1000)), WaitResult::kReady);
  EXPECT_TRUE(send(p, n, 56));
  EXPECT_FALSE(send(p, n + 1, 0));

  // Payload limits: capacity/2 in total, and the padding type is reserved.
  EXPECT_EQ(p.try_claim(1, max_ring_payload(4096) + 1).status().code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(p.try_claim(kPaddingType, 8).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(p.status().is_ok()) << "argument errors do not poison the ring";
}

TEST(Ring, LargestRecordFitsAnEmptyRingAtAnyPosition) {
  GuardedRing ring(4096);
  RingProducer p(ring.header(), 4096);
  RingConsumer c(ring.header(), 4096);
  for (uint64_t seq = 0; seq < 200; ++seq) {
    uint32_t small = static_cast<uint32_t>(seq % 37);
    ASSERT_TRUE(send(p, seq * 2, small));
    ASSERT_TRUE(send(p, seq * 2 + 1, max_ring_payload(4096)));
    p.publish();
    for (uint64_t k = 0; k < 2; ++k) {
      Result<RecordView> r = c.poll();
      ASSERT_TRUE(r) << r.status().to_string();
      expect_record(*r, seq * 2 + k, k == 0 ? small : max_ring_payload(4096));
      c.consume();
    }
  }
}

TEST(Ring, ConsumerRejectsEveryCorruption) {
  constexpr size_t kCap = 4096;
  {  // tail more than capacity ahead of head
    GuardedRing ring(kCap);
    RingConsumer c(ring.header(), kCap);
    set_tail(ring.header(), kCap + 8);
    expect_protocol_error(c);
  }
  {  // tail behind head (wraps to a huge distance)
    GuardedRing ring(kCap);
    RingConsumer c(ring.header(), kCap);
    set_tail(ring.header(), static_cast<uint64_t>(-8));
    expect_protocol_error(c);
  }
  {  // tail not 8-aligned
    GuardedRing ring(kCap);
    RingConsumer c(ring.header(), kCap);
    write_raw_header(ring.data(), 12, 1);
    set_tail(ring.header(), 20);
    expect_protocol_error(c);
  }
  {  // length shorter than the header
    GuardedRing ring(kCap);
    RingConsumer c(ring.header(), kCap);
    write_raw_header(ring.data(), 4, 1);
    set_tail(ring.header(), 8);
    expect_protocol_error(c);
  }
  {  // length 0
    GuardedRing ring(kCap);
    RingConsumer c(ring.header(), kCap);
    write_raw_header(ring.data(), 0, 1);
    set_tail(ring.header(), 8);
    expect_protocol_error(c);
  }
  {  // length beyond the published bytes
    GuardedRing ring(kCap);
    RingConsumer c(ring.header(), kCap);
    write_raw_header(ring.data(), 64, 1);
    set_tail(ring.header(), 32);
    expect_protocol_error(c);
  }
  {  // length beyond capacity / 2 (even though published)
    GuardedRing ring(kCap);
    RingConsumer c(ring.header(), kCap);
    write_raw_header(ring.data(), kCap / 2 + 8, 1);
    set_tail(ring.header(), kCap);
    expect_protocol_error(c);
  }
  {  // huge length
    GuardedRing ring(kCap);
    RingConsumer c(ring.header(), kCap);
    write_raw_header(ring.data(), 0xFFFFFFF0u, 1);
    set_tail(ring.header(), kCap);
    expect_protocol_error(c);
  }
  {  // a record crossing the end of the data area
    GuardedRing ring(kCap);
    RingProducer p(ring.header(), kCap);
    RingConsumer c(ring.header(), kCap);
    // Move both sides to 16 bytes before the end with legitimate records.
    ASSERT_TRUE(send(p, 0, kCap / 2 - 8));
    ASSERT_TRUE(send(p, 1, kCap / 2 - 8 - 16));
    p.publish();
    for (int i = 0; i < 2; ++i) {
      ASSERT_TRUE(c.poll());
      c.consume();
    }
    const uint64_t head = ring.header()->head.load();
    ASSERT_EQ(head % kCap, kCap - 16);
    write_raw_header(ring.data() + kCap - 16, 64, 1);
    set_tail(ring.header(), head + 64);
    expect_protocol_error(c);
  }
  {  // padding that does not run exactly to the end
    GuardedRing ring(kCap);
    RingProducer p(ring.header(), kCap);
    RingConsumer c(ring.header(), kCap);
    ASSERT_TRUE(send(p, 0, 1000));
    p.publish();
    ASSERT_TRUE(c.poll());
    c.consume();
    const uint64_t head = ring.header()->head.load();
    write_raw_header(ring.data() + head, 64, kPaddingType);
    set_tail(ring.header(), head + 64);
    expect_protocol_error(c);
  }
  {  // padding at position 0 (a producer could otherwise keep the consumer skipping)
    GuardedRing ring(kCap);
    RingConsumer c(ring.header(), kCap);
    write_raw_header(ring.data(), kCap, kPaddingType);
    set_tail(ring.header(), kCap);
    expect_protocol_error(c);
  }
  {  // padding longer than what is published
    GuardedRing ring(kCap);
    RingProducer p(ring.header(), kCap);
    RingConsumer c(ring.header(), kCap);
    ASSERT_TRUE(send(p, 0, 1000));
    p.publish();
    ASSERT_TRUE(c.poll());
    c.consume();
    const uint64_t head = ring.header()->head.load();
    write_raw_header(ring.data() + head, static_cast<uint32_t>(kCap - head), kPaddingType);
    set_tail(ring.header(), head + 8);
    expect_protocol_error(c);
  }
}

TEST(Ring, ProducerRejectsACorruptHead) {
  constexpr size_t kCap = 4096;
  {  // head beyond what was published
    GuardedRing ring(kCap);
    RingProducer p(ring.header(), kCap);
    while (send(p, 0, 100)) {
    }
    p.publish();
    ring.header()->head.store(ring.header()->tail.load() + 64);
    Result<void*> r = p.try_claim(1, 100);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.status().code(), ErrorCode::kProtocolError);
    EXPECT_EQ(p.wait_for_space(100, PollPolicy{}, milliseconds(1)), WaitResult::kReady)
        << "a waiting producer learns of the corruption";
  }
  {  // head moving backwards
    GuardedRing ring(kCap);
    RingProducer p(ring.header(), kCap);
    RingConsumer c(ring.header(), kCap);
    while (send(p, 0, 100)) {
    }
    p.publish();
    ASSERT_TRUE(c.poll());
    c.consume();
    ASSERT_TRUE(send(p, 1, 100));  // takes the freed space, caches the new head
    ring.header()->head.store(0);
    EXPECT_EQ(p.try_claim(1, 100).status().code(), ErrorCode::kProtocolError);
  }
  {  // corrupt positions at attach
    GuardedRing ring(kCap);
    ring.header()->tail.store(12);
    RingProducer p(ring.header(), kCap);
    EXPECT_EQ(p.try_claim(1, 1).status().code(), ErrorCode::kProtocolError);
  }
}

// Random garbage in every word the producer controls: the consumer either returns a
// record that lies inside the ring or reports corruption, and never touches the guard
// pages around it.
TEST(Ring, ConsumerSurvivesRandomGarbage) {
  constexpr size_t kCap = 4096;
  std::mt19937_64 rng(99);
  int errors = 0, records = 0;
  for (int round = 0; round < 2000; ++round) {
    GuardedRing ring(kCap);
    RingConsumer c(ring.header(), kCap);
    auto* words = reinterpret_cast<uint32_t*>(ring.data());
    for (size_t i = 0; i < kCap / 4; ++i) {
      // Mostly plausible lengths, sometimes padding or nonsense.
      uint64_t x = rng();
      words[i] = (x & 3) == 0 ? static_cast<uint32_t>(x >> 32)
                              : static_cast<uint32_t>((x >> 8) % (kCap + 64));
    }
    if (round % 3 == 0) {
      for (size_t i = 1; i < kCap / 4; i += 2) words[i] = rng() % 2 ? kPaddingType : 1;
    }
    set_tail(ring.header(), round % 5 == 0 ? rng() : (rng() % (kCap / 8 + 2)) * 8);
    for (int k = 0; k < 64; ++k) {
      Result<RecordView> r = c.poll();
      if (!r) {
        ++errors;
        EXPECT_EQ(r.status().code(), ErrorCode::kProtocolError);
        break;
      }
      if (r->empty()) break;
      ++records;
      const std::byte* begin = ring.data();
      ASSERT_GE(r->payload, begin + sizeof(RecordHeader));
      ASSERT_LE(r->payload + r->payload_len, begin + kCap);
      volatile std::byte sink{};
      for (uint32_t i = 0; i < r->payload_len; ++i) sink = r->payload[i];
      (void)sink;
      c.consume();
    }
  }
  EXPECT_GT(errors, 0);
  EXPECT_GT(records, 0);
}

// Between threads, so that ThreadSanitizer can check the ring's release/acquire pairs
// (it cannot see across processes).
TEST(Ring, ProducerAndConsumerThreads) {
  constexpr size_t kCap = 4096;
  constexpr uint64_t kRecords = 100000;
  GuardedRing ring(kCap);
  std::atomic<bool> stop{false};
  std::atomic<bool> producer_ok{true};
  std::thread producer([&] {
    RingProducer p(ring.header(), kCap);
    for (uint64_t seq = 0; seq < kRecords; ++seq) {
      const uint32_t len = static_cast<uint32_t>(seq % 300);
      while (!send(p, seq, len)) {
        if (!p.status().is_ok() || stop.load()) {
          producer_ok = false;
          return;
        }
        p.publish();
        p.wait_for_space(len, PollPolicy{}, milliseconds(100));
      }
      p.publish();
    }
  });
  // Stops and joins the producer however this test ends (a failed ASSERT returns early).
  struct Join {
    std::atomic<bool>& stop;
    std::thread& t;
    ~Join() {
      stop = true;
      t.join();
    }
  } join{stop, producer};

  RingConsumer c(ring.header(), kCap);
  uint64_t seq = 0;
  int idle = 0;
  while (seq < kRecords && idle < 50) {
    Result<RecordView> r = c.poll();
    ASSERT_TRUE(r) << r.status().to_string();
    if (r->empty()) {
      if (c.wait_for_data(PollPolicy{}, milliseconds(100)) == WaitResult::kTimedOut) ++idle;
      continue;
    }
    expect_record(*r, seq, static_cast<uint32_t>(seq % 300));
    c.consume();
    ++seq;
  }
  EXPECT_EQ(seq, kRecords);
  EXPECT_TRUE(producer_ok);
}

// ---- across processes ----

uint64_t fnv1a(const std::byte* p, size_t n, uint64_t h = 1469598103934665603ull) {
  for (size_t i = 0; i < n; ++i) {
    h ^= static_cast<uint8_t>(p[i]);
    h *= 1099511628211ull;
  }
  return h;
}

// Kills and reaps a forked child if the test stops early, so a failed assertion never
// leaves a producer running.
struct ChildGuard {
  pid_t pid;
  bool reaped = false;
  // Waits (bounded) for the child to exit and returns its wait status.
  int wait(int timeout_ms) {
    int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (pidfd >= 0) {
      pollfd p{pidfd, POLLIN, 0};
      if (::poll(&p, 1, timeout_ms) == 0) ::kill(pid, SIGKILL);
      ::close(pidfd);
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    reaped = true;
    return status;
  }
  ~ChildGuard() {
    if (reaped) return;
    ::kill(pid, SIGKILL);
    wait(-1);
  }
};

// Payload: [u64 seq][u64 checksum of the rest][bytes...].
constexpr uint32_t kRecordHead = 16;

TEST(Ring, CrossProcessProducerToConsumer) {
  constexpr size_t kCap = 64 * 1024;
  constexpr uint64_t kRecords = 200000;
  Result<Segment> seg = Segment::create_anonymous("kvpool-ring-test", ring_bytes(kCap));
  ASSERT_TRUE(seg) << seg.status().to_string();
  ASSERT_TRUE(init_ring(seg->data(), seg->size(), kCap));
  Result<UniqueFd> child_fd = seg->dup_fd();
  ASSERT_TRUE(child_fd);

  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Producer: maps the ring on its own (another address) from the descriptor.
    Result<Segment> mine = Segment::map_fd(std::move(*child_fd), true);
    if (!mine) ::_exit(10);
    RingProducer p(mine->as<RingHeader>(), kCap);
    std::mt19937 rng(7);
    for (uint64_t seq = 0; seq < kRecords; ++seq) {
      uint32_t extra = rng() % 8 == 0 ? rng() % 3000 : rng() % 64;
      uint32_t len = kRecordHead + extra;
      void* slot = nullptr;
      for (int tries = 0; slot == nullptr; ++tries) {
        Result<void*> r = p.try_claim(static_cast<uint32_t>(seq), len);
        if (!r) ::_exit(11);
        slot = *r;
        if (slot == nullptr) {
          p.publish();  // let the consumer see everything before we wait
          if (tries > 10000) ::_exit(12);
          p.wait_for_space(len, PollPolicy{}, milliseconds(100));
        }
      }
      auto* out = static_cast<std::byte*>(slot);
      for (uint32_t i = 0; i < extra; ++i) out[kRecordHead + i] = static_cast<std::byte>(rng());
      uint64_t sum = fnv1a(out + kRecordHead, extra, seq);
      std::memcpy(out, &seq, 8);
      std::memcpy(out + 8, &sum, 8);
      if (seq % 16 == 15) p.publish();  // batches of claims per publish, too
    }
    p.publish();
    ::_exit(0);
  }
  ChildGuard child{pid};
  child_fd->reset();

  RingConsumer c(seg->as<RingHeader>(), kCap);
  uint64_t expected = 0;
  int idle_timeouts = 0;
  bool child_done = false;
  std::vector<std::byte> copy;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  while (expected < kRecords && std::chrono::steady_clock::now() < deadline) {
    Result<RecordView> r = c.poll();
    ASSERT_TRUE(r) << r.status().to_string();
    if (r->empty()) {
      if (c.wait_for_data(PollPolicy{}, milliseconds(200)) == WaitResult::kTimedOut) {
        ++idle_timeouts;
        int status = 0;
        if (!child_done && ::waitpid(pid, &status, WNOHANG) == pid) {
          child_done = true;
          child.reaped = true;
          ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
              << "producer failed with status " << status;
        } else if (child_done) {
          break;  // no producer and nothing left: records are missing
        }
      }
      continue;
    }
    // Copy out once, then validate only the copy (the producer's memory can change).
    copy.assign(r->payload, r->payload + r->payload_len);
    const uint32_t type = r->type;
    c.consume();
    ASSERT_GE(copy.size(), kRecordHead);
    uint64_t seq, sum;
    std::memcpy(&seq, copy.data(), 8);
    std::memcpy(&sum, copy.data() + 8, 8);
    ASSERT_EQ(seq, expected) << "records arrive in order";
    ASSERT_EQ(type, static_cast<uint32_t>(seq));
    ASSERT_EQ(fnv1a(copy.data() + kRecordHead, copy.size() - kRecordHead, seq), sum)
        << "record " << seq << " corrupted";
    ++expected;
  }
  EXPECT_EQ(expected, kRecords);
  EXPECT_TRUE(c.poll()->empty()) << "nothing beyond the last record";
  if (!child_done) {
    int status = child.wait(30000);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
  EXPECT_GT(c.padding_skipped(), 0u);
  RecordProperty("idle_timeouts", idle_timeouts);
}

}  // namespace
}  // namespace kvpool::shm
