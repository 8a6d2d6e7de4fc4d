// The GPU tests' kernels: fill a region with a pattern, count the words that differ from it.
#include <cuda_runtime.h>

#include "pattern.hpp"

namespace kvpool::gputest {
namespace {

constexpr unsigned kThreads = 256;

__global__ void fill_kernel(uint64_t* dst, size_t words, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < words;
       i += size_t{gridDim.x} * blockDim.x)
    dst[i] = pattern_word(seed, i);
}

__global__ void check_kernel(const uint64_t* src, size_t words, uint64_t seed,
                             unsigned long long* mismatches) {
  unsigned long long bad = 0;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < words;
       i += size_t{gridDim.x} * blockDim.x)
    bad += src[i] != pattern_word(seed, i) ? 1 : 0;
  if (bad) atomicAdd(mismatches, bad);
}

unsigned blocks_for(size_t words) {
  size_t b = (words + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1024 ? (b == 0 ? 1 : b) : 1024);
}

}  // namespace

int launch_fill(void* dst, size_t words, uint64_t seed, void* stream) {
  fill_kernel<<<blocks_for(words), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<uint64_t*>(dst), words, seed);
  return static_cast<int>(cudaGetLastError());
}

int launch_check(const void* src, size_t words, uint64_t seed, unsigned long long* mismatches,
                 void* stream) {
  check_kernel<<<blocks_for(words), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const uint64_t*>(src), words, seed, mismatches);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace kvpool::gputest
