// The CUDA runtime, loaded at run time (dlopen) on first use rather than linked.
//
// libkvpool (so `import kvpool`, kvpoolctl, kvpool-events) and kvpoold must run on a host
// without CUDA as long as they touch only host pools: a NEEDED entry on libcudart.so.N
// would make the dynamic loader refuse the whole program there. So kvpool_cuda keeps
// CUDA's headers (types, enums) but reaches every function through this table, which is
// filled once from KVPOOL_CUDART_SONAME (the runtime's major version this was built
// against) or, failing that, from the build's toolkit directory.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace kvpool::cuda {

// One member per runtime function kvpool calls, named and typed like the function itself
// (its macro-expanded name: the headers may rename some, e.g. per-thread default stream).
struct Cudart {
  decltype(&::cudaGetErrorName) cudaGetErrorName;
  decltype(&::cudaGetErrorString) cudaGetErrorString;
  decltype(&::cudaGetLastError) cudaGetLastError;
  decltype(&::cudaGetDeviceCount) cudaGetDeviceCount;
  decltype(&::cudaGetDeviceProperties) cudaGetDeviceProperties;
  decltype(&::cudaGetDevice) cudaGetDevice;
  decltype(&::cudaSetDevice) cudaSetDevice;
  decltype(&::cudaMalloc) cudaMalloc;
  decltype(&::cudaFree) cudaFree;
  decltype(&::cudaMemGetInfo) cudaMemGetInfo;
  decltype(&::cudaMemset) cudaMemset;
  decltype(&::cudaDeviceSynchronize) cudaDeviceSynchronize;
  decltype(&::cudaIpcGetMemHandle) cudaIpcGetMemHandle;
  decltype(&::cudaIpcOpenMemHandle) cudaIpcOpenMemHandle;
  decltype(&::cudaIpcCloseMemHandle) cudaIpcCloseMemHandle;
  decltype(&::cudaHostRegister) cudaHostRegister;
  decltype(&::cudaHostUnregister) cudaHostUnregister;
  decltype(&::cudaMemcpyAsync) cudaMemcpyAsync;
  decltype(&::cudaMemcpy2DAsync) cudaMemcpy2DAsync;
  decltype(&::cudaStreamSynchronize) cudaStreamSynchronize;
};

// The loaded runtime, or nullptr when it could not be loaded (then cudart_load_error()
// says which files were tried and why each failed). Loaded on the first call, thread-safe;
// never unloaded.
const Cudart* cudart();
const std::string& cudart_load_error();

}  // namespace kvpool::cuda
