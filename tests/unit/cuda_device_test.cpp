// The CUDA interface on whatever this machine has: with no device (or no CUDA in the build)
// every device operation fails with a message that says why, and nothing crashes; with a
// device, a slab allocates, exports and frees.
#include "kvpool/cuda/device.hpp"

#include <gtest/gtest.h>

#include <regex>

namespace kvpool::cuda {
namespace {

TEST(CudaDevice, UuidPrintsLikeNvidiaSmi) {
  DeviceUuid u{};
  for (size_t i = 0; i < u.size(); ++i) u[i] = static_cast<uint8_t>(i * 17);
  EXPECT_EQ(uuid_string(u), "GPU-00112233-4455-6677-8899-aabbccddeeff");
}

TEST(CudaDevice, DeviceCountIsZeroOrANoDeviceReasonIsEmpty) {
  const int n = device_count();
  EXPECT_GE(n, 0);
  EXPECT_EQ(device_count(), n);  // cached, stable
  if (n == 0) {
    EXPECT_FALSE(no_device_reason().empty());
  } else {
    EXPECT_TRUE(no_device_reason().empty());
  }
  if (!built_with_cuda()) {
    EXPECT_EQ(n, 0);
    EXPECT_NE(no_device_reason().find("built without CUDA"), std::string::npos);
  }
}

TEST(CudaDevice, AllocatingOnAMissingDeviceNamesIt) {
  const int missing = device_count();  // one past the last visible ordinal
  auto slab = DeviceSlab::allocate(missing, 1 << 20, 256);
  ASSERT_FALSE(slab.is_ok());
  if (!built_with_cuda()) {
    EXPECT_EQ(slab.status().code(), ErrorCode::kUnsupported);
    EXPECT_NE(slab.status().message().find("-DKVPOOL_WITH_CUDA=ON"), std::string::npos);
  } else if (missing == 0) {
    EXPECT_EQ(slab.status().code(), ErrorCode::kDeviceError);
    EXPECT_NE(slab.status().message().find("no CUDA device visible"), std::string::npos)
        << slab.status().message();
  } else {
    EXPECT_EQ(slab.status().code(), ErrorCode::kDeviceError);
    EXPECT_NE(
        slab.status().message().find("CUDA device " + std::to_string(missing) + " does not exist"),
        std::string::npos)
        << slab.status().message();
  }
}

TEST(CudaDevice, AlignmentAboveWhatCudaMallocGuaranteesIsRefused) {
  if (!built_with_cuda()) GTEST_SKIP() << "kvpool was built without CUDA";
  auto slab = DeviceSlab::allocate(0, 1 << 20, 4096);
  ASSERT_FALSE(slab.is_ok());
  EXPECT_EQ(slab.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(slab.status().message().find("alignment 4096"), std::string::npos)
      << slab.status().message();
}

TEST(CudaDevice, PinningAndCopyingWithoutADeviceFailCleanly) {
  if (device_count() > 0) GTEST_SKIP() << "a CUDA device is visible";
  std::vector<std::byte> buf(4096);
  auto pin = HostRegistration::pin(buf.data(), buf.size());
  ASSERT_FALSE(pin.is_ok());
  EXPECT_EQ(pin.status().code(),
            built_with_cuda() ? ErrorCode::kDeviceError : ErrorCode::kUnsupported);
  DeviceUuid u{};
  auto m = DeviceMapping::open(IpcHandle{}, u, 4096);
  ASSERT_FALSE(m.is_ok());
  if (built_with_cuda()) {
    EXPECT_NE(m.status().message().find(uuid_string(u)), std::string::npos) << m.status().message();
  }
  CopyOp op{0, 0, 16, 1, 16, 16};
  std::vector<std::byte> dst(16);
  EXPECT_FALSE(copy_async(std::span(&op, 1), buf.data(), dst.data(), nullptr).is_ok());
}

TEST(CudaDevice, ASlabAllocatesExportsAndFrees) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  auto uuid = device_uuid(0);
  ASSERT_TRUE(uuid.is_ok()) << uuid.status().to_string();
  EXPECT_TRUE(std::regex_match(uuid_string(*uuid), std::regex("GPU-[0-9a-f-]{36}")));
  EXPECT_EQ(find_device(*uuid).value(), 0);
  auto slab = DeviceSlab::allocate(0, 3 << 20, 256);
  ASSERT_TRUE(slab.is_ok()) << slab.status().to_string();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(slab->data()) % 256, 0u);
  EXPECT_EQ(slab->uuid(), *uuid);
  auto h = slab->export_handle();
  ASSERT_TRUE(h.is_ok()) << h.status().to_string();
  EXPECT_NE(*h, IpcHandle{});
  // A process cannot open its own export (the multi-process gpu tests open it elsewhere).
  EXPECT_FALSE(DeviceMapping::open(*h, *uuid, slab->size()).is_ok());
}

TEST(CudaDevice, AnUnknownUuidIsNotALocalDevice) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  DeviceUuid u{};
  u.fill(0xAB);
  auto d = find_device(u);
  ASSERT_FALSE(d.is_ok());
  EXPECT_EQ(d.status().code(), ErrorCode::kDeviceError);
  EXPECT_NE(d.status().message().find(uuid_string(u)), std::string::npos);
  EXPECT_NE(d.status().message().find(uuid_string(device_uuid(0).value())), std::string::npos)
      << d.status().message();
}

}  // namespace
}  // namespace kvpool::cuda
