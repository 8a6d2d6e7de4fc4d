// A pool's hash scheme end to end: kvpoold's config -> the control segment -> the worker's
// Pool and MutableBlock::commit, kvpoolctl status, every event batch of both formats; and
// the refusals: a worker built for another scheme (Pool::check_hash_scheme) and a worker
// too old to know schemes (layout minor < 4) attaching to a pool that is not dynamo-0.2.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstring>

#include "events_testbed.hpp"
#include "kvpool/shm/protocol.hpp"
#include "kvpool/shm/unix_socket.hpp"

namespace kvpool::evtest {
namespace {

nlohmann::json two_scheme_config() {
  auto a = mptest::host_pool("plain", 16, 4);
  auto b = mptest::host_pool("router", 16, 4);
  b["hash_scheme"] = "dynamo-router";
  return mptest::test_config(nlohmann::json::array({a, b}));
}

std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) throw HarnessError("popen " + cmd);
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  ::pclose(p);
  return out;
}

Client connect(const DaemonProcess& d) {
  ConnectOptions o;
  o.runtime_dir = d.runtime_dir();
  auto c = Client::connect(d.instance(), o);
  if (!c) throw HarnessError(c.status().to_string());
  return std::move(c.value());
}

TEST(HashSchemeEndToEnd, TheWorkerHashesWithThePoolsScheme) {
  DaemonProcess d(two_scheme_config());
  d.start();
  Client c = connect(d);
  auto plain = c.pool("plain");
  auto router = c.pool("router");
  ASSERT_TRUE(plain.is_ok() && router.is_ok());
  EXPECT_EQ(plain->hash_scheme(), HashScheme::kDynamo02);
  EXPECT_EQ(router->hash_scheme(), HashScheme::kDynamoRouter);

  // commit() chains with the pool's scheme: a LoRA salt gives different sequence hashes in
  // the two pools, each equal to TokenBlockSequence's under that pool's scheme.
  const Salt salt = dynamo_router_salt("tenant-1", "adapter-a");
  const auto tokens = token_range(10, 8);
  for (Pool* p : {&*plain, &*router}) {
    auto seq = TokenBlockSequence::create(tokens, 4, salt, p->hash_scheme());
    auto blocks = p->allocate_blocks(2);
    ASSERT_TRUE(blocks.is_ok());
    for (size_t i = 0; i < 2; ++i) {
      auto& b = (*blocks)[i];
      ASSERT_TRUE(b.init_sequence(salt, seq->blocks()[i].parent_sequence_hash).is_ok());
      ASSERT_TRUE(b.add_tokens(seq->blocks()[i].tokens).is_ok());
      ASSERT_TRUE(b.commit().is_ok());
      EXPECT_EQ(*b.sequence_hash(), seq->blocks()[i].sequence_hash) << p->name() << " " << i;
    }
  }
  auto a = TokenBlockSequence::create(tokens, 4, salt, HashScheme::kDynamo02);
  auto b = TokenBlockSequence::create(tokens, 4, salt, HashScheme::kDynamoRouter);
  EXPECT_NE(a->blocks()[1].sequence_hash, b->blocks()[1].sequence_hash);

  // A worker built for dynamo-0.2 is told, naming both schemes, that "router" is not its.
  EXPECT_TRUE(plain->check_hash_scheme(HashScheme::kDynamo02).is_ok());
  Status s = router->check_hash_scheme(HashScheme::kDynamo02);
  EXPECT_EQ(s.code(), ErrorCode::kVersionMismatch);
  EXPECT_NE(s.message().find("'router'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("dynamo-router"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("dynamo-0.2"), std::string::npos) << s.message();

  // kvpoolctl status names each pool's scheme.
  auto j = nlohmann::json::parse(run(std::string(KVPOOLCTL_PATH) + " status --json --instance " +
                                     d.instance() + " --runtime-dir " + d.runtime_dir()));
  ASSERT_EQ(j["pools"].size(), 2u);
  EXPECT_EQ(j["pools"][0]["hash_scheme"], "dynamo-0.2");
  EXPECT_EQ(j["pools"][1]["hash_scheme"], "dynamo-router");
}

// The hello of a libkvpool of layout 1.3, which knows no hash schemes (nor sealed memfds,
// nor the pool mask): layout 2.0 refuses every major-1 client.
Result<std::string> old_client_hello(const DaemonProcess& d) {
  auto fd = shm::connect_unix(d.socket_path());
  if (!fd) return fd.status();
  proto::Hello h{};
  h.magic = proto::kHelloMagic;
  h.type = proto::MsgType::kHello;
  h.layout_major = 1;
  h.layout_minor = 3;
  std::snprintf(h.instance, sizeof(h.instance), "%s", d.instance().c_str());
  KVPOOL_RETURN_IF_ERROR(shm::send_message(fd->get(), std::as_bytes(std::span(&h, 1))));
  std::array<std::byte, 512> buf{};
  std::vector<shm::UniqueFd> fds;
  auto n = shm::recv_message(fd->get(), buf, &fds, 5000);
  if (!n) return n.status();
  proto::MsgType type;
  std::memcpy(&type, buf.data() + 4, sizeof(type));
  if (type != proto::MsgType::kRefusal) return std::string("welcomed");
  proto::Refusal r{};
  std::memcpy(&r, buf.data(), std::min(sizeof(r), *n));
  r.message[sizeof(r.message) - 1] = '\0';
  return std::string(r.message);
}

TEST(HashSchemeEndToEnd, AWorkerTooOldToKnowSchemesIsRefused) {
  DaemonProcess d(two_scheme_config());
  d.start();
  auto answer = old_client_hello(d);
  ASSERT_TRUE(answer.is_ok()) << answer.status().to_string();
  EXPECT_NE(answer->find("client speaks shm layout 1.3"), std::string::npos) << *answer;
  EXPECT_NE(answer->find("rebuild the worker"), std::string::npos) << *answer;
}

TEST(HashSchemeEndToEnd, AnUnknownSchemeInTheConfigIsRefusedNamingTheField) {
  auto c = two_scheme_config();
  c["pools"][1]["hash_scheme"] = "universal";
  DaemonProcess d(c);
  d.spawn();
  auto st = d.wait_exit(10s);
  ASSERT_TRUE(st.has_value());
  EXPECT_FALSE(st->exited() && st->code() == 0);
  EXPECT_NE(d.stderr_text().find("pools[1].hash_scheme"), std::string::npos) << d.stderr_text();
  EXPECT_NE(d.stderr_text().find("dynamo-router"), std::string::npos) << d.stderr_text();
}

}  // namespace
}  // namespace kvpool::evtest
