// CUDA rms_norm: one 256-thread block per row. Rows of float4s up to 8 per
// thread (dim <= 8192, 16-byte aligned) are loaded once, all at the start, and
// kept in registers for the scaling (a decode row is one block: its loads must
// be in flight together, not one per loop trip); the fp32 sum of squares is
// reduced over warps by shuffles. Other rows take the strided scalar loop.
// With rope_pos, each output row's trailing channels rotate before the store
// (scalar path: after it), with rope_kernel's own rotation (rope_device.cuh).
// `official` and `bf16` sum in rms_norm_cpu's orders instead: the vector path stages
// the row in shared memory for warp 0 (torch's order), the scalar path reads it from
// global memory; the unweighted bf16 norm (a serial sum) takes a warp per row.
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/rope/rope_device.cuh"

#include <cuda_runtime.h>

#include <cstdint>

namespace hart {
namespace {

constexpr int k_threads = 256;
constexpr int k_warps = k_threads / 32;
constexpr int k_vec = 8;  // float4s per thread on the vector path

// The arithmetic of one call (rms_norm_params' flags), a template argument so that
// the fp32 kernels stay as they were.
enum class norm_mode {
  fp32,           // block-wide fp32 sum, rsqrtf
  official,       // sum_squares_torch_order, 1 / sqrt rounded once
  official_bf16,  // the same, outputs rounded to bf16 (bf16 with a weight)
  head_bf16,      // the per-head bf16 RMS (bf16 without a weight)
};

__host__ __device__ constexpr bool rounds_to_bf16(norm_mode m) {
  return m == norm_mode::official_bf16 || m == norm_mode::head_bf16;
}

// The block's sum of v (every thread gets it).
__device__ float block_sum(float v) {
  __shared__ float partial[k_warps];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0.f;
  for (int w = 0; w < k_warps; ++w) total += partial[w];
  return total;
}

// Warp 0: sum_squares_torch_order of x [4·n4] (lane 0 gets it). Lane l < L sums the
// squares of float4s l, l + L, ... in four accumulators folded in order, then the
// lanes combine by shuffle-down. `Aligned`: x is 16-byte aligned.
template <bool Aligned>
__device__ float torch_order_sum_squares(const float* x, int64_t n4) {
  const int lane = threadIdx.x;
  int lanes = 1;
  while (lanes * 2 <= n4 && lanes * 2 <= 32) lanes *= 2;
  float s = 0.f;
  if (lane < lanes) {
    float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
    for (int64_t v = lane; v < n4; v += lanes) {
      float4 q;
      if constexpr (Aligned) {
        q = reinterpret_cast<const float4*>(x)[v];
      } else {
        q = make_float4(x[4 * v], x[4 * v + 1], x[4 * v + 2], x[4 * v + 3]);
      }
      a0 = __fadd_rn(a0, __fmul_rn(q.x, q.x));
      a1 = __fadd_rn(a1, __fmul_rn(q.y, q.y));
      a2 = __fadd_rn(a2, __fmul_rn(q.z, q.z));
      a3 = __fadd_rn(a3, __fmul_rn(q.w, q.w));
    }
    s = __fadd_rn(__fadd_rn(__fadd_rn(a0, a1), a2), a3);
  }
  for (int off = lanes / 2; off > 0; off >>= 1) s = __fadd_rn(s, __shfl_down_sync(0xffffffffu, s, off));
  return s;
}

__device__ __forceinline__ float4 bf16_round4(float4 v) {
  return make_float4(bf16_round(v.x), bf16_round(v.y), bf16_round(v.z), bf16_round(v.w));
}

// head_rms_bf16's 1 / rms from its fp32 sum of rounded squares.
__device__ float head_inv_from_sum(float acc, int64_t dim, float eps) {
  const float mean = bf16_round(__fmul_rn(acc, __fdiv_rn(1.0f, float(dim))));
  return bf16_round(__fdiv_rn(1.0f, __fsqrt_rn(bf16_round(__fadd_rn(mean, eps)))));
}

// The row's 1 / rms in rms_norm_cpu's arithmetic for mode M (not fp32), from x [dim]
// (global memory, or shared with `Aligned`); every thread gets it. x is read only
// before the closing __syncthreads, so y may alias it. No FMA anywhere: the CPU rounds
// every product.
template <norm_mode M, bool Aligned>
__device__ float row_inv_rms(const float* x, int64_t dim, float eps) {
  __shared__ float inv;
  if constexpr (M == norm_mode::head_bf16) {
    if (threadIdx.x == 0) {  // serially: the fp32 sum in channel order is the spec
      float acc = 0.f;
#pragma unroll 8
      for (int64_t i = 0; i < dim; ++i) acc = __fadd_rn(acc, bf16_round(__fmul_rn(x[i], x[i])));
      inv = head_inv_from_sum(acc, dim, eps);
    }
  } else {
    float ss = 0.f;  // meaningful in thread 0
    if (dim % 4) {   // sum_squares_torch_order's fallback: its double sum, in its order
      if (threadIdx.x == 0) {
        double acc = 0;
        for (int64_t i = 0; i < dim; ++i) acc = __dadd_rn(acc, __dmul_rn(double(x[i]), double(x[i])));
        ss = __double2float_rn(acc);
      }
    } else if (threadIdx.x < 32) {
      ss = torch_order_sum_squares<Aligned>(x, dim / 4);
    }
    if (threadIdx.x == 0) {  // rsqrt rounded once: IEEE double sqrt and division, then to fp32
      const float mean_square = __fmul_rn(ss, __fdiv_rn(1.0f, float(dim)));
      inv = __double2float_rn(__ddiv_rn(1.0, __dsqrt_rn(double(__fadd_rn(mean_square, eps)))));
    }
  }
  __syncthreads();
  return inv;
}

// Output float4 i of a row from its input v: v · inv (· w), rounded to bf16 under Bf16,
// then its pairs in the rope channels rotated (pairs start at even channels: a float4
// holds two whole ones).
template <bool Bf16>
__device__ __forceinline__ float4 norm_out4(const rms_norm_params& p, int64_t row, int64_t i, float4 v,
                                            float inv) {
  float4 o = make_float4(v.x * inv, v.y * inv, v.z * inv, v.w * inv);
  if (p.w) {
    const float4 g = __ldg(reinterpret_cast<const float4*>(p.w) + i);
    o = make_float4(g.x * o.x, g.y * o.y, g.z * o.z, g.w * o.w);
  }
  if (Bf16) o = bf16_round4(o);
  if (p.rope_pos) {
    const int64_t r0 = p.dim - p.rope_dim, c = 4 * i;
    const float pos = float(p.rope_pos[row / p.rope_rows_per_pos]);
    const float f = p.rope_attention_factor;
    if (c >= r0) rope_rotate_pair(o.x, o.y, pos, p.rope_inv_freq[(c - r0) / 2], f, false, Bf16);
    if (c + 2 >= r0) rope_rotate_pair(o.z, o.w, pos, p.rope_inv_freq[(c + 2 - r0) / 2], f, false, Bf16);
  }
  return o;
}

// fp32, official and official_bf16 (head_bf16: rms_norm_head_kernel, or the scalar
// path past its 1024 channels).
template <norm_mode M>
__global__ void rms_norm_vec_kernel(rms_norm_params p, int64_t xs, int64_t ys) {
  const int64_t row = blockIdx.x, n4 = p.dim / 4;
  const float4* x = reinterpret_cast<const float4*>(p.x + row * xs);
  float4* y = reinterpret_cast<float4*>(p.y + row * ys);
  float4 v[k_vec];
#pragma unroll
  for (int j = 0; j < k_vec; ++j) {
    const int64_t i = threadIdx.x + int64_t(j) * k_threads;
    v[j] = i < n4 ? __ldg(x + i) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  float inv;
  if constexpr (M == norm_mode::fp32) {
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < k_vec; ++j)
      ss += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
    inv = rsqrtf(block_sum(ss) / float(p.dim) + p.eps);
  } else {
    extern __shared__ float4 staged[];  // [n4] the row, for warp 0's ordered sum
#pragma unroll
    for (int j = 0; j < k_vec; ++j) {
      const int64_t i = threadIdx.x + int64_t(j) * k_threads;
      if (i < n4) staged[i] = v[j];
    }
    __syncthreads();
    inv = row_inv_rms<M, true>(reinterpret_cast<const float*>(staged), p.dim, p.eps);
  }
#pragma unroll
  for (int j = 0; j < k_vec; ++j) {
    const int64_t i = threadIdx.x + int64_t(j) * k_threads;
    if (i >= n4) break;
    y[i] = norm_out4<rounds_to_bf16(M)>(p, row, i, v[j], inv);
  }
}

constexpr int k_head_vec = 8;                // float4s per lane: rows of up to 1024
constexpr int k_head_rows = k_threads / 32;  // rows per block, one a warp

// head_bf16 on vector rows of <= 1024 (V4's q heads): one warp per row. Its sum is
// serial (head_rms_bf16's fp32 sum in channel order is the spec; a tree would change
// its bits), so rows go one a warp to keep many of those chains in flight.
// NOTE(rms_norm): measured on an H200, 65536 rows of 512: 153 us (the fp32 path: 157);
// one 256-thread block per row took 420.
__global__ void rms_norm_head_kernel(rms_norm_params p, int64_t xs, int64_t ys) {
  extern __shared__ float4 squares[];  // [n4, k_head_rows] each warp's squares, rounded to bf16
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t row = int64_t(blockIdx.x) * k_head_rows + warp, n4 = p.dim / 4;
  if (row >= p.n_rows) return;
  const float4* x = reinterpret_cast<const float4*>(p.x + row * xs);
  float4* y = reinterpret_cast<float4*>(p.y + row * ys);
  float4* sq = squares + warp * n4;
  float4 v[k_head_vec];
#pragma unroll
  for (int j = 0; j < k_head_vec; ++j) {
    const int64_t i = lane + 32 * j;
    v[j] = i < n4 ? __ldg(x + i) : make_float4(0.f, 0.f, 0.f, 0.f);
    if (i < n4) {
      sq[i] = bf16_round4(make_float4(__fmul_rn(v[j].x, v[j].x), __fmul_rn(v[j].y, v[j].y),
                                      __fmul_rn(v[j].z, v[j].z), __fmul_rn(v[j].w, v[j].w)));
    }
  }
  __syncwarp();
  float inv = 0.f;
  if (lane == 0) {  // 8 float4 loads go out ahead of their 32 dependent adds (zeros add nothing)
    float acc = 0.f;
    for (int64_t b = 0; b < n4; b += 8) {
      float4 q[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) q[k] = b + k < n4 ? sq[b + k] : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        acc = __fadd_rn(__fadd_rn(__fadd_rn(__fadd_rn(acc, q[k].x), q[k].y), q[k].z), q[k].w);
      }
    }
    inv = head_inv_from_sum(acc, p.dim, p.eps);
  }
  inv = __shfl_sync(0xffffffffu, inv, 0);
#pragma unroll
  for (int j = 0; j < k_head_vec; ++j) {
    const int64_t i = lane + 32 * j;
    if (i >= n4) break;
    y[i] = norm_out4<true>(p, row, i, v[j], inv);
  }
}

template <norm_mode M>
__global__ void rms_norm_kernel(rms_norm_params p, int64_t xs, int64_t ys) {
  const int64_t row = blockIdx.x;
  const float* x = p.x + row * xs;
  float* y = p.y + row * ys;
  float inv;
  if constexpr (M == norm_mode::fp32) {
    float ss = 0.f;
    for (int64_t i = threadIdx.x; i < p.dim; i += blockDim.x) ss += x[i] * x[i];
    inv = rsqrtf(block_sum(ss) / float(p.dim) + p.eps);
  } else {
    inv = row_inv_rms<M, false>(x, p.dim, p.eps);
  }
  constexpr bool bf16 = rounds_to_bf16(M);
  for (int64_t i = threadIdx.x; i < p.dim; i += blockDim.x) {
    const float v = x[i] * inv;
    const float o = p.w ? p.w[i] * v : v;
    y[i] = bf16 ? bf16_round(o) : o;
  }
  if (!p.rope_pos) return;
  __syncthreads();  // the row's outputs are written
  const int64_t r0 = p.dim - p.rope_dim;
  const float pos = float(p.rope_pos[row / p.rope_rows_per_pos]);
  for (int64_t e = threadIdx.x; e < p.rope_dim / 2; e += blockDim.x) {
    rope_rotate_pair(y[r0 + 2 * e], y[r0 + 2 * e + 1], pos, p.rope_inv_freq[e], p.rope_attention_factor,
                     false, bf16);
  }
}

bool aligned16(const void* q) {
  return reinterpret_cast<uintptr_t>(q) % 16 == 0;
}

template <norm_mode M>
void launch(const rms_norm_params& p, int64_t xs, int64_t ys, bool vec, cudaStream_t stream) {
  if constexpr (M == norm_mode::head_bf16) {
    if (vec && p.dim <= 4 * 32 * k_head_vec) {
      const unsigned n_blocks = unsigned((p.n_rows + k_head_rows - 1) / k_head_rows);
      const size_t smem_bytes = size_t(k_head_rows) * size_t(p.dim) * sizeof(float);  // <= 32 KB
      rms_norm_head_kernel<<<n_blocks, k_threads, smem_bytes, stream>>>(p, xs, ys);
      return;
    }
  } else if (vec) {
    // The ordered sums read the row staged in shared memory (<= 32 KB at dim 8192).
    const size_t smem_bytes = M == norm_mode::fp32 ? 0 : size_t(p.dim) * sizeof(float);
    rms_norm_vec_kernel<M><<<dim3(unsigned(p.n_rows)), k_threads, smem_bytes, stream>>>(p, xs, ys);
    return;
  }
  rms_norm_kernel<M><<<dim3(unsigned(p.n_rows)), k_threads, 0, stream>>>(p, xs, ys);
}

}  // namespace

status rms_norm_cuda(const rms_norm_params& p, CUstream_st* stream) {
  if (!p.x || !p.y) return invalid_argument("rms_norm_cuda: null pointer");
  if (p.dim <= 0 || p.n_rows < 0) return invalid_argument("rms_norm_cuda: bad dim %lld", (long long)p.dim);
  HART_RETURN_IF_ERROR(rms_norm_rope_check(p));
  if (p.n_rows == 0) return {};
  const int64_t xs = p.x_stride ? p.x_stride : p.dim;
  const int64_t ys = p.y_stride ? p.y_stride : p.dim;
  const bool vec = p.dim % 4 == 0 && p.dim <= int64_t(4) * k_vec * k_threads && xs % 4 == 0 && ys % 4 == 0 &&
                   aligned16(p.x) && aligned16(p.y) && (!p.w || aligned16(p.w));
  if (p.bf16) {
    if (p.w) {
      launch<norm_mode::official_bf16>(p, xs, ys, vec, stream);
    } else {
      launch<norm_mode::head_bf16>(p, xs, ys, vec, stream);
    }
  } else if (p.official) {
    launch<norm_mode::official>(p, xs, ys, vec, stream);
  } else {
    launch<norm_mode::fp32>(p, xs, ys, vec, stream);
  }
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return internal_error("rms_norm_cuda: %s", cudaGetErrorString(err));
  return {};
}

}  // namespace hart
