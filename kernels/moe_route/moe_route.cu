// CUDA moe_route: one 256-thread block per token. Scores and selection keys go
// to shared memory; the top-k is k rounds of a block-wide argmax under the CPU's
// order (value greater, or equal and index lower; NaN never selected; -0 == +0),
// which yields exactly the sequence topk_cpu's partial_sort does; one thread then
// normalises the k weights in slot order, as moe_route_cpu does.
#include "kernels/moe_route/moe_route.h"

#include <climits>
#include <cuda_runtime.h>

namespace hart {
namespace {

constexpr int k_threads = 256;
constexpr int k_warps = k_threads / 32;

// torch softplus (beta 1, threshold 20), as moe_route_cpu
__device__ float softplus(float x) {
  return x > 20.0f ? x : log1pf(expf(x));
}

// (v, i) better than (bv, bi); i = -1 is "none" and loses to any entry
__device__ bool better(float v, int i, float bv, int bi) {
  if (i < 0) return false;
  if (bi < 0) return true;
  return v > bv || (v == bv && i < bi);
}

// shared memory: s[E], sel[E], taken[E] (int)
__global__ void moe_route_kernel(moe_route_params p) {
  extern __shared__ float sm[];
  const int64_t E = p.n_experts, K = p.top_k, t = blockIdx.x;
  float* s = sm;
  float* sel = s + E;
  int* taken = reinterpret_cast<int*>(sel + E);
  __shared__ float warp_v[k_warps];
  __shared__ int warp_i[k_warps];
  for (int64_t e = threadIdx.x; e < E; e += blockDim.x) {
    s[e] = sqrtf(softplus(p.logits[t * E + e]));
    sel[e] = p.bias ? __fadd_rn(s[e], p.bias[e]) : s[e];
    taken[e] = 0;
  }
  __syncthreads();
  int32_t* out_ids = p.experts + t * K;
  if (p.hash_ids) {
    // NOTE(moe_route): the CPU returns out_of_range for an id outside [0, E); the
    // device cannot report that without a sync, so the slot gets -1 (weight 0).
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) {
      const int32_t e = p.hash_ids[t * K + k];
      out_ids[k] = (e >= 0 && e < E) ? e : -1;
    }
  } else {
    for (int64_t k = 0; k < K; ++k) {
      float bv = 0.0f;
      int bi = -1;
      for (int64_t e = threadIdx.x; e < E; e += blockDim.x) {
        const float v = sel[e];
        if (!taken[e] && !isnan(v) && better(v, int(e), bv, bi)) {
          bv = v;
          bi = int(e);
        }
      }
      for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (better(ov, oi, bv, bi)) {
          bv = ov;
          bi = oi;
        }
      }
      if (threadIdx.x % 32 == 0) {
        warp_v[threadIdx.x / 32] = bv;
        warp_i[threadIdx.x / 32] = bi;
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        for (int w = 1; w < k_warps; ++w) {
          if (better(warp_v[w], warp_i[w], bv, bi)) {
            bv = warp_v[w];
            bi = warp_i[w];
          }
        }
        out_ids[k] = bi;  // -1 once only NaN keys are left, as topk_cpu pads
        if (bi >= 0) taken[bi] = 1;
      }
      __syncthreads();
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    // NOTE(moe_route): a -1 slot (NaN keys) reads s[-1] on the CPU (undefined);
    // here it adds nothing and gets weight 0.
    float sum = 0;
    for (int64_t k = 0; k < K; ++k) sum = __fadd_rn(sum, out_ids[k] >= 0 ? s[out_ids[k]] : 0.0f);
    for (int64_t k = 0; k < K; ++k) {
      const float v = out_ids[k] >= 0 ? s[out_ids[k]] : 0.0f;
      p.weights[t * K + k] = __fmul_rn(__fdiv_rn(v, __fadd_rn(sum, 1e-20f)), p.route_scale);
    }
  }
}

}  // namespace

status moe_route_cuda(const moe_route_params& p, CUstream_st* stream) {
  if (!p.logits || !p.experts || !p.weights) return invalid_argument("moe_route_cuda: null pointer");
  if (p.top_k <= 0 || p.top_k > p.n_experts) {
    return invalid_argument("moe_route_cuda: top_k %lld not in [1, %lld]", (long long)p.top_k,
                            (long long)p.n_experts);
  }
  // s, sel and the taken flags live in shared memory (12 bytes per expert)
  if (p.n_experts > 2048) {
    return invalid_argument("moe_route_cuda: n_experts=%lld > 2048", (long long)p.n_experts);
  }
  if (p.n_tokens < 0 || p.n_tokens > INT_MAX) {
    return invalid_argument("moe_route_cuda: n_tokens=%lld", (long long)p.n_tokens);
  }
  if (p.n_tokens == 0) return {};
  const size_t smem = size_t(p.n_experts) * (2 * sizeof(float) + sizeof(int));
  moe_route_kernel<<<unsigned(p.n_tokens), k_threads, smem, stream>>>(p);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return internal_error("moe_route_cuda: launch failed: %s", cudaGetErrorString(err));
  return {};
}

}  // namespace hart
