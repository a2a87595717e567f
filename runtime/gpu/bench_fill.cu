#include "runtime/gpu/bench_fill.h"
#include "runtime/gpu/device_memory.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

namespace hart::gpu {
namespace {

constexpr int k_threads = 256;
constexpr int64_t k_max_blocks = 8192;  // grid-stride beyond this

// splitmix64 of (seed, i): independent 64 random bits per index.
__device__ uint64_t mix(uint64_t seed, uint64_t i) {
  uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// e4m3 byte: sign | exponent field (6 or 7) | mantissa: |v| in [0.5, 2).
__global__ void e4m3_kernel(uint8_t* q, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t r = mix(seed, uint64_t(i));
    q[i] = uint8_t((r & 0x80) | ((6 + ((r >> 8) & 1)) << 3) | ((r >> 16) & 7));
  }
}

__global__ void random_byte_kernel(uint8_t* q, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    q[i] = uint8_t(mix(seed, uint64_t(i)) >> 56);
  }
}

__global__ void byte_kernel(uint8_t* q, int64_t n, uint8_t v) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    q[i] = v;
}

__global__ void f32_kernel(float* x, int64_t n, uint64_t seed, float lo, float span) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    x[i] = lo + span * float(mix(seed, uint64_t(i)) >> 40) * 0x1p-24f;
  }
}

// The f32_kernel value's top 16 bits (a bf16 within one bf16 step of it).
__global__ void bf16_kernel(uint16_t* x, int64_t n, uint64_t seed, float lo, float span) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    x[i] = uint16_t(__float_as_uint(lo + span * float(mix(seed, uint64_t(i)) >> 40) * 0x1p-24f) >> 16);
  }
}

__global__ void empty_kernel() {}

int blocks_for(int64_t n) {
  return int(std::clamp<int64_t>((n + k_threads - 1) / k_threads, 1, k_max_blocks));
}

status launched(const char* op) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return internal_error("%s: launch failed: %s", op, cudaGetErrorString(e));
  return {};
}

}  // namespace

status bench_fill_e4m3(uint8_t* codes, int64_t n, uint64_t seed, CUstream_st* stream) {
  if (n <= 0) return {};
  e4m3_kernel<<<blocks_for(n), k_threads, 0, stream>>>(codes, n, seed);
  return launched("bench_fill_e4m3");
}

status bench_fill_bytes(uint8_t* bytes, int64_t n, uint64_t seed, CUstream_st* stream) {
  if (n <= 0) return {};
  random_byte_kernel<<<blocks_for(n), k_threads, 0, stream>>>(bytes, n, seed);
  return launched("bench_fill_bytes");
}

status bench_fill_e8m0(uint8_t* scales, int64_t n, uint8_t code, CUstream_st* stream) {
  if (n <= 0) return {};
  byte_kernel<<<blocks_for(n), k_threads, 0, stream>>>(scales, n, code);
  return launched("bench_fill_e8m0");
}

status bench_fill_f32(float* x, int64_t n, uint64_t seed, float lo, float hi, CUstream_st* stream) {
  if (n <= 0) return {};
  f32_kernel<<<blocks_for(n), k_threads, 0, stream>>>(x, n, seed, lo, hi - lo);
  return launched("bench_fill_f32");
}

status bench_fill_bf16(uint16_t* x, int64_t n, uint64_t seed, float lo, float hi, CUstream_st* stream) {
  if (n <= 0) return {};
  bf16_kernel<<<blocks_for(n), k_threads, 0, stream>>>(x, n, seed, lo, hi - lo);
  return launched("bench_fill_bf16");
}

status_or<double> bench_empty_launch_us(int n) {
  cudaEvent_t a, b;
  HART_RETURN_IF_ERROR(cuda_status(cudaEventCreate(&a), "bench: event"));
  HART_RETURN_IF_ERROR(cuda_status(cudaEventCreate(&b), "bench: event"));
  std::vector<float> ms(size_t(std::max(n, 1)));
  for (float& t : ms) {
    cudaEventRecord(a);
    empty_kernel<<<1, 32>>>();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    cudaEventElapsedTime(&t, a, b);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  HART_RETURN_IF_ERROR(launched("bench_empty_launch_us"));
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return 1e3 * double(ms[ms.size() / 2]);
}

}  // namespace hart::gpu
