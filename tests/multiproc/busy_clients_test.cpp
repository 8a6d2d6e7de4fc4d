// What kvpoold tells its callers about its cores (issue 32, shm/cpu_share.hpp): the CPUs its
// engine may run on, how many clients are in a call and how many of those are awake, which a
// caller reads to decide whether polling for its answer can pay. Real kvpoold, real clients, the
// real control segment.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "client_helpers.hpp"
#include "harness.hpp"
#include "kvpool/client.hpp"
#include "kvpool/shm/cpu_share.hpp"

namespace kvpool::mptest {
namespace {

TEST(BusyClients, TheEnginePublishesItsCpusAndTheClientsInACallAndZeroOnceTheyStop) {
  DaemonProcess d;
  d.start();
  auto v = d.view();
  // kvpoold inherits our affinity.
  EXPECT_EQ(stat_of(v.stats().engine_cpus), shm::allowed_cpu_count());
  EXPECT_EQ(stat_of(v.stats().clients_busy), 0u);
  EXPECT_EQ(stat_of(v.stats().clients_awake), shm::kAwakePublished) << "published, 0 awake";

  // Three clients (their own connections) ping flat out: the engine counts all three.
  constexpr int kClients = 3;
  std::vector<Client> clients;
  for (int i = 0; i < kClients; ++i) clients.push_back(connect_client(d));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> failures{0};
  std::vector<std::thread> callers;
  for (auto& c : clients)
    callers.emplace_back([&c, &stop, &failures] {
      while (!stop.load(std::memory_order_relaxed))
        if (!c.ping().is_ok()) failures.fetch_add(1);
    });
  uint64_t most = 0, most_awake = 0, awake_word = shm::kAwakePublished;
  wait_until(
      [&] {
        most = std::max(most, stat_of(v.stats().clients_busy));
        awake_word = stat_of(v.stats().clients_awake);
        most_awake = std::max(most_awake, awake_word & ~shm::kAwakePublished);
        return (most == kClients && most_awake > 0) || (awake_word & shm::kAwakePublished) == 0;
      },
      20s, "clients_busy to count the three callers and clients_awake one at least",
      [&] { return v.describe(); });
  EXPECT_NE(awake_word & shm::kAwakePublished, 0u) << "clients_awake lost its published bit";
  EXPECT_LE(most_awake, uint64_t{kClients}) << "more clients awake than in a call";
  stop = true;
  for (auto& t : callers) t.join();
  EXPECT_EQ(failures.load(), 0u);
  // Nobody calls: the engine parks and says so, and callers may poll again.
  wait_until(
      [&] {
        return stat_of(v.stats().clients_busy) == 0 &&
               stat_of(v.stats().clients_awake) == shm::kAwakePublished;
      },
      10s, "clients_busy and clients_awake back to 0 once the callers stopped",
      [&] { return v.describe(); });
}

}  // namespace
}  // namespace kvpool::mptest
