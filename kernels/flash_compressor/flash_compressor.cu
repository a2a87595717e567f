// CUDA flash compressor: one team of c/4 threads per entry, 4 channels (one
// float4) per thread, so every candidate row is read as c·4 contiguous bytes by
// the team (coalesced, 16 B per thread), with up to k_unroll candidates' loads
// in flight per thread. Per channel an online softmax (running max, sum and
// weighted kv) replaces compress_pool_cpu's three passes: the projections are
// read exactly once. For c = 512 with >= 32 candidates (HCA), blockDim.y = 4
// groups split the candidates and merge through shared memory. RMSNorm sums
// squares in double (as rms_norm_cpu), RoPE runs in fp32 without contraction,
// and the quantizers use kernels/quant's integer codecs (quant_codecs.cuh), so
// the stored values are bit-exact functions of the fp32 pre-quantization value.
//
// bf16 (flash_compressor_desc::bf16) runs compressor.cpp's bf16 branch instead,
// in its fp32 operations and orders: compress_pool_cpu's three passes (one
// group, every candidate summed in order by one thread), rms_norm_cpu's
// official norm (sum_squares_torch_order's lanes), RoPE, each step's output
// rounded to bf16, and the Hadamard output too before FP4. Only the
// transcendental functions are not glibc's: exp and sin/cos here are correctly
// rounded (double, rounded once), glibc's expf and sincosf miss that by an ulp
// on ~7e-4 and ~1.3% of the arguments seen here, so an entry differs from the
// CPU's only where such an ulp lands on a bf16 rounding boundary (measured:
// ~2e-4 of entries). Those kernels are separate instantiations: the fp32
// path's code is unchanged.
#include "kernels/flash_compressor/flash_compressor.h"
#include "kernels/flash_compressor/flash_compressor_plan.h"
#include "kernels/quant/quant_codecs.cuh"
#include "kernels/sparse_decode_attention/kv_entry.h"
#include "kernels/sparse_decode_attention/kv_entry_device.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>

namespace hart {
namespace {

namespace qd = quant_dev;
using ll = long long;

constexpr int k_threads_x = 128;      // one c = 512 team; 512/c teams for smaller c
constexpr int k_groups_hca = 4;       // candidate groups (blockDim.y) for c = 512, >= 32 candidates
constexpr int k_unroll = 4;           // candidates loaded before the first is used
constexpr int k_ring_cta_cap = 1024;  // ring kernel: persistent grid bound

struct fc_launch {
  flash_compressor_params p;
  int64_t cta0;  // CTAs of comp[0]; comp[1] takes the rest of grid.x
};

// -- team reductions ---------------------------------------------------------

// Lanes of the calling thread's team inside its warp: teams smaller than a warp
// run independently (different loop counts), so their shuffles name only themselves.
template <int TEAM>
__device__ __forceinline__ unsigned team_mask() {
  if constexpr (TEAM >= 32) {
    return 0xffffffffu;
  } else {
    return ((1u << TEAM) - 1u) << ((threadIdx.x % 32) / TEAM * TEAM);
  }
}

// Reductions over aligned groups of W lanes (W <= the team, a power of two).
template <int W>
__device__ __forceinline__ float max_lanes(float v, unsigned mask) {
#pragma unroll
  for (int o = W / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(mask, v, o));
  return v;
}

template <int W>
__device__ __forceinline__ double sum_lanes(double v, unsigned mask) {
#pragma unroll
  for (int o = W / 2; o > 0; o /= 2) v += __shfl_xor_sync(mask, v, o);
  return v;
}

__device__ __forceinline__ float4 ld_stream(const float* p) {
  return __ldcs(reinterpret_cast<const float4*>(p));
}
__device__ __forceinline__ float4 ld_keep(const float* p) {
  return __ldg(reinterpret_cast<const float4*>(p));
}
__device__ __forceinline__ float4 ld_plain(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}

__device__ __forceinline__ float get(const float4& v, int k) {
  return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w;
}

// A span as the kernels see it.
struct span_t {
  int64_t s, p0, r0, n;
};

__device__ __forceinline__ span_t span_at(const flash_compressor_params& p, int64_t s) {
  if (!p.cu_tokens) return {s, p.start[s], s, 1};
  const int64_t r0 = p.cu_tokens[s];
  return {s, p.start[s], r0, int64_t(p.cu_tokens[s + 1]) - r0};
}

__device__ __forceinline__ const float* ring_row(const flash_compressor_desc& d,
                                                 const flash_compressor_params& p, int64_t s, int64_t q) {
  const int32_t page = p.swa_pages[s * p.pages_stride + q / p.page_size];
  return d.ring + page * d.ring_page_stride + (q % fc_ring_rows(d)) * 2 * fc_width(d);
}

// -- one entry ---------------------------------------------------------------

// Candidate j of block blk (CSA: j < m the previous block's A half, then this
// block's B half): its kv and gate rows at the channel offset, and the position
// bias still to add to the gate (null for a ring row, which holds it added).
// NOTE(flash_compressor): pool_online addresses candidates the same way inline,
// as it did before the bf16 path: its registers (and speed) stay as measured.
struct cand_rows {
  const float* kv;
  const float* gate;
  const float* ape;
};

__device__ __forceinline__ cand_rows cand_at(const flash_compressor_desc& d, const flash_compressor_params& p,
                                             const span_t& sp, int64_t blk, int64_t j, int ch) {
  const int64_t m = d.rate, c = d.dim, width = fc_width(d);
  const bool prev = d.overlap && j < m;
  const int64_t q = prev ? (blk - 1) * m + j : blk * m + (d.overlap ? j - m : j);
  const int64_t half = (d.overlap && !prev) ? c : 0;
  if (q < sp.p0) {
    const float* row = ring_row(d, p, sp.s, q);
    return {row + half + ch, row + width + half + ch, nullptr};
  }
  const int64_t r = sp.r0 + (q - sp.p0);
  return {d.kv + r * (d.kv_stride ? d.kv_stride : width) + half + ch,
          d.gate + r * (d.gate_stride ? d.gate_stride : width) + half + ch,
          d.ape + (q % m) * width + half + ch};
}

__device__ __forceinline__ float4 add4(const float4& a, const float4& b) {
  return make_float4(__fadd_rn(a.x, b.x), __fadd_rn(a.y, b.y), __fadd_rn(a.z, b.z), __fadd_rn(a.w, b.w));
}

// x rounded to the nearest bf16 (RNE) as round_to_bf16 (runtime/core/codecs.h)
// rounds it, NaN included: integer arithmetic, whatever cvt would do.
__device__ __forceinline__ float bf16_rne(float x) {
  const uint32_t u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return __uint_as_float((u | 0x00400000u) & 0xffff0000u);
  return __uint_as_float((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
}

// e^x correctly rounded to fp32 (a double exp within 1 ulp, rounded once).
// compress_pool_cpu's expf is glibc's, which is not correctly rounded: it
// differs from this on 6e-4 to 8e-4 of the floats in [-16, -1/16] (measured).
__device__ __forceinline__ float exp_rn(float x) {
  return float(exp(double(x)));
}

// The online pool of the fp32 path: per channel a running (max, sum, weighted
// kv) over the thread's group of candidates, the groups merged in order.
template <int TEAM>
__device__ __forceinline__ void pool_online(const flash_compressor_desc& d, const flash_compressor_params& p,
                                            const span_t& sp, int64_t blk, int ch, float* smem,
                                            float (&x)[4]) {
  const int64_t m = d.rate, c = d.dim, width = fc_width(d);
  const int64_t kv_stride = d.kv_stride ? d.kv_stride : width;
  const int64_t gate_stride = d.gate_stride ? d.gate_stride : width;
  const int G = blockDim.y, gy = threadIdx.y;

  // Candidate j: (position, half). CSA: j < m the previous block's A half, then this block's B half.
  const int64_t j_begin = (d.overlap && blk == 0) ? m : 0;
  const int64_t n_cand = (d.overlap ? 2 * m : m) - j_begin;
  const int64_t per = (n_cand + G - 1) / G;
  const int64_t j_lo = j_begin + gy * per, j_hi = min(j_begin + n_cand, j_lo + per);

  float mx[4], sum[4], acc[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) mx[k] = -INFINITY, sum[k] = 0.f, acc[k] = 0.f;

  for (int64_t j0 = j_lo; j0 < j_hi; j0 += k_unroll) {
    float4 kv[k_unroll], g[k_unroll];
#pragma unroll
    for (int u = 0; u < k_unroll; ++u) {
      const int64_t j = j0 + u;
      if (j >= j_hi) break;
      const bool prev = d.overlap && j < m;
      const int64_t q = prev ? (blk - 1) * m + j : blk * m + (d.overlap ? j - m : j);
      const int64_t half = (d.overlap && !prev) ? c : 0;
      if (q < sp.p0) {
        const float* row = ring_row(d, p, sp.s, q);
        kv[u] = ld_plain(row + half + ch);
        g[u] = ld_plain(row + width + half + ch);
      } else {
        const int64_t r = sp.r0 + (q - sp.p0);
        kv[u] = ld_stream(d.kv + r * kv_stride + half + ch);
        const float4 z = ld_stream(d.gate + r * gate_stride + half + ch);
        const float4 a = ld_keep(d.ape + (q % m) * width + half + ch);
        g[u] =
            make_float4(__fadd_rn(z.x, a.x), __fadd_rn(z.y, a.y), __fadd_rn(z.z, a.z), __fadd_rn(z.w, a.w));
      }
    }
#pragma unroll
    for (int u = 0; u < k_unroll; ++u) {
      if (j0 + u >= j_hi) break;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float gv = get(g[u], k), v = get(kv[u], k);
        if (gv > mx[k]) {
          const float sc = expf(mx[k] - gv);  // 0 when mx was -inf
          sum[k] = sum[k] * sc + 1.f;
          acc[k] = acc[k] * sc + v;
          mx[k] = gv;
        } else if (gv != -INFINITY) {
          const float e = expf(gv - mx[k]);
          sum[k] += e;
          acc[k] += v * e;
        }
      }
    }
  }

  if (TEAM == k_threads_x && G > 1) {
    // Merge the groups' (max, sum, acc) in group order.
    float* part = smem;  // [G][3][512]
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      part[(gy * 3 + 0) * 512 + ch + k] = mx[k];
      part[(gy * 3 + 1) * 512 + ch + k] = sum[k];
      part[(gy * 3 + 2) * 512 + ch + k] = acc[k];
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      float M = -INFINITY;
      for (int y = 0; y < G; ++y) M = fmaxf(M, part[(y * 3) * 512 + ch + k]);
      float S = 0.f, A = 0.f;
      if (M != -INFINITY) {
        for (int y = 0; y < G; ++y) {
          const float my = part[(y * 3) * 512 + ch + k];
          if (my == -INFINITY) continue;
          const float sc = expf(my - M);
          S += part[(y * 3 + 1) * 512 + ch + k] * sc;
          A += part[(y * 3 + 2) * 512 + ch + k] * sc;
        }
      }
      x[k] = M == -INFINITY ? 0.f : A / S;
    }
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k) x[k] = mx[k] == -INFINITY ? 0.f : acc[k] / sum[k];
  }
}

// The bf16 path's pool: compress_pool_cpu's arithmetic in its order, each
// thread over every candidate of its 4 channels (blockDim.y = 1): the max, the
// fp32 sum of exps, then Σ kv · (exp / sum) skipping zero weights. Gates are
// read three times: span rows through the read-only cache, so the second and
// third reads hit L1 or L2.
__device__ __forceinline__ void pool_exact(const flash_compressor_desc& d, const flash_compressor_params& p,
                                           const span_t& sp, int64_t blk, int ch, float (&x)[4]) {
  const int64_t m = d.rate;
  const int64_t j_begin = (d.overlap && blk == 0) ? m : 0, j_end = d.overlap ? 2 * m : m;
  auto gate_of = [&](const cand_rows& cr) {
    return cr.ape ? add4(ld_keep(cr.gate), ld_keep(cr.ape)) : ld_plain(cr.gate);
  };

  float mx[4], sum[4], acc[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) mx[k] = -INFINITY, sum[k] = 0.f, acc[k] = 0.f;
#pragma unroll k_unroll
  for (int64_t j = j_begin; j < j_end; ++j) {
    const float4 g = gate_of(cand_at(d, p, sp, blk, j, ch));
#pragma unroll
    for (int k = 0; k < 4; ++k) mx[k] = fmaxf(mx[k], get(g, k));
  }
#pragma unroll k_unroll
  for (int64_t j = j_begin; j < j_end; ++j) {
    const float4 g = gate_of(cand_at(d, p, sp, blk, j, ch));
#pragma unroll
    for (int k = 0; k < 4; ++k) sum[k] = __fadd_rn(sum[k], exp_rn(__fsub_rn(get(g, k), mx[k])));
  }
#pragma unroll k_unroll
  for (int64_t j = j_begin; j < j_end; ++j) {
    const cand_rows cr = cand_at(d, p, sp, blk, j, ch);
    const float4 g = gate_of(cr), kv = cr.ape ? ld_stream(cr.kv) : ld_plain(cr.kv);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float w = __fdiv_rn(exp_rn(__fsub_rn(get(g, k), mx[k])), sum[k]);
      if (w != 0.0f) acc[k] = __fadd_rn(acc[k], __fmul_rn(get(kv, k), w));
    }
  }
#pragma unroll
  for (int k = 0; k < 4; ++k) x[k] = mx[k] == -INFINITY ? 0.f : acc[k];
}

// Σ x² over the entry in sum_squares_torch_order's order: its lanes are the
// team's threads when c <= 128 (c / 4 lanes, one float4 each); for c = 512 its
// 32 lanes fold the float4s of threads i, i + 32, i + 64, i + 96, which every
// warp reads back from shared memory and reduces itself (no third barrier).
template <int TEAM>
__device__ __forceinline__ float sum_squares_torch(const float (&x)[4], int lane, unsigned mask,
                                                   float* smem) {
  constexpr int L = TEAM < 32 ? TEAM : 32;
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  if constexpr (TEAM == k_threads_x) {
    float4* xs = reinterpret_cast<float4*>(smem);  // [TEAM]
    __syncthreads();                               // the previous entry's reads of xs are done
    xs[lane] = make_float4(x[0], x[1], x[2], x[3]);
    __syncthreads();
    for (int v = lane % 32; v < TEAM; v += 32) {
      const float4 t = xs[v];
#pragma unroll
      for (int k = 0; k < 4; ++k) acc[k] = __fadd_rn(acc[k], __fmul_rn(get(t, k), get(t, k)));
    }
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k) acc[k] = __fadd_rn(acc[k], __fmul_rn(x[k], x[k]));
  }
  float s = __fadd_rn(__fadd_rn(__fadd_rn(acc[0], acc[1]), acc[2]), acc[3]);
#pragma unroll
  for (int o = L / 2; o > 0; o /= 2) s = __fadd_rn(s, __shfl_down_sync(mask, s, o, L));
  return __shfl_sync(mask, s, 0, L);
}

// Emits block `blk` of span `sp`. All threads of the CTA call it together when
// TEAM = 128 (it has barriers); a smaller team runs alone (warp shuffles only).
// BF16: compressor.cpp's bf16 branch (the pool in compress_pool_cpu's order,
// the official RMSNorm, bf16 after the pool, the norm, RoPE and the Hadamard).
template <int TEAM, bool BF16>
__device__ void emit_entry(const flash_compressor_desc& d, const flash_compressor_params& p, const span_t& sp,
                           int64_t blk, int lane, float* smem) {
  const int64_t m = d.rate, c = d.dim;
  const int ch = 4 * lane;
  const int gy = threadIdx.y;
  const unsigned mask = team_mask<TEAM>();

  float x[4];
  if constexpr (BF16) {
    pool_exact(d, p, sp, blk, ch, x);
#pragma unroll
    for (int k = 0; k < 4; ++k) x[k] = bf16_rne(x[k]);
  } else {
    pool_online<TEAM>(d, p, sp, blk, ch, smem, x);
  }

  float inv;
  if constexpr (BF16) {
    // rms_norm_cpu official: the torch-order sum times 1/c, rsqrt rounded once.
    const float mean_square =
        __fmul_rn(sum_squares_torch<TEAM>(x, lane, mask, smem), __fdiv_rn(1.0f, float(c)));
    inv = float(__ddiv_rn(1.0, __dsqrt_rn(double(__fadd_rn(mean_square, d.eps)))));
  } else {
    // RMSNorm: sum of squares in double (products exact), as rms_norm_cpu.
    double ss = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) ss += double(x[k]) * double(x[k]);
    ss = sum_lanes<(TEAM < 32 ? TEAM : 32)>(ss, mask);
    if (TEAM == k_threads_x) {
      // The barrier before writing `red` also orders this call's `part` reads
      // and the previous call's `red` reads before the next writes.
      double* red = reinterpret_cast<double*>(smem + k_groups_hca * 3 * 512);
      __syncthreads();
      if (gy == 0 && (threadIdx.x & 31) == 0) red[threadIdx.x / 32] = ss;
      __syncthreads();
      ss = ((red[0] + red[1]) + red[2]) + red[3];
    }
    inv = 1.0f / sqrtf(float(ss / double(c)) + d.eps);
  }
  const float4 w = ld_keep(d.norm + ch);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    x[k] = __fmul_rn(get(w, k), __fmul_rn(x[k], inv));
    if constexpr (BF16) x[k] = bf16_rne(x[k]);
  }

  // RoPE at the block's first position on the trailing rope_dim dims (pairs stay in one thread).
  const int64_t first = blk * m;
  const int64_t nope = c - d.rope_dim;
  if (ch >= nope) {
#pragma unroll
    for (int k = 0; k < 4; k += 2) {
      const float f = d.inv_freq[(ch + k - nope) / 2];
      const float angle = __fmul_rn(float(first), f);
      float sn, cs;
      if constexpr (BF16) {
        // Correctly rounded; glibc's sincosf (rope_cpu's) differs on ~1.3% of angles in [1/4, 2^18].
        double sd, cd;
        sincos(double(angle), &sd, &cd);
        sn = float(sd), cs = float(cd);
      } else {
        sincosf(angle, &sn, &cs);
      }
      const float a = x[k], b = x[k + 1];
      x[k] = __fsub_rn(__fmul_rn(a, cs), __fmul_rn(b, sn));
      x[k + 1] = __fadd_rn(__fmul_rn(b, cs), __fmul_rn(a, sn));
      if constexpr (BF16) x[k] = bf16_rne(x[k]), x[k + 1] = bf16_rne(x[k + 1]);
    }
  }

  const int32_t page = p.full_pages[sp.s * p.pages_stride + first / p.page_size];
  uint8_t* dst = static_cast<uint8_t*>(d.entries) + page * d.entry_page_stride_bytes +
                 (first % p.page_size) / m * fc_entry_bytes(d);
  if (gy != 0 || page < 0) return;

  if (d.quant == flash_entry_quant::fp8_nope) {
    // Block of 64 dims = 16 lanes (the whole team when c < 64); lanes past nope add nothing.
    constexpr int W = TEAM < 16 ? TEAM : 16;
    float amax = 0.f;
    if (ch < nope) {
#pragma unroll
      for (int k = 0; k < 4; ++k) amax = fmaxf(amax, fabsf(x[k]));
    }
    amax = fmaxf(max_lanes<W>(amax, mask), 1e-4f);
    const int e = qd::pow2_scale_exponent(amax, 448.0f);
    const float s = ldexpf(1.0f, e);
    if (d.format == flash_entry_format::kv_entry) {  // c = 512: nope = 448, as the entry's
      kv_entry_dev::store4(x, ch, amax, dst);
      return;
    }
    if (ch < nope) {
#pragma unroll
      for (int k = 0; k < 4; ++k)
        x[k] = qd::f32_from_e4m3(qd::e4m3_from_f32(qd::clamp_q(x[k] / s, 448.0f))) * s;
    }
  } else if (d.quant == flash_entry_quant::hadamard_fp4) {
    if (TEAM <= 32) {
      // Sylvester butterflies in double in rms order h = 1, 2 (in thread), 4.. (across lanes): the
      // same pairs and order as hadamard_transform, so the double sums are identical.
      double t[4] = {x[0], x[1], x[2], x[3]};
      double a0 = t[0] + t[1], a1 = t[0] - t[1], a2 = t[2] + t[3], a3 = t[2] - t[3];
      t[0] = a0 + a2, t[2] = a0 - a2, t[1] = a1 + a3, t[3] = a1 - a3;
#pragma unroll
      for (int o = 1; o < TEAM; o *= 2) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const double other = __shfl_xor_sync(mask, t[k], o);
          t[k] = (lane & o) ? other - t[k] : t[k] + other;
        }
      }
      const double scale = double(1.0f / sqrtf(float(c)));
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        x[k] = float(t[k] * scale);
        if constexpr (BF16) x[k] = bf16_rne(x[k]);  // as hadamard_fp4_qdq_rows(.., bf16)
      }
      // FP4 block min(32, c) = 8 lanes.
      float amax = 0.f;
#pragma unroll
      for (int k = 0; k < 4; ++k) amax = fmaxf(amax, fabsf(x[k]));
      amax = fmaxf(max_lanes<8>(amax, mask), 0x1.8p-124f);
      const float s = ldexpf(1.0f, qd::pow2_scale_exponent(amax, 6.0f));
#pragma unroll
      for (int k = 0; k < 4; ++k)
        x[k] = qd::f32_from_e2m1(qd::e2m1_from_f32(qd::clamp_q(x[k] / s, 6.0f))) * s;
    }
  }
  *reinterpret_cast<float4*>(reinterpret_cast<float*>(dst) + ch) = make_float4(x[0], x[1], x[2], x[3]);
}

// Writes position q's ring row [kv | gate + ape] from projection row r.
template <int TEAM>
__device__ void write_ring_row(const flash_compressor_desc& d, const flash_compressor_params& p, int64_t s,
                               int64_t q, int64_t r, int lane) {
  const int64_t width = fc_width(d), m = d.rate;
  const int32_t page = p.swa_pages[s * p.pages_stride + q / p.page_size];
  if (page < 0) return;
  float* row = d.ring + page * d.ring_page_stride + (q % fc_ring_rows(d)) * 2 * width;
  const float* kv = d.kv + r * (d.kv_stride ? d.kv_stride : width);
  const float* gate = d.gate + r * (d.gate_stride ? d.gate_stride : width);
  const float* ape = d.ape + (q % m) * width;
  for (int64_t i = 4 * lane; i < width; i += 4 * TEAM) {
    *reinterpret_cast<float4*>(row + i) = ld_plain(kv + i);
    const float4 z = ld_plain(gate + i), a = ld_keep(ape + i);
    *reinterpret_cast<float4*>(row + width + i) =
        make_float4(__fadd_rn(z.x, a.x), __fadd_rn(z.y, a.y), __fadd_rn(z.z, a.z), __fadd_rn(z.w, a.w));
  }
}

// -- kernels -----------------------------------------------------------------

// Last s with cu[s] <= row (cu non-decreasing, cu[0] <= row).
__device__ __forceinline__ int64_t span_of_row(const int32_t* cu, int64_t n_seq, int64_t row) {
  int64_t lo = 0, hi = n_seq;  // answer in [lo, hi)
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (cu[mid] <= row)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

// Emits with the compressor's roundings. ANY_BF16: some compressor of the call
// has bf16; without, the kernel holds no bf16 code (the fp32 path's registers).
template <int TEAM, bool ANY_BF16>
__device__ __forceinline__ void emit(const flash_compressor_desc& d, const flash_compressor_params& p,
                                     const span_t& sp, int64_t blk, int lane, float* smem) {
  if constexpr (ANY_BF16) {
    if (d.bf16) {
      emit_entry<TEAM, true>(d, p, sp, blk, lane, smem);
      return;
    }
  }
  emit_entry<TEAM, false>(d, p, sp, blk, lane, smem);
}

// Prefill entries: team w of comp ic owns projection rows [w·m, w·m + m) and
// emits every block whose closing token lies there.
template <int TEAM, bool ANY_BF16>
__device__ void prefill_team(const fc_launch& L, int ic, int64_t cta, float* smem) {
  const flash_compressor_params& p = L.p;
  const flash_compressor_desc& d = p.comp[ic];
  const int64_t m = d.rate;
  const int lane = threadIdx.x % TEAM;
  const int64_t w = cta * (k_threads_x / TEAM) + threadIdx.x / TEAM;
  const int64_t row_lo = w * m, row_hi = min(p.n_tokens, row_lo + m);
  if (row_lo >= p.n_tokens) return;  // uniform over a CTA when TEAM = 128
  int64_t s = p.cu_tokens ? span_of_row(p.cu_tokens, p.n_seq, row_lo) : row_lo;
  for (; s < p.n_seq; ++s) {
    const span_t sp = span_at(p, s);
    if (sp.r0 >= row_hi) break;
    const int64_t lo = max(row_lo, sp.r0), hi = min(row_hi, sp.r0 + sp.n);
    if (lo >= hi) continue;
    const int64_t q_lo = sp.p0 + (lo - sp.r0), q_hi = sp.p0 + (hi - sp.r0);
    const int64_t qc = q_lo / m * m + m - 1;  // first closing position >= q_lo
    if (qc < q_hi) emit<TEAM, ANY_BF16>(d, p, sp, qc / m, lane, smem);
  }
}

template <bool ANY_BF16>
__global__ void __launch_bounds__(k_threads_x* k_groups_hca) fc_prefill_kernel(const fc_launch L) {
  __shared__ __align__(16) float smem[k_groups_hca * 3 * 512 + 8];
  const int ic = blockIdx.x < L.cta0 ? 0 : 1;
  const int64_t cta = blockIdx.x - (ic ? L.cta0 : 0);
  switch (L.p.comp[ic].dim) {
    case 512:
      prefill_team<128, ANY_BF16>(L, ic, cta, smem);
      break;
    case 128:
      prefill_team<32, ANY_BF16>(L, ic, cta, smem);
      break;
    case 64:
      prefill_team<16, ANY_BF16>(L, ic, cta, smem);
      break;
    default:
      prefill_team<8, ANY_BF16>(L, ic, cta, smem);
      break;
  }
}

// Prefill ring rows: a persistent grid walks every span's kept rows.
template <int TEAM>
__device__ void ring_team(const flash_compressor_params& p, int ic) {
  const flash_compressor_desc& d = p.comp[ic];
  const int64_t m = d.rate, P = p.page_size;
  const int lane = threadIdx.x % TEAM;
  const int64_t teams = int64_t(gridDim.x) * (k_threads_x / TEAM);
  const int64_t team = int64_t(blockIdx.x) * (k_threads_x / TEAM) + threadIdx.x / TEAM;
  for (int64_t s = 0; s < p.n_seq; ++s) {
    const span_t sp = span_at(p, s);
    const int64_t end = sp.p0 + sp.n;
    // Kept rows: the tail [tail0, end), then (overlap) the m rows before each page edge in (p0, tail0].
    const int64_t tail0 = max(sp.p0, end / m * m - (d.overlap ? m : 0));
    const int64_t n_tail = end - tail0;
    const int64_t n_edges = d.overlap && tail0 > sp.p0 ? tail0 / P - sp.p0 / P : 0;
    const int64_t n_keep = n_tail + n_edges * m;
    for (int64_t i = team; i < n_keep; i += teams) {
      int64_t q = tail0 + i;
      if (i >= n_tail) {
        const int64_t k = (i - n_tail) / m;
        q = (sp.p0 / P + 1 + k) * P - m + (i - n_tail) % m;
        if (q < sp.p0 || q >= tail0) continue;
      }
      write_ring_row<TEAM>(d, p, s, q, sp.r0 + (q - sp.p0), lane);
    }
  }
}

__global__ void __launch_bounds__(k_threads_x) fc_ring_kernel(const flash_compressor_params p) {
  const int ic = blockIdx.y;
  switch (p.comp[ic].dim) {
    case 512:
      ring_team<128>(p, ic);
      break;
    case 128:
      ring_team<32>(p, ic);
      break;
    case 64:
      ring_team<16>(p, ic);
      break;
    default:
      ring_team<8>(p, ic);
      break;
  }
}

// Decode: team s owns sequence s's token (row s): ring row first (no candidate
// of this step reads it: they lie within ring − 1 positions before it), then
// the entry if the block closes.
template <int TEAM, bool ANY_BF16>
__device__ void decode_team(const fc_launch& L, int ic, int64_t cta, float* smem) {
  const flash_compressor_params& p = L.p;
  const flash_compressor_desc& d = p.comp[ic];
  const int lane = threadIdx.x % TEAM;
  const int64_t s = cta * (k_threads_x / TEAM) + threadIdx.x / TEAM;
  if (s >= p.n_seq) return;  // uniform over a CTA when TEAM = 128
  const span_t sp = span_at(p, s);
  if (threadIdx.y == 0 && fc_ring_keeps(d, p.page_size, sp.p0, sp.p0 + 1)) {
    write_ring_row<TEAM>(d, p, s, sp.p0, sp.r0, lane);
  }
  if ((sp.p0 + 1) % d.rate == 0) emit<TEAM, ANY_BF16>(d, p, sp, sp.p0 / d.rate, lane, smem);
}

template <bool ANY_BF16>
__global__ void __launch_bounds__(k_threads_x* k_groups_hca) fc_decode_kernel(const fc_launch L) {
  __shared__ __align__(16) float smem[k_groups_hca * 3 * 512 + 8];
  const int ic = blockIdx.x < L.cta0 ? 0 : 1;
  const int64_t cta = blockIdx.x - (ic ? L.cta0 : 0);
  switch (L.p.comp[ic].dim) {
    case 512:
      decode_team<128, ANY_BF16>(L, ic, cta, smem);
      break;
    case 128:
      decode_team<32, ANY_BF16>(L, ic, cta, smem);
      break;
    case 64:
      decode_team<16, ANY_BF16>(L, ic, cta, smem);
      break;
    default:
      decode_team<8, ANY_BF16>(L, ic, cta, smem);
      break;
  }
}

// -- launch ------------------------------------------------------------------

int64_t teams_per_cta(const flash_compressor_desc& d) {
  return k_threads_x / (d.dim / 4);
}

// Candidate groups: 4 only when every compressor is a c = 512 one with >= 32
// candidates (HCA) in fp32; smaller teams share a CTA and must stay
// barrier-free, and the bf16 pool sums every candidate in one thread.
int groups_for(const flash_compressor_params& p) {
  for (int64_t ic = 0; ic < p.n_comp; ++ic) {
    const flash_compressor_desc& d = p.comp[ic];
    if (d.dim != 512 || fc_ring_rows(d) < 32 || d.bf16) return 1;
  }
  return k_groups_hca;
}

bool any_bf16(const flash_compressor_params& p) {
  for (int64_t ic = 0; ic < p.n_comp; ++ic) {
    if (p.comp[ic].bf16) return true;
  }
  return false;
}

status launch_error(const char* op) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return internal_error("%s: launch failed: %s", op, cudaGetErrorString(e));
  return {};
}

}  // namespace

status flash_compressor_cuda_supports(const flash_compressor_params& p) {
  const char* op = "flash_compressor_cuda";
  HART_RETURN_IF_ERROR(fc_validate(p, op));
  for (int64_t ic = 0; ic < p.n_comp; ++ic) {
    const flash_compressor_desc& d = p.comp[ic];
    if (d.dim != 32 && d.dim != 64 && d.dim != 128 && d.dim != 512) {
      return unimplemented("%s: comp[%lld]: dim=%lld (CUDA handles 32, 64, 128, 512)", op, ll(ic), ll(d.dim));
    }
    if (d.rope_dim % 4) {
      return unimplemented("%s: comp[%lld]: rope_dim=%lld must be a multiple of 4", op, ll(ic),
                           ll(d.rope_dim));
    }
    if (d.quant == flash_entry_quant::hadamard_fp4 && d.dim > 128) {
      return unimplemented("%s: comp[%lld]: Hadamard + FP4 needs dim <= 128, got %lld", op, ll(ic),
                           ll(d.dim));
    }
    const int64_t width = fc_width(d);
    const int64_t align = d.format == flash_entry_format::kv_entry ? 8 : 16;
    if ((d.kv_stride ? d.kv_stride : width) % 4 || (d.gate_stride ? d.gate_stride : width) % 4 ||
        d.ring_page_stride % 4 || d.entry_page_stride_bytes % align ||
        reinterpret_cast<uintptr_t>(d.entries) % align ||
        (reinterpret_cast<uintptr_t>(d.kv) | reinterpret_cast<uintptr_t>(d.gate) |
         reinterpret_cast<uintptr_t>(d.ape) | reinterpret_cast<uintptr_t>(d.norm) |
         reinterpret_cast<uintptr_t>(d.ring)) %
            16) {
      return invalid_argument(
          "%s: comp[%lld]: float4 access needs 16-byte aligned pointers and strides (entries: %lld)", op,
          ll(ic), ll(align));
    }
  }
  if (p.n_tokens > INT32_MAX)
    return invalid_argument("%s: n_tokens=%lld exceeds int32 rows", op, ll(p.n_tokens));
  return {};
}

status flash_compressor_prefill_cuda(const flash_compressor_params& p, cudaStream_t stream) {
  HART_RETURN_IF_ERROR(flash_compressor_cuda_supports(p));
  if (p.n_seq == 0 || p.n_tokens == 0) return {};
  fc_launch L{p, 0};
  int64_t ctas[2] = {0, 0}, ring_ctas = 1;
  for (int64_t ic = 0; ic < p.n_comp; ++ic) {
    const flash_compressor_desc& d = p.comp[ic];
    const int64_t windows = (p.n_tokens + d.rate - 1) / d.rate;
    ctas[ic] = (windows + teams_per_cta(d) - 1) / teams_per_cta(d);
    // Kept ring rows: < 2m per span, plus m per page edge (overlap).
    const int64_t keep =
        p.n_seq * 2 * d.rate + (d.overlap ? (p.n_tokens / p.page_size + p.n_seq) * d.rate : 0);
    ring_ctas = std::max(ring_ctas,
                         std::min<int64_t>(k_ring_cta_cap, (keep + teams_per_cta(d) - 1) / teams_per_cta(d)));
  }
  L.cta0 = ctas[0];
  if (ctas[0] + ctas[1] > INT32_MAX) return invalid_argument("flash_compressor_prefill_cuda: grid too large");
  const auto entries_kernel = any_bf16(p) ? fc_prefill_kernel<true> : fc_prefill_kernel<false>;
  entries_kernel<<<dim3(unsigned(ctas[0] + ctas[1])), dim3(k_threads_x, groups_for(p)), 0, stream>>>(L);
  HART_RETURN_IF_ERROR(launch_error("flash_compressor_prefill_cuda"));
  fc_ring_kernel<<<dim3(unsigned(ring_ctas), unsigned(p.n_comp)), k_threads_x, 0, stream>>>(p);
  return launch_error("flash_compressor_prefill_cuda (ring)");
}

status flash_compressor_decode_cuda(const flash_compressor_params& p, cudaStream_t stream) {
  if (p.cu_tokens)
    return invalid_argument("flash_compressor_decode_cuda: cu_tokens must be null (one token per sequence)");
  HART_RETURN_IF_ERROR(flash_compressor_cuda_supports(p));
  if (p.n_seq == 0) return {};
  fc_launch L{p, 0};
  int64_t ctas[2] = {0, 0};
  for (int64_t ic = 0; ic < p.n_comp; ++ic)
    ctas[ic] = (p.n_seq + teams_per_cta(p.comp[ic]) - 1) / teams_per_cta(p.comp[ic]);
  L.cta0 = ctas[0];
  const auto kernel = any_bf16(p) ? fc_decode_kernel<true> : fc_decode_kernel<false>;
  kernel<<<dim3(unsigned(ctas[0] + ctas[1])), dim3(k_threads_x, groups_for(p)), 0, stream>>>(L);
  return launch_error("flash_compressor_decode_cuda");
}

}  // namespace hart
