// File: kernels/testing/cuda_test_util.h — helpers for the CUDA parity sections of
// kernels/<op>/*_test.cpp: whether a device exists, and a device copy of a host
// vector (poisoned or uploaded) that is read back for comparison.
//
//   HART_SKIP_WITHOUT_CUDA();
//   device_vec<float> d_x(x), d_y(std::vector<float>(n, k_sentinel));
//   ASSERT_TRUE(op_cuda({d_x.get(), d_y.get(), ...}, nullptr).ok());
//   ASSERT_TRUE(cuda_synced(nullptr));
//   const std::vector<float> y = d_y.to_host();
#pragma once

#ifdef HART_CUDA

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <vector>

namespace hart::testing {

/// True when a CUDA device can be used. Without one, cudaGetDeviceCount leaves a
/// sticky error behind; it is cleared so later calls do not report it.
inline bool cuda_device_available() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    return false;
  }
  return true;
}

/// GTEST_SKIP only works in the test body itself, hence a macro.
#define HART_SKIP_WITHOUT_CUDA()                                                 \
  do {                                                                           \
    if (!::hart::testing::cuda_device_available())                               \
      GTEST_SKIP() << "no CUDA device: CUDA parity not checked on this machine"; \
  } while (0)

/// Synchronises `stream` and reports the first asynchronous error of the ops on it.
inline ::testing::AssertionResult cuda_synced(cudaStream_t stream) {
  const cudaError_t e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess) return ::testing::AssertionFailure() << "CUDA error: " << cudaGetErrorString(e);
  return ::testing::AssertionSuccess();
}

/// Device copy of a host vector, freed on destruction. CUDA errors are test failures.
template <class T>
class device_vec {
 public:
  explicit device_vec(const std::vector<T>& host) : n_(host.size()) {
    // at least one element, so an empty buffer is still a valid non-null pointer
    check(cudaMalloc(reinterpret_cast<void**>(&ptr_), std::max<size_t>(n_, 1) * sizeof(T)), "cudaMalloc");
    upload(host);
  }
  ~device_vec() { cudaFree(ptr_); }
  device_vec(const device_vec&) = delete;
  device_vec& operator=(const device_vec&) = delete;

  T* get() const { return ptr_; }
  size_t size() const { return n_; }

  /// Overwrites the device copy (e.g. to re-poison an output before a second run).
  void upload(const std::vector<T>& host) {
    if (host.size() != n_) {
      ADD_FAILURE() << "device_vec::upload: size " << host.size() << " != " << n_;
      return;
    }
    if (n_) check(cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }

  std::vector<T> to_host() const {
    std::vector<T> host(n_);
    if (n_) check(cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    return host;
  }

 private:
  static void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) ADD_FAILURE() << what << ": " << cudaGetErrorString(e);
  }
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

}  // namespace hart::testing

#endif  // HART_CUDA
