// CUDA rms_norm: one 256-thread block per row. Rows of float4s up to 8 per
// thread (dim <= 8192, 16-byte aligned) are loaded once, all at the start, and
// kept in registers for the scaling (a decode row is one block: its loads must
// be in flight together, not one per loop trip); the fp32 sum of squares is
// reduced over warps by shuffles. Other rows take the strided scalar loop.
// With rope_pos, each output row's trailing channels rotate before the store
// (scalar path: after it), with rope_kernel's own rotation (rope_device.cuh).
#include "kernels/rms_norm/rms_norm.h"

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/rope/rope_device.cuh"

namespace hart {
namespace {

constexpr int k_threads = 256;
constexpr int k_warps = k_threads / 32;
constexpr int k_vec = 8;  // float4s per thread on the vector path

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


__global__ void rms_norm_vec_kernel(rms_norm_params p, int64_t xs, int64_t ys) {
  const int64_t row = blockIdx.x, n4 = p.dim / 4;
  const float4* x = reinterpret_cast<const float4*>(p.x + row * xs);
  float4* y = reinterpret_cast<float4*>(p.y + row * ys);
  const float4* w = reinterpret_cast<const float4*>(p.w);
  float4 v[k_vec];
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < k_vec; ++j) {
    const int64_t i = threadIdx.x + int64_t(j) * k_threads;
    v[j] = i < n4 ? __ldg(x + i) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
#pragma unroll
  for (int j = 0; j < k_vec; ++j) ss += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
  const float inv = rsqrtf(block_sum(ss) / float(p.dim) + p.eps);
#pragma unroll
  for (int j = 0; j < k_vec; ++j) {
    const int64_t i = threadIdx.x + int64_t(j) * k_threads;
    if (i >= n4) break;
    float4 o = make_float4(v[j].x * inv, v[j].y * inv, v[j].z * inv, v[j].w * inv);
    if (w) {
      const float4 g = __ldg(w + i);
      o = make_float4(g.x * o.x, g.y * o.y, g.z * o.z, g.w * o.w);
    }
    if (p.rope_pos) {  // pairs start at even channels: a float4 holds two whole ones
      const int64_t r0 = p.dim - p.rope_dim, c = 4 * i;
      const float pos = float(p.rope_pos[row / p.rope_rows_per_pos]);
      const float f = p.rope_attention_factor;
      if (c >= r0) rope_rotate_pair(o.x, o.y, pos, p.rope_inv_freq[(c - r0) / 2], f, false);
      if (c + 2 >= r0) rope_rotate_pair(o.z, o.w, pos, p.rope_inv_freq[(c + 2 - r0) / 2], f, false);
    }
    y[i] = o;
  }
}

__global__ void rms_norm_kernel(rms_norm_params p, int64_t xs, int64_t ys) {
  const int64_t row = blockIdx.x;
  const float* x = p.x + row * xs;
  float* y = p.y + row * ys;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < p.dim; i += blockDim.x) ss += x[i] * x[i];
  const float inv = rsqrtf(block_sum(ss) / float(p.dim) + p.eps);
  for (int64_t i = threadIdx.x; i < p.dim; i += blockDim.x) {
    const float v = x[i] * inv;
    y[i] = p.w ? p.w[i] * v : v;
  }
  if (!p.rope_pos) return;
  __syncthreads();  // the row's outputs are written
  const int64_t r0 = p.dim - p.rope_dim;
  const float pos = float(p.rope_pos[row / p.rope_rows_per_pos]);
  for (int64_t e = threadIdx.x; e < p.rope_dim / 2; e += blockDim.x) {
    rope_rotate_pair(y[r0 + 2 * e], y[r0 + 2 * e + 1], pos, p.rope_inv_freq[e], p.rope_attention_factor, false);
  }
}

bool aligned16(const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; }

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
  if (vec) {
    rms_norm_vec_kernel<<<dim3(unsigned(p.n_rows)), k_threads, 0, stream>>>(p, xs, ys);
  } else {
    rms_norm_kernel<<<dim3(unsigned(p.n_rows)), k_threads, 0, stream>>>(p, xs, ys);
  }
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return internal_error("rms_norm_cuda: %s", cudaGetErrorString(err));
  return {};
}

}  // namespace hart
