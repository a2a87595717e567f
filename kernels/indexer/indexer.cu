// CUDA indexer_score. Every score is bitwise indexer_score_cpu's: each head's
// q_h · k_s is fp32 products added in channel order (no FMA), then
// ReLU(dot) · softmax_scale · w[h], and the heads' terms are added in head
// order, exactly the CPU's operations (so the top-k over them,
// kernels/lightning_topk, picks what the CPU picks). With bf16 the same dots
// go through the CPU's bf16 rounding points (indexer.h): the kernels are
// templates on it, so the fp32 instantiation is the code it always was.
//   tiled (n_heads <= 64, head_dim % 4 == 0, keys 16-byte aligned): q is
//   staged once per CTA in shared memory, padded so that lane h reading head
//   h's channel d hits its own bank; each warp scores 4 keys, lane l heads l
//   and l + 32, every k float4 a broadcast load shared by the lanes' 8 dot
//   chains.
//   otherwise: one warp per key, lane l heads l, l + 32, ... from global q.
// indexer_score_paged_cuda runs the same kernels over (keys, tokens), each key
// found through the token's page list (one launch for a pass).
#include "kernels/indexer/indexer.h"

#include <climits>
#include <cuda_runtime.h>

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

// A pass's tokens over the paged key store; blockIdx.y is the token.
struct paged_source {
  indexer_score_paged_params p;
  __device__ int64_t n_keys(int64_t t) const { return p.lengths[t]; }
  __device__ const float* q(int64_t t) const { return p.q + t * p.n_heads * p.head_dim; }
  __device__ const float* w(int64_t t) const { return p.w + t * p.n_heads; }
  __device__ float* score(int64_t t) const { return p.score + t * p.score_stride; }
  __device__ const float* key(int64_t t, int64_t s) const {
    const int64_t pos = s * p.rate;
    return p.keys + int64_t(p.pages[p.page_base[t] + pos / p.page_size]) * p.page_floats + p.key_off +
           pos % p.page_size / p.rate * p.head_dim;
  }
};

// runtime/core/codecs.cpp's round_to_bf16 bit for bit: half to even, and a
// NaN kept (quieted, sign and top payload bits) where __float2bfloat16_rn
// would give the canonical NaN.
__device__ __forceinline__ float round_to_bf16(float x) {
  const uint32_t u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return __uint_as_float((u | 0x00400000u) & 0xffff0000u);
  return __uint_as_float((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
}

// indexer_score_cpu's term for head h: fp32, or with bf16 the dot·scale and
// the term rounded (the heads' sum is fp32, rounded once by score_value).
template <bool BF16>
__device__ __forceinline__ float head_term(float dot, float scale, const float* w, int64_t h) {
  if (BF16) return round_to_bf16(__fmul_rn(fmaxf(round_to_bf16(__fmul_rn(dot, scale)), 0.0f), w[h]));
  return __fmul_rn(__fmul_rn(fmaxf(dot, 0.0f), scale), w[h]);
}

template <bool BF16>
__device__ __forceinline__ float score_value(float acc) {
  return BF16 ? round_to_bf16(acc) : acc;
}

// shared memory: q [n_heads][head_dim + 1], then terms [k_warps][k_keys_per_warp][n_heads]
template <bool BF16, class Src>
__global__ void indexer_score_tiled_kernel(Src src, int64_t H, int64_t hd, float scale) {
  extern __shared__ float sm[];
  constexpr int KPW = k_keys_per_warp;
  const int64_t tok = blockIdx.y, n_keys = src.n_keys(tok), ld = hd + 1;
  if (int64_t(blockIdx.x) * k_warps * KPW >= n_keys) return;  // the whole block: past this token's keys
  const float* gq = src.q(tok);
  float* qs = sm;
  for (int64_t i = threadIdx.x; i < H * hd; i += blockDim.x) qs[(i / hd) * ld + i % hd] = gq[i];
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t s0 = (int64_t(blockIdx.x) * k_warps + warp) * KPW;
  if (s0 >= n_keys) return;  // whole warps exit together
  const int nk = int(min(int64_t(KPW), n_keys - s0));
  const float4* k[KPW];
#pragma unroll
  for (int j = 0; j < KPW; ++j) k[j] = reinterpret_cast<const float4*>(src.key(tok, s0 + min(j, nk - 1)));
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
  const float* w = src.w(tok);
  float* t = sm + H * ld + warp * KPW * H;
  for (int j = 0; j < nk; ++j) {
    if (lane < H) t[j * H + lane] = head_term<BF16>(dot[j][0], scale, w, lane);
    if (lane + 32 < H) t[j * H + lane + 32] = head_term<BF16>(dot[j][1], scale, w, lane + 32);
  }
  __syncwarp();
  if (lane < nk) {
    float acc = 0;
    for (int64_t h = 0; h < H; ++h) acc = __fadd_rn(acc, t[lane * H + h]);
    src.score(tok)[s0 + lane] = score_value<BF16>(acc);
  }
}

// shared memory: [k_warps][n_heads] head terms
template <bool BF16, bool VEC, class Src>
__global__ void indexer_score_kernel(Src src, int64_t H, int64_t hd, float scale) {
  extern __shared__ float terms[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t tok = blockIdx.y, s = blockIdx.x * int64_t(k_warps) + warp;
  if (s >= src.n_keys(tok)) return;  // whole warps exit together
  const float* k = src.key(tok, s);
  const float* gq = src.q(tok);
  const float* w = src.w(tok);
  float* t = terms + warp * H;
  for (int64_t h = lane; h < H; h += 32) {
    const float* q = gq + h * hd;
    float dot = 0;
    if (VEC) {
      const float4* q4 = reinterpret_cast<const float4*>(q);
      const float4* k4 = reinterpret_cast<const float4*>(k);
      for (int64_t d = 0; d < hd / 4; ++d) dot = add_products(dot, __ldg(q4 + d), __ldg(k4 + d));
    } else {
      for (int64_t d = 0; d < hd; ++d) dot = __fadd_rn(dot, __fmul_rn(q[d], k[d]));
    }
    t[h] = head_term<BF16>(dot, scale, w, h);
  }
  __syncwarp();
  if (lane == 0) {
    float acc = 0;
    for (int64_t h = 0; h < H; ++h) acc = __fadd_rn(acc, t[h]);
    src.score(tok)[s] = score_value<BF16>(acc);
  }
}

bool aligned16(const void* q) {
  return reinterpret_cast<uintptr_t>(q) % 16 == 0;
}

// One launch over n_tokens x max_keys: the tiled kernel when the heads fit and
// every key is 16-byte aligned (keys_aligned), else a warp per key.
template <bool BF16, class Src>
status launch_scores(const char* name, const Src& src, int64_t n_tokens, int64_t max_keys, int64_t H,
                     int64_t hd, float scale, bool keys_aligned, bool q_aligned, CUstream_st* stream) {
  const size_t tiled_smem = size_t(H * (hd + 1) + k_warps * k_keys_per_warp * H) * sizeof(float);
  const bool tiled = H <= k_tiled_max_heads && hd % 4 == 0 && keys_aligned && tiled_smem <= 48 * 1024;
  const int64_t keys_per_block = tiled ? int64_t(k_warps) * k_keys_per_warp : k_warps;
  const int64_t n_blocks = (max_keys + keys_per_block - 1) / keys_per_block;
  if (n_blocks > INT_MAX || n_tokens > 65535) {
    return invalid_argument("%s: %lld keys x %lld tokens exceed the grid", name, (long long)max_keys,
                            (long long)n_tokens);
  }
  if (max_keys == 0 || n_tokens == 0) return {};
  const dim3 grid{unsigned(n_blocks), unsigned(n_tokens)};
  if (tiled) {
    indexer_score_tiled_kernel<BF16><<<grid, k_threads, tiled_smem, stream>>>(src, H, hd, scale);
  } else {
    const size_t smem = size_t(k_warps * H) * sizeof(float);
    if (smem > 48 * 1024)
      return invalid_argument("%s: n_heads=%lld over the kernel's 1536", name, (long long)H);
    if (hd % 4 == 0 && q_aligned && keys_aligned) {
      indexer_score_kernel<BF16, true><<<grid, k_threads, smem, stream>>>(src, H, hd, scale);
    } else {
      indexer_score_kernel<BF16, false><<<grid, k_threads, smem, stream>>>(src, H, hd, scale);
    }
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return internal_error("%s: launch failed: %s", name, cudaGetErrorString(err));
  return {};
}

}  // namespace

status indexer_score_paged_cuda(const indexer_score_paged_params& p, CUstream_st* stream) {
  if (!p.q || !p.w || !p.keys || !p.lengths || !p.page_base || !p.pages || !p.score) {
    return invalid_argument("indexer_score_paged_cuda: null pointer");
  }
  if (p.n_tokens < 0 || p.n_heads <= 0 || p.head_dim <= 0 || p.max_keys < 0 || p.score_stride < p.max_keys ||
      p.rate <= 0 || p.page_size <= 0 || p.page_size % p.rate != 0 || p.page_floats <= 0 || p.key_off < 0) {
    return invalid_argument(
        "indexer_score_paged_cuda: bad sizes (tokens=%lld heads=%lld head_dim=%lld max_keys=%lld "
        "score_stride=%lld rate=%lld page_size=%lld page_floats=%lld key_off=%lld)",
        (long long)p.n_tokens, (long long)p.n_heads, (long long)p.head_dim, (long long)p.max_keys,
        (long long)p.score_stride, (long long)p.rate, (long long)p.page_size, (long long)p.page_floats,
        (long long)p.key_off);
  }
  const bool keys_aligned =
      aligned16(p.keys) && p.page_floats % 4 == 0 && p.key_off % 4 == 0 && p.head_dim % 4 == 0;
  const bool q_aligned = aligned16(p.q) && p.head_dim % 4 == 0;
  const auto launch = p.bf16 ? launch_scores<true, paged_source> : launch_scores<false, paged_source>;
  return launch("indexer_score_paged_cuda", paged_source{p}, p.n_tokens, p.max_keys, p.n_heads, p.head_dim,
                p.softmax_scale, keys_aligned, q_aligned, stream);
}

}  // namespace hart
