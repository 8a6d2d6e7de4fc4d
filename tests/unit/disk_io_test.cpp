// The disk tier's I/O engine (daemon/disk/disk_io, op_queue): every op comes back exactly
// once with its own result, its hooks run on an I/O thread and never on the submitting
// thread, and the lock-free queue loses and duplicates nothing under many threads.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "daemon/disk/disk_io.hpp"
#include "daemon/disk/op_queue.hpp"

namespace kvpool::daemon::disk {
namespace {

using namespace std::chrono_literals;

TEST(OpQueue, ManyProducersAndConsumersMoveEveryItemExactlyOnce) {
  OpQueue<uint64_t> q(64);
  constexpr uint64_t kPerProducer = 50000;
  constexpr int kProducers = 3;
  constexpr int kConsumers = 3;
  std::vector<std::vector<uint64_t>> got(kConsumers);
  std::atomic<int> producing{kProducers};
  std::vector<std::thread> ts;
  for (int p = 0; p < kProducers; ++p) {
    ts.emplace_back([&, p] {
      for (uint64_t i = 0; i < kPerProducer; ++i) {
        const uint64_t v = (uint64_t(p) << 32) | i;
        while (!q.push(v)) std::this_thread::yield();  // full: the consumers catch up
      }
      producing.fetch_sub(1);
    });
  }
  for (int c = 0; c < kConsumers; ++c) {
    ts.emplace_back([&, c] {
      uint64_t v = 0;
      for (;;) {
        if (q.pop(v)) {
          got[c].push_back(v);
        } else if (producing.load() == 0) {
          if (!q.pop(v)) return;
          got[c].push_back(v);
        } else {
          std::this_thread::yield();
        }
      }
    });
  }
  for (auto& t : ts) t.join();
  std::set<uint64_t> all;
  size_t n = 0;
  for (const auto& g : got) {
    n += g.size();
    all.insert(g.begin(), g.end());
    // One producer's items reach any one consumer in the order they were pushed.
    std::vector<uint64_t> last(kProducers, 0);
    std::vector<bool> any(kProducers, false);
    for (uint64_t v : g) {
      const auto p = static_cast<size_t>(v >> 32);
      const uint64_t i = v & 0xffffffffu;
      if (any[p]) {
        EXPECT_GT(i, last[p]);
      }
      any[p] = true;
      last[p] = i;
    }
  }
  EXPECT_EQ(n, kProducers * kPerProducer);
  EXPECT_EQ(all.size(), kProducers * kPerProducer);
}

TEST(OpQueue, RefusesWhenFullAndTakesAgainOnceDrained) {
  OpQueue<int> q(4);
  int pushed = 0;
  while (q.push(pushed)) ++pushed;
  EXPECT_EQ(pushed, 4);
  int v = -1;
  ASSERT_TRUE(q.pop(v));
  EXPECT_EQ(v, 0);
  EXPECT_TRUE(q.push(99));
  EXPECT_FALSE(q.push(100));
  for (int want : {1, 2, 3, 99}) {
    ASSERT_TRUE(q.pop(v));
    EXPECT_EQ(v, want);
  }
  EXPECT_FALSE(q.pop(v));
}

// What a hook saw: the thread it ran on and the result it was given.
struct HookRecord {
  std::atomic<pid_t> before_tid{0};
  std::atomic<pid_t> after_tid{0};
  std::atomic<int64_t> after_result{0};
  char before_thread[16] = {};
};

void record_before(void* ctx, int64_t) {
  auto* r = static_cast<HookRecord*>(ctx);
  pthread_getname_np(pthread_self(), r->before_thread, sizeof(r->before_thread));
  r->before_tid.store(::gettid());
}
void record_after(void* ctx, int64_t result) {
  auto* r = static_cast<HookRecord*>(ctx);
  r->after_result.store(result);
  r->after_tid.store(::gettid());
}

class DiskIoBackends : public ::testing::TestWithParam<IoBackend> {};

TEST_P(DiskIoBackends, EveryOpCompletesOnceWithItsResultAndItsHooksRunOnAnIoThread) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("kvpool-diskio-" + std::to_string(::getpid())))
          .string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ::unlink(path.c_str());
  constexpr uint32_t kDepth = 64;
  auto io = DiskIo::create(GetParam(), kDepth, "t");
  ASSERT_TRUE(io) << io.status().to_string();

  // Each op writes its own 512 bytes, then reads them back.
  std::vector<std::vector<char>> out(kDepth, std::vector<char>(512));
  std::vector<std::vector<char>> in(kDepth, std::vector<char>(512));
  std::vector<iovec> wiov(kDepth), riov(kDepth);
  std::vector<HookRecord> rec(kDepth);
  auto run = [&](bool write) {
    for (uint32_t i = 0; i < kDepth; ++i) {
      std::memset(out[i].data(), 'a' + static_cast<int>(i % 26), 512);
      wiov[i] = {out[i].data(), 512};
      riov[i] = {in[i].data(), 512};
      IoOp op{write,  fd, uint64_t{i} * 512, write ? &wiov[i] : &riov[i],
              1,      i,  &record_before,    &record_after,
              &rec[i]};
      ASSERT_TRUE((*io)->submit(op).is_ok());
    }
    std::set<uint64_t> done;
    std::vector<IoDone> got;
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (done.size() < kDepth) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << done.size() << " of " << kDepth;
      pollfd p{(*io)->event_fd(), POLLIN, 0};
      ::poll(&p, 1, 100);
      got.clear();
      (*io)->reap(got);
      for (const IoDone& d : got) {
        EXPECT_TRUE(done.insert(d.tag).second) << "op " << d.tag << " completed twice";
        EXPECT_EQ(d.result, 512) << "op " << d.tag;
        // Reaped after its after-hook ran, and the hook saw the same result.
        EXPECT_EQ(rec[d.tag].after_result.load(), 512);
      }
    }
  };
  run(true);
  run(false);
  const pid_t me = ::gettid();
  for (uint32_t i = 0; i < kDepth; ++i) {
    EXPECT_EQ(in[i], out[i]) << "op " << i;
    EXPECT_NE(rec[i].before_tid.load(), me) << "a before-hook ran on the submitting thread";
    EXPECT_NE(rec[i].after_tid.load(), me) << "an after-hook ran on the reaping thread";
    EXPECT_STREQ(rec[i].before_thread, "kvpool-disk-io");
  }
  ::close(fd);
}

INSTANTIATE_TEST_SUITE_P(Backends, DiskIoBackends,
                         ::testing::Values(IoBackend::kUring, IoBackend::kThreads),
                         [](const auto& info) {
                           return std::string(info.param == IoBackend::kUring ? "IoUring"
                                                                              : "Threads");
                         });

}  // namespace
}  // namespace kvpool::daemon::disk
