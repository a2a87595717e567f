// File: kernels/cuda_device.h — what the CUDA ops' launch logic asks of the
// current device and driver (host code only).
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

/// A driver API function (CUDA 12.0's version of it) through the runtime, or
/// null when the driver lacks it: linking the driver library would make every
/// hart binary need one, and hart runs on machines without a GPU.
inline void* cuda_driver_symbol(const char* name) {
  void* f = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion(name, &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return f;
}

}  // namespace hart
