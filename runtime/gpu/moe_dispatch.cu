#include "kernels/linear/linear.h"
#include "runtime/gpu/moe_dispatch.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace hart::gpu {
namespace {

constexpr int k_plan_threads = 1024;
constexpr int k_max_k = 16;  // routed experts per token the combine sorts in registers

status launched(const char* op) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return internal_error("%s: launch failed: %s", op, cudaGetErrorString(e));
  return {};
}

__global__ void hash_kernel(const int32_t* ids, const int32_t* tid2eid, int64_t n, int64_t k,
                            int32_t* experts) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n * k) experts[i] = tid2eid[int64_t(ids[i / k]) * k + i % k];
}

// offset[e] = Σ_{e' < e} count[e'], tile0[e] = Σ_{e' < e} ceil(count[e'] / k_tile)
// over the CTA (each thread a contiguous run of experts, warp shuffles, then
// the warps' totals); *n_tiles (when set) = all tiles. Visible to the CTA on return.
__device__ void exclusive_scan(const int32_t* count, int32_t* offset, int32_t* tile0, int E, int k_tile,
                               int32_t* n_tiles) {
  __shared__ int32_t warp_rows[k_plan_threads / 32], warp_tiles[k_plan_threads / 32];
  const int per = (E + blockDim.x - 1) / blockDim.x, e0 = min(E, int(threadIdx.x) * per),
            e1 = min(E, e0 + per);
  int32_t rows = 0, tiles = 0;
  for (int e = e0; e < e1; ++e) rows += count[e], tiles += (count[e] + k_tile - 1) / k_tile;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
  int32_t r_incl = rows, t_incl = tiles;  // inclusive scans within the warp
  for (int o = 1; o < 32; o <<= 1) {
    const int32_t r = __shfl_up_sync(0xffffffffu, r_incl, o), t = __shfl_up_sync(0xffffffffu, t_incl, o);
    if (lane >= o) r_incl += r, t_incl += t;
  }
  if (lane == 31) warp_rows[warp] = r_incl, warp_tiles[warp] = t_incl;
  __syncthreads();
  int32_t r_base = 0, t_base = 0;
  for (int w = 0; w < warp; ++w) r_base += warp_rows[w], t_base += warp_tiles[w];
  r_base += r_incl - rows;
  t_base += t_incl - tiles;
  for (int e = e0; e < e1; ++e) {
    offset[e] = r_base;
    tile0[e] = t_base;
    r_base += count[e];
    t_base += (count[e] + k_tile - 1) / k_tile;
  }
  if (threadIdx.x == blockDim.x - 1) {
    int32_t all = 0;
    for (int w = 0; w < n_warps; ++w) all += warp_tiles[w];
    *n_tiles = all;
  }
  __syncthreads();
}

// One CTA: counts per expert, offsets and tile starts (a block scan), then
// one warp per expert ranks its rows in index order with ballots (stable).
__global__ void __launch_bounds__(k_plan_threads) plan_kernel(moe_plan_params p) {
  extern __shared__ int32_t sh[];
  const int E = int(p.n_experts), n = int(p.n_tokens * p.k);
  int32_t* count = sh;          // [E]
  int32_t* offset = sh + E;     // [E]
  int32_t* tile0 = sh + 2 * E;  // [E]
  int32_t* ex = sh + 3 * E;     // [n] the experts, staged
  for (int e = threadIdx.x; e < E; e += blockDim.x) count[e] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int32_t e = p.experts[i];
    ex[i] = e;
    if (e >= 0 && e < E) atomicAdd(&count[e], 1);  // an id outside [0, E) routes nowhere
  }
  __syncthreads();
  const int k_tile = p.max_tile_rows;
  exclusive_scan(count, offset, tile0, E, k_tile, p.n_tiles);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
  for (int e = warp; e < E; e += n_warps) {
    int32_t rank = 0;
    for (int base = 0; base < n; base += 32) {
      const int i = base + lane;
      const bool mine = i < n && ex[i] == e;
      const unsigned ballot = __ballot_sync(0xffffffffu, mine);
      if (mine) {
        const int32_t at = offset[e] + rank + __popc(ballot & ((1u << lane) - 1));
        p.src[at] = int64_t(i / p.k) * p.row_width;
        p.row_weight[at] = p.weights[i];
        p.slot[i] = at;
      }
      rank += __popc(ballot);
    }
    for (int j = lane; j * k_tile < count[e]; j += 32) {
      p.tile_group[tile0[e] + j] = e;
      p.tile_row0[tile0[e] + j] = offset[e] + j * k_tile;
      p.tile_rows[tile0[e] + j] = min(k_tile, count[e] - j * k_tile);
    }
  }
}

// grid (blocks over the channels, tokens): each thread adds one channel's rows.
__device__ __forceinline__ float round_bf16(float x) {
  return __bfloat162float(__float2bfloat16_rn(x));
}

__global__ void combine_kernel(float* y, const float* ye, const int32_t* experts, const int32_t* slot,
                               int64_t k, int64_t width, bool bf16) {
  const int64_t t = blockIdx.y, c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= width) return;
  int32_t ex[k_max_k], sl[k_max_k];
  int n = 0;
  for (int64_t j = 0; j < k; ++j) {  // insertion sort by expert id (k is small)
    const int32_t e = experts[t * k + j], s = slot[t * k + j];
    if (s < 0) continue;
    int at = n++;
    for (; at > 0 && ex[at - 1] > e; --at) ex[at] = ex[at - 1], sl[at] = sl[at - 1];
    ex[at] = e;
    sl[at] = s;
  }
  float v[k_max_k];
  for (int j = 0; j < n; ++j) v[j] = ye[int64_t(sl[j]) * width + c];  // loads issued together
  if (bf16) {  // the official order: the routed rows (bf16 outputs) from 0, then y's shared expert
    float acc = 0.0f;
    for (int j = 0; j < n; ++j) acc = acc + round_bf16(v[j]);
    y[t * width + c] = round_bf16(acc + y[t * width + c]);
    return;
  }
  float acc = y[t * width + c];
  for (int j = 0; j < n; ++j) acc = acc + v[j];
  y[t * width + c] = acc;
}

}  // namespace

status moe_hash_cuda(const int32_t* ids, const int32_t* tid2eid, int64_t n_tokens, int64_t k,
                     int32_t* experts, CUstream_st* stream) {
  if (n_tokens <= 0) return {};
  const int64_t n = n_tokens * k;
  hash_kernel<<<unsigned((n + 255) / 256), 256, 0, stream>>>(ids, tid2eid, n_tokens, k, experts);
  return launched("moe_hash_cuda");
}

int64_t moe_plan_max_tiles(int64_t n_rows, int64_t n_experts, int64_t tile_rows) {
  // Σ_e ceil(c_e / tile) <= Σ_e (c_e / tile + 1) over the non-empty experts.
  return (n_rows + tile_rows - 1) / tile_rows + (n_rows < n_experts ? n_rows : n_experts);
}

status moe_plan_cuda(const moe_plan_params& p, CUstream_st* stream) {
  const int64_t n = p.n_tokens * p.k;
  if (n > moe_plan_max_rows || p.n_experts <= 0 || p.k > k_max_k || p.max_tile_rows < 1 ||
      p.max_tile_rows > linear_grouped_wide_tile_rows) {
    return invalid_argument(
        "moe_plan_cuda: %lld rows (max %lld), %lld experts, top-%lld (max %d), tiles of %d rows",
        (long long)n, (long long)moe_plan_max_rows, (long long)p.n_experts, (long long)p.k, k_max_k,
        p.max_tile_rows);
  }
  if (n == 0) return {};
  // Every slot gets a row: the combine reads slot for every (t, k). Ids outside
  // [0, E) (none from the router) would leave theirs unset: mark them first.
  if (cudaMemsetAsync(p.slot, 0xff, size_t(n) * sizeof(int32_t), stream) != cudaSuccess)
    return launched("moe_plan_cuda");
  const size_t smem = size_t(3 * p.n_experts + n) * sizeof(int32_t);
  plan_kernel<<<1, k_plan_threads, smem, stream>>>(p);
  return launched("moe_plan_cuda");
}

status moe_combine_cuda(float* y, const float* ye, const int32_t* experts, const int32_t* slot,
                        int64_t n_tokens, int64_t k, int64_t width, bool bf16, CUstream_st* stream) {
  if (n_tokens <= 0) return {};
  if (k > k_max_k || n_tokens > 65535) {
    return invalid_argument("moe_combine_cuda: top-%lld (max %d), %lld tokens (max 65535)", (long long)k,
                            k_max_k, (long long)n_tokens);
  }
  combine_kernel<<<dim3{unsigned((width + 255) / 256), unsigned(n_tokens)}, 256, 0, stream>>>(
      y, ye, experts, slot, k, width, bf16);
  return launched("moe_combine_cuda");
}

}  // namespace hart::gpu
