// CUDA compress_pool: one thread per channel (256-thread blocks over dim; the
// batched form adds a grid row per output), each running compress_pool_cpu's
// three passes over the candidates in the same order
// (coalesced: neighbouring threads read neighbouring channels of a row). Only
// expf's last bits differ from the CPU.
#include "kernels/compress_pool/compress_pool.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>

namespace hart {
namespace {

constexpr int k_threads = 256;

// Channel ch of the pooling of n_cand candidates (row pointers kv, gate).
// NOTE(compress_pool): unrolled so that a thread's candidate loads (row
// pointer, then value) are in flight together; HCA pools 128 candidates and
// one load at a time made a decode call ~24 µs. The sums keep the CPU's order.
__device__ float pool_channel(const float* const* kv, const float* const* gate, int64_t n_cand, int64_t ch) {
  float mx = -INFINITY;
#pragma unroll 8
  for (int64_t j = 0; j < n_cand; ++j) mx = fmaxf(mx, __ldg(gate[j] + ch));
  if (mx == -INFINITY) return 0.0f;  // no live candidate (CSA block 0's missing half)
  float denom = 0;
#pragma unroll 8
  for (int64_t j = 0; j < n_cand; ++j) denom = __fadd_rn(denom, expf(__fsub_rn(__ldg(gate[j] + ch), mx)));
  float acc = 0;
#pragma unroll 8
  for (int64_t j = 0; j < n_cand; ++j) {
    const float w = __fdiv_rn(expf(__fsub_rn(__ldg(gate[j] + ch), mx)), denom);
    if (w != 0.0f) acc = __fadd_rn(acc, __fmul_rn(__ldg(kv[j] + ch), w));  // a dead candidate's kv may be non-finite
  }
  return acc;
}

__global__ void compress_pool_kernel(compress_pool_params p) {
  const int64_t ch = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (ch >= p.dim) return;
  p.out[ch] = pool_channel(p.kv, p.gate, p.n_cand, ch);
}

// grid (channel blocks, outputs)
__global__ void compress_pool_batch_kernel(compress_pool_batch_params p) {
  const int64_t ch = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, o = blockIdx.y;
  if (ch >= p.dim) return;
  const int64_t slot0 = o * p.n_cand_max;
  p.out[o * p.dim + ch] = pool_channel(p.kv + slot0, p.gate + slot0, p.n_cand[o], ch);
}

}  // namespace

status compress_pool_cuda(const compress_pool_params& p, CUstream_st* stream) {
  if (!p.kv || !p.gate || !p.out) return invalid_argument("compress_pool_cuda: null pointer");
  if (p.n_cand <= 0 || p.dim <= 0) {
    return invalid_argument("compress_pool_cuda: n_cand %lld dim %lld", (long long)p.n_cand, (long long)p.dim);
  }
  const int64_t n_blocks = (p.dim + k_threads - 1) / k_threads;
  if (n_blocks > INT_MAX) return invalid_argument("compress_pool_cuda: dim %lld exceeds the grid", (long long)p.dim);
  compress_pool_kernel<<<unsigned(n_blocks), k_threads, 0, stream>>>(p);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return internal_error("compress_pool_cuda: launch failed: %s", cudaGetErrorString(err));
  return {};
}

status compress_pool_batch_cuda(const compress_pool_batch_params& p, CUstream_st* stream) {
  if (!p.kv || !p.gate || !p.n_cand || !p.out) return invalid_argument("compress_pool_batch_cuda: null pointer");
  if (p.n_out < 0 || p.n_cand_max <= 0 || p.dim <= 0) {
    return invalid_argument("compress_pool_batch_cuda: n_out %lld n_cand_max %lld dim %lld", (long long)p.n_out,
                            (long long)p.n_cand_max, (long long)p.dim);
  }
  if ((p.dim + k_threads - 1) / k_threads > INT_MAX) {
    return invalid_argument("compress_pool_batch_cuda: dim %lld exceeds the grid", (long long)p.dim);
  }
  for (int64_t o0 = 0; o0 < p.n_out; o0 += 65535) {  // grid.y's limit
    compress_pool_batch_params part = p;
    part.kv += o0 * p.n_cand_max;
    part.gate += o0 * p.n_cand_max;
    part.n_cand += o0;
    part.out += o0 * p.dim;
    part.n_out = std::min<int64_t>(65535, p.n_out - o0);
    compress_pool_batch_kernel<<<dim3(unsigned((p.dim + k_threads - 1) / k_threads), unsigned(part.n_out)), k_threads,
                                 0, stream>>>(part);
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return internal_error("compress_pool_batch_cuda: launch failed: %s", cudaGetErrorString(err));
  return {};
}

}  // namespace hart
