// Every CUDA call kvpool makes, behind one interface that compiles without CUDA.
//
// Built with KVPOOL_WITH_CUDA this is the CUDA runtime (src/device.cpp), loaded with dlopen
// on first use (src/cudart.hpp): a host without it has device_count() 0 and a reason naming
// the library, and everything host-only works. Without KVPOOL_WITH_CUDA a stub
// (src/device_stub.cpp) answers kUnsupported "kvpool was built without CUDA ...", and
// device_count() is 0. No CUDA header leaks out of here, so the daemon, libkvpool and the
// tests compile the same in both builds.
//
// Storage of device pools (docs/design.md §6): the daemon cudaMallocs one slab per pool
// (DeviceSlab) and exports it with cudaIpcGetMemHandle; a client opens that handle once
// (DeviceMapping) and addresses blocks by offset from the base it gets. A legacy IPC handle
// maps the whole allocation, so a slab is exactly one allocation. Memory from cuMemCreate
// would instead travel as a POSIX fd (cuMemExportToShareableHandle) over the Unix socket:
// that is a second slab/mapping pair here plus a new StorageKind whose daemon storage
// (daemon/pool_storage.hpp) adds the fd to the welcome; the pool core does not change.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "kvpool/core/copy_plan.hpp"
#include "kvpool/core/status.hpp"

namespace kvpool::cuda {

using DeviceUuid = std::array<uint8_t, 16>;
using IpcHandle = std::array<uint8_t, 64>;  // cudaIpcMemHandle_t, opaque

// cudaMalloc guarantees this alignment of the base; layouts asking for more are refused.
inline constexpr uint32_t kSlabAlignment = 256;

// Whether this build has the CUDA backend at all.
bool built_with_cuda();
// Visible devices. Any CUDA error (no driver: cudaErrorInsufficientDriver, no device) is
// 0 devices: cudaGetDeviceCount leaves its count unset when it fails. Cached after the
// first call (which initialises the CUDA runtime in this process).
int device_count();
// Why device_count() is 0, for messages ("no CUDA device visible (<CUDA's reason>)").
std::string no_device_reason();

// The UUID of local device `device` (what nvidia-smi -L prints, as bytes).
Result<DeviceUuid> device_uuid(int device);
// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi prints it.
std::string uuid_string(const DeviceUuid& uuid);
// The local ordinal of the device with this UUID (ordinals differ between processes under
// CUDA_VISIBLE_DEVICES). kDeviceError naming the UUID and the local devices when absent.
Result<int> find_device(const DeviceUuid& uuid);

// Daemon side: one cudaMalloc allocation of a device pool, freed by the destructor.
class DeviceSlab {
 public:
  // Selects `device`, allocates `bytes` (zeroed) and checks the base against `alignment`.
  // Errors name the device and the bytes: no such device (kDeviceError), alignment above
  // kSlabAlignment (kInvalidArgument), not enough memory (kResourceExhausted, with the
  // device's free and total memory).
  static Result<DeviceSlab> allocate(int device, uint64_t bytes, uint32_t alignment);

  DeviceSlab() = default;
  ~DeviceSlab();
  DeviceSlab(DeviceSlab&& other) noexcept;
  DeviceSlab& operator=(DeviceSlab&& other) noexcept;
  DeviceSlab(const DeviceSlab&) = delete;
  DeviceSlab& operator=(const DeviceSlab&) = delete;

  void* data() const { return data_; }
  uint64_t size() const { return size_; }
  int device() const { return device_; }
  const DeviceUuid& uuid() const { return uuid_; }
  // cudaIpcGetMemHandle of the whole slab, for clients (other processes) to open.
  Result<IpcHandle> export_handle() const;

 private:
  void release() noexcept;
  void* data_ = nullptr;
  uint64_t size_ = 0;
  int device_ = -1;
  DeviceUuid uuid_{};
};

// Client side: a slab exported by the daemon, opened in this process (cudaIpcOpenMemHandle
// on the local device whose UUID matches), closed by the destructor. A process cannot open
// a handle it exported itself.
class DeviceMapping {
 public:
  // kDeviceError when no local device has `uuid` (the message names it and the local
  // devices), or CUDA refuses the handle. The caller's current device is left unchanged.
  static Result<DeviceMapping> open(const IpcHandle& handle, const DeviceUuid& uuid,
                                    uint64_t bytes);

  DeviceMapping() = default;
  ~DeviceMapping();
  DeviceMapping(DeviceMapping&& other) noexcept;
  DeviceMapping& operator=(DeviceMapping&& other) noexcept;
  DeviceMapping(const DeviceMapping&) = delete;
  DeviceMapping& operator=(const DeviceMapping&) = delete;

  void* data() const { return data_; }
  uint64_t size() const { return size_; }
  int device() const { return device_; }  // local ordinal

 private:
  void release() noexcept;
  void* data_ = nullptr;
  uint64_t size_ = 0;
  int device_ = -1;
};

// Pins a host range (cudaHostRegister, portable to every context) for the life of the
// object, so copies to and from it run at DMA speed. The range must stay mapped until the
// registration is destroyed.
class HostRegistration {
 public:
  static Result<HostRegistration> pin(void* data, size_t bytes);

  HostRegistration() = default;
  ~HostRegistration();
  HostRegistration(HostRegistration&& other) noexcept;
  HostRegistration& operator=(HostRegistration&& other) noexcept;
  HostRegistration(const HostRegistration&) = delete;
  HostRegistration& operator=(const HostRegistration&) = delete;

 private:
  void release() noexcept;
  void* data_ = nullptr;
};

// Enqueues the plan on `stream` (a cudaStream_t; nullptr: the legacy default stream):
// one cudaMemcpyAsync per flat op, one cudaMemcpy2DAsync per op with rows apart. Pointers
// may be host (pinned or not) or device memory of any device (unified addressing decides).
// Returns once enqueued; the bytes are there after the stream is synchronised.
Status copy_async(std::span<const CopyOp> ops, const void* src_base, void* dst_base, void* stream);
// cudaStreamSynchronize(stream), errors as Status.
Status synchronize(void* stream);

}  // namespace kvpool::cuda
