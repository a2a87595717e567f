// CUDA indexer_score. Every score is bitwise indexer_score_cpu's: each head's
// q_h · k_s is fp32 products added in channel order (no FMA), then
// ReLU(dot) · softmax_scale · w[h], and the heads' terms are added in head
// order, exactly the CPU's operations (so the top-k over them,
// kernels/lightning_topk, picks what the CPU picks).
//   tiled (n_heads <= 64, head_dim % 4 == 0, keys 16-byte aligned): q is
//   staged once per CTA in shared memory, padded so that lane h reading head
//   h's channel d hits its own bank; each warp scores 4 keys, lane l heads l
//   and l + 32, every k float4 a broadcast load shared by the lanes' 8 dot
//   chains.
//   otherwise: one warp per key, lane l heads l, l + 32, ... from global q.
#include "kernels/indexer/indexer.h"

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

namespace hart {
namespace {

constexpr int k_threads = 256;
constexpr int k_warps = k_threads / 32;

__device__ __forceinline__ float add_products(float dot, float4 a, float4 b) {
  dot = __fadd_rn(dot, __fmul_rn(a.x, b.x));
  dot = __fadd_rn(dot, __fmul_rn(a.y, b.y));
  dot = __fadd_rn(dot, __fmul_rn(a.z, b.z));
  return __fadd_rn(dot, __fmul_rn(a.w, b.w));
}

constexpr int k_keys_per_warp = 4;
constexpr int64_t k_tiled_max_heads = 64;

__device__ __forceinline__ float head_term(const indexer_score_params& p, float dot, int64_t h) {
  return __fmul_rn(__fmul_rn(fmaxf(dot, 0.0f), p.softmax_scale), p.w[h]);
}

// shared memory: q [n_heads][head_dim + 1], then terms [k_warps][k_keys_per_warp][n_heads]
__global__ void indexer_score_tiled_kernel(indexer_score_params p) {
  extern __shared__ float sm[];
  constexpr int KPW = k_keys_per_warp;
  const int64_t hd = p.head_dim, H = p.n_heads, ld = hd + 1;
  float* qs = sm;
  for (int64_t i = threadIdx.x; i < H * hd; i += blockDim.x) qs[(i / hd) * ld + i % hd] = p.q[i];
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t s0 = (int64_t(blockIdx.x) * k_warps + warp) * KPW;
  if (s0 >= p.n_keys) return;  // whole warps exit together
  const int nk = int(min(int64_t(KPW), p.n_keys - s0));
  const float4* k[KPW];
#pragma unroll
  for (int j = 0; j < KPW; ++j) k[j] = reinterpret_cast<const float4*>(p.keys + (s0 + min(j, nk - 1)) * hd);
  const float* q0 = qs + min(int64_t(lane), H - 1) * ld;
  const float* q1 = qs + min(int64_t(lane) + 32, H - 1) * ld;
  float dot[KPW][2];
#pragma unroll
  for (int j = 0; j < KPW; ++j) dot[j][0] = dot[j][1] = 0.0f;
  for (int64_t d4 = 0; d4 < hd / 4; ++d4) {
    float4 kv[KPW];
#pragma unroll
    for (int j = 0; j < KPW; ++j) kv[j] = __ldg(k[j] + d4);
    const float4 a = make_float4(q0[4 * d4], q0[4 * d4 + 1], q0[4 * d4 + 2], q0[4 * d4 + 3]);
    const float4 b = make_float4(q1[4 * d4], q1[4 * d4 + 1], q1[4 * d4 + 2], q1[4 * d4 + 3]);
#pragma unroll
    for (int j = 0; j < KPW; ++j) {
      dot[j][0] = add_products(dot[j][0], a, kv[j]);
      dot[j][1] = add_products(dot[j][1], b, kv[j]);
    }
  }
  float* t = sm + H * ld + warp * KPW * H;
  for (int j = 0; j < nk; ++j) {
    if (lane < H) t[j * H + lane] = head_term(p, dot[j][0], lane);
    if (lane + 32 < H) t[j * H + lane + 32] = head_term(p, dot[j][1], lane + 32);
  }
  __syncwarp();
  if (lane < nk) {
    float acc = 0;
    for (int64_t h = 0; h < H; ++h) acc = __fadd_rn(acc, t[lane * H + h]);
    p.score[s0 + lane] = acc;
  }
}

// shared memory: [k_warps][n_heads] head terms
template <bool VEC>
__global__ void indexer_score_kernel(indexer_score_params p) {
  extern __shared__ float terms[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t s = blockIdx.x * int64_t(k_warps) + warp;
  if (s >= p.n_keys) return;  // whole warps exit together
  const float* k = p.keys + s * p.head_dim;
  float* t = terms + warp * p.n_heads;
  for (int64_t h = lane; h < p.n_heads; h += 32) {
    const float* q = p.q + h * p.head_dim;
    float dot = 0;
    if (VEC) {
      const float4* q4 = reinterpret_cast<const float4*>(q);
      const float4* k4 = reinterpret_cast<const float4*>(k);
      for (int64_t d = 0; d < p.head_dim / 4; ++d) dot = add_products(dot, __ldg(q4 + d), __ldg(k4 + d));
    } else {
      for (int64_t d = 0; d < p.head_dim; ++d) dot = __fadd_rn(dot, __fmul_rn(q[d], k[d]));
    }
    t[h] = head_term(p, dot, h);
  }
  __syncwarp();
  if (lane == 0) {
    float acc = 0;
    for (int64_t h = 0; h < p.n_heads; ++h) acc = __fadd_rn(acc, t[h]);
    p.score[s] = acc;
  }
}

bool aligned16(const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; }

}  // namespace

status indexer_score_cuda(const indexer_score_params& p, CUstream_st* stream) {
  if (!p.q || !p.w || !p.score || (!p.keys && p.n_keys)) return invalid_argument("indexer_score_cuda: null pointer");
  if (p.n_heads <= 0 || p.head_dim <= 0 || p.n_keys < 0) {
    return invalid_argument("indexer_score_cuda: bad sizes (n_heads=%lld head_dim=%lld n_keys=%lld)",
                            (long long)p.n_heads, (long long)p.head_dim, (long long)p.n_keys);
  }
  const int64_t n_blocks = (p.n_keys + k_warps - 1) / k_warps;
  if (n_blocks > INT_MAX) return invalid_argument("indexer_score_cuda: n_keys=%lld exceeds the grid", (long long)p.n_keys);
  if (p.n_keys == 0) return {};
  const size_t tiled_smem =
      size_t(p.n_heads * (p.head_dim + 1) + k_warps * k_keys_per_warp * p.n_heads) * sizeof(float);
  if (p.n_heads <= k_tiled_max_heads && p.head_dim % 4 == 0 && aligned16(p.keys) && tiled_smem <= 48 * 1024) {
    const int64_t keys_per_block = int64_t(k_warps) * k_keys_per_warp;
    indexer_score_tiled_kernel<<<unsigned((p.n_keys + keys_per_block - 1) / keys_per_block), k_threads, tiled_smem,
                                 stream>>>(p);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return internal_error("indexer_score_cuda: launch failed: %s", cudaGetErrorString(err));
    return {};
  }
  const size_t smem = size_t(k_warps * p.n_heads) * sizeof(float);
  if (smem > 48 * 1024) return invalid_argument("indexer_score_cuda: n_heads=%lld over the kernel's 1536", (long long)p.n_heads);
  if (p.head_dim % 4 == 0 && aligned16(p.q) && aligned16(p.keys)) {
    indexer_score_kernel<true><<<unsigned(n_blocks), k_threads, smem, stream>>>(p);
  } else {
    indexer_score_kernel<false><<<unsigned(n_blocks), k_threads, smem, stream>>>(p);
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return internal_error("indexer_score_cuda: launch failed: %s", cudaGetErrorString(err));
  return {};
}

}  // namespace hart
