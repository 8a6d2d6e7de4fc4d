// dlopen of the CUDA runtime (see cudart.hpp for why it is not linked).
#include "cudart.hpp"

#include <dlfcn.h>

#include <type_traits>

#include <vector>

namespace kvpool::cuda {
namespace {

struct Loaded {
  Cudart api{};
  bool ok = false;
  std::string error;
};

// The macro-expanded name of a runtime function, as the library exports it.
#define KVPOOL_CUDART_STR2(x) #x
#define KVPOOL_CUDART_STR(x) KVPOOL_CUDART_STR2(x)

Loaded load() {
  Loaded out;
  // The soname first (ld.so.conf, LD_LIBRARY_PATH: where the host's runtime is), then the
  // toolkit this was built with. RTLD_LOCAL: the runtime's symbols stay out of the global
  // namespace, so a worker that links its own libcudart is not disturbed.
  std::vector<std::string> candidates = {KVPOOL_CUDART_SONAME};
#ifdef KVPOOL_CUDART_FALLBACK
  candidates.emplace_back(KVPOOL_CUDART_FALLBACK);
#endif
  void* lib = nullptr;
  std::string tried;
  for (const std::string& c : candidates) {
    lib = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib) break;
    const char* why = dlerror();
    tried += (tried.empty() ? "" : "; ") + std::string(why ? why : c + ": not loadable");
  }
  if (!lib) {
    out.error = "the CUDA runtime " KVPOOL_CUDART_SONAME
                " could not be loaded (install the CUDA runtime, or add its directory to "
                "LD_LIBRARY_PATH; host pools work without it): " +
                tried;
    return out;
  }
  bool missing = false;
  auto bind = [&](auto& member, const char* name) {
    member = reinterpret_cast<std::remove_reference_t<decltype(member)>>(dlsym(lib, name));
    if (!member && !missing) {
      missing = true;
      out.error = std::string("the CUDA runtime " KVPOOL_CUDART_SONAME " lacks ") + name +
                  " (a runtime older than the toolkit kvpool was built with?)";
    }
  };
#define KVPOOL_CUDART_BIND(f) bind(out.api.f, KVPOOL_CUDART_STR(f))
  KVPOOL_CUDART_BIND(cudaGetErrorName);
  KVPOOL_CUDART_BIND(cudaGetErrorString);
  KVPOOL_CUDART_BIND(cudaGetLastError);
  KVPOOL_CUDART_BIND(cudaGetDeviceCount);
  KVPOOL_CUDART_BIND(cudaGetDeviceProperties);
  KVPOOL_CUDART_BIND(cudaGetDevice);
  KVPOOL_CUDART_BIND(cudaSetDevice);
  KVPOOL_CUDART_BIND(cudaMalloc);
  KVPOOL_CUDART_BIND(cudaFree);
  KVPOOL_CUDART_BIND(cudaMemGetInfo);
  KVPOOL_CUDART_BIND(cudaMemset);
  KVPOOL_CUDART_BIND(cudaDeviceSynchronize);
  KVPOOL_CUDART_BIND(cudaIpcGetMemHandle);
  KVPOOL_CUDART_BIND(cudaIpcOpenMemHandle);
  KVPOOL_CUDART_BIND(cudaIpcCloseMemHandle);
  KVPOOL_CUDART_BIND(cudaHostRegister);
  KVPOOL_CUDART_BIND(cudaHostUnregister);
  KVPOOL_CUDART_BIND(cudaMemcpyAsync);
  KVPOOL_CUDART_BIND(cudaMemcpy2DAsync);
  KVPOOL_CUDART_BIND(cudaStreamSynchronize);
#undef KVPOOL_CUDART_BIND
  out.ok = !missing;
  return out;
}

const Loaded& loaded() {
  static const Loaded l = load();  // C++ guarantees one initialisation across threads
  return l;
}

}  // namespace

const Cudart* cudart() { return loaded().ok ? &loaded().api : nullptr; }
const std::string& cudart_load_error() { return loaded().error; }

}  // namespace kvpool::cuda
