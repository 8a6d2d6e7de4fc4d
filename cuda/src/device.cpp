// The CUDA backend: the CUDA runtime API from plain C++ (no kernels here), reached through
// the table cudart.hpp loads at run time: every entry point checks that it loaded (through
// device_count()) before calling it.

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "cudart.hpp"
#include "kvpool/core/units.hpp"
#include "kvpool/cuda/device.hpp"

namespace kvpool::cuda {
namespace {

// The loaded runtime. Only called once device_count() > 0 (or, for releases, on objects
// that exist only because it was), which implies cudart() loaded.
const Cudart& rt() { return *cudart(); }

static_assert(sizeof(cudaIpcMemHandle_t) == std::tuple_size_v<IpcHandle>);
static_assert(sizeof(cudaUUID_t) == std::tuple_size_v<DeviceUuid>);

std::string error_text(cudaError_t e) {
  return std::string(rt().cudaGetErrorName(e)) + ": " + rt().cudaGetErrorString(e);
}

// A failed call leaves its error as the thread's "last error"; clear it so a later,
// unrelated cudaGetLastError() in the caller's code does not report ours.
Status cuda_error(const std::string& what, cudaError_t e,
                  ErrorCode code = ErrorCode::kDeviceError) {
  (void)rt().cudaGetLastError();
  return Status(code, what + ": " + error_text(e));
}

struct Probe {
  int count = 0;
  std::string reason;  // why count is 0
};

const Probe& probe() {
  static const Probe p = [] {
    if (cudart() == nullptr) return Probe{0, cudart_load_error()};
    int n = 0;  // cudaGetDeviceCount leaves it unset on error
    cudaError_t e = rt().cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      (void)rt().cudaGetLastError();
      return Probe{0, "cudaGetDeviceCount failed with " + error_text(e)};
    }
    if (n <= 0) return Probe{0, "the CUDA driver reports no devices"};
    return Probe{n, ""};
  }();
  return p;
}

Status check_device(int device) {
  const int n = device_count();
  if (n == 0)
    return Status(ErrorCode::kDeviceError, "no CUDA device visible (" + no_device_reason() + ")");
  if (device < 0 || device >= n) {
    return Status(ErrorCode::kDeviceError,
                  "CUDA device " + std::to_string(device) + " does not exist: " +
                      std::to_string(n) + " device(s) visible (0.." + std::to_string(n - 1) + ")");
  }
  return Status::ok();
}

// Makes `device` current for a scope and restores the caller's device after, when it was
// another one (restoring the same device would be a no-op; cudaSetDevice on a device the
// caller never used would create a context there).
class CurrentDevice {
 public:
  explicit CurrentDevice(int device) {
    if (rt().cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    set_ = rt().cudaSetDevice(device);
    if (set_ != cudaSuccess) (void)rt().cudaGetLastError();
    if (previous_ == device) previous_ = -1;
  }
  ~CurrentDevice() {
    if (previous_ >= 0 && set_ == cudaSuccess) (void)rt().cudaSetDevice(previous_);
  }
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;
  cudaError_t status() const { return set_; }

 private:
  int previous_ = -1;
  cudaError_t set_ = cudaSuccess;
};

}  // namespace

bool built_with_cuda() { return true; }
int device_count() { return probe().count; }
std::string no_device_reason() { return probe().count > 0 ? std::string() : probe().reason; }

Result<DeviceUuid> device_uuid(int device) {
  KVPOOL_RETURN_IF_ERROR(check_device(device));
  cudaDeviceProp prop{};
  if (cudaError_t e = rt().cudaGetDeviceProperties(&prop, device); e != cudaSuccess)
    return cuda_error("cudaGetDeviceProperties(" + std::to_string(device) + ")", e);
  DeviceUuid u;
  std::memcpy(u.data(), prop.uuid.bytes, u.size());
  return u;
}

Result<int> find_device(const DeviceUuid& uuid) {
  const int n = device_count();
  if (n == 0) {
    return Status(ErrorCode::kDeviceError, "the pool's GPU " + uuid_string(uuid) +
                                               " is not visible here: no CUDA device visible (" +
                                               no_device_reason() + ")");
  }
  std::string local;
  for (int d = 0; d < n; ++d) {
    auto u = device_uuid(d);
    if (!u) return u.status();
    if (*u == uuid) return d;
    local += (local.empty() ? "" : ", ") + std::to_string(d) + " " + uuid_string(*u);
  }
  return Status(ErrorCode::kDeviceError,
                "the pool's GPU " + uuid_string(uuid) + " is not among this process's devices (" +
                    local +
                    "); check CUDA_VISIBLE_DEVICES and that the worker runs on the daemon's host");
}

// ---- DeviceSlab ----------------------------------------------------------------------------

Result<DeviceSlab> DeviceSlab::allocate(int device, uint64_t bytes, uint32_t alignment) {
  if (alignment > kSlabAlignment) {
    return Status(ErrorCode::kInvalidArgument,
                  "layout alignment " + std::to_string(alignment) + " is above the " +
                      std::to_string(kSlabAlignment) +
                      " bytes cudaMalloc guarantees; device pools take alignment <= " +
                      std::to_string(kSlabAlignment));
  }
  if (alignment == 0) alignment = 1;
  KVPOOL_RETURN_IF_ERROR(check_device(device));
  auto uuid = device_uuid(device);
  if (!uuid) return uuid.status();
  // The daemon keeps `device` current: restoring device 0 would give it a context there.
  if (cudaError_t e = rt().cudaSetDevice(device); e != cudaSuccess)
    return cuda_error("cudaSetDevice(" + std::to_string(device) + ")", e);
  void* p = nullptr;
  if (cudaError_t e = rt().cudaMalloc(&p, bytes); e != cudaSuccess) {
    size_t free_b = 0, total_b = 0;
    (void)rt().cudaGetLastError();
    bool info = rt().cudaMemGetInfo(&free_b, &total_b) == cudaSuccess;
    std::string where = "cudaMalloc of " + std::to_string(bytes) + " bytes on device " +
                        std::to_string(device) + " (" + uuid_string(*uuid) + ")";
    if (info) {
      where += " with " + std::to_string(free_b) + " bytes (" + gib_text(free_b) + ") free of " +
               std::to_string(total_b) + " (" + gib_text(total_b) + ")";
    }
    return cuda_error(
        where, e,
        e == cudaErrorMemoryAllocation ? ErrorCode::kResourceExhausted : ErrorCode::kDeviceError);
  }
  DeviceSlab slab;
  slab.data_ = p;
  slab.size_ = bytes;
  slab.device_ = device;
  slab.uuid_ = *uuid;
  if (reinterpret_cast<uintptr_t>(p) % alignment != 0) {
    return Status(ErrorCode::kInternal, "cudaMalloc returned a base not aligned to " +
                                            std::to_string(alignment) + " bytes");
  }
  // Zeroed like host pools, so a block never shows another run's bytes; and a slab that
  // cannot be written fails here rather than in a client.
  if (cudaError_t e = rt().cudaMemset(p, 0, bytes); e != cudaSuccess)
    return cuda_error("cudaMemset of the new slab", e);
  if (cudaError_t e = rt().cudaDeviceSynchronize(); e != cudaSuccess)
    return cuda_error("cudaDeviceSynchronize after zeroing the new slab", e);
  return slab;
}

Result<IpcHandle> DeviceSlab::export_handle() const {
  if (!data_) return Status(ErrorCode::kInvalidState, "export of an empty DeviceSlab");
  cudaIpcMemHandle_t h{};
  if (cudaError_t e = rt().cudaIpcGetMemHandle(&h, data_); e != cudaSuccess)
    return cuda_error("cudaIpcGetMemHandle on device " + std::to_string(device_), e);
  IpcHandle out;
  std::memcpy(out.data(), &h, out.size());
  return out;
}

void DeviceSlab::release() noexcept {
  if (!data_) return;
  // cudaFree in the slab's context; errors (e.g. the runtime already unloading at exit)
  // leave nothing to do: the driver frees everything of a process that ends.
  if (rt().cudaSetDevice(device_) == cudaSuccess) (void)rt().cudaFree(data_);
  (void)rt().cudaGetLastError();
  data_ = nullptr;
  size_ = 0;
}

// ---- DeviceMapping -------------------------------------------------------------------------

Result<DeviceMapping> DeviceMapping::open(const IpcHandle& handle, const DeviceUuid& uuid,
                                          uint64_t bytes) {
  auto local = find_device(uuid);
  if (!local) return local.status();
  CurrentDevice current(*local);
  if (current.status() != cudaSuccess)
    return cuda_error("cudaSetDevice(" + std::to_string(*local) + ")", current.status());
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle.data(), sizeof(h));
  void* p = nullptr;
  if (cudaError_t e = rt().cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
      e != cudaSuccess) {
    return cuda_error("cudaIpcOpenMemHandle of the pool's slab on device " +
                          std::to_string(*local) + " (" + uuid_string(uuid) +
                          "; a process cannot open a handle it exported itself)",
                      e);
  }
  DeviceMapping m;
  m.data_ = p;
  m.size_ = bytes;
  m.device_ = *local;
  return m;
}

void DeviceMapping::release() noexcept {
  if (!data_) return;
  CurrentDevice current(device_);
  (void)rt().cudaIpcCloseMemHandle(data_);
  (void)rt().cudaGetLastError();
  data_ = nullptr;
  size_ = 0;
}

// ---- HostRegistration ----------------------------------------------------------------------

Result<HostRegistration> HostRegistration::pin(void* data, size_t bytes) {
  if (device_count() == 0) {
    return Status(ErrorCode::kDeviceError,
                  "cannot pin host memory: no CUDA device visible (" + no_device_reason() + ")");
  }
  if (cudaError_t e = rt().cudaHostRegister(data, bytes, cudaHostRegisterPortable);
      e != cudaSuccess)
    return cuda_error("cudaHostRegister of " + std::to_string(bytes) + " bytes", e);
  HostRegistration r;
  r.data_ = data;
  return r;
}

void HostRegistration::release() noexcept {
  if (!data_) return;
  (void)rt().cudaHostUnregister(data_);
  (void)rt().cudaGetLastError();
  data_ = nullptr;
}

// ---- copies --------------------------------------------------------------------------------

Status copy_async(std::span<const CopyOp> ops, const void* src_base, void* dst_base, void* stream) {
  if (cudart() == nullptr) return Status(ErrorCode::kUnsupported, cudart_load_error());
  auto s = static_cast<cudaStream_t>(stream);
  auto* src = static_cast<const std::byte*>(src_base);
  auto* dst = static_cast<std::byte*>(dst_base);
  for (size_t i = 0; i < ops.size(); ++i) {
    const CopyOp& op = ops[i];
    cudaError_t e =
        op.flat() ? rt().cudaMemcpyAsync(dst + op.dst_offset, src + op.src_offset, op.bytes(),
                                         cudaMemcpyDefault, s)
                  : rt().cudaMemcpy2DAsync(dst + op.dst_offset, op.dst_pitch, src + op.src_offset,
                                           op.src_pitch, op.width, op.height, cudaMemcpyDefault, s);
    if (e != cudaSuccess) {
      return cuda_error("copy " + std::to_string(i + 1) + " of " + std::to_string(ops.size()) +
                            " (" + std::to_string(op.bytes()) + " bytes)",
                        e);
    }
  }
  return Status::ok();
}

Status synchronize(void* stream) {
  if (cudart() == nullptr) return Status(ErrorCode::kUnsupported, cudart_load_error());
  if (cudaError_t e = rt().cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
      e != cudaSuccess)
    return cuda_error("cudaStreamSynchronize", e);
  return Status::ok();
}

}  // namespace kvpool::cuda
