#include "kernels/quant/quant.h"
#include "kernels/quant/quant_codecs.cuh"
#include "runtime/gpu/engine_kernels.h"

#include <climits>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

namespace hart::gpu {
namespace {

namespace qd = quant_dev;
constexpr int k_threads = 128;
constexpr int64_t k_max_grid = 65535;  // grid.y limit; rows past it loop

status launched(const char* op) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return internal_error("%s: launch failed: %s", op, cudaGetErrorString(e));
  return {};
}

__device__ __forceinline__ float round_bf16(float x) {
  return __bfloat162float(__float2bfloat16_rn(x));
}

// grid (blocks over the channels, tokens)
__global__ void embed_kernel(const float* table, const int32_t* ids, int64_t n_hc, int64_t dim, bool bf16,
                             float* x) {
  const int64_t t = blockIdx.y, d = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (d >= dim) return;
  const float e = table[int64_t(ids[t]) * dim + d];
  const float v = bf16 ? round_bf16(e) : e;
  for (int64_t i = 0; i < n_hc; ++i) x[(t * n_hc + i) * dim + d] = v;
}

constexpr int k_copy_unroll = 4;  // values a thread loads before it stores any

// grid (rows, column slices of k_threads * k_copy_unroll)
__global__ void copy_rows_kernel(float* dst, const int64_t* dst_off, const float* src, const int64_t* src_off,
                                 int64_t width, int64_t n, bool add) {
  const int64_t c0 = int64_t(blockIdx.y) * blockDim.x * k_copy_unroll + threadIdx.x;
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    if (dst_off[i] < 0) continue;
    float* d = dst + dst_off[i];
    const float* s = src + src_off[i];
    float v[k_copy_unroll];
#pragma unroll
    for (int u = 0; u < k_copy_unroll; ++u) {
      const int64_t c = c0 + u * int64_t(blockDim.x);
      v[u] = c < width ? s[c] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < k_copy_unroll; ++u) {
      const int64_t c = c0 + u * int64_t(blockDim.x);
      if (c < width) d[c] = add ? d[c] + v[u] : v[u];
    }
  }
}

// max over the CTA (k_threads) of non-negative, non-NaN partial maxima
__device__ float cta_max(float v) {
  __shared__ float warp_max[k_threads / 32];
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = v;
  __syncthreads();
  v = warp_max[0];
  for (int i = 1; i < k_threads / 32; ++i) v = warp_max[i] > v ? warp_max[i] : v;
  return v;
}

// blockIdx.x = block within the row, blockIdx.y (+ loop) = row
__global__ void rows_fp8_qdq_kernel(float* x, int64_t n_rows, int64_t dim, int64_t block, int64_t stride) {
  const int64_t b0 = int64_t(blockIdx.x) * block, len = min(block, dim - b0);
  for (int64_t r = blockIdx.y; r < n_rows; r += gridDim.y) {
    float* xb = x + r * stride + b0;
    float amax = fp8_amax_floor;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
      const float a = fabsf(xb[i]);
      if (a > amax) amax = a;
    }
    const float s = ldexpf(1.0f, qd::pow2_scale_exponent(cta_max(amax), e4m3_max));
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
      const float v = qd::clamp_q(__fdiv_rn(xb[i], s), e4m3_max);
      xb[i] = __fmul_rn(qd::f32_from_e4m3(qd::e4m3_from_f32(v)), s);
    }
    __syncthreads();  // warp_max is reused by the next row
  }
}

__global__ void scale_kernel(float* x, int64_t n, float s, bool bf16) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float v = x[i] * s;
    x[i] = bf16 ? round_bf16(v) : v;
  }
}

// grid (column blocks, rows)
__global__ void round_bf16_rows_kernel(float* x, int64_t n_rows, int64_t width, int64_t stride) {
  for (int64_t r = blockIdx.y; r < n_rows; r += gridDim.y) {
    for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < width;
         c += int64_t(gridDim.x) * blockDim.x) {
      x[r * stride + c] = round_bf16(x[r * stride + c]);
    }
  }
}

__global__ void picks_to_rows_kernel(picks_to_rows_params p) {
  const int64_t t = blockIdx.x;
  for (int64_t j = threadIdx.x; j < p.k; j += blockDim.x) {
    const int32_t i = p.picks[t * p.k + j];
    int32_t row = -1;
    if (i >= 0) {
      const int64_t first = int64_t(i) * p.rate;
      const int64_t page = p.full_pages[p.page_base[t] + first / p.page_size];
      row = int32_t(page * p.full_page_rows + p.entry_row0 + (first % p.page_size) / p.rate);
    }
    p.idx[t * p.n_idx + p.col0 + j] = row;
  }
}

unsigned grid_rows(int64_t n) {
  return unsigned(std::min<int64_t>(n, k_max_grid));
}

}  // namespace

status embed_rows_cuda(const float* table, const int32_t* ids, int64_t n_tokens, int64_t n_hc, int64_t dim,
                       bool bf16, float* x, CUstream_st* stream) {
  if (n_tokens <= 0) return {};
  if (n_tokens > 65535)
    return invalid_argument("embed_rows_cuda: n_tokens=%lld over the grid", (long long)n_tokens);
  embed_kernel<<<dim3{unsigned((dim + k_threads - 1) / k_threads), unsigned(n_tokens)}, k_threads, 0,
                 stream>>>(table, ids, n_hc, dim, bf16, x);
  return launched("embed_rows_cuda");
}

status copy_rows_cuda(float* dst, const int64_t* dst_off, const float* src, const int64_t* src_off,
                      int64_t width, int64_t n, bool add, CUstream_st* stream) {
  if (n <= 0 || width <= 0) return {};
  const int64_t slices = (width + k_threads * k_copy_unroll - 1) / (k_threads * k_copy_unroll);
  if (slices > 65535) return invalid_argument("copy_rows_cuda: width=%lld over the grid", (long long)width);
  copy_rows_kernel<<<dim3{grid_rows(n), unsigned(slices)}, k_threads, 0, stream>>>(dst, dst_off, src, src_off,
                                                                                   width, n, add);
  return launched("copy_rows_cuda");
}

status rows_fp8_qdq_cuda(float* x, int64_t n_rows, int64_t dim, int64_t block, int64_t stride,
                         CUstream_st* stream) {
  if (block <= 0 || dim < 0 || stride < dim) {
    return invalid_argument("rows_fp8_qdq_cuda: dim=%lld block=%lld stride=%lld", (long long)dim,
                            (long long)block, (long long)stride);
  }
  if (n_rows <= 0 || dim == 0) return {};
  const dim3 grid(unsigned((dim + block - 1) / block), grid_rows(n_rows));
  rows_fp8_qdq_kernel<<<grid, k_threads, 0, stream>>>(x, n_rows, dim, block, stride);
  return launched("rows_fp8_qdq_cuda");
}

status scale_cuda(float* x, int64_t n, float s, bool bf16, CUstream_st* stream) {
  if (n <= 0) return {};
  scale_kernel<<<unsigned(std::min<int64_t>((n + k_threads - 1) / k_threads, 4096)), k_threads, 0, stream>>>(
      x, n, s, bf16);
  return launched("scale_cuda");
}

status round_bf16_rows_cuda(float* x, int64_t n_rows, int64_t width, int64_t stride, CUstream_st* stream) {
  if (n_rows <= 0 || width <= 0) return {};
  if (stride < width) {
    return invalid_argument("round_bf16_rows_cuda: stride %lld < width %lld", (long long)stride,
                            (long long)width);
  }
  const dim3 grid(unsigned(std::min<int64_t>((width + k_threads - 1) / k_threads, 64)), grid_rows(n_rows));
  round_bf16_rows_kernel<<<grid, k_threads, 0, stream>>>(x, n_rows, width, stride);
  return launched("round_bf16_rows_cuda");
}

status picks_to_rows_cuda(const picks_to_rows_params& p, CUstream_st* stream) {
  if (p.n_tokens <= 0 || p.k <= 0) return {};
  if (p.n_tokens > INT_MAX)
    return invalid_argument("picks_to_rows_cuda: n_tokens=%lld", (long long)p.n_tokens);
  picks_to_rows_kernel<<<unsigned(p.n_tokens), k_threads, 0, stream>>>(p);
  return launched("picks_to_rows_cuda");
}

}  // namespace hart::gpu
