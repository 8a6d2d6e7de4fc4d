// The trust boundary (docs/design.md §3, §5; docs/security.md): each test performs one attack
// a hostile or buggy local client can make, with real processes against a real kvpoold, and
// checks that only the attacker is hurt: the daemon lives, everyone else's blocks and bytes
// are intact, and what the attacker held comes back.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "client_helpers.hpp"
#include "harness.hpp"
#include "kvpool/core/paths.hpp"
#include "kvpool/shm/lease_mutex.hpp"
#include "kvpool/shm/unix_socket.hpp"

namespace kvpool::mptest {
namespace {

constexpr uid_t kOtherUser = 65533;

// A client that speaks the handshake by hand: Hello, the Welcome's descriptors, the client
// segment mapped read-write, and (when asked) Ready, without ever taking its lease.
struct RawAttach {
  shm::UniqueFd sock;
  proto::Welcome welcome{};
  std::vector<shm::UniqueFd> fds;
  shm::Segment client;
  shm::ClientHeader* header() { return client.as<shm::ClientHeader>(); }
};

RawAttach raw_attach(const DaemonProcess& d, bool send_ready) {
  RawAttach r;
  auto sock = shm::connect_unix(d.socket_path());
  if (!sock) throw HarnessError("connect: " + sock.status().to_string());
  r.sock = std::move(sock.value());
  proto::Hello h{};
  h.magic = proto::kHelloMagic;
  h.type = proto::MsgType::kHello;
  h.layout_major = shm::kLayoutMajor;
  h.layout_minor = shm::kLayoutMinor;
  std::memcpy(h.instance, d.instance().data(), d.instance().size());
  if (!shm::send_message(r.sock.get(), std::as_bytes(std::span(&h, 1))).is_ok())
    throw HarnessError("send hello");
  alignas(8) std::byte buf[512];
  auto n = shm::recv_message(r.sock.get(), buf, &r.fds, 10000);
  if (!n || *n != sizeof(proto::Welcome))
    throw HarnessError("no welcome (" +
                       (n ? std::to_string(*n) + " bytes" : n.status().to_string()) + ")");
  std::memcpy(&r.welcome, buf, sizeof(r.welcome));
  auto seg = shm::Segment::map_fd(std::move(r.fds.at(1)), true);
  if (!seg) throw HarnessError("map client segment: " + seg.status().to_string());
  r.client = std::move(seg.value());
  if (send_ready) {
    proto::Ready ready{proto::kHelloMagic, proto::MsgType::kReady};
    if (!shm::send_message(r.sock.get(), std::as_bytes(std::span(&ready, 1))).is_ok())
      throw HarnessError("send ready");
  }
  return r;
}

bool slot_free(const DaemonView& v, uint32_t slot) {
  return v.slot(slot).state.load() == static_cast<uint32_t>(shm::SlotState::kFree);
}

// The daemon publishes a slot after its Welcome is on the way, so a client can be back from
// connect before its slot shows: wait for it before watching the slot go free again.
void wait_attached(const DaemonView& v, uint32_t slot) {
  wait_until(
      [&] { return v.slot(slot).state.load() == static_cast<uint32_t>(shm::SlotState::kAttached); },
      10s, "slot " + std::to_string(slot) + " to show attached", [&] { return v.describe(); });
}

// ---- Critical 1: the daemon never runs pthread code on client memory -----------------------

// glibc links a robust mutex its caller locks into the caller's robust list through the
// mutex's own __list pointers, and unlinks it through them on unlock. A daemon that probed
// a client's lease with trylock/unlock followed pointers this client rewrites from a second
// thread while it hangs up: a general protection fault in the daemon. Now it only reads the
// lease word.
TEST(TrustBoundary, LeaseListScribblerCannotCrashTheDaemon) {
  DaemonProcess d(test_config(nlohmann::json::array({host_pool("g", 16)})));
  d.start();
  auto v = d.view();
  WorkerProcess keeper(d, "holder", {"--mutable", "1", "--register", "1"});
  keeper.expect_line("READY");
  keeper.expect_line("HOLDING");
  for (int round = 0; round < 20; ++round) {
    RawAttach a = raw_attach(d, /*send_ready=*/true);
    const uint32_t slot = a.welcome.slot;
    wait_until([&] { return !slot_free(v, slot); }, 5s, "the raw client to be attached");
    std::atomic<bool> stop{false};
    auto* m = &a.header()->lease.m;
    std::thread scribbler([&] {
      std::mt19937_64 rng(static_cast<uint64_t>(round) * 7919 + 1);
      while (!stop.load(std::memory_order_relaxed)) {
        // Pointers into nowhere and into the daemon's likely heap, as fast as we can.
        __atomic_store_n(reinterpret_cast<uint64_t*>(&m->__data.__list.__prev),
                         rng() | 0x8000000000000000ull, __ATOMIC_RELAXED);
        __atomic_store_n(reinterpret_cast<uint64_t*>(&m->__data.__list.__next), rng() & ~7ull,
                         __ATOMIC_RELAXED);
      }
    });
    a.sock.reset();  // hang up: the daemon decides whether this client is gone
    wait_until([&] { return slot_free(v, slot) || !d.running(); }, 10s,
               "the scribbler's slot to be freed", [&] { return v.describe(); });
    stop.store(true);
    scribbler.join();
    ASSERT_TRUE(d.running()) << "round " << round << ": kvpoold died\n" << d.stderr_text();
  }
  EXPECT_EQ(keeper.command("verify"), "OK regions=4");
  Client good = connect_client(d);
  EXPECT_TRUE(good.ping().is_ok());
  expect_invariants(v);
}

// ---- High 4: a lease word naming someone else's thread proves nothing ---------------------

TEST(TrustBoundary, DeadClientWhoseLeaseNamesAnotherThreadIsReclaimed) {
  DaemonProcess d(test_config(nlohmann::json::array({host_pool("g", 16)})));
  d.start();
  auto v = d.view();
  const uint64_t reclaimed0 = stat_of(v.stats().reclaimed_clients);
  WorkerProcess liar(KVPOOL_ATTACKER_PATH, d, "liar");
  std::string line = liar.expect_line("LIED slot=");
  const uint32_t slot = static_cast<uint32_t>(std::stoul(line.substr(10)));
  auto st = liar.wait_exit(10s);
  ASSERT_TRUE(st && st->exited()) << "the liar did not exit";
  // Its lease word still says "held by tid 1" (init, alive); only the pidfd knows better.
  wait_until([&] { return slot_free(v, slot); }, 10s, "the liar's slot to be reclaimed",
             [&] { return v.describe(); });
  wait_counts(v, Want{16, 0, 0, 0});
  EXPECT_EQ(stat_of(v.stats().reclaimed_clients), reclaimed0 + 1);
  EXPECT_TRUE(d.stderr_gets("client reclaimed: slot " + std::to_string(slot))) << d.stderr_text();
}

// A live client whose socket hangs up but who still holds its lease is not reclaimed under
// its feet; the engine stops watching its dead socket (level-triggered, it would keep the
// engine from ever parking) and decides from the pidfd when the process exits.
TEST(TrustBoundary, LiveClientThatHangsUpKeepsItsBlocksAndTheEngineParks) {
  DaemonProcess d(test_config(nlohmann::json::array({host_pool("g", 16)})));
  d.start();
  auto v = d.view();
  auto c = open_connection(d);
  auto r = must_call(*c, Opcode::kAllocate, 0, 2, nullptr, 0);
  ASSERT_EQ(r.code, ErrorCode::kOk);
  const uint32_t slot = c->slot();
  // Hang up our sending side: the daemon reads EOF, while our lease thread (which watches
  // for the daemon's hang-up) keeps the lease.
  ::shutdown(c->socket_fd(), SHUT_WR);
  wait_until(
      [&] { return v.slot(slot).state.load() == static_cast<uint32_t>(shm::SlotState::kSuspect); },
      10s, "the slot to be flagged suspect", [&] { return v.describe(); });
  wait_counts(v, Want{14, 2, 0, 0});
  // The engine parks again: its sleep count keeps rising while nobody asks anything.
  const uint64_t sleeps = stat_of(v.stats().engine_sleeps);
  wait_until([&] { return stat_of(v.stats().engine_sleeps) >= sleeps + 5; }, 10s,
             "the engine to park with a hung-up suspect");
  c.reset();  // our lease thread gives the lease back: a clean detach
  wait_until([&] { return slot_free(v, slot); }, 10s, "the suspect to be released",
             [&] { return v.describe(); });
  wait_counts(v, Want{16, 0, 0, 0});
}

// ---- Critical 2: nothing a client does to its descriptors hurts anyone else -----------------

TEST(TrustBoundary, PoolDescriptorCannotBeResizedAndHasNoName) {
  DaemonProcess d(test_config(nlohmann::json::array({host_pool("g", 16)})));
  d.start();
  auto v = d.view();
  WorkerProcess writer(d, "writer", {"--blocks", "3"});
  writer.expect_line("READY");
  std::string reg = writer.expect_line("REGISTERED");
  WorkerProcess attacker(KVPOOL_ATTACKER_PATH, d, "truncate");
  EXPECT_EQ(attacker.expect_line("TRUNCATE"), "TRUNCATE shrink=EPERM grow=EPERM");
  // Everyone still reads their bytes (a shrink would have SIGBUSed them), and new clients
  // still map the pool.
  EXPECT_EQ(writer.command("verify"), "OK regions=12");
  const std::string hashes =
      reg.substr(reg.find("hashes=") + 7, reg.find(" ids=") - reg.find("hashes=") - 7);
  std::vector<std::string> args;
  for (size_t p = 0; p < hashes.size();) {
    size_t e = hashes.find(',', p);
    if (e == std::string::npos) e = hashes.size();
    args.push_back(hashes.substr(p, e - p));
    p = e + 1;
  }
  WorkerProcess reader(d, "reader", args);
  reader.expect_line("READY");
  reader.expect_line("MATCHED n=3");
  EXPECT_EQ(reader.expect_line("VERIFIED"), "VERIFIED regions=12");
  // No segment of this daemon has a name anyone could open (or squat before it starts).
  EXPECT_TRUE(d.shm_files().empty());
  // The memfds are the daemon's own, mode 0600: a client's read-only descriptor cannot be
  // re-opened read-write by another user.
  for (const auto& e :
       std::filesystem::directory_iterator("/proc/" + std::to_string(d.pid()) + "/fd")) {
    char link[512];
    ssize_t n = ::readlink(e.path().c_str(), link, sizeof(link) - 1);
    if (n <= 0 || std::string(link, static_cast<size_t>(n)).rfind("/memfd:kvpool.", 0) != 0)
      continue;
    struct stat st {};
    ASSERT_EQ(::stat(e.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u) << std::string(link, static_cast<size_t>(n));
  }
  ASSERT_TRUE(d.running());
}

// ---- Critical 3: reference counts cannot wrap ------------------------------------------------

TEST(TrustBoundary, RepeatedHashesHitThePerBlockReferenceCap) {
  auto pools = nlohmann::json::array({host_pool("g", 16)});
  pools[0]["max_holds"] = 1024;  // room for the references: the quota is what stops them
  auto cfg = test_config(pools);
  cfg["quota"] = {{"max_refs_per_block", 100}};
  DaemonProcess d(cfg);
  d.start();
  auto v = d.view();
  WorkerProcess writer(d, "writer", {"--blocks", "1"});
  writer.expect_line("READY");
  std::string reg = writer.expect_line("REGISTERED");
  const uint64_t hash = std::stoull(reg.substr(reg.find("hashes=") + 7));
  auto c = open_connection(d);
  // 150 references on one block in one call: refused whole, nothing taken.
  std::vector<uint64_t> same(150, hash);
  auto r = must_call(*c, Opcode::kMatch, 0, 150, same.data(), same.size() * 8);
  EXPECT_EQ(r.code, ErrorCode::kQuotaExceeded) << r.message;
  EXPECT_TRUE(contains(r.message, "max_refs_per_block")) << r.message;
  EXPECT_EQ(
      v.pool().block(static_cast<uint32_t>(std::stoul(reg.substr(reg.find("ids=") + 4)))).refcount,
      1u);
  // Up to the cap is fine; one more is not, across calls too.
  same.resize(99);
  r = must_call(*c, Opcode::kMatch, 0, 99, same.data(), same.size() * 8);
  ASSERT_EQ(r.code, ErrorCode::kOk) << r.message;
  EXPECT_EQ(r.refs.size(), 99u);
  r = must_call(*c, Opcode::kMatch, 0, 1, same.data(), 8);
  ASSERT_EQ(r.code, ErrorCode::kOk) << r.message;
  r = must_call(*c, Opcode::kMatch, 0, 1, same.data(), 8);
  EXPECT_EQ(r.code, ErrorCode::kQuotaExceeded) << r.message;
  expect_invariants(v);
  // The writer's reference is untouched; the attacker's hundred go in one step when it dies.
  const uint32_t slot = c->slot();
  c.reset();
  wait_until([&] { return slot_free(v, slot); }, 10s, "the attacker to detach");
  wait_counts(v, Want{15, 0, 1, 0});
  EXPECT_EQ(writer.command("verify"), "OK regions=4");
  expect_invariants(v);
}

TEST(TrustBoundary, ConfigRefusesACapThatCouldWrapACount) {
  auto cfg = test_config();
  cfg["max_clients"] = 4096;
  cfg["quota"] = {{"max_refs_per_block", 1 << 20}};
  DaemonProcess d(cfg);
  d.spawn();
  auto st = d.wait_exit(15s);
  ASSERT_TRUE(st && st->exited() && st->code() != 0);
  EXPECT_TRUE(d.stderr_gets("quota.max_refs_per_block")) << d.stderr_text();
}

// ---- Medium 9: quotas ------------------------------------------------------------------------

TEST(TrustBoundary, QuotasBoundWhatOneClientHolds) {
  auto cfg = test_config(nlohmann::json::array({host_pool("g", 32)}));
  cfg["quota"] = {{"max_mutable_blocks", 4}, {"max_references", 6}, {"max_priority", 10}};
  DaemonProcess d(cfg);
  d.start();
  auto v = d.view();
  Client c = connect_client(d);
  Pool p = pool_of(c);
  auto five = p.allocate_blocks(5);
  ASSERT_FALSE(five);
  EXPECT_EQ(five.status().code(), ErrorCode::kQuotaExceeded);
  EXPECT_TRUE(contains(five.status().message(), "max_mutable_blocks")) << five.status().message();
  auto four = p.allocate_blocks(4);
  ASSERT_TRUE(four) << four.status().to_string();
  // Priority above the cap: refused, the blocks stay the caller's.
  std::optional<SequenceHash> parent;
  for (uint32_t i = 0; i < 4; ++i) {
    MutableBlock& b = (*four)[i];
    ASSERT_TRUE(b.init_sequence(7, parent).is_ok());
    std::vector<Token> t{i * 4 + 1, i * 4 + 2, i * 4 + 3, i * 4 + 4};
    ASSERT_TRUE(b.add_tokens(t));
    ASSERT_TRUE(b.commit().is_ok());
    parent = *b.sequence_hash();
    b.set_priority(i == 3 ? 11 : 1);
  }
  auto hi = p.register_blocks(std::move(*four));
  ASSERT_FALSE(hi);
  EXPECT_EQ(hi.status().code(), ErrorCode::kQuotaExceeded);
  EXPECT_TRUE(contains(hi.status().message(), "max_priority")) << hi.status().message();
  expect_invariants(v);
  // Another client is not limited by this one's holdings.
  Client other = connect_client(d);
  Pool op = pool_of(other);
  auto theirs = op.allocate_blocks(4);
  EXPECT_TRUE(theirs) << theirs.status().to_string();
}

// ---- High 5 + 14: per-pool allow-lists -------------------------------------------------------

TEST(TrustBoundary, APoolClosedToAUidSendsItNoDescriptorAndRefusesItsRequests) {
  auto pools = nlohmann::json::array({host_pool("g", 16), host_pool("secret", 16)});
  pools[1]["allowed_uids"] = {kNobody};
  DaemonProcess d(test_config(pools));
  d.start();
  auto v = d.view();
  // Let nobody reach the socket (the harness makes it 0660 root:root).
  ASSERT_EQ(::chmod(d.socket_path().c_str(), 0666), 0);
  ASSERT_EQ(::chmod(d.dir().c_str(), 0755), 0);
  // nobody may use "secret".
  WorkerProcess owner(d, "holder",
                      {"--as-gid", "65534", "--as-uid", "65534", "--pool", "secret", "--mutable",
                       "1", "--register", "1"});
  owner.expect_line("READY");
  owner.expect_line("HOLDING");
  // root (the test) may not: the pool is listed, but it got no descriptor for it...
  auto c = open_connection(d);
  ASSERT_EQ(c->pools().size(), 2u);
  EXPECT_FALSE(c->pools()[1].usable);
  EXPECT_EQ(c->pools()[1].data.data(), nullptr) << "the closed pool was mapped";
  EXPECT_TRUE(c->pools()[0].usable);
  // ... and the daemon refuses what it asks of it, whatever the library would have let by.
  auto r = must_call(*c, Opcode::kAllocate, 1, 1, nullptr, 0);
  EXPECT_EQ(r.code, ErrorCode::kPermissionDenied) << r.message;
  EXPECT_TRUE(contains(r.message, "pool 'secret' is not open to this client")) << r.message;
  std::vector<uint64_t> probe{1, 2, 3};
  r = must_call(*c, Opcode::kMatch, 1, 3, probe.data(), probe.size() * 8);
  EXPECT_EQ(r.code, ErrorCode::kPermissionDenied) << r.message;
  EXPECT_TRUE(counts_match(v.counts(1), Want{14, 1, 1, 0})) << v.describe();
  EXPECT_EQ(must_call(*c, Opcode::kAllocate, 0, 1, nullptr, 0).code, ErrorCode::kOk);
  // Through the library: a clear error when the pool is opened.
  WorkerProcess root_worker(d, "holder", {"--pool", "secret", "--mutable", "1"});
  std::string line = root_worker.expect_line("ERR");
  EXPECT_TRUE(contains(line, "PermissionDenied")) << line;
  EXPECT_TRUE(contains(line, "pool 'secret' is not open to uid 0")) << line;
  EXPECT_EQ(owner.command("verify"), "OK regions=4");
}

// A test worker run as uid nobody (group `gid`) with no runtime_dir, so that libkvpool
// resolves the daemon itself; its first line ("READY ..." or "ERR ...") and how it exited.
struct FirstLine {
  std::string line;
  std::optional<ExitStatus> exit;
};

FirstLine worker_as_nobody(const std::string& instance, gid_t gid,
                           const std::vector<std::string>& env) {
  ChildProcess c;
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw HarnessError("pipe2");
  shm::UniqueFd rd(out[0]), wr(out[1]);
  c.spawn({KVPOOL_TEST_WORKER_PATH, "--instance", instance, "--runtime-dir", "", "idle", "--as-gid",
           std::to_string(gid), "--as-uid", std::to_string(kNobody)},
          env, -1, wr.get(), 2);
  wr.reset();
  FirstLine r;
  char ch;
  while (::read(rd.get(), &ch, 1) == 1 && ch != '\n') r.line += ch;
  r.exit = c.wait_exit(20s);  // stdin is /dev/null: an attached worker detaches and exits
  return r;
}

// ---- High 6 (+ operations issue 1): finding the daemon, and only the real one ---------------

// A member of the daemon's group reaches its socket (0660) in a directory it cannot write
// (0750), as under the shipped unit; it must find it there, not fall through to /tmp.
TEST(TrustBoundary, GroupMemberFindsTheDaemonInADirectoryItCannotWrite) {
  constexpr gid_t kGroup = 23456;
  DaemonProcess d;
  d.start();
  ASSERT_EQ(::chmod(d.dir().c_str(), 0755), 0);
  ASSERT_EQ(::chown(d.runtime_dir().c_str(), 0, kGroup), 0);
  ASSERT_EQ(::chmod(d.runtime_dir().c_str(), 0750), 0);
  ASSERT_EQ(::chown(d.socket_path().c_str(), 0, kGroup), 0);
  ASSERT_EQ(::chmod(d.socket_path().c_str(), 0660), 0);
  // No runtime_dir given: the client resolves it ($KVPOOL_RUNTIME_DIR first in the order).
  // Through the worker (libkvpool's resolution) as nobody, first in the group, then not.
  const std::vector<std::string> env{"KVPOOL_RUNTIME_DIR=" + d.runtime_dir(), "PATH=/usr/bin:/bin"};
  std::string in_group = worker_as_nobody(d.instance(), kGroup, env).line;
  EXPECT_TRUE(in_group.rfind("READY", 0) == 0) << in_group;
  std::string outsider = worker_as_nobody(d.instance(), kNobody, env).line;
  EXPECT_TRUE(contains(outsider, "ERR")) << outsider;
  EXPECT_TRUE(contains(outsider, "join the daemon's group")) << outsider;
  EXPECT_TRUE(contains(outsider, d.runtime_dir())) << outsider;
}

// Another local user creates /tmp/kvpool-<victim uid> first and serves a fake daemon there;
// the victim's client must not use it (and must not hand it its KV cache).
TEST(TrustBoundary, FakeDaemonInSharedTmpIsNotTrusted) {
  const std::string dir = "/tmp/kvpool-" + std::to_string(kNobody);
  std::filesystem::remove_all(dir);
  ASSERT_EQ(::mkdir(dir.c_str(), 0777), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  ASSERT_EQ(::chown(dir.c_str(), kOtherUser, kOtherUser), 0);
  struct Cleanup {
    std::string d;
    ~Cleanup() { std::filesystem::remove_all(d); }
  } cleanup{dir};
  // The fake daemon: a listening socket owned by the other user.
  const std::string sock = dir + "/fake.sock";
  auto l = shm::listen_unix(sock);
  ASSERT_TRUE(l) << l.status().to_string();
  ASSERT_EQ(::chmod(sock.c_str(), 0777), 0);
  ASSERT_EQ(::chown(sock.c_str(), kOtherUser, kOtherUser), 0);

  const FirstLine r = worker_as_nobody("fake", kNobody, {"PATH=/usr/bin:/bin"});
  const std::string& first = r.line;
  ASSERT_TRUE(r.exit);
  EXPECT_NE(r.exit->code(), 0);
  EXPECT_TRUE(contains(first, "NotFound")) << first;
  EXPECT_TRUE(contains(first, "not trusted")) << first;
  // Nobody ever connected to the fake.
  auto accepted = shm::accept_unix(l->get());
  ASSERT_TRUE(accepted);
  EXPECT_FALSE(accepted->valid()) << "the victim connected to the fake daemon";
}

// Given a runtime_dir explicitly, a server that is neither root, the caller, nor the owner of
// the directory is refused after connect (SO_PEERCRED).
TEST(TrustBoundary, ServerOfAnotherUserIsRefusedAfterConnect) {
  char tmpl[] = "/tmp/kvpool-peer-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  struct Cleanup {
    std::string d;
    ~Cleanup() { std::filesystem::remove_all(d); }
  } cleanup{dir};
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  const std::string sock = dir + "/x.sock";
  int ready[2];
  ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The fake server, as another user: only async-signal-safe calls after fork.
    if (::setgid(kOtherUser) != 0 || ::setuid(kOtherUser) != 0) ::_exit(2);
    int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path, sock.c_str(), sock.size() + 1);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd, 4) != 0)
      ::_exit(3);
    char one = 1;
    (void)!::write(ready[1], &one, 1);
    for (;;) {
      int c = ::accept(fd, nullptr, nullptr);
      if (c >= 0) (void)!::write(ready[1], &one, 1);
    }
  }
  ::close(ready[1]);
  char b;
  ASSERT_EQ(::read(ready[0], &b, 1), 1) << "the fake server did not start";
  ConnectOptions o;
  o.runtime_dir = dir;
  o.connect_timeout = 2s;
  auto c = Client::connect("x", o);
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  ::close(ready[0]);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.status().code(), ErrorCode::kPermissionDenied) << c.status().to_string();
  EXPECT_TRUE(contains(c.status().message(), "runs as uid " + std::to_string(kOtherUser)))
      << c.status().message();
}

// ---- High 7 + 8: connections that never attach -------------------------------------------

TEST(TrustBoundary, HellosWithoutReadyTimeOutAndACapPerUidHolds) {
  auto cfg = test_config();
  cfg["max_clients"] = 6;
  cfg["attach_timeout_ms"] = 2000;
  DaemonProcess d(cfg);
  d.start();
  auto v = d.view();
  std::vector<RawAttach> squatters;
  for (int i = 0; i < 6; ++i) squatters.push_back(raw_attach(d, /*send_ready=*/false));
  // Every slot taken by clients that never say Ready; then they are dropped.
  ConnectOptions o;
  o.runtime_dir = d.runtime_dir();
  auto refused = Client::connect(d.instance(), o);
  ASSERT_FALSE(refused) << "a slot was free while six clients were attaching";
  EXPECT_EQ(refused.status().code(), ErrorCode::kResourceExhausted);
  wait_until([&] { return v.clients() == 0; }, 10s, "the squatters' slots to time out",
             [&] { return v.describe(); });
  EXPECT_TRUE(d.stderr_gets("no Ready within attach_timeout_ms")) << d.stderr_text();
  Client good = connect_client(d);
  EXPECT_TRUE(good.ping().is_ok());
}

TEST(TrustBoundary, SlotsPerUidAreCapped) {
  auto cfg = test_config();
  cfg["max_clients"] = 8;
  cfg["max_clients_per_uid"] = 2;
  DaemonProcess d(cfg);
  d.start();
  Client a = connect_client(d);
  Client b = connect_client(d);
  ConnectOptions o;
  o.runtime_dir = d.runtime_dir();
  auto c = Client::connect(d.instance(), o);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.status().code(), ErrorCode::kResourceExhausted);
  EXPECT_TRUE(contains(c.status().message(), "max_clients_per_uid")) << c.status().message();
}

// ---- Issue 27 item 5: one uid's share is capped by default ------------------------------------

// The shipped default (uid_share_percent 87), which test_config() turns off.
nlohmann::json default_share_config(nlohmann::json pools = nullptr) {
  auto cfg = test_config(std::move(pools));
  cfg.erase("uid_share_percent");
  return cfg;
}

// A worker of uid nobody on pool g holding `mutable` blocks; the socket opened to it.
std::unique_ptr<WorkerProcess> nobody_holding(const DaemonProcess& d, uint32_t mutable_blocks) {
  EXPECT_EQ(::chmod(d.socket_path().c_str(), 0666), 0);
  EXPECT_EQ(::chmod(d.dir().c_str(), 0755), 0);
  auto w = std::make_unique<WorkerProcess>(
      d, "holder",
      std::vector<std::string>{"--as-gid", "65534", "--as-uid", "65534", "--mutable",
                               std::to_string(mutable_blocks), "--register", "0"});
  w->expect_line("READY");
  w->expect_line("HOLDING");
  return w;
}

TEST(TrustBoundary, OneUidTakesAtMostItsShareOfTheSlotsByDefault) {
  auto cfg = default_share_config();
  cfg["max_clients"] = 8;  // 87 % of 8: 6 slots for one uid, 2 left for the others
  DaemonProcess d(cfg);
  d.start();
  std::vector<Client> mine;
  for (int i = 0; i < 6; ++i) mine.push_back(connect_client(d));
  ConnectOptions o;
  o.runtime_dir = d.runtime_dir();
  auto seventh = Client::connect(d.instance(), o);
  ASSERT_FALSE(seventh) << "one uid took a 7th of 8 slots under the default share";
  EXPECT_EQ(seventh.status().code(), ErrorCode::kResourceExhausted);
  EXPECT_TRUE(
      contains(seventh.status().message(), "max_clients_per_uid 6, from uid_share_percent 87"))
      << seventh.status().message();
  // Another uid still gets a slot.
  auto other = nobody_holding(d, 1);
  EXPECT_EQ(other->command("ping").rfind("OK", 0), 0u);
}

TEST(TrustBoundary, OneUidTakesAtMostItsShareOfAPoolOverAllItsClientsByDefault) {
  DaemonProcess d(default_share_config(nlohmann::json::array({host_pool("g", 16)})));
  d.start();
  // 87 % of 16 blocks: 13 for one uid however many clients it spreads them over.
  Client a = connect_client(d);
  Client b = connect_client(d);
  auto ha = pool_of(a).allocate_blocks(8);
  ASSERT_TRUE(ha) << ha.status().to_string();
  auto hb = pool_of(b).allocate_blocks(5);
  ASSERT_TRUE(hb) << hb.status().to_string();
  auto more = pool_of(b).allocate_blocks(1);
  ASSERT_FALSE(more) << "uid 0 took a 14th block of 16 over two clients";
  EXPECT_EQ(more.status().code(), ErrorCode::kQuotaExceeded);
  EXPECT_TRUE(
      contains(more.status().message(), "uid 0 holds 13 of pool 'g''s 16 blocks over 2 client(s)"))
      << more.status().message();
  EXPECT_TRUE(contains(more.status().message(), "uid_share_percent 87")) << more.status().message();
  // A third client of the same uid is held to the same share; a match counts too.
  Client c = connect_client(d);
  auto hc = pool_of(c).allocate_blocks(1);
  ASSERT_FALSE(hc);
  EXPECT_EQ(hc.status().code(), ErrorCode::kQuotaExceeded);
  // More than the pool has is still the pool's own answer.
  auto too_many = pool_of(c).allocate_blocks(17);
  ASSERT_FALSE(too_many);
  EXPECT_EQ(too_many.status().code(), ErrorCode::kNotEnoughBlocks);
  // Another uid gets the rest.
  auto other = nobody_holding(d, 3);
  // Given back, the share is free again.
  ha->clear();
  a.flush();
  auto v = d.view();
  wait_until([&] { return v.counts(0).mutable_blocks == 8; }, 10s, "uid 0's 8 blocks back",
             [&] { return v.describe(); });
  auto again = pool_of(b).allocate_blocks(8);
  EXPECT_TRUE(again) << again.status().to_string();
}

// A single-tenant host (allowed_uids names one uid) shares with nobody: that uid's workers
// take every slot and every block under the default share.
TEST(TrustBoundary, ASingleAllowedUidTakesTheWholePoolAndEverySlot) {
  auto cfg = default_share_config(nlohmann::json::array({host_pool("g", 16)}));
  cfg["max_clients"] = 8;
  cfg["allowed_uids"] = nlohmann::json::array({::getuid()});
  DaemonProcess d(cfg);
  d.start();
  std::vector<Client> mine;
  for (int i = 0; i < 8; ++i) mine.push_back(connect_client(d));
  auto a = pool_of(mine[0]).allocate_blocks(10);
  ASSERT_TRUE(a) << a.status().to_string();
  auto b = pool_of(mine[7]).allocate_blocks(6);
  ASSERT_TRUE(b) << "the 14th-16th blocks of one allowed uid: " << b.status().to_string();
  EXPECT_EQ(d.view().counts(0).mutable_blocks, 16u);
}

// Issue 27 item 6: users who each stay within max_pending_per_uid but together fill
// max_pending_connections do not lock a further user out.
TEST(TrustBoundary, UsersFillingThePendingCapDoNotLockOutAnotherUser) {
  auto cfg = test_config();
  cfg["max_pending_connections"] = 8;
  cfg["max_pending_per_uid"] = 4;
  cfg["attach_timeout_ms"] = 60000;  // they wait for their hello all along
  DaemonProcess d(cfg);
  d.start();
  ASSERT_EQ(::chmod(d.socket_path().c_str(), 0666), 0);
  ASSERT_EQ(::chmod(d.dir().c_str(), 0755), 0);
  // Two uids, four silent connections each: 8 of 8 wait for their hello.
  std::vector<pid_t> holders;
  int hold[2];
  ASSERT_EQ(::pipe2(hold, O_CLOEXEC), 0);
  for (uid_t uid : {61001u, 61002u}) {
    int ready[2];
    ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
    const std::string path = d.socket_path();
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {      // only async-signal-safe calls after fork
      ::close(hold[1]);  // so that the read below sees EOF once the test closes its end
      if (::setgid(uid) != 0 || ::setuid(uid) != 0) ::_exit(2);
      sockaddr_un a{};
      a.sun_family = AF_UNIX;
      std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
      for (int i = 0; i < 4; ++i) {
        int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
        if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) ::_exit(3);
      }
      char one = 1;
      (void)!::write(ready[1], &one, 1);
      char b;
      (void)!::read(hold[0], &b, 1);  // until the test closes its end
      ::_exit(0);
    }
    ::close(ready[1]);
    char b = 0;
    ASSERT_EQ(::read(ready[0], &b, 1), 1) << "uid " << uid << " could not connect 4 times";
    ::close(ready[0]);
    holders.push_back(pid);
  }
  // The daemon accepts in connect order: these 8 are pending before our connection is.
  ConnectOptions o;
  o.runtime_dir = d.runtime_dir();
  auto c = Client::connect(d.instance(), o);
  EXPECT_TRUE(c) << "locked out by two users' pending connections: " << c.status().to_string();
  if (c) {
    EXPECT_TRUE(c->ping().is_ok());
  }
  EXPECT_TRUE(d.stderr_gets("max_pending_connections reached: dropped the oldest"))
      << d.stderr_text();
  ::close(hold[1]);
  ::close(hold[0]);
  for (pid_t pid : holders) {
    int st = 0;
    ::waitpid(pid, &st, 0);
  }
}

TEST(TrustBoundary, AcceptAtTheDescriptorLimitBacksOffInsteadOfSpinning) {
  auto cfg = test_config();
  cfg["max_pending_connections"] = 512;
  cfg["max_pending_per_uid"] = 512;
  DaemonProcess d(cfg);
  d.start();
  auto v = d.view();  // now: at the limit, the daemon cannot take a connection to observe
  // Lower the running daemon's descriptor limit, then open more connections than it can take.
  const std::string lim = "prlimit --pid " + std::to_string(d.pid()) + " --nofile=48:";
  ASSERT_EQ(std::system(lim.c_str()), 0);
  std::vector<shm::UniqueFd> flood;
  for (int i = 0; i < 80; ++i) {
    auto s = shm::connect_unix(d.socket_path());
    if (s) flood.push_back(std::move(s.value()));
  }
  // It says so in the log, rate-limited (a spinning accept loop wrote thousands of lines a
  // second), and stays alive.
  wait_until([&] { return contains(d.stderr_text(), "not accepting for 100 ms"); }, 10s,
             "the daemon to report EMFILE");
  const uint64_t sleeps = stat_of(v.stats().engine_sleeps);
  wait_until([&] { return stat_of(v.stats().engine_sleeps) >= sleeps + 5; }, 10s,
             "the engine to keep parking while connections are queued");
  size_t lines = 0;
  {
    std::istringstream in(d.stderr_text());
    std::string l;
    while (std::getline(in, l)) lines += contains(l, "accept:");
  }
  EXPECT_LE(lines, 20u) << "accept warnings are not rate-limited";
  flood.clear();
  ASSERT_EQ(std::system(("prlimit --pid " + std::to_string(d.pid()) + " --nofile=1024:").c_str()),
            0);
  wait_until(
      [&] {
        ConnectOptions o;
        o.runtime_dir = d.runtime_dir();
        auto c = Client::connect(d.instance(), o);
        return c.is_ok();
      },
      10s, "an honest client to attach once the flood is gone");
}

// ---- Medium 10: a stalled daemon, a forked client --------------------------------------------

TEST(TrustBoundary, StoppedDaemonGivesDaemonUnresponsiveNotAHang) {
  DaemonProcess d;
  d.start();
  ConnectOptions o;
  o.runtime_dir = d.runtime_dir();
  o.unresponsive_after = 300ms;
  auto c = Client::connect(d.instance(), o);
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->ping().is_ok());
  d.kill(SIGSTOP);
  Status st = c->ping();
  d.kill(SIGCONT);
  EXPECT_EQ(st.code(), ErrorCode::kDaemonUnresponsive) << st.to_string();
  EXPECT_TRUE(contains(st.message(), "stopped or wedged")) << st.message();
  // Once it runs again the same client works.
  wait_until([&] { return c->ping().is_ok(); }, 10s, "the client to work after SIGCONT");
}

TEST(TrustBoundary, ClientInheritedThroughForkFailsCleanlyInTheChild) {
  DaemonProcess d;
  d.start();
  Client c = connect_client(d);
  ASSERT_TRUE(c.ping().is_ok());
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    Status st = c.ping();
    uint16_t code = static_cast<uint16_t>(st.code());
    (void)!::write(p[1], &code, sizeof(code));
    ::_exit(0);
  }
  ::close(p[1]);
  uint16_t code = 0;
  ssize_t n = ::read(p[0], &code, sizeof(code));
  ::close(p[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_EQ(n, static_cast<ssize_t>(sizeof(code))) << "the child hung or died";
  EXPECT_EQ(static_cast<ErrorCode>(code), ErrorCode::kDisconnected);
  EXPECT_TRUE(c.ping().is_ok()) << "the parent's client is unaffected";
}

// ---- Medium 11 + 12: floods and protocol abuse on the socket ---------------------------------

TEST(TrustBoundary, BogusReleaseFloodCutsOffTheFlooderOnly) {
  DaemonProcess d;
  d.start();
  auto v = d.view();
  Client good = connect_client(d);
  auto bad = open_connection(d);
  const uint32_t slot = bad->slot();
  wait_attached(v, slot);
  std::vector<BlockRef> junk(1024);
  for (uint32_t i = 0; i < junk.size(); ++i) junk[i] = BlockRef{i % 64, 0xDEAD0000u + i};
  std::vector<std::byte> rec(sizeof(proto::RequestHeader) + junk.size() * sizeof(BlockRef));
  proto::RequestHeader h{0, 0, static_cast<uint32_t>(junk.size())};
  std::memcpy(rec.data(), &h, sizeof(h));
  std::memcpy(rec.data() + sizeof(h), junk.data(), junk.size() * sizeof(BlockRef));
  // 200 records of 1024 handles it does not hold; the ring holds ~30 at a time, so each
  // send waits for room (or for the daemon to cut it off).
  for (int i = 0; i < 200 && !slot_free(v, slot); ++i) {
    wait_until(
        [&] {
          return slot_free(v, slot) ||
                 bad->send_raw(static_cast<uint32_t>(Opcode::kReleaseImmutable), rec.data(),
                               static_cast<uint32_t>(rec.size()))
                     .is_ok();
        },
        10s, "room on the flooder's ring");
    if (i % 16 == 0) {
      EXPECT_TRUE(good.ping().is_ok());
    }
  }
  wait_until([&] { return slot_free(v, slot); }, 10s, "the flooder to be cut off",
             [&] { return v.describe(); });
  auto r = bad->call(Opcode::kPing, 0, 0, nullptr, 0);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().code(), ErrorCode::kDisconnected) << r.status().to_string();
  EXPECT_TRUE(contains(r.status().message(), "release handles refused")) << r.status().message();
  EXPECT_TRUE(good.ping().is_ok());
}

TEST(TrustBoundary, OversizedSocketMessageDisconnectsInsteadOfSuspecting) {
  DaemonProcess d;
  d.start();
  auto v = d.view();
  auto bad = open_connection(d);
  const uint32_t slot = bad->slot();
  wait_attached(v, slot);
  const uint64_t dc0 = stat_of(v.stats().disconnects);
  std::vector<std::byte> big(200, std::byte{0x41});
  ASSERT_TRUE(shm::send_message(bad->socket_fd(), big).is_ok());
  wait_until([&] { return slot_free(v, slot); }, 10s, "the sender to be disconnected",
             [&] { return v.describe(); });
  EXPECT_EQ(stat_of(v.stats().disconnects), dc0 + 1);
  auto r = bad->call(Opcode::kPing, 0, 0, nullptr, 0);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().code(), ErrorCode::kDisconnected) << r.status().to_string();
  EXPECT_TRUE(contains(r.status().message(), "malformed message on the socket"))
      << r.status().message();
}

// ---- Trust model 13: read-only means read-only ------------------------------------------------

TEST(TrustBoundary, WriteThroughAnImmutableBlockFaultsInTheWriterOnly) {
  DaemonProcess d;
  d.start();
  auto v = d.view();
  WorkerProcess writer(d, "writer", {"--blocks", "2"});
  writer.expect_line("READY");
  writer.expect_line("REGISTERED");
  writer.send_line("scribble-immutable");
  writer.expect_line("WRITING");
  auto st = writer.wait_exit(10s);
  ASSERT_TRUE(st) << "the writer survived its write (or hung)";
  EXPECT_TRUE(st->signaled() && st->signal() == SIGSEGV) << st->describe();
  // Its blocks come back as registered, matchable and intact (nothing was written).
  wait_counts(v, Want{-1, 0, 0, 2});
  expect_invariants(v);
}

// Operations issue, bug 3: a client that takes over a slot starts from zero, not from its
// predecessor's request and hit counts (kvpoolctl clients, /metrics).
TEST(SlotCounters, ANewClientInAReusedSlotStartsFromZero) {
  auto cfg = test_config();
  cfg["max_clients"] = 1;  // every client gets the one slot its predecessor had
  DaemonProcess d(cfg);
  d.start();
  auto v = d.view();
  std::string hashes;
  {
    WorkerProcess writer(d, "writer", {"--blocks", "2"});
    writer.expect_line("READY slot=0");
    std::string reg = writer.expect_line("REGISTERED");
    hashes = reg.substr(reg.find("hashes=") + 7, reg.find(" ids=") - reg.find("hashes=") - 7);
    writer.close_stdin();
    ASSERT_TRUE(writer.wait_exit(10s));
  }
  wait_until([&] { return slot_free(v, 0); }, 10s, "the writer to detach");
  {
    WorkerProcess reader(d, "reader",
                         {hashes.substr(0, hashes.find(',')), hashes.substr(hashes.find(',') + 1)});
    reader.expect_line("READY slot=0");
    reader.expect_line("MATCHED n=2");
    reader.expect_line("VERIFIED");
    for (int i = 0; i < 20; ++i) reader.command("ping");
    EXPECT_EQ(stat_of(v.slot(0).match_hits), 2u);
    EXPECT_GE(stat_of(v.slot(0).requests), 21u);
    reader.close_stdin();
    ASSERT_TRUE(reader.wait_exit(10s));
  }
  wait_until([&] { return slot_free(v, 0); }, 10s, "the reader to detach");
  WorkerProcess next(d, "holder", {"--mutable", "1", "--register", "0"});
  next.expect_line("READY slot=0");
  next.expect_line("HOLDING");
  // One allocate of its own; none of its predecessors' requests or hits.
  EXPECT_EQ(stat_of(v.slot(0).requests), 1u);
  EXPECT_EQ(stat_of(v.slot(0).match_hits), 0u);
  EXPECT_EQ(stat_of(v.slot(0).rejected_handles), 0u);
}

}  // namespace
}  // namespace kvpool::mptest
