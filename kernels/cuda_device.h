// File: kernels/cuda_device.h — what the CUDA ops' launch logic asks of the
// current device (host code only).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

namespace hart {

/// Streaming multiprocessors of the current device, asked once per device
/// (132, an H200's, if the runtime cannot say).
inline int64_t cuda_sm_count() {
  static std::atomic<int> cached[64];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) {
    (void)cudaGetLastError();
    return 132;
  }
  int n = cached[dev].load(std::memory_order_relaxed);
  if (n <= 0) {
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) {
      (void)cudaGetLastError();
      n = 132;
    }
    cached[dev].store(n, std::memory_order_relaxed);
  }
  return n;
}

}  // namespace hart
