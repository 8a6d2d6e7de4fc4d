// The CUDA interface of a build without CUDA: no devices, and every device operation
// answers kUnsupported with the way out.
#include "kvpool/cuda/device.hpp"

namespace kvpool::cuda {
namespace {

constexpr const char* kNoCuda =
    "kvpool was built without CUDA (configure with -DKVPOOL_WITH_CUDA=ON and a CUDA toolkit)";

Status unsupported() { return Status(ErrorCode::kUnsupported, kNoCuda); }

}  // namespace

bool built_with_cuda() { return false; }
int device_count() { return 0; }
std::string no_device_reason() { return kNoCuda; }

Result<DeviceUuid> device_uuid(int) { return unsupported(); }
Result<int> find_device(const DeviceUuid&) { return unsupported(); }

Result<DeviceSlab> DeviceSlab::allocate(int, uint64_t, uint32_t) { return unsupported(); }
Result<IpcHandle> DeviceSlab::export_handle() const { return unsupported(); }
void DeviceSlab::release() noexcept {}

Result<DeviceMapping> DeviceMapping::open(const IpcHandle&, const DeviceUuid&, uint64_t) {
  return unsupported();
}
void DeviceMapping::release() noexcept {}

Result<HostRegistration> HostRegistration::pin(void*, size_t) { return unsupported(); }
void HostRegistration::release() noexcept {}

Status copy_async(std::span<const CopyOp>, const void*, void*, void*) { return unsupported(); }
Status synchronize(void*) { return unsupported(); }

}  // namespace kvpool::cuda
