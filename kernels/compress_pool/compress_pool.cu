// CUDA compress_pool: one thread per channel (256-thread blocks over dim), each
// running compress_pool_cpu's three passes over the candidates in the same order
// (coalesced: neighbouring threads read neighbouring channels of a row). Only
// expf's last bits differ from the CPU.
#include "kernels/compress_pool/compress_pool.h"

#include <cuda_runtime.h>

#include <climits>

namespace hart {
namespace {

constexpr int k_threads = 256;

__global__ void compress_pool_kernel(compress_pool_params p) {
  const int64_t ch = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (ch >= p.dim) return;
  // NOTE(compress_pool): unrolled so that a thread's candidate loads (row
  // pointer, then value) are in flight together; HCA pools 128 candidates and
  // one load at a time made a decode call ~24 µs. The sums keep the CPU's order.
  float mx = -INFINITY;
#pragma unroll 8
  for (int64_t j = 0; j < p.n_cand; ++j) mx = fmaxf(mx, __ldg(p.gate[j] + ch));
  if (mx == -INFINITY) {  // no live candidate (CSA block 0's missing half)
    p.out[ch] = 0.0f;
    return;
  }
  float denom = 0;
#pragma unroll 8
  for (int64_t j = 0; j < p.n_cand; ++j) denom = __fadd_rn(denom, expf(__fsub_rn(__ldg(p.gate[j] + ch), mx)));
  float acc = 0;
#pragma unroll 8
  for (int64_t j = 0; j < p.n_cand; ++j) {
    const float w = __fdiv_rn(expf(__fsub_rn(__ldg(p.gate[j] + ch), mx)), denom);
    if (w != 0.0f) acc = __fadd_rn(acc, __fmul_rn(__ldg(p.kv[j] + ch), w));  // a dead candidate's kv may be non-finite
  }
  p.out[ch] = acc;
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

}  // namespace hart
