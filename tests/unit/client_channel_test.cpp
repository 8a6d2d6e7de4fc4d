// The client channel (shm/client_channel.hpp) against a daemon side played by the test, in
// one process: a real control segment, a real client segment with its rings and lease, a
// real socketpair and eventfd. The races a reattach's claim_back meets end to end (its new
// daemon answers some records and dies before the rest; answers come in another order; the
// daemon cuts the client off) are driven here record by record.
#include "kvpool/shm/client_channel.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "daemon/client_segment.hpp"
#include "kvpool/core/clock.hpp"
#include "kvpool/shm/cpu_share.hpp"
#include "kvpool/shm/lease_mutex.hpp"

namespace kvpool::shm {
namespace {

constexpr uint64_t kRing = 4096;

// The daemon's side of one attachment, played by the test.
struct FakeDaemon {
  ControlWriter control;
  daemon::ClientSegment seg;
  UniqueFd sock;  // the daemon's end of the socketpair
  UniqueFd bell;  // the eventfd the client rings
  std::optional<RingConsumer> requests;
  std::optional<RingProducer> responses;

  // The client's attach, as attach_client would hand it over.
  ClientAttach attach;

  FakeDaemon() {
    auto lay = control_layout(4, {}, 0);
    EXPECT_TRUE(lay.is_ok()) << lay.status().to_string();
    auto w = ControlWriter::create("channel-test", 4, *lay, {}, 0);
    EXPECT_TRUE(w.is_ok()) << w.status().to_string();
    control = std::move(w.value());
    control.publish_ready();
    auto s = daemon::create_client_segment(3, 7, kRing);
    EXPECT_TRUE(s.is_ok()) << s.status().to_string();
    seg = std::move(s.value());
    requests.emplace(seg.requests, kRing);
    responses.emplace(seg.responses, kRing);
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    sock = UniqueFd(sv[0]);
    attach.sock = UniqueFd(sv[1]);
    bell = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    attach.bell = UniqueFd(::fcntl(bell.get(), F_DUPFD_CLOEXEC, 0));
    attach.welcome.slot = 3;
    attach.welcome.generation = 7;
    attach.welcome.ring_capacity = kRing;
    auto ro = control.open_readonly_fd();
    auto ctl = ControlReader::open(std::move(Segment::map_fd(std::move(*ro), false).value()));
    EXPECT_TRUE(ctl.is_ok()) << ctl.status().to_string();
    attach.control = std::move(ctl.value());
    // The client's own mapping of its segment, at another address than the daemon's.
    attach.client = std::move(Segment::map_fd(std::move(*seg.segment.dup_fd()), true).value());
    const auto cl = client_segment_layout(kRing);
    attach.requests = reinterpret_cast<RingHeader*>(attach.client.as<char>() + cl.request_offset);
    attach.responses = reinterpret_cast<RingHeader*>(attach.client.as<char>() + cl.response_offset);
  }

  // The next request record's header and type; fails the test when there is none.
  proto::RequestHeader take(uint32_t* type = nullptr) {
    auto r = requests->poll();
    EXPECT_TRUE(r.is_ok() && !r->empty());
    proto::RequestHeader h{};
    std::memcpy(&h, r->payload, sizeof(h));
    if (type) *type = r->type;
    requests->consume();
    return h;
  }

  // An answer of `payload_len` bytes: a ResponseHeader for `corr` with `refs`, cut or padded.
  void answer(uint64_t corr, std::vector<proto::BlockRef> refs, ErrorCode code = ErrorCode::kOk,
              uint32_t count_claimed = UINT32_MAX) {
    proto::ResponseHeader h{
        corr, static_cast<uint16_t>(code),
        0,    count_claimed == UINT32_MAX ? static_cast<uint32_t>(refs.size()) : count_claimed,
        0,    0};
    const uint32_t len = static_cast<uint32_t>(sizeof(h) + refs.size() * sizeof(proto::BlockRef));
    auto c = responses->try_claim(1, len);
    ASSERT_TRUE(c.is_ok() && *c);
    std::memcpy(*c, &h, sizeof(h));
    if (!refs.empty())
      std::memcpy(static_cast<std::byte*>(*c) + sizeof(h), refs.data(),
                  refs.size() * sizeof(proto::BlockRef));
    responses->publish();
  }
  void raw_answer(const void* bytes, uint32_t len) {
    auto c = responses->try_claim(1, len);
    ASSERT_TRUE(c.is_ok() && *c);
    std::memcpy(*c, bytes, len);
    responses->publish();
  }
  // Dies: its end of the socket closes (the kernel does this for a killed daemon).
  void die() { sock.reset(); }
  // Reads the client's Ready, as kvpoold does. (A socket closed with unread data resets
  // its peer, and the client would then read no disconnect notice.)
  void read_ready() {
    char buf[64];
    EXPECT_GT(::recv(sock.get(), buf, sizeof(buf), 0), 0);
  }
  bool bell_rung() {
    uint64_t v = 0;
    return ::read(bell.get(), &v, sizeof(v)) == sizeof(v) && v > 0;
  }
};

std::unique_ptr<ClientChannel> open_channel(FakeDaemon& d, ChannelOptions o = {}) {
  auto c = ClientChannel::create(d.attach, o);
  EXPECT_TRUE(c.is_ok()) << c.status().to_string();
  return std::move(c.value());
}

const std::function<void()> kNothing = [] {};

TEST(ClientChannel, DecoderRefusesARecordShorterThanItsHeader) {
  std::byte bytes[16] = {};
  RecordView rec{1, sizeof(bytes), bytes};
  uint64_t corr = 99;
  auto a = decode_answer(rec, &corr);
  ASSERT_FALSE(a.is_ok());
  EXPECT_EQ(a.status().code(), ErrorCode::kProtocolError);
  EXPECT_NE(a.status().message().find("shorter than its 24-byte header"), std::string::npos)
      << a.status().message();
  EXPECT_EQ(corr, 99u);  // no correlation id was read
}

TEST(ClientChannel, AShortAnswerOnTheRingIsAnErrorNotASuccessForCorrelationZero) {
  FakeDaemon d;
  auto ch = open_channel(d);
  auto corr = ch->send(proto::Opcode::kPing, 0, 0, nullptr, 0, kNothing);
  ASSERT_TRUE(corr.is_ok());
  d.take();
  const uint64_t eight = *corr;
  d.raw_answer(&eight, sizeof(eight));  // 8 bytes: no status, no counts
  std::vector<uint64_t> others;
  auto r = ch->wait(*corr, [&](uint64_t c, Answer&&) { others.push_back(c); });
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kProtocolError);
  EXPECT_TRUE(others.empty());  // not handed to anybody as an answer to correlation 0
  // Sticky: the record stays refused, never read as something else later.
  auto again = ch->read_answer();
  ASSERT_FALSE(again.is_ok());
  EXPECT_EQ(again.status().code(), ErrorCode::kProtocolError);
}

TEST(ClientChannel, CountsThatOverrunTheRecordAnswerTheirCallerWithAnError) {
  FakeDaemon d;
  auto ch = open_channel(d);
  auto corr = ch->send(proto::Opcode::kPing, 0, 0, nullptr, 0, kNothing);
  ASSERT_TRUE(corr.is_ok());
  d.take();
  d.answer(*corr, {{1, 1}}, ErrorCode::kOk, /*count_claimed=*/1000);
  auto r = ch->wait(*corr, [](uint64_t, Answer&&) { FAIL(); });
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->code, ErrorCode::kProtocolError);
  EXPECT_TRUE(r->refs.empty());
}

TEST(ClientChannel, AnswersForOtherCallersAreHandedOverInTheOrderTheyCame) {
  FakeDaemon d;
  auto ch = open_channel(d);
  std::vector<uint64_t> corrs;
  for (int i = 0; i < 3; ++i) {
    auto c = ch->send(proto::Opcode::kPing, 0, 0, nullptr, 0, kNothing);
    ASSERT_TRUE(c.is_ok());
    corrs.push_back(*c);
  }
  for (int i = 0; i < 3; ++i) EXPECT_EQ(d.take().correlation_id, corrs[i]);
  d.answer(corrs[2], {{7, 1}});
  d.answer(corrs[0], {{5, 1}});
  d.answer(corrs[1], {{6, 1}, {6, 2}});
  std::vector<std::pair<uint64_t, uint32_t>> others;
  auto r =
      ch->wait(corrs[1], [&](uint64_t c, Answer&& a) { others.emplace_back(c, a.refs[0].id); });
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(r->refs.size(), 2u);
  EXPECT_EQ(r->refs[1], (proto::BlockRef{6, 2}));
  ASSERT_EQ(others.size(), 2u);
  EXPECT_EQ(others[0], std::make_pair(corrs[2], 7u));
  EXPECT_EQ(others[1], std::make_pair(corrs[0], 5u));
}

TEST(ClientChannel, PublishRingsTheEventfdOnlyWhileTheDaemonParks) {
  FakeDaemon d;
  auto ch = open_channel(d);
  auto& word = d.control.header().daemon_sleeping;
  word.store(5u << 1, std::memory_order_seq_cst);  // running on CPU tag 5
  ASSERT_TRUE(ch->send(proto::Opcode::kPing, 0, 0, nullptr, 0, kNothing).is_ok());
  EXPECT_FALSE(d.bell_rung());
  word.store((5u << 1) | 1u, std::memory_order_seq_cst);  // parking
  ASSERT_TRUE(ch->send(proto::Opcode::kPing, 0, 0, nullptr, 0, kNothing).is_ok());
  EXPECT_TRUE(d.bell_rung());
}

TEST(ClientChannel, LeaseIsHeldWhileStartedAndGivenBackCleanlyOnStop) {
  FakeDaemon d;
  auto ch = open_channel(d);
  ASSERT_TRUE(ch->start(nullptr).is_ok());
  d.read_ready();
  const LeaseWord held = peek(d.seg.header->lease);
  EXPECT_NE(held.tid, 0u);
  EXPECT_FALSE(held.owner_died);
  EXPECT_EQ(try_lock(d.seg.header->lease), LockResult::kBusy);
  ch->stop();
  EXPECT_EQ(peek(d.seg.header->lease).tid, 0u);
  EXPECT_EQ(try_lock(d.seg.header->lease), LockResult::kAcquired);  // not kOwnerDied
  EXPECT_TRUE(unlock(d.seg.header->lease).is_ok());
}

// claim_back's race: the new daemon answers the first of a reattach's records and dies
// before the rest. The answered record is read (its blocks were handed to our slot there);
// a waiter for the rest, asleep on the doorbell, is woken by the gone watch and told.
TEST(ClientChannel, DaemonDyingMidClaimAnswersWhatItAnsweredAndWakesTheRestWithDaemonGone) {
  FakeDaemon d;
  auto ch = open_channel(d);
  ASSERT_TRUE(ch->start(nullptr).is_ok());
  std::vector<uint64_t> corrs;
  for (int i = 0; i < 3; ++i) {
    auto c = ch->send(proto::Opcode::kReclaim, 0, 0, nullptr, 0, kNothing);
    ASSERT_TRUE(c.is_ok());
    corrs.push_back(*c);
  }
  for (int i = 0; i < 3; ++i) d.take();
  d.answer(corrs[0], {{11, 1}});
  d.answer(corrs[2], {{13, 1}});
  auto first = ch->wait(corrs[0], [](uint64_t, Answer&&) { FAIL(); });
  ASSERT_TRUE(first.is_ok());
  EXPECT_EQ(first->refs[0].id, 11u);

  std::mutex m;
  std::condition_variable cv;
  bool asleep = false;
  Result<Answer> second = Status(ErrorCode::kInternal, "not set");
  std::vector<uint64_t> others;
  std::thread waiter([&] {
    second = ch->wait(corrs[1], [&](uint64_t c, Answer&&) {
      others.push_back(c);
      std::lock_guard lk(m);
      asleep = true;  // it read the third answer: next it finds nothing and sleeps
      cv.notify_all();
    });
  });
  {
    std::unique_lock lk(m);
    ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(10), [&] { return asleep; }));
  }
  d.die();
  waiter.join();
  ASSERT_FALSE(second.is_ok());
  EXPECT_EQ(second.status().code(), ErrorCode::kDaemonGone);
  EXPECT_EQ(others, std::vector<uint64_t>{corrs[2]});
  EXPECT_TRUE(ch->gone());
  auto after = ch->send(proto::Opcode::kPing, 0, 0, nullptr, 0, kNothing);
  // The ring has room: send itself succeeds; it is the wait that reports the death.
  ASSERT_TRUE(after.is_ok());
  auto w = ch->wait(*after, [](uint64_t, Answer&&) {});
  EXPECT_EQ(w.status().code(), ErrorCode::kDaemonGone);
}

TEST(ClientChannel, ADaemonThatCutsUsOffGivesItsReason) {
  FakeDaemon d;
  auto ch = open_channel(d);
  ASSERT_TRUE(ch->start(nullptr).is_ok());
  d.read_ready();
  auto corr = ch->send(proto::Opcode::kPing, 0, 0, nullptr, 0, kNothing);
  ASSERT_TRUE(corr.is_ok());
  proto::send_refusal(d.sock.get(), proto::MsgType::kDisconnect, ErrorCode::kProtocolError,
                      "more than 16 malformed records");
  d.die();
  auto r = ch->wait(*corr, [](uint64_t, Answer&&) {});
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kDisconnected);
  EXPECT_NE(r.status().message().find("more than 16 malformed records"), std::string::npos)
      << r.status().message();
}

TEST(ClientChannel, AStoppingDaemonIsGoneAtOnce) {
  FakeDaemon d;
  auto ch = open_channel(d);
  EXPECT_FALSE(ch->gone());
  d.control.publish_stopping();
  EXPECT_TRUE(ch->gone());
  auto r = ch->wait(1, [](uint64_t, Answer&&) {});
  EXPECT_EQ(r.status().code(), ErrorCode::kDaemonGone);
}

TEST(ClientChannel, AWaitOnADaemonWhoseHeartbeatStoppedReportsItUnresponsive) {
  FakeDaemon d;
  const uint64_t now = now_ns(CLOCK_MONOTONIC);
  d.control.header().heartbeat_ns.store(now - 60'000'000'000ull, std::memory_order_relaxed);
  auto ch = open_channel(d, ChannelOptions{std::chrono::microseconds(50), std::chrono::seconds(1)});
  auto corr = ch->send(proto::Opcode::kPing, 0, 0, nullptr, 0, kNothing);
  ASSERT_TRUE(corr.is_ok());
  auto r = ch->wait(*corr, [](uint64_t, Answer&&) {});
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kDaemonUnresponsive);
}

// Issue 32 (shm/cpu_share.hpp): polling pays only while the engine and the clients in a call
// fit the engine's CPUs; a daemon that publishes no CPUs (zeros) leaves callers polling.
TEST(CpuShare, PollingPaysOnlyWhileTheEngineAndTheBusyClientsFitItsCpus) {
  EXPECT_TRUE(polling_pays(0, 0));  // a daemon before the gauges
  EXPECT_TRUE(polling_pays(40, 0));
  EXPECT_TRUE(polling_pays(0, 2));
  EXPECT_TRUE(polling_pays(1, 2));  // one caller and the engine on two cores
  EXPECT_FALSE(polling_pays(2, 2));
  EXPECT_FALSE(polling_pays(16, 2));
  EXPECT_TRUE(polling_pays(7, 8));
  EXPECT_FALSE(polling_pays(8, 8));
  EXPECT_GE(allowed_cpu_count(), 1u);
  // The awake clients count when the daemon publishes them, the busy ones otherwise.
  EXPECT_EQ(clients_competing(5, 0), 5u);  // a daemon before clients_awake
  EXPECT_EQ(clients_competing(5, kAwakePublished | 1), 1u);
  EXPECT_EQ(clients_competing(5, kAwakePublished), 0u);
  EXPECT_TRUE(polling_pays(clients_competing(16, kAwakePublished | 1), 2));
  EXPECT_FALSE(polling_pays(clients_competing(16, kAwakePublished | 2), 2));
}

// kvpoold parks at once after answering a client that needs its core: one it woke from a
// sleep there, or one whose request came from there (preempted by kvpoold's wake-up before it
// could sleep). Tags are CPU + 1; 0 is unknown and never matches.
TEST(CpuShare, AnsweredOnOurCoreWhenTheClientSleptOrLastSentThere) {
  EXPECT_TRUE(answered_on_our_core(/*woke=*/3, /*requested_from=*/0, /*here=*/3));
  EXPECT_TRUE(answered_on_our_core(0, 3, 3));  // not asleep: preempted on our core
  EXPECT_TRUE(answered_on_our_core(2, 3, 3));  // asleep elsewhere, but sent from here
  EXPECT_TRUE(answered_on_our_core(3, 2, 3));
  EXPECT_FALSE(answered_on_our_core(0, 0, 3));  // a client before producer_cpu, awake
  EXPECT_FALSE(answered_on_our_core(2, 2, 3));  // on another core: polling on may pay
  EXPECT_FALSE(answered_on_our_core(0, 2, 3));
  EXPECT_FALSE(answered_on_our_core(0, 0, 0));  // our own CPU unknown
  // No getcpu on either side (a seccomp filter): an unknown tag names no core, even when
  // both sides have it.
  EXPECT_FALSE(answered_on_our_core(kUnknownCpuTag, kUnknownCpuTag, kUnknownCpuTag));
  EXPECT_FALSE(answered_on_our_core(0, kUnknownCpuTag, kUnknownCpuTag));
  EXPECT_TRUE(answered_on_our_core(kUnknownCpuTag, 3, 3));  // the client's unknown, ours not
}

// The daemon side of a wait-policy test: watches the caller's response doorbell for at most
// `window` (until it says it sleeps), then answers `corr` with one block. Returns whether
// the caller said it sleeps within the window.
bool answer_after_watching(FakeDaemon& d, uint64_t corr, std::chrono::milliseconds window) {
  Doorbell& bell = d.seg.responses->consumer_bell;
  bool slept = false;
  const auto until = std::chrono::steady_clock::now() + window;
  while (!slept && std::chrono::steady_clock::now() < until)
    slept = bell.sleeping.load(std::memory_order_acquire) != 0;
  d.answer(corr, {{4, 2}});
  return slept;
}

// While the busy clients outnumber the engine's cores a caller sleeps on its doorbell at
// once, when the daemon does not say how many of them are awake (one before clients_awake).
// Its poll budget here is 10 s and kvpoold has already taken its request, so a caller that
// polled would still be polling when this test stops waiting for it to sleep (5 s).
TEST(ClientChannel, ACallerSleepsAtOnceWhileTheBusyClientsOutnumberTheEnginesCpus) {
  FakeDaemon d;
  d.control.header().stats.engine_cpus.store(2, std::memory_order_relaxed);
  d.control.header().stats.clients_busy.store(2, std::memory_order_relaxed);
  ChannelOptions o;
  o.poll = std::chrono::seconds(10);
  auto ch = open_channel(d, o);
  auto corr = ch->send(proto::Opcode::kPing, 0, 0, nullptr, 0, kNothing);
  ASSERT_TRUE(corr.is_ok());
  d.take();  // started: only the busy count can stop the caller's poll
  std::atomic<bool> slept{false};
  std::thread daemon_side(
      [&] { slept = answer_after_watching(d, *corr, std::chrono::seconds(5)); });
  auto r = ch->wait(*corr, [](uint64_t, Answer&&) {});
  daemon_side.join();
  EXPECT_TRUE(slept.load()) << "the caller polled though 2 busy clients fill 2 CPUs";
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(r->refs.size(), 1u);
  EXPECT_EQ(r->refs[0], (proto::BlockRef{4, 2}));
}

// Many clients in a call, but all of them asleep but one: that one may poll (a sleeping
// client holds no core). Its poll budget is 10 s and kvpoold has taken its request, so it
// polls until answered; the daemon side answers once it has watched the caller poll for
// 200 ms without ever saying it sleeps. The same caller with two clients awake sleeps.
TEST(ClientChannel, ACallerPollsWhileTheAwakeClientsFitTheEnginesCpus) {
  for (const uint64_t awake : {uint64_t{1}, uint64_t{2}}) {
    SCOPED_TRACE("clients awake: " + std::to_string(awake));
    FakeDaemon d;
    d.control.header().stats.engine_cpus.store(2, std::memory_order_relaxed);
    d.control.header().stats.clients_busy.store(16, std::memory_order_relaxed);
    d.control.header().stats.clients_awake.store(kAwakePublished | awake,
                                                 std::memory_order_relaxed);
    ChannelOptions o;
    o.poll = std::chrono::seconds(10);
    auto ch = open_channel(d, o);
    auto corr = ch->send(proto::Opcode::kPing, 0, 0, nullptr, 0, kNothing);
    ASSERT_TRUE(corr.is_ok());
    d.take();
    // Polling is judged over 200 ms; sleeping as soon as the flag shows (5 s at most).
    const std::chrono::milliseconds window =
        awake == 1 ? std::chrono::milliseconds(200) : std::chrono::seconds(5);
    std::atomic<bool> slept{false};
    std::thread daemon_side([&] { slept = answer_after_watching(d, *corr, window); });
    auto r = ch->wait(*corr, [](uint64_t, Answer&&) {});
    daemon_side.join();
    if (awake == 1)
      EXPECT_FALSE(slept.load()) << "the caller slept though it alone was awake on 2 CPUs";
    else
      EXPECT_TRUE(slept.load()) << "the caller polled though 2 awake clients fill 2 CPUs";
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    ASSERT_EQ(r->refs.size(), 1u);
  }
}

// A full request ring waits for room and lets the owner read its answers meanwhile (the
// daemon stops taking requests while they are unread).
TEST(ClientChannel, AFullRingWaitsForRoomAndRunsOnFullMeanwhile) {
  FakeDaemon d;
  auto ch = open_channel(d);
  std::vector<std::byte> items(1000);
  int sent = 0;
  while (true) {
    auto c = ch->try_claim(static_cast<uint32_t>(proto::Opcode::kPing), 1000);
    ASSERT_TRUE(c.is_ok());
    if (*c == nullptr) break;
    ++sent;
  }
  ch->publish();
  ASSERT_GT(sent, 0);
  std::atomic<int> full_calls{0};
  std::thread daemon_side([&] {
    // Consumes once the sender said it found the ring full.
    while (full_calls.load() == 0) std::this_thread::yield();
    for (int i = 0; i < sent; ++i) {
      (void)d.requests->poll();
      d.requests->consume();
    }
  });
  auto c = ch->claim(static_cast<uint32_t>(proto::Opcode::kPing), 1000, [&] { ++full_calls; });
  daemon_side.join();
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_NE(*c, nullptr);
  EXPECT_GE(full_calls.load(), 1);
}

}  // namespace
}  // namespace kvpool::shm
