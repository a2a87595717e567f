// File: kernels/testing/cuda_bench_util.h — what the standalone CUDA benches
// (built by nvcc alone, scripts/gpu/) share: CK(call), the check of a CUDA
// runtime call (on failure it prints the call, where, and CUDA's message, and
// exits 1), and hash32, the counter hash their device-side random fills use.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                                 \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

namespace hart::bench {

/// A 64-bit finalizer (MurmurHash3's fmix64) folded to 32 bits: random bits per (seed, index).
__device__ __forceinline__ uint32_t hash32(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return uint32_t(x);
}

}  // namespace hart::bench
