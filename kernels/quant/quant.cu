// CUDA versions of the quantizers in quant.h. Bit-exact with quant_cpu.cpp:
// the codecs are integer ports (quant_codecs.cuh), a block's amax is a max (order
// free), every scale is a power of two, x / s and q * s are single IEEE roundings
// (__fdiv_rn / __fmul_rn, safe from fast-math), and the Hadamard butterflies run
// in fp64 in the CPU's order, rounding once to fp32.
//
// Launch shapes: one 128-thread CTA per quantization block; one CTA per row for
// the Hadamard transform.
#include "kernels/quant/quant.h"
#include "kernels/quant/quant_args.h"
#include "kernels/quant/quant_codecs.cuh"

#include <climits>
#include <cuda_runtime.h>

#include <algorithm>

namespace hart {
namespace {

using ll = long long;
namespace qd = quant_dev;

constexpr int k_threads = 128;  // 4 warps: a 128-wide block is one element per thread
constexpr int k_warps = k_threads / 32;
constexpr int64_t k_hadamard_max_n = 4096;  // fp64 row in static-size dynamic shared memory (32 KB)

// max over the CTA of `v` (every thread's partial max, all >= the floor, never NaN)
__device__ float cta_max(float v) {
  __shared__ float warp_max[k_warps];
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = v;
  __syncthreads();
  v = warp_max[0];
  for (int i = 1; i < k_warps; ++i) v = warp_max[i] > v ? warp_max[i] : v;
  return v;
}

// max(floor, max |x[i]|) over n elements, NaN skipped (the CPU's `a > amax`)
__device__ float block_amax(const float* x, int64_t n, float floor) {
  float amax = floor;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float a = fabsf(x[i]);
    if (a > amax) amax = a;
  }
  return cta_max(amax);
}

enum class act_mode { fp8_qdq, fp8_codes, fp4_qdq };

template <act_mode M>
__global__ void act_quant_kernel(float* x, int64_t block, uint8_t* q, float* scales) {
  constexpr bool fp8 = M != act_mode::fp4_qdq;
  constexpr float q_max = fp8 ? e4m3_max : e2m1_max;
  const int64_t b = blockIdx.x;
  float* xb = x + b * block;
  const float s = ldexpf(
      1.0f, qd::pow2_scale_exponent(block_amax(xb, block, fp8 ? fp8_amax_floor : fp4_amax_floor), q_max));
  if (M == act_mode::fp8_codes && threadIdx.x == 0) scales[b] = s;
  for (int64_t i = threadIdx.x; i < block; i += blockDim.x) {
    const float v = qd::clamp_q(__fdiv_rn(xb[i], s), q_max);
    if (M == act_mode::fp8_codes) {
      q[b * block + i] = qd::e4m3_from_f32(v);
    } else if (fp8) {
      xb[i] = __fmul_rn(qd::f32_from_e4m3(qd::e4m3_from_f32(v)), s);
    } else {
      xb[i] = __fmul_rn(qd::f32_from_e2m1(qd::e2m1_from_f32(v)), s);
    }
  }
}

// In-place H_n x * scale for row blockIdx.x; fp64 butterflies in the CPU's order.
__global__ void hadamard_kernel(float* x, int64_t n, float scale) {
  extern __shared__ double t[];
  float* row = x + int64_t(blockIdx.x) * n;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) t[i] = row[i];
  __syncthreads();
  for (int64_t h = 1; h < n; h *= 2) {
    for (int64_t e = threadIdx.x; e < n / 2; e += blockDim.x) {
      const int64_t j = (e / h) * 2 * h + e % h;
      const double a = t[j], b = t[j + h];
      t[j] = __dadd_rn(a, b);
      t[j + h] = __dsub_rn(a, b);
    }
    __syncthreads();
  }
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    row[i] = __double2float_rn(__dmul_rn(t[i], double(scale)));
}

// One CTA per block x block tile (partial at the edges) of a [rows, cols] weight.
// -- validation (shapes and pointers only: see quant.h on data checks) -------

// The CPU's shape checks plus the grid limit: one block of threads per quantization block.
status check_blocks(const char* op, int64_t n, int64_t block) {
  HART_RETURN_IF_ERROR(quant_args::check_blocks(op, n, block));
  if (n / block > INT_MAX) return invalid_argument("%s: n / block=%lld exceeds the grid", op, ll(n / block));
  return {};
}

using quant_args::check_ptr;

status launched(const char* op) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return internal_error("%s: launch failed: %s", op, cudaGetErrorString(err));
  return {};
}

template <act_mode M>
status act_quant_launch(const char* op, float* x, int64_t n, int64_t block, uint8_t* q, float* scales,
                        CUstream_st* stream) {
  if (n == 0) return {};
  act_quant_kernel<M><<<unsigned(n / block), k_threads, 0, stream>>>(x, block, q, scales);
  return launched(op);
}

}  // namespace

status act_quant_fp8_qdq_cuda(float* x, int64_t n, int64_t block, CUstream_st* stream) {
  const char* op = "act_quant_fp8_qdq_cuda";
  HART_RETURN_IF_ERROR(check_blocks(op, n, block));
  HART_RETURN_IF_ERROR(check_ptr(op, "x", x, n));
  return act_quant_launch<act_mode::fp8_qdq>(op, x, n, block, nullptr, nullptr, stream);
}

status act_quant_fp8_cuda(const float* x, int64_t n, int64_t block, uint8_t* q, float* scales,
                          CUstream_st* stream) {
  const char* op = "act_quant_fp8_cuda";
  HART_RETURN_IF_ERROR(check_blocks(op, n, block));
  HART_RETURN_IF_ERROR(check_ptr(op, "x", x, n));
  HART_RETURN_IF_ERROR(check_ptr(op, "q", q, n));
  HART_RETURN_IF_ERROR(check_ptr(op, "scales", scales, n));
  // the codes mode only reads x
  return act_quant_launch<act_mode::fp8_codes>(op, const_cast<float*>(x), n, block, q, scales, stream);
}

status fp4_act_qdq_cuda(float* x, int64_t n, int64_t block, CUstream_st* stream) {
  const char* op = "fp4_act_qdq_cuda";
  HART_RETURN_IF_ERROR(check_blocks(op, n, block));
  HART_RETURN_IF_ERROR(check_ptr(op, "x", x, n));
  return act_quant_launch<act_mode::fp4_qdq>(op, x, n, block, nullptr, nullptr, stream);
}

status hadamard_transform_cuda(float* x, int64_t n_rows, int64_t n, float scale, CUstream_st* stream) {
  const char* op = "hadamard_transform_cuda";
  if (n < 1 || (n & (n - 1)) != 0) return invalid_argument("%s: n=%lld is not a power of two", op, ll(n));
  if (n > k_hadamard_max_n) return invalid_argument("%s: n=%lld > %lld", op, ll(n), ll(k_hadamard_max_n));
  if (n_rows < 0 || n_rows > INT_MAX) return invalid_argument("%s: n_rows=%lld", op, ll(n_rows));
  HART_RETURN_IF_ERROR(check_ptr(op, "x", x, n_rows * n));
  if (n_rows == 0) return {};
  hadamard_kernel<<<unsigned(n_rows), k_threads, size_t(n) * sizeof(double), stream>>>(x, n, scale);
  return launched(op);
}

}  // namespace hart
