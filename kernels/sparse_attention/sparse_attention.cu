// CUDA sparse attention over gathered fp32 rows. A block takes one query, a
// group of G heads and a slice of its index list, so every row it loads serves
// G heads (V4 decode: 64 heads read the same ~640 rows; a block per head read
// each row 64 times). The slice is walked in tiles of k_tile rows with an
// online softmax: logits (each warp 4 rows × G heads, a lane 4 of every 128
// channels, the 4G dots reduced across the warp in 5 shuffle steps), the
// tile's max and weights per head, then the weighted sum with a thread per
// channel. With one slice the block finishes the output with the sink; with
// several (few queries: more blocks than query × head groups would give) each
// writes (max, sum, unnormalised output) to the workspace and a second kernel
// merges the slices in slice order. The fast decode kernel over FP8 entries
// is kernels/sparse_decode_attention.
//
// bf16 (the official numerics, sparse_attention_cpu's bf16 branch): one slice
// per query; a step takes 64 rows (two tiles of logits) so the running max
// moves once per official block; weights expf(l − m) rounded to bf16 before
// the weighted sum, the sink added to the sum outside the max, the output
// divided and rounded to bf16.
#include "kernels/cuda_device.h"
#include "kernels/sparse_attention/sparse_attention.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

namespace hart {
namespace {

constexpr int k_threads = 256;
constexpr int k_warps = k_threads / 32;
constexpr int k_warp_rows = 4;                 // rows a warp's logits step takes
constexpr int k_tile = k_warps * k_warp_rows;  // rows per tile
static_assert(sparse_attention_cuda_max_head_dim <= 4 * k_threads,
              "a thread holds at most 4 output channels");
constexpr int64_t k_min_slice_rows = 32;  // a slice below this costs more to merge than it saves

// Per (query, head, slice) partials in the workspace: max, sum, then head_dim outputs.
__host__ __device__ inline int64_t partial_floats(int64_t head_dim) {
  return head_dim + 2;
}

// Sums each of NV values over the warp; lane L ends with value L % NV in v[0].
// Offsets >= NV add whole vectors; below, each step halves the values a lane keeps.
template <int NV>
__device__ inline float warp_sum_transposed(float (&v)[NV], int lane) {
#pragma unroll
  for (int o = 16; o >= NV; o >>= 1) {
#pragma unroll
    for (int i = 0; i < NV; ++i) v[i] += __shfl_xor_sync(0xffffffffu, v[i], o);
  }
#pragma unroll
  for (int o = NV / 2; o >= 1; o >>= 1) {
    const bool upper = (lane & o) != 0;
#pragma unroll
    for (int i = 0; i < o; ++i) {
      const float send = upper ? v[i] : v[i + o];
      const float keep = upper ? v[i + o] : v[i];
      v[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
    }
  }
  return v[0];
}

struct slice_plan {
  int64_t n_slices = 1, slice_rows = 0;
};

// Rows per softmax step: a tile, or the official block of 64 (two tiles).
template <bool Official>
constexpr int k_step = Official ? 2 * k_tile : k_tile;

// shared: p [k_step][G] (16-byte aligned: read as float4) | q [G][D] | rows [k_step] | m, l, factor [G]
template <int G, int NCH, bool Official>
__global__ void __launch_bounds__(k_threads)
    sparse_attention_kernel(sparse_attention_gather_params p, int64_t kvs, slice_plan plan, float* partials) {
  constexpr int step = k_step<Official>;
  extern __shared__ float4 smem4[];
  const int64_t D = p.head_dim;
  float* prob = reinterpret_cast<float*>(smem4);
  float* q = prob + step * G;
  int32_t* row = reinterpret_cast<int32_t*>(q + G * D);
  float* m = reinterpret_cast<float*>(row + step);
  float* l = m + G;
  float* factor = l + G;
  const int64_t t = blockIdx.x, h0 = int64_t(blockIdx.y) * G, s = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Unrolled so a thread's loads are in flight together (a decode block waits on this first).
#pragma unroll 8
  for (int64_t i = threadIdx.x; i < G * D; i += k_threads) q[i] = p.q[(t * p.n_heads + h0) * D + i];
  if (threadIdx.x < G) {
    m[threadIdx.x] = -INFINITY;
    l[threadIdx.x] = 0.0f;
  }
  float acc[NCH][G];
#pragma unroll
  for (int c = 0; c < NCH; ++c) {
#pragma unroll
    for (int g = 0; g < G; ++g) acc[c][g] = 0.0f;
  }
  const int64_t j_begin = s * plan.slice_rows, j_end = min(p.n_idx, j_begin + plan.slice_rows);
  const int32_t* idx = p.idx + t * p.n_idx;
  // Thread i < step holds row i of the next step's index list, loaded a step ahead.
  auto index_at = [&](int64_t j) -> int32_t {
    const int32_t e = j < j_end ? idx[j] : -1;
    return (e >= 0 && e < p.n_entries) ? e : -1;
  };
  int32_t next_row = threadIdx.x < step ? index_at(j_begin + threadIdx.x) : -1;
  for (int64_t j0 = j_begin; j0 < j_end; j0 += step) {
    __syncthreads();  // q loaded; the previous step's rows and weights consumed
    if (threadIdx.x < step) {
      row[threadIdx.x] = next_row;
      next_row = index_at(j0 + step + threadIdx.x);
    }
    __syncthreads();
    // Logits: warp w has rows 4w..4w+3 of each tile, every load of them in flight before the sums.
#pragma unroll
    for (int tile0 = 0; tile0 < step; tile0 += k_tile) {
      float dot[k_warp_rows * G];
#pragma unroll
      for (int i = 0; i < k_warp_rows * G; ++i) dot[i] = 0.0f;
      int32_t e[k_warp_rows];
#pragma unroll
      for (int r = 0; r < k_warp_rows; ++r) e[r] = row[tile0 + warp * k_warp_rows + r];
      for (int64_t c0 = 0; c0 < D; c0 += 128) {
        float v[k_warp_rows][4];
#pragma unroll
        for (int r = 0; r < k_warp_rows; ++r) {
          const float* kv = p.kv + int64_t(max(e[r], 0)) * kvs;
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int64_t d = c0 + lane + 32 * i;
            v[r][i] = (e[r] >= 0 && d < D) ? __ldg(kv + d) : 0.0f;
          }
        }
#pragma unroll
        for (int g = 0; g < G; ++g) {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int64_t d = c0 + lane + 32 * i;
            const float qv = d < D ? q[g * D + d] : 0.0f;
#pragma unroll
            for (int r = 0; r < k_warp_rows; ++r) dot[r * G + g] = fmaf(qv, v[r][i], dot[r * G + g]);
          }
        }
      }
      const float sum = warp_sum_transposed<k_warp_rows * G>(dot, lane);
      if (lane < k_warp_rows * G) {  // lane = r·G + g holds row r's dot with head g
        const int j = tile0 + warp * k_warp_rows + lane / G;
        prob[j * G + lane % G] = row[j] >= 0 ? sum * p.scale : -INFINITY;
      }
    }
    __syncthreads();
    // Online softmax: warp g updates head g's max and sum over the step's rows
    // (lane: rows lane, lane + 32). Official: the weights rounded to bf16, the sum not.
    if (warp < G) {
      const int g = warp;
      constexpr int per_lane = step / 32;
      float lg[per_lane], w[per_lane];
#pragma unroll
      for (int i = 0; i < per_lane; ++i) lg[i] = prob[(lane + 32 * i) * G + g];
      float tmax = lg[0];
#pragma unroll
      for (int i = 1; i < per_lane; ++i) tmax = fmaxf(tmax, lg[i]);
      for (int o = 16; o > 0; o >>= 1) tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, o));
      const float m_old = m[g], m_new = fmaxf(m_old, tmax);
#pragma unroll
      for (int i = 0; i < per_lane; ++i) w[i] = m_new == -INFINITY ? 0.0f : expf(lg[i] - m_new);
      float tsum = w[0];
#pragma unroll
      for (int i = 1; i < per_lane; ++i) tsum += w[i];
      for (int o = 16; o > 0; o >>= 1) tsum += __shfl_xor_sync(0xffffffffu, tsum, o);
#pragma unroll
      for (int i = 0; i < per_lane; ++i)
        prob[(lane + 32 * i) * G + g] = Official ? __bfloat162float(__float2bfloat16_rn(w[i])) : w[i];
      if (lane == 0) {
        const float f = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
        factor[g] = f;
        l[g] = l[g] * f + tsum;
        m[g] = m_new;
      }
    }
    __syncthreads();
    // Weighted sum: a thread per channel (tid, tid + 256, ...), rows in tile order.
    float f[G];
#pragma unroll
    for (int g = 0; g < G; ++g) f[g] = factor[g];
#pragma unroll
    for (int c = 0; c < NCH; ++c) {
#pragma unroll
      for (int g = 0; g < G; ++g) acc[c][g] *= f[g];
    }
    // Predicated, not branched: the unrolled rows' loads go out together. An empty
    // row adds 0 · 0 (its weight is 0 too; its memory is never read).
#pragma unroll 8
    for (int r = 0; r < step; ++r) {
      const int32_t e = row[r];
      const float* kv = p.kv + int64_t(max(e, 0)) * kvs;
      float v[NCH];
#pragma unroll
      for (int c = 0; c < NCH; ++c) {
        const int64_t d = threadIdx.x + int64_t(c) * k_threads;
        v[c] = (e >= 0 && d < D) ? __ldg(kv + d) : 0.0f;
      }
      float w[G];  // the row's weights: one broadcast load per 4 heads
      if constexpr (G % 4 == 0) {
#pragma unroll
        for (int g = 0; g < G; g += 4) {
          const float4 w4 = reinterpret_cast<const float4*>(prob + r * G)[g / 4];
          w[g] = w4.x, w[g + 1] = w4.y, w[g + 2] = w4.z, w[g + 3] = w4.w;
        }
      } else {
#pragma unroll
        for (int g = 0; g < G; ++g) w[g] = prob[r * G + g];
      }
#pragma unroll
      for (int g = 0; g < G; ++g) {
#pragma unroll
        for (int c = 0; c < NCH; ++c) acc[c][g] = fmaf(w[g], v[c], acc[c][g]);
      }
    }
  }
  __syncthreads();
  if constexpr (Official) {
    // One slice; the sink joins the sum, not the max.
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const float denom = l[g] + expf(p.sink[h0 + g] - m[g]);
      float* out = p.out + (t * p.n_heads + h0 + g) * D;
#pragma unroll
      for (int c = 0; c < NCH; ++c) {
        const int64_t d = threadIdx.x + int64_t(c) * k_threads;
        if (d < D) out[d] = __bfloat162float(__float2bfloat16_rn(acc[c][g] / denom));
      }
    }
    return;
  }
  if (plan.n_slices == 1) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const float sink = p.sink[h0 + g], mg = m[g];
      const float M = fmaxf(mg, sink);
      const float fm = mg == -INFINITY ? 0.0f : expf(mg - M);
      const float denom = l[g] * fm + (sink == -INFINITY ? 0.0f : expf(sink - M));
      const float scale = denom > 0.0f ? fm / denom : 0.0f;
      float* out = p.out + (t * p.n_heads + h0 + g) * D;
#pragma unroll
      for (int c = 0; c < NCH; ++c) {
        const int64_t d = threadIdx.x + int64_t(c) * k_threads;
        if (d < D) out[d] = acc[c][g] * scale;
      }
    }
    return;
  }
#pragma unroll
  for (int g = 0; g < G; ++g) {
    float* part = partials + ((t * p.n_heads + h0 + g) * plan.n_slices + s) * partial_floats(D);
    if (threadIdx.x == 0) {
      part[0] = m[g];
      part[1] = l[g];
    }
#pragma unroll
    for (int c = 0; c < NCH; ++c) {
      const int64_t d = threadIdx.x + int64_t(c) * k_threads;
      if (d < D) part[2 + d] = acc[c][g];
    }
  }
}

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

// One block per (query, head): the slices' partials combined in slice order,
// with the sink. shared: each slice's weight e^{m_s − M} / denominator.
__global__ void __launch_bounds__(k_threads)
    merge_kernel(sparse_attention_gather_params p, int64_t n_slices, const float* partials) {
  extern __shared__ float wgt[];
  __shared__ float scratch[k_warps];
  const int64_t th = blockIdx.x, D = p.head_dim, pf = partial_floats(D);
  const float* part = partials + th * n_slices * pf;
  const float sink = p.sink[th % p.n_heads];
  float M = sink;
  for (int64_t s = threadIdx.x; s < n_slices; s += k_threads) M = fmaxf(M, part[s * pf]);
  M = block_reduce(M, true, scratch);
  float sum = 0.0f;
  for (int64_t s = threadIdx.x; s < n_slices; s += k_threads) {
    const float ms = part[s * pf];
    wgt[s] = ms == -INFINITY ? 0.0f : expf(ms - M);
    sum += wgt[s] * part[s * pf + 1];
  }
  // the block sum has a fixed order, so reruns agree bit for bit
  const float sink_w = (sink == -INFINITY || M == -INFINITY) ? 0.0f : expf(sink - M);
  const float denom = block_reduce(sum, false, scratch) + sink_w;
  float* out = p.out + th * D;
  for (int64_t d = threadIdx.x; d < D; d += k_threads) {
    float o = 0.0f;
#pragma unroll 8
    for (int64_t s = 0; s < n_slices; ++s)
      o = fmaf(wgt[s], part[s * pf + 2 + d], o);  // loads in flight together
    out[d] = denom > 0.0f ? o / denom : 0.0f;
  }
}

int heads_per_block(int64_t n_heads) {
  for (int g : {8, 4, 2}) {
    if (n_heads % g == 0) return g;
  }
  return 1;
}

int64_t smem_bytes(int G, int64_t head_dim, int step) {
  return (G * head_dim + step * G + step + 3 * G) * 4;
}

// Blocks the device holds at once, about: fewer (query, head group) pairs than
// this and the index list is sliced until there are this many blocks.
int64_t target_blocks() {
  return 2 * cuda_sm_count();
}

slice_plan plan_slices(const sparse_attention_gather_params& p, int G) {
  slice_plan plan;
  const int64_t pairs = p.n_queries * (p.n_heads / G);
  int64_t n = std::min(target_blocks() / std::max<int64_t>(pairs, 1), p.n_idx / k_min_slice_rows);
  const int64_t per_slice = p.n_queries * p.n_heads * partial_floats(p.head_dim) * int64_t(sizeof(float));
  if (!p.workspace || p.bf16) n = 1;
  n = std::min<int64_t>(n, int64_t(p.workspace_bytes) / per_slice);
  plan.n_slices = std::max<int64_t>(n, 1);
  // Slices of whole tiles, the last one shorter.
  const int64_t tiles = (p.n_idx + k_tile - 1) / k_tile;
  plan.slice_rows = std::max<int64_t>(1, (tiles + plan.n_slices - 1) / plan.n_slices) * k_tile;
  plan.n_slices = std::max<int64_t>(1, (p.n_idx + plan.slice_rows - 1) / plan.slice_rows);
  return plan;
}

template <int G, int NCH, bool Official>
cudaError_t launch(const sparse_attention_gather_params& p, int64_t kvs, const slice_plan& plan,
                   CUstream_st* stream) {
  const dim3 grid(unsigned(p.n_queries), unsigned(p.n_heads / G), unsigned(plan.n_slices));
  // At most 8 heads × 1024 channels of q: under the 48 KB a block gets without opting in.
  const size_t smem = size_t(smem_bytes(G, p.head_dim, k_step<Official>));
  sparse_attention_kernel<G, NCH, Official>
      <<<grid, k_threads, smem, stream>>>(p, kvs, plan, static_cast<float*>(p.workspace));
  return cudaGetLastError();
}

template <int G, bool Official>
cudaError_t launch_g(const sparse_attention_gather_params& p, int64_t kvs, const slice_plan& plan,
                     CUstream_st* st) {
  if (p.head_dim <= k_threads) return launch<G, 1, Official>(p, kvs, plan, st);
  if (p.head_dim <= 2 * k_threads) return launch<G, 2, Official>(p, kvs, plan, st);
  return launch<G, 4, Official>(p, kvs, plan, st);
}

template <bool Official>
cudaError_t launch_heads(const sparse_attention_gather_params& p, int64_t kvs, const slice_plan& plan, int G,
                         CUstream_st* st) {
  switch (G) {
    case 8:
      return launch_g<8, Official>(p, kvs, plan, st);
    case 4:
      return launch_g<4, Official>(p, kvs, plan, st);
    case 2:
      return launch_g<2, Official>(p, kvs, plan, st);
    default:
      return launch_g<1, Official>(p, kvs, plan, st);
  }
}

}  // namespace

size_t sparse_attention_cuda_workspace_bytes(int64_t n_heads, int64_t head_dim) {
  // plan_slices keeps queries × (heads / G) × slices <= target_blocks().
  if (n_heads <= 0 || head_dim <= 0) return 0;
  return size_t(target_blocks() * heads_per_block(n_heads) * partial_floats(head_dim)) * sizeof(float);
}

status sparse_attention_cuda(const sparse_attention_gather_params& p, CUstream_st* stream) {
  if (!p.q || !p.sink || !p.out || (p.n_idx && (!p.idx || !p.kv))) {
    return invalid_argument("sparse_attention_cuda: null pointer");
  }
  if (p.n_queries < 0 || p.n_heads <= 0 || p.head_dim <= 0 || p.n_idx < 0 || p.n_entries < 0) {
    return invalid_argument(
        "sparse_attention_cuda: bad sizes n_queries=%lld n_heads=%lld head_dim=%lld n_idx=%lld",
        (long long)p.n_queries, (long long)p.n_heads, (long long)p.head_dim, (long long)p.n_idx);
  }
  if (p.head_dim > sparse_attention_cuda_max_head_dim) {
    return invalid_argument("sparse_attention_cuda: head_dim=%lld over the %lld a block holds",
                            (long long)p.head_dim, (long long)sparse_attention_cuda_max_head_dim);
  }
  const int64_t kvs = p.kv_stride ? p.kv_stride : p.head_dim;
  if (kvs < p.head_dim)
    return invalid_argument("sparse_attention_cuda: kv_stride=%lld < head_dim", (long long)kvs);
  if (p.n_entries > INT32_MAX) return invalid_argument("sparse_attention_cuda: n_entries over int32 indices");
  if (p.n_queries > INT32_MAX) return invalid_argument("sparse_attention_cuda: too many queries");
  if (p.n_queries == 0) return {};
  const int G = heads_per_block(p.n_heads);
  const slice_plan plan = plan_slices(p, G);
  cudaError_t e =
      p.bf16 ? launch_heads<true>(p, kvs, plan, G, stream) : launch_heads<false>(p, kvs, plan, G, stream);
  if (e == cudaSuccess && plan.n_slices > 1) {
    merge_kernel<<<unsigned(p.n_queries * p.n_heads), k_threads, size_t(plan.n_slices) * sizeof(float),
                   stream>>>(p, plan.n_slices, static_cast<const float*>(p.workspace));
    e = cudaGetLastError();
  }
  if (e != cudaSuccess) return internal_error("sparse_attention_cuda: %s", cudaGetErrorString(e));
  return {};
}

}  // namespace hart
