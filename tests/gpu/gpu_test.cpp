// Device pools end to end (label `gpu`): the real kvpoold owning CUDA slabs, real worker
// processes (fork + exec of kvpool_gpu_worker, before any CUDA call in them) sharing device
// blocks through CUDA IPC, kill -9 reclamation, and copy_blocks round trips.
//
// GpuTest cases need a device and skip cleanly without one ("no CUDA device visible").
// The others run everywhere: a cuda pool the machine cannot provide stops kvpoold with a
// message naming the pool, device and bytes; copy_blocks between host pools needs no CUDA.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <numeric>

#include "harness.hpp"
#include "kvpool/client.hpp"
#include "kvpool/core/layout.hpp"
#include "kvpool/cuda/device.hpp"

namespace kvpool::mptest {
namespace {

using nlohmann::json;

json layout_json(uint32_t layers, uint32_t outer, uint32_t page, uint32_t inner, uint32_t alignment,
                 const std::string& kind = "fully_contiguous") {
  return {{"num_layers", layers}, {"outer_dim", outer}, {"page_size", page},
          {"inner_dim", inner},   {"dtype_bytes", 2},   {"alignment", alignment},
          {"kind", kind}};
}

json device_pool(const std::string& name, uint32_t blocks, json layout, int device = 0) {
  return {{"name", name},
          {"storage", "cuda"},
          {"device", device},
          {"num_blocks", blocks},
          {"layout", std::move(layout)}};
}

json plain_host_pool(const std::string& name, uint32_t blocks, json layout) {
  return {{"name", name}, {"num_blocks", blocks}, {"layout", std::move(layout)}};
}

uint64_t pool_bytes(const json& pool) {
  const json& l = pool["layout"];
  LayoutConfig c{.num_blocks = pool["num_blocks"].get<uint32_t>(),
                 .num_layers = l["num_layers"].get<uint32_t>(),
                 .outer_dim = l["outer_dim"].get<uint32_t>(),
                 .page_size = l["page_size"].get<uint32_t>(),
                 .inner_dim = l["inner_dim"].get<uint32_t>(),
                 .dtype_bytes = l["dtype_bytes"].get<uint32_t>(),
                 .alignment = l["alignment"].get<uint32_t>(),
                 .kind = l["kind"] == "layer_separate" ? LayoutKind::kLayerSeparate
                                                       : LayoutKind::kFullyContiguous};
  return Layout::create(c).value().total_bytes();
}

ConnectOptions options_for(const DaemonProcess& daemon) {
  ConnectOptions o;
  o.runtime_dir = daemon.runtime_dir();
  o.poll_us = 20;
  return o;
}

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::built_with_cuda())
      GTEST_SKIP() << "no CUDA device visible: kvpool was built without CUDA";
    if (cuda::device_count() == 0)
      GTEST_SKIP() << "no CUDA device visible (" << cuda::no_device_reason() << ")";
  }
};

// Small regions (128 bytes) so many blocks fit; 2 layers x 2 (K, V).
json small_layout(const std::string& kind = "fully_contiguous") {
  return layout_json(2, 2, 4, 16, 256, kind);
}

// ---- sharing ---------------------------------------------------------------------------------

TEST_F(GpuTest, TwoProcessesShareADeviceBlock) {
  // Host pools around the device pool: the welcome carries fds for "h" and "h2" only, and
  // each must land on its own pool (they differ in size, so a mix-up fails to map).
  DaemonProcess daemon(test_config(
      json::array({host_pool("h", 8), device_pool("d", 32, small_layout()), host_pool("h2", 24)})));
  daemon.start();

  WorkerProcess writer(daemon, "write",
                       {"--pool", "d", "--blocks", "4", "--salt", "7", "--token-base", "100"});
  writer.expect_line("READY");
  std::string reg = writer.expect_line("REGISTERED", 60s);
  std::string hashes = field(reg, "hashes");
  std::vector<uint64_t> ids = parse_list(field(reg, "ids"));
  ASSERT_EQ(ids.size(), 4u) << reg;

  std::vector<std::string> args{"--pool", "d"};
  for (uint64_t h : parse_list(hashes)) args.push_back(std::to_string(h));
  WorkerProcess reader(daemon, "read", args);
  reader.expect_line("READY");
  std::string matched = reader.expect_line("MATCHED", 60s);
  EXPECT_EQ(field(matched, "n"), "4") << matched;
  EXPECT_EQ(parse_list(field(matched, "ids")), ids) << "the reader must get the writer's blocks";
  std::string verified = reader.expect_line("VERIFIED", 60s);
  EXPECT_EQ(field(verified, "regions"), "16") << verified;  // 4 blocks x 2 layers x 2

  // Both hold the same 4 blocks: active, nothing mutable.
  auto c = daemon.view().counts(1);
  EXPECT_EQ(c.active, 4u);
  EXPECT_EQ(c.mutable_blocks, 0u);
  writer.command("verify", "OK regions=16");

  // A client that never touches the device pool uses the host pools as always.
  auto client = Client::connect(daemon.instance(), options_for(daemon));
  ASSERT_TRUE(client.is_ok()) << client.status().to_string();
  EXPECT_EQ(client->pool_names(), (std::vector<std::string>{"h", "d", "h2"}));
  EXPECT_EQ(client->pool("d")->storage(), Pool::Storage::kCuda);
  EXPECT_TRUE(client->pool("d")->is_device());
  EXPECT_EQ(client->pool("h2")->storage(), Pool::Storage::kHost);
  auto h2 = client->pool("h2");
  auto blocks = h2->allocate_blocks(24);  // every block of h2: its mapping is h2's size
  ASSERT_TRUE(blocks.is_ok()) << blocks.status().to_string();
  std::memset(*blocks->back().address(1, 1), 0x42, 64);

  writer.send_line("exit");
  reader.send_line("exit");
  ASSERT_TRUE(writer.wait_exit(20s).has_value());
  ASSERT_TRUE(reader.wait_exit(20s).has_value());
  wait_until([&] { return daemon.view().counts(1).inactive == 4; }, 10s,
             "the shared blocks to become inactive once both workers left",
             [&] { return daemon.view().describe(); });
}

TEST_F(GpuTest, AKilledClientHoldingDeviceBlocksIsReclaimed) {
  DaemonProcess daemon(test_config(json::array({device_pool("d", 32, small_layout())})));
  daemon.start();
  WorkerProcess holder(
      daemon, "write",
      {"--pool", "d", "--blocks", "3", "--salt", "9", "--token-base", "500", "--mutable", "5"});
  holder.expect_line("READY");
  std::string reg = holder.expect_line("REGISTERED", 60s);
  ASSERT_EQ(parse_list(field(reg, "mutable")).size(), 5u) << reg;
  auto c = daemon.view().counts();
  EXPECT_EQ(c.mutable_blocks, 5u);
  EXPECT_EQ(c.active, 3u);

  holder.kill9();
  ASSERT_TRUE(holder.wait_exit(10s).has_value());
  wait_until(
      [&] {
        auto v = daemon.view();
        auto n = v.counts();
        return v.stats().reclaimed_clients.load() == 1 && n.mutable_blocks == 0 && n.active == 0;
      },
      10s, "kvpoold to reclaim the killed holder's 8 device blocks",
      [&] { return daemon.view().describe(); });
  auto v = daemon.view();
  EXPECT_EQ(v.stats().reclaimed_blocks.load(), 8u);
  c = v.counts();
  EXPECT_EQ(c.inactive, 3u);
  EXPECT_EQ(c.free, 29u);

  // The daemon owns the memory: the dead writer's registered bytes are still there.
  std::vector<std::string> args{"--pool", "d"};
  for (uint64_t h : parse_list(field(reg, "hashes"))) args.push_back(std::to_string(h));
  WorkerProcess reader(daemon, "read", args);
  reader.expect_line("READY");
  EXPECT_EQ(field(reader.expect_line("MATCHED", 60s), "n"), "3");
  reader.expect_line("VERIFIED", 60s);
}

// ---- copies ----------------------------------------------------------------------------------

void round_trip(const json& device, const json& host, bool pin, uint32_t blocks) {
  DaemonProcess daemon(test_config(json::array({device, host})));
  daemon.start();
  WorkerProcess w(daemon, "roundtrip",
                  {"--device-pool", device["name"].get<std::string>(), "--host-pool",
                   host["name"].get<std::string>(), "--blocks", std::to_string(blocks), "--pin",
                   pin ? "1" : "0"});
  w.expect_line("READY", 60s);
  std::string line = w.expect_line("ROUNDTRIP", 120s);
  EXPECT_EQ(field(line, "blocks"), std::to_string(blocks));
  w.send_line("exit");
  auto st = w.wait_exit(20s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->code(), 0) << st->describe();
}

// 16 KiB blocks (2 layers x K,V x 16 tokens x 128 x 2 B), ids consecutive: merged copies.
TEST_F(GpuTest, DeviceHostDeviceRoundTripPreservesBytesPinned) {
  json l = layout_json(2, 2, 16, 128, 256);
  round_trip(device_pool("d", 64, l), plain_host_pool("h", 64, l), true, 16);
}

TEST_F(GpuTest, DeviceHostDeviceRoundTripPreservesBytesUnpinned) {
  json l = layout_json(2, 2, 16, 128, 256);
  round_trip(device_pool("d", 64, l), plain_host_pool("h", 64, l), false, 16);
}

// 192-byte blocks padded to 256 on the device, tight on the host: 2D copies.
TEST_F(GpuTest, RoundTripBetweenPaddedAndTightBlocks) {
  round_trip(device_pool("d", 64, layout_json(3, 1, 4, 8, 256)),
             plain_host_pool("h", 64, layout_json(3, 1, 4, 8, 64)), true, 12);
}

// LayerSeparate device pool, FullyContiguous host pool: one copy per layer and run.
TEST_F(GpuTest, RoundTripBetweenLayerSeparateDeviceAndContiguousHost) {
  round_trip(device_pool("d", 48, layout_json(4, 2, 16, 64, 256, "layer_separate")),
             plain_host_pool("h", 48, layout_json(4, 2, 16, 64, 256)), false, 10);
}

// ---- start-up failures -----------------------------------------------------------------------

// The daemon refuses to start rather than run without a pool it was told to serve, and
// leaves nothing behind (no socket, no shm, even of the host pool created before it).
void expect_start_failure(const json& bad_pool, const std::vector<std::string>& needles) {
  DaemonProcess daemon(test_config(json::array({host_pool("h", 8), bad_pool})));
  daemon.spawn();
  auto st = daemon.wait_exit(60s);
  ASSERT_TRUE(st.has_value()) << "kvpoold kept running: " << daemon.stderr_text();
  EXPECT_TRUE(st->exited() && st->code() != 0) << st->describe();
  const std::string err = daemon.stderr_text();
  for (const auto& n : needles)
    EXPECT_NE(err.find(n), std::string::npos) << "'" << n << "' in:\n" << err;
  EXPECT_TRUE(daemon.shm_files().empty());
  EXPECT_FALSE(std::filesystem::exists(daemon.socket_path()));
}

TEST(DevicePoolStartup, ACudaPoolWithoutItsDeviceStopsKvpooldNamingPoolDeviceAndBytes) {
  const int missing = cuda::device_count();  // "no device" here; one past the last on a GPU host
  json pool = device_pool("gpu0", 16, small_layout(), missing);
  expect_start_failure(pool, {"pool 'gpu0'", "cuda device " + std::to_string(missing),
                              std::to_string(pool_bytes(pool)) + " bytes"});
}

TEST_F(GpuTest, ACudaPoolLargerThanTheDeviceStopsKvpooldNamingTheBytes) {
  // 2 MiB blocks, 256Ki of them: 512 GiB, more than any GPU has.
  json pool = device_pool("huge", 1u << 18, layout_json(4, 2, 16, 8192, 256));
  expect_start_failure(pool,
                       {"pool 'huge'", "cuda device 0", std::to_string(pool_bytes(pool)) + " bytes",
                        "cudaErrorMemoryAllocation"});
}

// ---- host pools: no CUDA needed ----------------------------------------------------------------

TEST(HostCopyBlocks, CopiesBetweenHostPoolsOfDifferentKindsWithoutCuda) {
  json fc = layout_json(2, 2, 4, 16, 256);
  json ls = layout_json(2, 2, 4, 16, 64, "layer_separate");
  DaemonProcess daemon(
      test_config(json::array({plain_host_pool("a", 16, fc), plain_host_pool("b", 16, ls),
                               plain_host_pool("c", 16, layout_json(2, 2, 8, 16, 64))})));
  daemon.start();
  auto client = Client::connect(daemon.instance(), options_for(daemon));
  ASSERT_TRUE(client.is_ok()) << client.status().to_string();
  Pool a = *client->pool("a");
  Pool b = *client->pool("b");
  EXPECT_FALSE(a.is_device());
  EXPECT_EQ(a.cuda_device().status().code(), ErrorCode::kInvalidState);
  auto src = a.allocate_blocks(6);
  auto dst = b.allocate_blocks(6);
  ASSERT_TRUE(src.is_ok() && dst.is_ok());
  std::vector<uint32_t> si, di;
  for (size_t k = 0; k < 6; ++k) {
    si.push_back((*src)[k].block_id());
    di.push_back((*dst)[5 - k].block_id());  // reversed: single-block runs
    for (uint32_t l = 0; l < 2; ++l)
      for (uint32_t o = 0; o < 2; ++o)
        std::memset(*(*src)[k].address(l, o), static_cast<int>(k * 16 + l * 2 + o + 1), 128);
  }
  ASSERT_TRUE(copy_blocks(a, si, b, di).is_ok());
  for (size_t k = 0; k < 6; ++k)
    for (uint32_t l = 0; l < 2; ++l)
      for (uint32_t o = 0; o < 2; ++o) {
        const std::byte* p = *(*dst)[5 - k].address(l, o);
        for (int i = 0; i < 128; ++i)
          ASSERT_EQ(static_cast<int>(p[i]), static_cast<int>(k * 16 + l * 2 + o + 1))
              << "block " << k << " layer " << l << " outer " << o << " byte " << i;
      }

  // Refusals with the pools named.
  Pool c = *client->pool("c");  // 256-byte regions: twice a's block size
  std::vector<uint32_t> one{si[0]};
  Status st = copy_blocks(a, one, c, one);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("'a' -> 'c'"), std::string::npos) << st.message();
  std::vector<uint32_t> out_of_range{16};
  EXPECT_EQ(copy_blocks(a, out_of_range, b, one).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(copy_blocks(a, one, a, one).code(), ErrorCode::kInvalidArgument);
}

TEST(HostCopyBlocks, PinningHostPoolsNeedsCuda) {
  DaemonProcess daemon(test_config());
  daemon.start();
  ConnectOptions o = options_for(daemon);
  o.pin_host_pools = true;
  auto client = Client::connect(daemon.instance(), o);
  if (!cuda::built_with_cuda()) {
    ASSERT_FALSE(client.is_ok());
    EXPECT_EQ(client.status().code(), ErrorCode::kUnsupported);
    EXPECT_NE(client.status().message().find("built without CUDA"), std::string::npos);
  } else if (cuda::device_count() == 0) {
    ASSERT_FALSE(client.is_ok());
    EXPECT_EQ(client.status().code(), ErrorCode::kDeviceError);
    EXPECT_NE(client.status().message().find("pool 'g'"), std::string::npos)
        << client.status().message();
  } else {
    ASSERT_TRUE(client.is_ok()) << client.status().to_string();
    // Pinned or not, a host pool's bytes are the same bytes.
    auto blocks = client->pool("g")->allocate_blocks(2);
    ASSERT_TRUE(blocks.is_ok());
    std::memset(*(*blocks)[0].address(0, 0), 7, 16);
  }
  // Without the option nothing CUDA happens, whatever the build.
  auto plain = Client::connect(daemon.instance(), options_for(daemon));
  EXPECT_TRUE(plain.is_ok()) << plain.status().to_string();
}

}  // namespace
}  // namespace kvpool::mptest
