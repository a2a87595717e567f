// CUDA sparse attention, the simple form: one block per (query, head); logits
// of the gathered rows in shared memory, then max, weights, weighted sum, all
// fp32. Both passes give each warp k_rows whole rows at a time, every load of
// them in flight before the sums (a decode query's block waits on memory
// latency: ~640 rows per CSA query); the weighted sum's per-warp partials are
// added in warp order. The fast split decode kernel over FP8
// entries is kernels/sparse_decode_attention.
#include "kernels/sparse_attention/sparse_attention.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

namespace hart {
namespace {

constexpr int k_threads = 256;
constexpr int k_warps = k_threads / 32;
constexpr int k_rows = 4;      // gathered rows a warp has in flight
constexpr int k_lane_ch = 16;  // channels per lane per pass (a warp covers 512 of a row)
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

// shared: q [head_dim] | weight [n_idx] | row [n_idx] (-1 = empty) | partial outputs [k_warps][head_dim]
__global__ void __launch_bounds__(k_threads) sparse_attention_kernel(sparse_attention_gather_params p, int64_t kvs) {
  extern __shared__ float smem[];
  __shared__ float scratch[k_warps];
  __shared__ int32_t n_valid;
  const int64_t t = blockIdx.x / p.n_heads, h = blockIdx.x % p.n_heads, D = p.head_dim;
  float* q = smem;
  float* wgt = smem + D;
  int32_t* row = reinterpret_cast<int32_t*>(wgt + p.n_idx);
  float* part = reinterpret_cast<float*>(row + p.n_idx);
  const float* qg = p.q + (t * p.n_heads + h) * D;
  for (int64_t d = threadIdx.x; d < D; d += k_threads) q[d] = qg[d];
  for (int64_t j = threadIdx.x; j < p.n_idx; j += k_threads) {
    const int32_t e = p.idx[t * p.n_idx + j];
    row[j] = (e >= 0 && e < p.n_entries) ? e : -1;
  }
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Logits: a warp takes k_rows rows at once (rows warp, warp + k_warps, ...),
  // every lane loading its channels of all of them before the sums.
  for (int64_t j0 = warp; j0 < p.n_idx; j0 += int64_t(k_warps) * k_rows) {
    float dot[k_rows];
#pragma unroll
    for (int r = 0; r < k_rows; ++r) dot[r] = 0.0f;
    for (int64_t c0 = 0; c0 < D; c0 += 32 * k_lane_ch) {
      float v[k_rows][k_lane_ch];
#pragma unroll
      for (int r = 0; r < k_rows; ++r) {
        const int64_t j = j0 + int64_t(r) * k_warps;
        const int32_t e = j < p.n_idx ? row[j] : -1;
        const float* kv = p.kv + int64_t(max(e, 0)) * kvs;
#pragma unroll
        for (int i = 0; i < k_lane_ch; ++i) {
          const int64_t d = c0 + lane + 32 * i;
          v[r][i] = (e >= 0 && d < D) ? __ldg(kv + d) : 0.0f;
        }
      }
#pragma unroll
      for (int r = 0; r < k_rows; ++r) {
#pragma unroll
        for (int i = 0; i < k_lane_ch; ++i) {
          const int64_t d = c0 + lane + 32 * i;
          if (d < D) dot[r] = fmaf(q[d], v[r][i], dot[r]);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < k_rows; ++r) {
      for (int o = 16; o > 0; o >>= 1) dot[r] += __shfl_xor_sync(0xffffffffu, dot[r], o);
      const int64_t j = j0 + int64_t(r) * k_warps;
      if (lane == 0 && j < p.n_idx && row[j] >= 0) wgt[j] = dot[r] * p.scale;
    }
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
  // Weighted sum: warp w adds the valid rows w, w + k_warps, ... (k_rows in
  // flight), each lane its channels; the warps' partials are added in warp order.
  const int64_t nv = n_valid;
  for (int64_t c0 = 0; c0 < D; c0 += 32 * k_lane_ch) {
    float o[k_lane_ch];
#pragma unroll
    for (int i = 0; i < k_lane_ch; ++i) o[i] = 0.0f;
    for (int64_t j0 = warp; j0 < nv; j0 += int64_t(k_warps) * k_rows) {
      float v[k_rows][k_lane_ch], w[k_rows];
#pragma unroll
      for (int r = 0; r < k_rows; ++r) {
        const int64_t j = j0 + int64_t(r) * k_warps;
        const bool ok = j < nv;
        w[r] = ok ? wgt[j] : 0.0f;
        const float* kv = p.kv + int64_t(ok ? row[j] : 0) * kvs;
#pragma unroll
        for (int i = 0; i < k_lane_ch; ++i) {
          const int64_t d = c0 + lane + 32 * i;
          v[r][i] = (ok && d < D) ? __ldg(kv + d) : 0.0f;
        }
      }
#pragma unroll
      for (int r = 0; r < k_rows; ++r) {
#pragma unroll
        for (int i = 0; i < k_lane_ch; ++i) o[i] = fmaf(w[r], v[r][i], o[i]);
      }
    }
#pragma unroll
    for (int i = 0; i < k_lane_ch; ++i) {
      const int64_t d = c0 + lane + 32 * i;
      if (d < D) part[warp * D + d] = o[i];
    }
  }
  __syncthreads();
  float* out = p.out + (t * p.n_heads + h) * D;
  for (int64_t d = threadIdx.x; d < D; d += k_threads) {
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < k_warps; ++w) o += part[w * D + d];
    out[d] = o;
  }
}

int64_t smem_bytes(int64_t head_dim, int64_t n_idx) { return ((1 + k_warps) * head_dim + 2 * n_idx) * 4; }

}  // namespace

int64_t sparse_attention_cuda_max_idx(int64_t head_dim) {
  return std::max<int64_t>(0, (k_max_smem_bytes / 4 - (1 + k_warps) * head_dim) / 2);
}

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
