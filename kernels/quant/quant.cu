// CUDA versions of the quantizers in quant.h. Bit-exact with quant_cpu.cpp:
// the codecs are integer ports (quant_codecs.cuh), a block's amax is a max (order
// free), every scale is a power of two, x / s and q * s are single IEEE roundings
// (__fdiv_rn / __fmul_rn, safe from fast-math), and the Hadamard butterflies run
// in fp64 in the CPU's order, rounding once to fp32.
//
// Launch shapes: one 128-thread CTA per quantization block (activations) or per
// weight tile; one CTA per row for the Hadamard transform; elementwise grid-stride
// loops for the dequantizers; one warp per 32-wide MXFP4 group.
#include "kernels/quant/quant.h"
#include "kernels/quant/quant_args.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>

#include "kernels/quant/quant_codecs.cuh"

namespace hart {
namespace {

using ll = long long;
namespace qd = quant_dev;

constexpr int k_threads = 128;           // 4 warps: a 128-wide block is one element per thread
constexpr int k_warps = k_threads / 32;
constexpr int k_elementwise_blocks = 4096;  // grid-stride cap for the dequantizers
constexpr int64_t k_hadamard_max_n = 4096;  // fp64 row in static-size dynamic shared memory (32 KB)
constexpr int64_t k_mxfp4_block = 32;

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
  const float s = ldexpf(1.0f, qd::pow2_scale_exponent(block_amax(xb, block, fp8 ? fp8_amax_floor : fp4_amax_floor), q_max));
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

__global__ void act_dequant_fp8_kernel(const uint8_t* q, const float* scales, int64_t n, int64_t block, float* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __fmul_rn(qd::f32_from_e4m3(q[i]), scales[i / block]);
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
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) row[i] = __double2float_rn(__dmul_rn(t[i], double(scale)));
}

// One CTA per block x block tile (partial at the edges) of a [rows, cols] weight.
__global__ void fp8_block_quantize_kernel(const float* w, int64_t rows, int64_t cols, int64_t block, uint8_t* q,
                                          uint8_t* scale_e8m0) {
  const int64_t rb = blockIdx.y, cb = blockIdx.x, n_cb = gridDim.x;
  const int64_t r0 = rb * block, c0 = cb * block;
  const int64_t h = min(rows - r0, block), wd = min(cols - c0, block);
  float amax = fp8_amax_floor;
  for (int64_t e = threadIdx.x; e < h * wd; e += blockDim.x) {
    const float a = fabsf(w[(r0 + e / wd) * cols + c0 + e % wd]);
    if (a > amax) amax = a;
  }
  amax = cta_max(amax);
  const uint8_t code = qd::e8m0_from_exponent(qd::pow2_scale_exponent(amax, e4m3_max));
  if (threadIdx.x == 0) scale_e8m0[rb * n_cb + cb] = code;
  const float s = qd::f32_from_e8m0(code);
  for (int64_t e = threadIdx.x; e < h * wd; e += blockDim.x) {
    const int64_t idx = (r0 + e / wd) * cols + c0 + e % wd;
    q[idx] = qd::e4m3_from_f32(qd::clamp_q(__fdiv_rn(w[idx], s), e4m3_max));
  }
}

__global__ void fp8_block_dequantize_kernel(const uint8_t* q, const uint8_t* scale_e8m0, int64_t rows, int64_t cols,
                                            int64_t block, float* out) {
  const int64_t n_cb = (cols + block - 1) / block;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * cols;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    out[i] = __fmul_rn(qd::f32_from_e4m3(q[i]), qd::f32_from_e8m0(scale_e8m0[(r / block) * n_cb + c / block]));
  }
}

// One warp per (row, 32-wide group); lane l holds column g*32 + l.
__global__ void mxfp4_quantize_kernel(const float* w, int64_t rows, int64_t cols, uint8_t* packed,
                                      uint8_t* scale_e8m0) {
  const int64_t n_groups = cols / k_mxfp4_block;
  const int64_t grp = blockIdx.x * int64_t(k_warps) + threadIdx.x / 32;
  if (grp >= rows * n_groups) return;  // whole warps exit together
  const int lane = threadIdx.x % 32;
  const int64_t r = grp / n_groups, g = grp % n_groups;
  const float v = w[r * cols + g * k_mxfp4_block + lane];
  float amax = fabsf(v) > fp4_amax_floor ? fabsf(v) : fp4_amax_floor;
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, amax, o);
    amax = other > amax ? other : amax;
  }
  const uint8_t code = qd::e8m0_from_exponent(qd::pow2_scale_exponent(amax, e2m1_max));
  if (lane == 0) scale_e8m0[r * n_groups + g] = code;
  const uint8_t nib = qd::e2m1_from_f32(qd::clamp_q(__fdiv_rn(v, qd::f32_from_e8m0(code)), e2m1_max));
  const uint8_t hi = uint8_t(__shfl_down_sync(0xffffffffu, uint32_t(nib), 1));
  if (lane % 2 == 0) packed[r * (cols / 2) + g * (k_mxfp4_block / 2) + lane / 2] = uint8_t(nib | (hi << 4));
}

__global__ void mxfp4_dequantize_kernel(const uint8_t* packed, const uint8_t* scale_e8m0, int64_t rows,
                                        int64_t cols, float* out) {
  const int64_t n_groups = cols / k_mxfp4_block;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * cols;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, k = i % cols;
    const uint8_t byte = packed[r * (cols / 2) + k / 2];
    const uint8_t nibble = (k % 2 == 0) ? (byte & 0xf) : (byte >> 4);
    out[i] = __fmul_rn(qd::f32_from_e2m1(nibble), qd::f32_from_e8m0(scale_e8m0[r * n_groups + k / k_mxfp4_block]));
  }
}

// -- validation (shapes and pointers only: see quant.h on data checks) -------

// The CPU's shape checks plus the grid limit: one block of threads per quantization block.
status check_blocks(const char* op, int64_t n, int64_t block) {
  HART_RETURN_IF_ERROR(quant_args::check_blocks(op, n, block));
  if (n / block > INT_MAX) return invalid_argument("%s: n / block=%lld exceeds the grid", op, ll(n / block));
  return {};
}

using quant_args::check_matrix;
using quant_args::check_ptr;

status launched(const char* op) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return internal_error("%s: launch failed: %s", op, cudaGetErrorString(err));
  return {};
}

unsigned elementwise_grid(int64_t n) {
  return unsigned(std::min<int64_t>((n + k_threads - 1) / k_threads, k_elementwise_blocks));
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

status act_dequant_fp8_cuda(const uint8_t* q, const float* scales, int64_t n, int64_t block, float* out,
                            CUstream_st* stream) {
  const char* op = "act_dequant_fp8_cuda";
  HART_RETURN_IF_ERROR(check_blocks(op, n, block));
  HART_RETURN_IF_ERROR(check_ptr(op, "q", q, n));
  HART_RETURN_IF_ERROR(check_ptr(op, "scales", scales, n));
  HART_RETURN_IF_ERROR(check_ptr(op, "out", out, n));
  if (n == 0) return {};
  act_dequant_fp8_kernel<<<elementwise_grid(n), k_threads, 0, stream>>>(q, scales, n, block, out);
  return launched(op);
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

status fp8_block_quantize_cuda(const float* w, int64_t rows, int64_t cols, int64_t block, uint8_t* q,
                               uint8_t* scale_e8m0, CUstream_st* stream) {
  const char* op = "fp8_block_quantize_cuda";
  HART_RETURN_IF_ERROR(check_matrix(op, rows, cols));
  if (block <= 0) return invalid_argument("%s: block=%lld must be > 0", op, ll(block));
  HART_RETURN_IF_ERROR(check_ptr(op, "w", w, rows * cols));
  HART_RETURN_IF_ERROR(check_ptr(op, "q", q, rows * cols));
  HART_RETURN_IF_ERROR(check_ptr(op, "scale_e8m0", scale_e8m0, rows * cols));
  const int64_t n_rb = (rows + block - 1) / block, n_cb = (cols + block - 1) / block;
  if (n_cb > INT_MAX || n_rb > 65535) return invalid_argument("%s: %lldx%lld tiles exceed the grid", op, ll(n_rb), ll(n_cb));
  if (rows == 0 || cols == 0) return {};
  fp8_block_quantize_kernel<<<dim3(unsigned(n_cb), unsigned(n_rb)), k_threads, 0, stream>>>(w, rows, cols, block, q,
                                                                                              scale_e8m0);
  return launched(op);
}

status fp8_block_dequantize_cuda(const uint8_t* q, const uint8_t* scale_e8m0, int64_t rows, int64_t cols,
                                 int64_t block, float* out, CUstream_st* stream) {
  const char* op = "fp8_block_dequantize_cuda";
  HART_RETURN_IF_ERROR(check_matrix(op, rows, cols));
  if (block <= 0) return invalid_argument("%s: block=%lld must be > 0", op, ll(block));
  HART_RETURN_IF_ERROR(check_ptr(op, "q", q, rows * cols));
  HART_RETURN_IF_ERROR(check_ptr(op, "scale_e8m0", scale_e8m0, rows * cols));
  HART_RETURN_IF_ERROR(check_ptr(op, "out", out, rows * cols));
  if (rows == 0 || cols == 0) return {};
  fp8_block_dequantize_kernel<<<elementwise_grid(rows * cols), k_threads, 0, stream>>>(q, scale_e8m0, rows, cols,
                                                                                       block, out);
  return launched(op);
}

status mxfp4_quantize_cuda(const float* w, int64_t rows, int64_t cols, uint8_t* packed, uint8_t* scale_e8m0,
                           CUstream_st* stream) {
  const char* op = "mxfp4_quantize_cuda";
  HART_RETURN_IF_ERROR(check_matrix(op, rows, cols));
  if (cols % k_mxfp4_block != 0) return invalid_argument("%s: cols=%lld is not a multiple of 32", op, ll(cols));
  HART_RETURN_IF_ERROR(check_ptr(op, "w", w, rows * cols));
  HART_RETURN_IF_ERROR(check_ptr(op, "packed", packed, rows * cols));
  HART_RETURN_IF_ERROR(check_ptr(op, "scale_e8m0", scale_e8m0, rows * cols));
  const int64_t n_ctas = (rows * (cols / k_mxfp4_block) + k_warps - 1) / k_warps;
  if (n_ctas > INT_MAX) return invalid_argument("%s: %lldx%lld exceeds the grid", op, ll(rows), ll(cols));
  if (n_ctas == 0) return {};
  mxfp4_quantize_kernel<<<unsigned(n_ctas), k_threads, 0, stream>>>(w, rows, cols, packed, scale_e8m0);
  return launched(op);
}

status mxfp4_dequantize_cuda(const uint8_t* packed, const uint8_t* scale_e8m0, int64_t rows, int64_t cols,
                             float* out, CUstream_st* stream) {
  const char* op = "mxfp4_dequantize_cuda";
  HART_RETURN_IF_ERROR(check_matrix(op, rows, cols));
  if (cols % k_mxfp4_block != 0) return invalid_argument("%s: cols=%lld is not a multiple of 32", op, ll(cols));
  HART_RETURN_IF_ERROR(check_ptr(op, "packed", packed, rows * cols));
  HART_RETURN_IF_ERROR(check_ptr(op, "scale_e8m0", scale_e8m0, rows * cols));
  HART_RETURN_IF_ERROR(check_ptr(op, "out", out, rows * cols));
  if (rows == 0 || cols == 0) return {};
  mxfp4_dequantize_kernel<<<elementwise_grid(rows * cols), k_threads, 0, stream>>>(packed, scale_e8m0, rows, cols,
                                                                                   out);
  return launched(op);
}

}  // namespace hart
