// CUDA mHC.
//   hc_pre / hc_head: the (2+n)*n (or n) dot products with fn and the sum of
//   squares, each in fp64 like the CPU (only the summation order differs); then
//   the tiny fp32 gate / softmax / Sinkhorn math in shared memory with exactly
//   hc_pre_cpu's operations (a thread per stream or row for the gates and the
//   softmax, a thread per element for the Sinkhorn iterations), and the
//   collapse spread over the channels. For n_hc = 4 (V4) with 16-byte aligned
//   rows one token is a cluster of 8 blocks: each sums a slice of x's float4s
//   (every fn load independent), every block reads all the slices' sums and
//   collapses its share of the channels, block 0 also makes post and comb.
//   With a workspace and at most 8 tokens the sums come from up to 64 blocks
//   per token first (hc_mix_partial_kernel): at batch 1 a cluster's 8 SMs
//   took ~29 µs over the fp64 work.
//   Otherwise one block per token, one warp per dot product.
//   hc_post: elementwise over (stream, channel), blocks spread over both; the
//   same fp32 operations in the same order as hc_post_cpu, so it is bit-identical.
// Every fp32 a*b+c is written with __fmul_rn/__fadd_rn: nvcc would otherwise fuse
// it into an FMA, which the CPU build (no -mfma) never does.
// `official` / `bf16` (template Official): the CPU's official arithmetic, bit for bit
// but for the fp64 order of the dot products with fn: the mean square in
// sum_squares_torch_order's fp32 order (torch_lane_sums, then torch_fold), rsqrt
// rounded once, glibc's expf (expf_glibc), hc_post's Σ comb·x before post·y; with
// bf16 the outputs rounded inside the kernels. The torch order's 32 lanes are fp32
// chains over the whole row: each block of a cluster makes 4 of them (read through
// distributed shared memory), and on the split path 8 more blocks of
// hc_mix_partial_kernel make them alongside the fp64 sums.
#include "kernels/mhc/mhc.h"

#include <climits>
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace hart {
namespace {

namespace cg = cooperative_groups;

constexpr int k_threads = 256;
constexpr int k_warps = k_threads / 32;
constexpr int k_cluster = 8;  // blocks per token on the n_hc = 4 path (the portable cluster size)

// glibc's expf (2.28 on: sysdeps/ieee754/flt-32/e_expf.c and its 32-entry exp2f table),
// operation for operation as its x86-64 FMA build computes it: what std::exp gives the
// CPU ops. Checked against glibc 2.36 on all 2^32 floats: equal; glibc's build without
// FMA differs on 2 of them. CUDA's expf is up to 2 ulp off.
__constant__ uint64_t k_exp2f_table[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51, 0x3fef72b83c7d517b,
    0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1, 0x3fef06fe0a31b715, 0x3feef1a7373aa9cb,
    0x3feedea64c123422, 0x3feece086061892d, 0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429,
    0x3feea47eb03a5585, 0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d, 0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069, 0x3fef5818dcfba487, 0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da, 0x3fefd0765b6e4540};

__device__ float expf_glibc(float x) {
  if (isnan(x)) return x + x;
  if (x > 0x1.62e42ep6f) return INFINITY;    // e^x > FLT_MAX
  if (x < -0x1.9fe368p6f) return 0.0f;       // e^x < 2^-150
  if (x < -0x1.9d1d9ep6f) return 0x1p-149f;  // glibc's __math_may_uflowf
  // x·32/ln2 = k + r: 2^(k/32) from the table and the exponent, 2^(r/32) a cubic
  const double xd = x, inv_ln2_n = 0x1.71547652b82fep+5, shift = 0x1.8p52;
  const double kd_shifted = __fma_rn(inv_ln2_n, xd, shift);  // rounds k to an integer in the low bits
  const uint64_t ki = uint64_t(__double_as_longlong(kd_shifted));
  const double kd = __dsub_rn(kd_shifted, shift);
  const double r = __fma_rn(inv_ln2_n, xd, -kd);
  const double s = __longlong_as_double((long long)(k_exp2f_table[ki % 32] + (ki << 47)));
  const double z = __fma_rn(0x1.c6af84b912394p-20, r, 0x1.ebfce50fac4f3p-13);
  const double y = __fma_rn(z, __dmul_rn(r, r), __fma_rn(r, 0x1.62e42ff0c52d6p-6, 1.0));
  return __double2float_rn(__dmul_rn(y, s));
}

// e^v: with Official as the CPU computes it (expf_glibc)
template <bool Official>
__device__ float hc_exp(float v) {
  return Official ? expf_glibc(v) : expf(v);
}

template <bool Official>
__device__ float sigmoid(float v) {
  return __fdiv_rn(1.0f, __fadd_rn(1.0f, hc_exp<Official>(-v)));
}

// round_to_bf16 (runtime/core/codecs.h), RNE
__device__ float round_bf16(float v) {
  return __bfloat162float(__float2bfloat16_rn(v));
}

// a * s + b, rounded twice as on the CPU
__device__ float mul_add(float a, float s, float b) {
  return __fadd_rn(__fmul_rn(a, s), b);
}

// The official r = rsqrt(mean(x²) + eps) from the fp32 Σx²: the mean in fp32, the
// rsqrt rounded once, as hc_mix on the CPU.
__device__ float official_rsqrt(float sum_squares, int64_t width, float eps) {
  const float mean_square = __fmul_rn(sum_squares, __fdiv_rn(1.0f, float(width)));
  return __double2float_rn(__ddiv_rn(1.0, __dsqrt_rn(double(__fadd_rn(mean_square, eps)))));
}

// r from an fp64 Σx² (any order) as hc_mix on the CPU; Official: for rows of width % 4 != 0,
// where sum_squares_torch_order is the exactly rounded sum.
template <bool Official>
__device__ float mix_rsqrt(double sum_squares, int64_t width, float eps) {
  if (Official) return official_rsqrt(float(sum_squares), width, eps);
  return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(float(sum_squares / double(width)), eps)));
}

// sum_squares_torch_order (rms_norm.h) on the device, in two steps: torch_lane_sums
// (lane l: its float4s l, l + lanes, ... in four fp32 accumulators, folded in order)
// and torch_fold (the lanes by shuffle-down). Its lane count for a row of `width`
// floats; 0 when width % 4 != 0 (no float4 order: the exactly rounded sum).
__device__ int torch_lanes(int64_t width) {
  if (width % 4) return 0;
  int lanes = 1;
  while (lanes < 32 && lanes * 2 <= width / 4) lanes *= 2;
  return lanes;
}

constexpr int k_stage = 4096;  // squares staged per pass of torch_lane_sums (16 KB)

// The lane sums of lanes [l0, l1) (< lanes) of x's width floats into out[l - l0]
// (visible to the block on return; every thread of the block, k_threads of them,
// calls it). Each lane's four accumulators are fp32 chains in float4 order: the
// squares of a range of their float4s are staged in shared memory by the whole
// block (a thread's loads all in flight together; Aligned: x 16-byte aligned, as
// float4s), then a thread per (lane, component) adds its column in order.
template <bool Aligned>
__device__ void torch_lane_sums(const float* x, int64_t width, int lanes, int l0, int l1, float* out) {
  __shared__ __align__(16) float stage[k_stage];
  constexpr int k_per_thread = k_stage / 4 / k_threads;  // float4s
  l1 = min(l1, lanes);
  if (l0 >= l1) return;
  const int n_lanes = l1 - l0, cols = 4 * n_lanes;
  const int64_t n4 = width / 4, n_pos = (n4 + lanes - 1) / lanes, rows = k_stage / cols;
  float acc = 0;
  for (int64_t p0 = 0; p0 < n_pos; p0 += rows) {
    const int64_t n_staged = min(rows, n_pos - p0) * n_lanes;  // float4s: [row][lane]
    float4 q[k_per_thread];
#pragma unroll
    for (int j = 0; j < k_per_thread; ++j) {
      const int64_t e = threadIdx.x + j * k_threads, v = (p0 + e / n_lanes) * lanes + l0 + e % n_lanes;
      // past the last float4 (its lane has none): + 0, which leaves the sum as it is
      q[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (e < n_staged && v < n4) {
        q[j] = Aligned ? __ldg(reinterpret_cast<const float4*>(x) + v)
                       : make_float4(x[4 * v], x[4 * v + 1], x[4 * v + 2], x[4 * v + 3]);
      }
    }
#pragma unroll
    for (int j = 0; j < k_per_thread; ++j) {
      const int64_t e = threadIdx.x + j * k_threads;
      if (e < n_staged) {
        reinterpret_cast<float4*>(stage)[e] =
            make_float4(__fmul_rn(q[j].x, q[j].x), __fmul_rn(q[j].y, q[j].y), __fmul_rn(q[j].z, q[j].z),
                        __fmul_rn(q[j].w, q[j].w));
      }
    }
    __syncthreads();
    if (threadIdx.x < cols) {
#pragma unroll 8
      for (int64_t r = 0; r < n_staged / n_lanes; ++r) acc = __fadd_rn(acc, stage[r * cols + threadIdx.x]);
    }
    __syncthreads();
  }
  if (threadIdx.x < cols) stage[threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.x < n_lanes) {
    const float* a = stage + 4 * threadIdx.x;
    out[threadIdx.x] = __fadd_rn(__fadd_rn(__fadd_rn(a[0], a[1]), a[2]), a[3]);
  }
  __syncthreads();
}

// Σx² from the lane sums, by a whole warp: lane l holds lane sum l (l < lanes);
// lane 0 gets the total.
__device__ float torch_fold(float v, int lanes) {
  for (int off = lanes / 2; off > 0; off >>= 1) v = __fadd_rn(v, __shfl_down_sync(0xffffffffu, v, off));
  return v;
}

// mix[o] = float(x · fn[o]) * rsqrt(mean(x^2) + eps) for o < n_out (shared memory);
// fp64 partial sums per lane, reduced by shuffles.
template <bool Official>
__device__ void hc_mix(const float* x, const float* fn, int64_t n_out, int64_t width, float eps, float* mix,
                       float* r_out) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int lanes = Official ? torch_lanes(width) : 0;
  __shared__ float lane_sum[32];
  if (lanes) torch_lane_sums<false>(x, width, lanes, 0, lanes, lane_sum);
  for (int64_t o = warp - 1; o < n_out; o += k_warps) {  // o = -1: the sum of squares
    if (o < 0 && lanes) {
      const float sum_squares = torch_fold(lane < lanes ? lane_sum[lane] : 0.0f, lanes);
      if (lane == 0) *r_out = official_rsqrt(sum_squares, width, eps);
      continue;
    }
    const float* w = o < 0 ? x : fn + o * width;
    double acc = 0;
    for (int64_t i = lane; i < width; i += 32) acc += double(x[i]) * double(w[i]);
    for (int s = 16; s > 0; s >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, s);
    if (lane == 0) {
      if (o < 0) {
        *r_out = mix_rsqrt<Official>(acc, width, eps);
      } else {
        mix[o] = float(acc);
      }
    }
  }
  __syncthreads();
  for (int64_t o = threadIdx.x; o < n_out; o += blockDim.x) mix[o] = __fmul_rn(mix[o], *r_out);
  __syncthreads();
}

// Threads o <= NO hold the token's fp64 sums (o < NO: x · fn[o]; o = NO: Σ x²), and
// with torch lanes (Official) thread 0 holds torch_fold's Σx² instead:
// r_out and mix[o] = float(sum) · r, visible to the block on return.
template <int NO, bool Official>
__device__ void hc_mix_finish(double sum, float torch_sum_squares, int64_t width, float eps, float* mix,
                              float* r_out) {
  if (Official && torch_lanes(width)) {
    if (threadIdx.x == 0) *r_out = official_rsqrt(torch_sum_squares, width, eps);
  } else if (threadIdx.x == NO) {
    *r_out = mix_rsqrt<Official>(sum, width, eps);
  }
  __syncthreads();
  if (threadIdx.x < NO) mix[threadIdx.x] = __fmul_rn(float(sum), *r_out);
  __syncthreads();
}

// The NO + 1 fp64 sums of the float4s [i0, i1) of x against fn, every thread
// keeping its own, reduced warp by warp; threads o <= NO of the block get the
// block's totals (in warp order).
template <int NO>
__device__ double hc_mix_slice(const float* x, const float* fn, int64_t width, int64_t i0, int64_t i1) {
  __shared__ double part[k_warps][NO + 1];
  double acc[NO + 1];
#pragma unroll
  for (int o = 0; o <= NO; ++o) acc[o] = 0;
  for (int64_t i4 = i0 + threadIdx.x; i4 < i1; i4 += blockDim.x) {
    const float4 xv = __ldg(reinterpret_cast<const float4*>(x) + i4);
    const double x0 = xv.x, x1 = xv.y, x2 = xv.z, x3 = xv.w;
    acc[NO] += x0 * x0 + x1 * x1 + x2 * x2 + x3 * x3;
#pragma unroll
    for (int o = 0; o < NO; ++o) {
      const float4 wv = __ldg(reinterpret_cast<const float4*>(fn + o * width) + i4);
      acc[o] += x0 * double(wv.x) + x1 * double(wv.y) + x2 * double(wv.z) + x3 * double(wv.w);
    }
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int o = 0; o <= NO; ++o) {
    for (int s = 16; s > 0; s >>= 1) acc[o] += __shfl_xor_sync(0xffffffffu, acc[o], s);
    if (lane == 0) part[warp][o] = acc[o];
  }
  __syncthreads();
  double sum = 0;
  if (threadIdx.x <= NO) {
    for (int w = 0; w < k_warps; ++w) sum += part[w][threadIdx.x];
  }
  return sum;
}

// Torch lanes per block where k_cluster blocks share a token's sum_squares_torch_order.
constexpr int k_lanes_per_block = 32 / k_cluster;

// hc_mix for NO outputs across the k_cluster blocks of a cluster (one token),
// when width % 4 == 0 and x, fn are 16-byte aligned: each block sums a slice
// of the float4s (Official: and k_lanes_per_block torch lanes); every block then
// adds the blocks' sums in rank order (fixed, so all get the same mix) through
// distributed shared memory, and goes on with mix and r_out.
template <int NO, bool Official>
__device__ void hc_mix_cluster(const float* x, const float* fn, int64_t width, float eps, float* mix,
                               float* r_out) {
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank(), n_blocks = cluster.num_blocks();
  __shared__ double total[NO + 1];
  __shared__ float lane_sum[k_lanes_per_block];
  const int64_t n4 = width / 4, per = (n4 + n_blocks - 1) / n_blocks;
  const int64_t end4 = n4 < (rank + 1) * per ? n4 : (rank + 1) * per;
  const double mine = hc_mix_slice<NO>(x, fn, width, rank * per, end4);
  const int lanes = Official ? torch_lanes(width) : 0;
  if (lanes) {
    torch_lane_sums<true>(x, width, lanes, rank * k_lanes_per_block, (rank + 1) * k_lanes_per_block,
                          lane_sum);
  }
  if (threadIdx.x <= NO) total[threadIdx.x] = mine;
  cluster.sync();  // every block's totals are written
  double sum = 0;
  if (threadIdx.x <= NO) {
    for (unsigned b = 0; b < n_blocks; ++b) sum += cluster.map_shared_rank(total, b)[threadIdx.x];
  }
  float torch_sum_squares = 0;
  if (lanes && threadIdx.x < 32) {
    const int l = threadIdx.x;
    const float v =
        l < lanes ? cluster.map_shared_rank(lane_sum, l / k_lanes_per_block)[l % k_lanes_per_block] : 0.0f;
    torch_sum_squares = torch_fold(v, lanes);
  }
  cluster.sync();  // every block has read them: a block may exit after this
  hc_mix_finish<NO, Official>(sum, torch_sum_squares, width, eps, mix, r_out);
}

// Few tokens: each token's float4s split over `splits` blocks (grid (splits,
// tokens)), so the fp64 work (~400 K conversions and FMAs per token) is not
// left to one cluster's 8 SMs; partial[(t · splits + s) · (NO + 1) + o].
// Official: k_cluster more blocks per token (grid (splits + k_cluster, tokens))
// make the torch lane sums alongside, k_lanes_per_block each, into
// lane_sums[t · 32 + l].
template <int NO, bool Official>
__global__ void hc_mix_partial_kernel(const float* x, const float* fn, int64_t width, int64_t splits,
                                      double* partial, float* lane_sums) {
  const int64_t t = blockIdx.y, s = blockIdx.x, n4 = width / 4, per = (n4 + splits - 1) / splits;
  if (Official && s >= splits) {
    const int l0 = int(s - splits) * k_lanes_per_block;
    torch_lane_sums<true>(x + t * width, width, torch_lanes(width), l0, l0 + k_lanes_per_block,
                          lane_sums + t * 32 + l0);
    return;
  }
  const double sum = hc_mix_slice<NO>(x + t * width, fn, width, min(n4, s * per), min(n4, (s + 1) * per));
  if (threadIdx.x <= NO) partial[(t * splits + s) * (NO + 1) + threadIdx.x] = sum;
}

// out[d] = Σ_i g[i] * x[i*dim + d] for d in [d0, d1), accumulated in stream order from 0;
// rounded to bf16 with `bf16`
__device__ void collapse(const float* x, const float* g, int64_t n, int64_t dim, float* out, int64_t d0,
                         int64_t d1, bool bf16) {
  for (int64_t d = d0 + threadIdx.x; d < d1; d += blockDim.x) {
    float acc = 0;
#pragma unroll 4
    for (int64_t i = 0; i < n; ++i) acc = __fadd_rn(acc, __fmul_rn(g[i], x[i * dim + d]));  // loads together
    out[d] = bf16 ? round_bf16(acc) : acc;
  }
}

// The collapse's share of block `rank` of `n_blocks`: whole float4 groups of channels.
__device__ void collapse_share(const float* x, const float* g, int64_t n, int64_t dim, float* out,
                               unsigned rank, unsigned n_blocks, bool bf16) {
  const int64_t per = ((dim + n_blocks - 1) / n_blocks + 3) / 4 * 4;
  const int64_t d0 = min(dim, rank * per), d1 = min(dim, d0 + per);
  collapse(x, g, n, dim, out, d0, d1, bf16);
}

// hc_pre's input gates from the mix (shared memory pre[n]), visible to the block on return.
template <bool Official>
__device__ void hc_pre_gates(const hc_pre_params& p, const float* mix, float* pre) {
  const int64_t i = threadIdx.x;
  if (i < p.n_hc) pre[i] = __fadd_rn(sigmoid<Official>(mul_add(mix[i], p.scale[0], p.base[i])), p.hc_eps);
  __syncthreads();
}

// The Sinkhorn iterations on c [n*n] with the second buffer b, one thread per
// element (each sums its row or column in index order and divides, hc_pre_cpu's
// operations for that element; new values go to the other buffer, so no
// element is read after it changed). Returns the buffer holding the result.
__device__ float* sinkhorn(float* c, float* b, int64_t n, int64_t iters, float eps) {
  for (int64_t it = 0; it < iters; ++it) {
    if (it > 0) {  // rows, then columns; the first pass normalises columns only
      for (int64_t e = threadIdx.x; e < n * n; e += blockDim.x) {
        const float* row = c + (e / n) * n;
        float sr = 0;
        for (int64_t k = 0; k < n; ++k) sr = __fadd_rn(sr, row[k]);
        b[e] = __fdiv_rn(c[e], __fadd_rn(sr, eps));
      }
      __syncthreads();
      float* f = c;
      c = b;
      b = f;
    }
    for (int64_t e = threadIdx.x; e < n * n; e += blockDim.x) {
      const int64_t k = e % n;
      float sc = 0;
      for (int64_t j = 0; j < n; ++j) sc = __fadd_rn(sc, c[j * n + k]);
      b[e] = __fdiv_rn(c[e], __fadd_rn(sc, eps));
    }
    __syncthreads();
    float* f = c;
    c = b;
    b = f;
  }
  return c;
}

// sinkhorn() for n·n <= 32 elements in one warp's registers (lane e holds
// c[e]; every lane of the warp calls it): the same additions in the same order
// and the same divisions, without a block barrier per half-iteration (40 of
// them at 20 iterations were most of hc_pre's time at one token).
__device__ float sinkhorn_warp(float v, int n, int64_t iters, float eps) {
  const int e = threadIdx.x % 32, row = e / n, col = e % n;
  for (int64_t it = 0; it < iters; ++it) {
    if (it > 0) {
      float sr = 0;
      for (int k = 0; k < n; ++k) sr = __fadd_rn(sr, __shfl_sync(0xffffffffu, v, (row * n + k) % 32));
      v = __fdiv_rn(v, __fadd_rn(sr, eps));
    }
    float sc = 0;
    for (int j = 0; j < n; ++j) sc = __fadd_rn(sc, __shfl_sync(0xffffffffu, v, (j * n + col) % 32));
    v = __fdiv_rn(v, __fadd_rn(sc, eps));
  }
  return v;
}

// hc_pre's output gates and stream mix from the mix (shared memory c[n*n],
// b[n*n]): post, then one thread per row for the softmax, then the Sinkhorn.
// c[j*n + k]: input stream j -> output stream k.
template <bool Official>
__device__ void hc_pre_comb(const hc_pre_params& p, int64_t t, const float* mix, float* c, float* b) {
  const int64_t n = p.n_hc;
  const int64_t i = threadIdx.x;
  if (i < n) {
    p.post[t * n + i] = __fmul_rn(2.0f, sigmoid<Official>(mul_add(mix[n + i], p.scale[1], p.base[n + i])));
    const int64_t j = i;
    float mx = -INFINITY;
    for (int64_t k = 0; k < n; ++k) {
      c[j * n + k] = mul_add(mix[2 * n + j * n + k], p.scale[2], p.base[2 * n + j * n + k]);
      mx = fmaxf(mx, c[j * n + k]);
    }
    float sum = 0;
    for (int64_t k = 0; k < n; ++k) {
      sum = __fadd_rn(sum, c[j * n + k] = hc_exp<Official>(__fsub_rn(c[j * n + k], mx)));
    }
    for (int64_t k = 0; k < n; ++k) c[j * n + k] = __fadd_rn(__fdiv_rn(c[j * n + k], sum), p.hc_eps);
  }
  __syncthreads();
  if (n * n <= 32) {
    if (threadIdx.x < 32) {
      const int64_t e = threadIdx.x;
      const float v = sinkhorn_warp(e < n * n ? c[e] : 1.0f, int(n), p.sinkhorn_iters, p.hc_eps);
      if (e < n * n) p.comb[t * n * n + e] = v;
    }
    return;
  }
  const float* r = sinkhorn(c, b, n, p.sinkhorn_iters, p.hc_eps);
  for (int64_t e = threadIdx.x; e < n * n; e += blockDim.x) p.comb[t * n * n + e] = r[e];
}

// shared memory: mix[(2+n)*n], pre[n], r, c[n*n], b[n*n]
template <bool Official>
__global__ void hc_pre_kernel(hc_pre_params p) {
  extern __shared__ float sm[];
  const int64_t n = p.n_hc, width = n * p.dim, n_mix = (2 + n) * n;
  float* mix = sm;
  float* pre = mix + n_mix;
  float* r = pre + n;
  float* c = r + 1;
  const int64_t t = blockIdx.x;
  const float* x = p.x + t * width;
  hc_mix<Official>(x, p.fn, n_mix, width, p.norm_eps, mix, r);
  hc_pre_gates<Official>(p, mix, pre);
  hc_pre_comb<Official>(p, t, mix, c, c + n * n);
  collapse(x, pre, n, p.dim, p.collapsed + t * p.dim, 0, p.dim, Official && p.bf16);
}

// n_hc = 4, one cluster per token, shared memory as hc_pre_kernel's: every
// block has the mix and collapses its share of the channels; block 0 also
// writes post and comb.
// With `partial` (hc_mix_partial_kernel's), the mix adds the token's `splits`
// partial sums in split order instead of summing x in the cluster (Official: and
// folds its lane_sums).
template <bool Official>
__global__ void __cluster_dims__(k_cluster, 1, 1)
    hc_pre_cluster_kernel(hc_pre_params p, const double* partial, int64_t splits, const float* lane_sums) {
  extern __shared__ float sm[];
  constexpr int64_t n = 4, n_mix = (2 + n) * n;
  const int64_t width = n * p.dim;
  float* mix = sm;
  float* pre = mix + n_mix;
  float* r = pre + n;
  float* c = r + 1;
  const int64_t t = blockIdx.x / k_cluster;
  const unsigned rank = blockIdx.x % k_cluster;
  const float* x = p.x + t * width;
  if (partial) {
    double sum = 0;
    if (threadIdx.x <= n_mix) {
      // Unrolled: the loads of up to 64 splits in flight together (the adds keep split order).
#pragma unroll 8
      for (int64_t s = 0; s < splits; ++s) sum += partial[(t * splits + s) * (n_mix + 1) + threadIdx.x];
    }
    const int lanes = Official ? torch_lanes(width) : 0;
    float torch_sum_squares = 0;
    if (lanes && threadIdx.x < 32) {
      const int l = threadIdx.x;
      torch_sum_squares = torch_fold(l < lanes ? lane_sums[t * 32 + l] : 0.0f, lanes);
    }
    hc_mix_finish<n_mix, Official>(sum, torch_sum_squares, width, p.norm_eps, mix, r);
  } else {
    hc_mix_cluster<n_mix, Official>(x, p.fn, width, p.norm_eps, mix, r);
  }
  hc_pre_gates<Official>(p, mix, pre);
  if (rank == 0) hc_pre_comb<Official>(p, t, mix, c, c + n * n);
  collapse_share(x, pre, n, p.dim, p.collapsed + t * p.dim, rank, k_cluster, Official && p.bf16);
}

// hc_head's gates from the mix (shared memory mix[n], overwritten), visible to the block on return.
template <bool Official>
__device__ void hc_head_gates(const hc_head_params& p, float* mix) {
  const int64_t i = threadIdx.x;
  if (i < p.n_hc) mix[i] = __fadd_rn(sigmoid<Official>(mul_add(mix[i], p.scale[0], p.base[i])), p.hc_eps);
  __syncthreads();
}

// shared memory: mix[n], r
template <bool Official>
__global__ void hc_head_kernel(hc_head_params p) {
  extern __shared__ float sm[];
  const int64_t n = p.n_hc, width = n * p.dim;
  const int64_t t = blockIdx.x;
  const float* x = p.x + t * width;
  hc_mix<Official>(x, p.fn, n, width, p.norm_eps, sm, sm + n);
  hc_head_gates<Official>(p, sm);
  collapse(x, sm, n, p.dim, p.out + t * p.dim, 0, p.dim, Official && p.bf16);
}

// n_hc = 4, one cluster per token; each block collapses its share of the channels
template <bool Official>
__global__ void __cluster_dims__(k_cluster, 1, 1) hc_head_cluster_kernel(hc_head_params p) {
  extern __shared__ float sm[];
  const int64_t width = 4 * p.dim;
  const int64_t t = blockIdx.x / k_cluster;
  const float* x = p.x + t * width;
  hc_mix_cluster<4, Official>(x, p.fn, width, p.norm_eps, sm, sm + 4);
  hc_head_gates<Official>(p, sm);
  collapse_share(x, sm, 4, p.dim, p.out + t * p.dim, blockIdx.x % k_cluster, k_cluster, Official && p.bf16);
}

// grid (blocks over the n*dim elements, tokens)
template <bool Official>
__global__ void hc_post_kernel(hc_post_params p) {
  const int64_t n = p.n_hc, t = blockIdx.y;
  const float* x = p.x + t * n * p.dim;
  const float* y = p.y + t * p.dim;
  const float* c = p.comb + t * n * n;
  float* o = p.out + t * n * p.dim;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n * p.dim;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t k = e / p.dim, d = e % p.dim;
    if (Official) {  // post·y + (Σ_j comb·x), the sum first
      float mixed = 0;
#pragma unroll 4
      for (int64_t j = 0; j < n; ++j) mixed = __fadd_rn(mixed, __fmul_rn(c[j * n + k], x[j * p.dim + d]));
      const float sum = __fadd_rn(__fmul_rn(p.post[t * n + k], y[d]), mixed);
      o[e] = p.bf16 ? round_bf16(sum) : sum;
      continue;
    }
    float acc = __fmul_rn(p.post[t * n + k], y[d]);
#pragma unroll 4
    for (int64_t j = 0; j < n; ++j)
      acc = __fadd_rn(acc, __fmul_rn(c[j * n + k], x[j * p.dim + d]));  // loads together
    o[e] = acc;
  }
}

status launched(const char* op) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return internal_error("%s: launch failed: %s", op, cudaGetErrorString(err));
  return {};
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

status check_tokens(const char* op, int64_t n_tokens) {
  if (n_tokens < 0 || n_tokens > INT_MAX)
    return invalid_argument("%s: n_tokens=%lld", op, (long long)n_tokens);
  return {};
}

// Blocks per token for the split mix (hc_mix_partial_kernel): at most 8 tokens
// (more fill the GPU with clusters alone), slices of >= 64 float4s, <= 64 blocks.
int64_t hc_pre_splits(int64_t n_tokens, int64_t n_hc, int64_t dim) {
  if (n_hc != 4 || n_tokens < 1 || n_tokens > 8 || dim % 4 != 0) return 0;
  return std::min<int64_t>(64, std::max<int64_t>(1, n_hc * dim / 4 / 64));
}

// The split mix's fp64 partial sums in the workspace, then (official) its 32 torch lane sums per token.
int64_t hc_pre_partial_doubles(int64_t n_tokens, int64_t n_hc, int64_t dim) {
  return n_tokens * hc_pre_splits(n_tokens, n_hc, dim) * ((2 + n_hc) * n_hc + 1);
}

template <bool Official>
void hc_pre_launch(const hc_pre_params& p, size_t smem, CUstream_st* stream) {
  if (p.n_hc == 4 && aligned16(p.x) && aligned16(p.fn) && p.n_tokens <= INT_MAX / k_cluster) {
    const int64_t splits = hc_pre_splits(p.n_tokens, p.n_hc, p.dim);
    double* partial = splits > 0 ? p.workspace : nullptr;
    float* lane_sums =
        partial ? reinterpret_cast<float*>(partial + hc_pre_partial_doubles(p.n_tokens, 4, p.dim)) : nullptr;
    if (partial) {
      const unsigned blocks = unsigned(splits + (Official ? k_cluster : 0));
      hc_mix_partial_kernel<24, Official><<<dim3{blocks, unsigned(p.n_tokens)}, k_threads, 0, stream>>>(
          p.x, p.fn, p.n_hc * p.dim, splits, partial, lane_sums);
    }
    hc_pre_cluster_kernel<Official>
        <<<unsigned(p.n_tokens * k_cluster), k_threads, smem, stream>>>(p, partial, splits, lane_sums);
  } else {
    hc_pre_kernel<Official><<<unsigned(p.n_tokens), k_threads, smem, stream>>>(p);
  }
}

}  // namespace

size_t hc_pre_workspace_bytes(int64_t n_tokens, int64_t n_hc, int64_t dim) {
  if (hc_pre_splits(n_tokens, n_hc, dim) == 0) return 0;
  return size_t(hc_pre_partial_doubles(n_tokens, n_hc, dim)) * sizeof(double) +
         size_t(n_tokens * 32) * sizeof(float);
}

status hc_pre_cuda(const hc_pre_params& p, CUstream_st* stream) {
  if (!p.x || !p.fn || !p.base || !p.scale || !p.collapsed || !p.post || !p.comb) {
    return invalid_argument("hc_pre_cuda: null pointer");
  }
  if (p.n_hc <= 0 || p.n_hc > 64 || p.dim <= 0 || p.sinkhorn_iters < 1) {
    return invalid_argument("hc_pre_cuda: bad sizes (n_hc=%lld in [1, 64], dim=%lld, sinkhorn_iters=%lld)",
                            (long long)p.n_hc, (long long)p.dim, (long long)p.sinkhorn_iters);
  }
  HART_RETURN_IF_ERROR(check_tokens("hc_pre_cuda", p.n_tokens));
  if (p.n_tokens == 0) return {};
  // mix[(2+n)*n], pre[n], r, c[n*n], b[n*n]: n_hc <= 64 keeps it under 50 KB
  const size_t smem = size_t((2 + p.n_hc) * p.n_hc + p.n_hc + 1 + 2 * p.n_hc * p.n_hc) * sizeof(float);
  if (p.official || p.bf16) {
    hc_pre_launch<true>(p, smem, stream);
  } else {
    hc_pre_launch<false>(p, smem, stream);
  }
  return launched("hc_pre_cuda");
}

status hc_post_cuda(const hc_post_params& p, CUstream_st* stream) {
  if (!p.x || !p.y || !p.post || !p.comb || !p.out) return invalid_argument("hc_post_cuda: null pointer");
  if (p.out == p.x) return invalid_argument("hc_post_cuda: out must not alias x");
  if (p.n_hc <= 0 || p.dim <= 0) {
    return invalid_argument("hc_post_cuda: bad sizes (n_hc=%lld, dim=%lld)", (long long)p.n_hc,
                            (long long)p.dim);
  }
  HART_RETURN_IF_ERROR(check_tokens("hc_post_cuda", p.n_tokens));
  if (p.n_tokens == 0) return {};
  if (p.n_tokens > 65535)
    return invalid_argument("hc_post_cuda: n_tokens=%lld over the grid", (long long)p.n_tokens);
  const int64_t blocks = std::min<int64_t>((p.n_hc * p.dim + k_threads - 1) / k_threads, 1024);
  const dim3 grid{unsigned(blocks), unsigned(p.n_tokens)};
  if (p.official || p.bf16) {
    hc_post_kernel<true><<<grid, k_threads, 0, stream>>>(p);
  } else {
    hc_post_kernel<false><<<grid, k_threads, 0, stream>>>(p);
  }
  return launched("hc_post_cuda");
}

status hc_head_cuda(const hc_head_params& p, CUstream_st* stream) {
  if (!p.x || !p.fn || !p.base || !p.scale || !p.out) return invalid_argument("hc_head_cuda: null pointer");
  if (p.n_hc <= 0 || p.n_hc > 64 || p.dim <= 0) {
    return invalid_argument("hc_head_cuda: bad sizes (n_hc=%lld in [1, 64], dim=%lld)", (long long)p.n_hc,
                            (long long)p.dim);
  }
  HART_RETURN_IF_ERROR(check_tokens("hc_head_cuda", p.n_tokens));
  if (p.n_tokens == 0) return {};
  const size_t smem = size_t(p.n_hc + 1) * sizeof(float);
  const bool official = p.official || p.bf16;
  if (p.n_hc == 4 && aligned16(p.x) && aligned16(p.fn) && p.n_tokens <= INT_MAX / k_cluster) {
    const unsigned blocks = unsigned(p.n_tokens * k_cluster);
    if (official) {
      hc_head_cluster_kernel<true><<<blocks, k_threads, smem, stream>>>(p);
    } else {
      hc_head_cluster_kernel<false><<<blocks, k_threads, smem, stream>>>(p);
    }
  } else if (official) {
    hc_head_kernel<true><<<unsigned(p.n_tokens), k_threads, smem, stream>>>(p);
  } else {
    hc_head_kernel<false><<<unsigned(p.n_tokens), k_threads, smem, stream>>>(p);
  }
  return launched("hc_head_cuda");
}

}  // namespace hart
