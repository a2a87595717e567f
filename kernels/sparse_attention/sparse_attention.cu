// CUDA sparse attention, the simple form: one block per (query, head); logits
// of the gathered rows in shared memory, then max, weights, weighted sum, all
// fp32. The rows' loads are batched (k_batch in flight per thread) ahead of
// the sums, which keep their order: a decode query's block waits on memory
// latency, not on one load per row. The fast split decode kernel over FP8
// entries is kernels/sparse_decode_attention.
#include "kernels/sparse_attention/sparse_attention.h"

#include <cuda_runtime.h>

#include <cmath>

namespace hart {
namespace {

constexpr int k_threads = 256;
constexpr int k_warps = k_threads / 32;
constexpr int k_batch = 8;  // rows whose values a thread loads before summing them
constexpr int64_t k_max_smem_bytes = 227 * 1024;  // sm_90 opt-in limit per block

__device__ float block_reduce(float v, bool is_max, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) {
    const float u = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, u) : v + u;
  }
  __syncthreads();  // scratch may still be read from the previous reduction
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  float r = scratch[0];
  for (int w = 1; w < k_warps; ++w) r = is_max ? fmaxf(r, scratch[w]) : r + scratch[w];
  return r;
}

// shared: q [head_dim] | weight [n_idx] | row [n_idx] (-1 = empty)
__global__ void __launch_bounds__(k_threads) sparse_attention_kernel(sparse_attention_gather_params p, int64_t kvs) {
  extern __shared__ float smem[];
  __shared__ float scratch[k_warps];
  const int64_t t = blockIdx.x / p.n_heads, h = blockIdx.x % p.n_heads, D = p.head_dim;
  float* q = smem;
  float* wgt = smem + D;
  int32_t* row = reinterpret_cast<int32_t*>(wgt + p.n_idx);
  const float* qg = p.q + (t * p.n_heads + h) * D;
  for (int64_t d = threadIdx.x; d < D; d += k_threads) q[d] = qg[d];
  for (int64_t j = threadIdx.x; j < p.n_idx; j += k_threads) {
    const int32_t e = p.idx[t * p.n_idx + j];
    row[j] = (e >= 0 && e < p.n_entries) ? e : -1;
  }
  __syncthreads();
  // logits, one warp per gathered row; the row's values loaded k_batch per lane ahead of the fmaf chain
  const int lane = threadIdx.x % 32;
  for (int64_t j = threadIdx.x / 32; j < p.n_idx; j += k_warps) {
    if (row[j] < 0) continue;
    const float* kv = p.kv + int64_t(row[j]) * kvs;
    float dot = 0.0f;
    int64_t d = lane;
    for (; d + 32 * (k_batch - 1) < D; d += 32 * k_batch) {
      float v[k_batch];
#pragma unroll
      for (int i = 0; i < k_batch; ++i) v[i] = __ldg(kv + d + 32 * i);
#pragma unroll
      for (int i = 0; i < k_batch; ++i) dot = fmaf(q[d + 32 * i], v[i], dot);
    }
    for (; d < D; d += 32) dot = fmaf(q[d], __ldg(kv + d), dot);
    for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    if (lane == 0) wgt[j] = dot * p.scale;
  }
  __syncthreads();
  const float sink = p.sink[h];
  float mx = sink;
  for (int64_t j = threadIdx.x; j < p.n_idx; j += k_threads) {
    if (row[j] >= 0) mx = fmaxf(mx, wgt[j]);
  }
  mx = block_reduce(mx, true, scratch);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < p.n_idx; j += k_threads) {
    const float e = row[j] >= 0 ? expf(wgt[j] - mx) : 0.0f;
    wgt[j] = e;
    sum += e;
  }
  const float denom = block_reduce(sum, false, scratch) + expf(sink - mx);
  // every thread's wgt[] writes are visible after block_reduce's barriers; the
  // probabilities are computed once here (the same division the sum used to do per channel)
  __syncthreads();
  for (int64_t j = threadIdx.x; j < p.n_idx; j += k_threads) wgt[j] = wgt[j] / denom;
  __syncthreads();
  // compact the valid rows to the front, in index order (one warp: a ballot scan)
  __shared__ int32_t n_valid;
  if (threadIdx.x < 32) {
    int32_t base = 0;
    for (int64_t j0 = 0; j0 < p.n_idx; j0 += 32) {
      const int64_t j = j0 + lane;
      const bool ok = j < p.n_idx && row[j] >= 0;
      const int32_t r = ok ? row[j] : -1;
      const float w = ok ? wgt[j] : 0.0f;
      const unsigned ballot = __ballot_sync(0xffffffffu, ok);
      __syncwarp();
      if (ok) {
        const int32_t at = base + __popc(ballot & ((1u << lane) - 1));
        row[at] = r;  // at <= j: entries not yet read by this warp are never overwritten
        wgt[at] = w;
      }
      base += __popc(ballot);
      __syncwarp();
    }
    if (lane == 0) n_valid = base;
  }
  __syncthreads();
  const int64_t nv = n_valid;
  float* out = p.out + (t * p.n_heads + h) * D;
  for (int64_t d = threadIdx.x; d < D; d += k_threads) {
    float o = 0.0f;
    int64_t j = 0;
    for (; j + k_batch <= nv; j += k_batch) {
      float v[k_batch];
#pragma unroll
      for (int i = 0; i < k_batch; ++i) v[i] = __ldg(p.kv + int64_t(row[j + i]) * kvs + d);
#pragma unroll
      for (int i = 0; i < k_batch; ++i) o = fmaf(wgt[j + i], v[i], o);
    }
    for (; j < nv; ++j) o = fmaf(wgt[j], __ldg(p.kv + int64_t(row[j]) * kvs + d), o);
    out[d] = o;
  }
}

int64_t smem_bytes(int64_t head_dim, int64_t n_idx) { return (head_dim + 2 * n_idx) * 4; }

}  // namespace

int64_t sparse_attention_cuda_max_idx(int64_t head_dim) { return (k_max_smem_bytes / 4 - head_dim) / 2; }

status sparse_attention_cuda(const sparse_attention_gather_params& p, CUstream_st* stream) {
  if (!p.q || !p.sink || !p.out || (p.n_idx && (!p.idx || !p.kv))) {
    return invalid_argument("sparse_attention_cuda: null pointer");
  }
  if (p.n_queries < 0 || p.n_heads <= 0 || p.head_dim <= 0 || p.n_idx < 0 || p.n_entries < 0) {
    return invalid_argument("sparse_attention_cuda: bad sizes n_queries=%lld n_heads=%lld head_dim=%lld n_idx=%lld",
                            (long long)p.n_queries, (long long)p.n_heads, (long long)p.head_dim, (long long)p.n_idx);
  }
  const int64_t kvs = p.kv_stride ? p.kv_stride : p.head_dim;
  if (kvs < p.head_dim) return invalid_argument("sparse_attention_cuda: kv_stride=%lld < head_dim", (long long)kvs);
  if (p.n_entries > INT32_MAX) return invalid_argument("sparse_attention_cuda: n_entries over int32 indices");
  if (p.n_idx > sparse_attention_cuda_max_idx(p.head_dim)) {
    return invalid_argument("sparse_attention_cuda: n_idx=%lld over the %lld that fit in shared memory",
                            (long long)p.n_idx, (long long)sparse_attention_cuda_max_idx(p.head_dim));
  }
  if (p.n_queries * p.n_heads > INT32_MAX) return invalid_argument("sparse_attention_cuda: too many (query, head) pairs");
  if (p.n_queries == 0) return {};
  const int64_t smem = smem_bytes(p.head_dim, p.n_idx);
  cudaError_t e = cudaSuccess;
  if (smem > 48 * 1024) {  // above the default limit a kernel must opt in
    e = cudaFuncSetAttribute(sparse_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  }
  if (e == cudaSuccess) {
    sparse_attention_kernel<<<unsigned(p.n_queries * p.n_heads), k_threads, size_t(smem), stream>>>(p, kvs);
    e = cudaGetLastError();
  }
  if (e != cudaSuccess) return internal_error("sparse_attention_cuda: %s", cudaGetErrorString(e));
  return {};
}

}  // namespace hart
