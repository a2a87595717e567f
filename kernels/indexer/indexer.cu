// CUDA indexer_score: one warp per key, 8 keys per 256-thread block. For each
// head the warp forms q_h · k_s (lane-strided fp32 products, shuffle-tree sum),
// then accumulates ReLU(dot) · softmax_scale · w[h] over heads in the CPU's
// order. Only the order of the head_dim-long dot sums differs from the CPU.
// The top-k over these scores is kernels/lightning_topk.
#include "kernels/indexer/indexer.h"

#include <cuda_runtime.h>

#include <climits>

namespace hart {
namespace {

constexpr int k_threads = 256;
constexpr int k_warps = k_threads / 32;

__global__ void indexer_score_kernel(indexer_score_params p) {
  const int64_t s = blockIdx.x * int64_t(k_warps) + threadIdx.x / 32;
  if (s >= p.n_keys) return;  // whole warps exit together
  const int lane = threadIdx.x % 32;
  const float* k = p.keys + s * p.head_dim;
  float acc = 0;
  for (int64_t h = 0; h < p.n_heads; ++h) {
    const float* q = p.q + h * p.head_dim;
    float dot = 0;
    for (int64_t d = lane; d < p.head_dim; d += 32) dot = __fadd_rn(dot, __fmul_rn(q[d], k[d]));
    for (int o = 16; o > 0; o >>= 1) dot = __fadd_rn(dot, __shfl_xor_sync(0xffffffffu, dot, o));
    acc = __fadd_rn(acc, __fmul_rn(__fmul_rn(fmaxf(dot, 0.0f), p.softmax_scale), p.w[h]));
  }
  if (lane == 0) p.score[s] = acc;
}

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
  indexer_score_kernel<<<unsigned(n_blocks), k_threads, 0, stream>>>(p);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return internal_error("indexer_score_cuda: launch failed: %s", cudaGetErrorString(err));
  return {};
}

}  // namespace hart
