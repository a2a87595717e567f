// File: kernels/linear/linear_fp8_device.cuh — internal to kernels/linear: the
// per-warp dot products the FP8 linear and the grouped linear share, so both
// compute every output with the same operations in the same order; the e4m3
// MMA both tensor-core linears issue; the bf16 MMA and exact three-term bf16
// split of fp32 inputs (linear_bf16w, linear_fp8_raw_tc); and what
// the warp-per-output GEMVs (these two and linear_bf16w) share: the warp sum,
// the predicated store, how many output rows a warp takes.
#pragma once

#include "kernels/cuda_device.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace hart::linear_dev {

constexpr int k_block = 128;  // k_linear_fp8_block

// 2^(c-127) for an e8m0 code (c = 255 is NaN).
__device__ __forceinline__ float e8m0_value(uint8_t c) {
  return c == 255 ? __int_as_float(0x7fc00000) : ldexpf(1.0f, int(c) - 127);
}

// d += a · b for one m16n8k32 e4m3 tile, fp32 accumulation (a: 4 words of 4
// codes, rows g and g + 8 of the tile; b: 2 words, output column g).
__device__ __forceinline__ void mma_e4m3(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// d += a · b for one m16n8k16 bf16 tile, fp32 accumulation.
__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// The 8 channel pairs of 16 fp32 inputs as three bf16 terms each, hi + mid + lo
// = x exactly (each term takes the next 8 significant bits of the remainder).
__device__ __forceinline__ void split3(const float4 (&v)[4], uint32_t (&hi)[8], uint32_t (&mid)[8],
                                       uint32_t (&lo)[8]) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float4& q = v[j / 2];
    const float a = j % 2 ? q.z : q.x, b = j % 2 ? q.w : q.y;
    const __nv_bfloat16 ah = __float2bfloat16_rn(a), bh = __float2bfloat16_rn(b);
    const float ar = a - __bfloat162float(ah), br = b - __bfloat162float(bh);
    const __nv_bfloat16 am = __float2bfloat16_rn(ar), bm = __float2bfloat16_rn(br);
    hi[j] = bf16x2(__bfloat162float(ah), __bfloat162float(bh));
    mid[j] = bf16x2(__bfloat162float(am), __bfloat162float(bm));
    lo[j] = bf16x2(ar - __bfloat162float(am), br - __bfloat162float(bm));
  }
}

// One 64-channel chunk on bf16 tensor cores, every product exact: the lane's
// 16 fp32 inputs of rows g and g + 8 (at x_lo, x_hi; 16-byte aligned) split
// into three bf16 terms, times its 16 weights of each of 4 n-tiles as 8 bf16
// pairs (w[nt][i]: channels 2i, 2i + 1), added into acc in the MMA's fp32.
__device__ __forceinline__ void mma_bf16x3_chunk(float (&acc)[4][4], const float* x_lo, const float* x_hi,
                                                 const uint32_t (&w)[4][8]) {
  uint32_t xt[3][2][8];  // [term][row half][channel pair]
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float4* xv = reinterpret_cast<const float4*>(h ? x_hi : x_lo);
    float4 v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = __ldg(xv + i);
    split3(v, xt[0][h], xt[1][h], xt[2][h]);
  }
#pragma unroll
  for (int s = 0; s < 4; ++s) {
#pragma unroll
    for (int term = 2; term >= 0; --term) {  // smallest terms first
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        mma_bf16(acc[nt], xt[term][0][2 * s], xt[term][1][2 * s], xt[term][0][2 * s + 1],
                 xt[term][1][2 * s + 1], w[nt][2 * s], w[nt][2 * s + 1]);
      }
    }
  }
}

// Word i (0..7) of a lane's 32 bytes: the tensor-core linears load 32
// contiguous codes per lane per 128-channel block, k-step s using words 2s and
// 2s + 1 (the MMA's k index permuted identically for both operands).
__device__ __forceinline__ uint32_t mma_word(const uint4 (&v)[2], int i) {
  const uint4& h = v[i / 4];
  const int j = i % 4;
  return j == 0 ? h.x : j == 1 ? h.y : j == 2 ? h.z : h.w;
}

// Two 16-byte loads from each of a warp's 4 n-tiles' weight rows: at element k
// and k + `second` (e4m3 codes: 32 contiguous at k, second = 16; bf16: 16 at k,
// second = 8; e4m3 widened per 64-channel half: 16 at k and 16 at k + 64).
template <class T>
__device__ __forceinline__ void mma_load_weights(uint4 (&bw)[4][2], const T* const (&wrow)[4], int64_t k,
                                                 int64_t second) {
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
    bw[nt][0] = __ldg(reinterpret_cast<const uint4*>(wrow[nt] + k));
    bw[nt][1] = __ldg(reinterpret_cast<const uint4*>(wrow[nt] + k + second));
  }
}

// One 128-channel block of a warp's 4 n-tiles (32 outputs): part[nt] = the
// block's sums from zero for input rows g (codes lo) and g + 8 (codes hi; HI =
// false: the tile has no such rows, the MMA's high half is zero).
template <bool HI>
__device__ __forceinline__ void mma_block(float (&part)[4][4], const uint4 (&lo)[2], const uint4 (&hi)[2],
                                          const uint4 (&bw)[4][2]) {
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) part[nt][0] = part[nt][1] = part[nt][2] = part[nt][3] = 0.0f;
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const uint32_t a0 = mma_word(lo, 2 * s), a2 = mma_word(lo, 2 * s + 1);
    const uint32_t a1 = HI ? mma_word(hi, 2 * s) : 0u, a3 = HI ? mma_word(hi, 2 * s + 1) : 0u;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
      mma_e4m3(part[nt], a0, a1, a2, a3, mma_word(bw[nt], 2 * s), mma_word(bw[nt], 2 * s + 1));
  }
}

__device__ __forceinline__ void fp8x4_to_float(uint32_t u, float* f) {
  const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(u & 0xffff), __NV_E4M3);
  const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(u >> 16), __NV_E4M3);
  const float2 a = __half22float2(__half2(lo)), b = __half22float2(__half2(hi));
  f[0] = a.x;
  f[1] = a.y;
  f[2] = b.x;
  f[3] = b.y;
}

// The 16 weights at k of each of R output rows times the mt <= MT input rows
// at x (row stride xs), added into acc[r][m]: the step fp8_dot_rows repeats
// along k. Each input float4 is loaded once for all R rows (the L1 traffic per
// output falls R-fold); each output's operations are the same for every R.
// XS: x is in shared memory (plain loads; __ldg is for global memory only).
template <int MT, int R, bool XS = false>
__device__ __forceinline__ void fp8_step(const uint4 (&wv)[R], float sw, const float* __restrict__ x,
                                         int64_t xs, int64_t k, int mt, float (&acc)[R][MT]) {
  float wf[R][16];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    fp8x4_to_float(wv[r].x, wf[r]);
    fp8x4_to_float(wv[r].y, wf[r] + 4);
    fp8x4_to_float(wv[r].z, wf[r] + 8);
    fp8x4_to_float(wv[r].w, wf[r] + 12);
  }
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    if (m >= mt) break;
    const float4* xr = reinterpret_cast<const float4*>(x + m * xs + k);
    float4 xv[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) xv[j] = XS ? xr[j] : __ldg(xr + j);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float part = 0.0f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        part = fmaf(wf[r][4 * j + 0], xv[j].x, part);
        part = fmaf(wf[r][4 * j + 1], xv[j].y, part);
        part = fmaf(wf[r][4 * j + 2], xv[j].z, part);
        part = fmaf(wf[r][4 * j + 3], xv[j].w, part);
      }
      acc[r][m] = fmaf(part, sw, acc[r][m]);
    }
  }
}

// Weight loads per row a lane issues before it uses the first: ~2 KB in
// flight per warp for R = 1, 4 KB for R >= 2.
template <int R>
constexpr int k_prefetch = R == 1 ? 4 : 2;

// P steps' weight loads (a step: a lane's 16 codes of each of R rows, 512
// channels apart) and their block scales, from channel k.
template <int P, int R>
__device__ __forceinline__ void fp8_load_batch(uint4 (&wv)[P][R], uint8_t (&sc)[P],
                                               const uint8_t* const (&row)[R], const uint8_t* __restrict__ ws,
                                               int64_t k) {
  constexpr int64_t step = 32 * 16;
#pragma unroll
  for (int u = 0; u < P; ++u) {
#pragma unroll
    for (int r = 0; r < R; ++r) wv[u][r] = __ldg(reinterpret_cast<const uint4*>(row[r] + k + u * step));
    sc[u] = __ldg(ws + (k + u * step) / k_block);
  }
}

// One warp's partial sums of the R output rows at w, w + in, ... (e4m3 codes,
// all in one 128-row scale block: scale row `ws`) against the mt <= MT input
// rows at x (row stride xs); rows past nr <= R repeat row nr - 1 (the caller
// drops them). The caller reduces acc over the warp. VEC: in % 16 == 0, w and
// x 16-byte aligned, xs % 4 == 0 (each lane's 16 weights are one uint4 inside
// one 128-channel block). Each lane sums 16 exact products in fp32, scales by the
// block's 2^k and accumulates: the order depends only on `in`, so results are
// batch-invariant, and equal for every R. The weight loads of k_prefetch
// steps are issued together, for one input row a batch ahead (the order of the
// sums is unchanged).
template <int MT, int R, bool VEC, bool XS = false>
__device__ __forceinline__ void fp8_dot_rows(const uint8_t* __restrict__ w, int nr,
                                             const uint8_t* __restrict__ ws, const float* __restrict__ x,
                                             int64_t xs, int64_t in, int mt, int lane, float (&acc)[R][MT]) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int m = 0; m < MT; ++m) acc[r][m] = 0.0f;
  }
  const uint8_t* row[R];
#pragma unroll
  for (int r = 0; r < R; ++r) row[r] = w + (r < nr ? r : nr - 1) * in;
  if (VEC) {
    constexpr int64_t step = 32 * 16;
    constexpr int P = k_prefetch<R>;
    int64_t k = int64_t(lane) * 16;
    if constexpr (MT == 1) {
      // Decode: the next batch's loads are issued before this one's sums, so a
      // warp keeps its loads in flight along a long row (a batch at a time, each
      // warp waited a full memory latency per batch).
      uint4 wv[P][R];
      uint8_t sc[P];
      if (k + (P - 1) * step < in) fp8_load_batch<P, R>(wv, sc, row, ws, k);
      for (; k + (P - 1) * step < in; k += P * step) {
        uint4 nw[P][R];
        uint8_t ns[P];
        if (k + (2 * P - 1) * step < in) fp8_load_batch<P, R>(nw, ns, row, ws, k + P * step);
#pragma unroll
        for (int u = 0; u < P; ++u)
          fp8_step<MT, R, XS>(wv[u], e8m0_value(sc[u]), x, xs, k + u * step, mt, acc);
#pragma unroll
        for (int u = 0; u < P; ++u) {
          sc[u] = ns[u];
#pragma unroll
          for (int r = 0; r < R; ++r) wv[u][r] = nw[u][r];
        }
      }
    } else {
      for (; k + (P - 1) * step < in; k += P * step) {
        uint4 wv[P][R];
        uint8_t sc[P];
        // fp8_load_batch's loads written out: through the call ptxas spills <4, 1> (64 registers, 24-byte
        // stack)
#pragma unroll
        for (int u = 0; u < P; ++u) {
#pragma unroll
          for (int r = 0; r < R; ++r) wv[u][r] = __ldg(reinterpret_cast<const uint4*>(row[r] + k + u * step));
          sc[u] = __ldg(ws + (k + u * step) / k_block);
        }
#pragma unroll
        for (int u = 0; u < P; ++u)
          fp8_step<MT, R, XS>(wv[u], e8m0_value(sc[u]), x, xs, k + u * step, mt, acc);
      }
    }
    for (; k < in; k += step) {
      uint4 wv[R];
#pragma unroll
      for (int r = 0; r < R; ++r) wv[r] = __ldg(reinterpret_cast<const uint4*>(row[r] + k));
      fp8_step<MT, R, XS>(wv, e8m0_value(__ldg(ws + k / k_block)), x, xs, k, mt, acc);
    }
  } else {
    for (int64_t k = lane; k < in; k += 32) {
      const float sw = e8m0_value(__ldg(ws + k / k_block));
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float wf = float(__half(__nv_cvt_fp8_to_halfraw(__ldg(row[r] + k), __NV_E4M3))) * sw;
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          if (m >= mt) break;
          acc[r][m] = fmaf(wf, x[m * xs + k], acc[r][m]);
        }
      }
    }
  }
}

// The same for fp32 weights (rows at w + r * in, past nr repeating the last):
// lane-strided 16-wide runs when VEC (in % 16 == 0, w 16-byte aligned), one
// channel per lane otherwise.
template <int MT, int R, bool VEC>
__device__ __forceinline__ void f32_dot_rows(const float* __restrict__ w, int nr, const float* __restrict__ x,
                                             int64_t in, int mt, int lane, float (&acc)[R][MT]) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int m = 0; m < MT; ++m) acc[r][m] = 0.0f;
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float* wr = w + (r < nr ? r : nr - 1) * in;
    if (VEC) {
      for (int64_t k = int64_t(lane) * 16; k < in; k += 32 * 16) {
        float4 wv[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) wv[j] = __ldg(reinterpret_cast<const float4*>(wr + k) + j);
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          if (m >= mt) break;
          const float4* xr = reinterpret_cast<const float4*>(x + m * in + k);
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const float4 xv = __ldg(xr + j);
            acc[r][m] = fmaf(wv[j].x, xv.x, acc[r][m]);
            acc[r][m] = fmaf(wv[j].y, xv.y, acc[r][m]);
            acc[r][m] = fmaf(wv[j].z, xv.z, acc[r][m]);
            acc[r][m] = fmaf(wv[j].w, xv.w, acc[r][m]);
          }
        }
      }
    } else {
      for (int64_t k = lane; k < in; k += 32) {
        const float wf = __ldg(wr + k);
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          if (m >= mt) break;
          acc[r][m] = fmaf(wf, x[m * in + k], acc[r][m]);
        }
      }
    }
  }
}

// Sums acc over the warp (butterfly: every lane ends with the total).
template <int MT, int R>
__device__ __forceinline__ void warp_sum(float (&acc)[R][MT]) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      for (int off = 16; off > 0; off >>= 1) acc[r][m] += __shfl_xor_sync(0xffffffffu, acc[r][m], off);
    }
  }
}

// Lane 0's store of a warp's reduced sums: y[(r0 + m) * ys + o0 + r] = (or +=)
// acc[r][m] for r < nr, m < mt. Unrolled with predicates, so acc stays in
// registers (a runtime-bounded loop puts it in local memory).
template <int MT, int R>
__device__ __forceinline__ void store_rows(const float (&acc)[R][MT], float* y, int64_t ys, int64_t r0,
                                           int64_t o0, int nr, int mt, bool accumulate) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      if (r >= nr || m >= mt) continue;
      float& v = y[(r0 + m) * ys + o0 + r];
      v = accumulate ? v + acc[r][m] : acc[r][m];
    }
  }
}

// Stores a warp's 16-row × 32-output MMA tile: acc[nt][2h + i] is row r0 + g + 8h,
// output n0 + 8nt + 2t + i (lane = 4g + t); rows from n_rows on are dropped.
__device__ __forceinline__ void store_mma_tile(const float (&acc)[4][4], float* y, int64_t ys, int64_t r0,
                                               int64_t n0, int64_t n_rows, bool accumulate) {
  const int g = (threadIdx.x % 32) >> 2, t = threadIdx.x & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t r = r0 + g + 8 * h;
    if (r >= n_rows) continue;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      float* yr = y + r * ys + n0 + nt * 8 + 2 * t;
      yr[0] = accumulate ? yr[0] + acc[nt][2 * h] : acc[nt][2 * h];
      yr[1] = accumulate ? yr[1] + acc[nt][2 * h + 1] : acc[nt][2 * h + 1];
    }
  }
}

// Split K for the 4-warp tensor-core CTAs (acc: MT m-tiles x 4 n-tiles x 4
// per lane): every CTA of a tile leaves its partial sums in `partials`; the
// last of the tile's `splits` CTAs to arrive adds them all in split order (the
// same order whoever is last: repeatable) and resets the tile's counter for the
// next launch. Returns whether this CTA holds the sums and stores the tile.
// Every thread of the CTA must call it (it synchronizes the block).
template <int MT>
__device__ __forceinline__ bool split_k_gather(float (&acc)[MT][4][4], float* __restrict__ partials,
                                               int* __restrict__ arrivals, int64_t tile, int64_t splits,
                                               int64_t split) {
  constexpr int64_t per_cta = 4 * MT * 4 * 32 * 4;  // 4 warps
  const int64_t at = (int64_t(threadIdx.x / 32) * MT * 4 * 32 + threadIdx.x % 32) * 4;
  float* mine = partials + (tile * splits + split) * per_cta + at;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      __stcg(reinterpret_cast<float4*>(mine + (mt * 4 + nt) * 32 * 4),
             make_float4(acc[mt][nt][0], acc[mt][nt][1], acc[mt][nt][2], acc[mt][nt][3]));
    }
  }
  __threadfence();
  __syncthreads();
  __shared__ int last;
  if (threadIdx.x == 0) last = atomicAdd(arrivals + tile, 1) == splits - 1;
  __syncthreads();
  if (!last) return false;
  __threadfence();
  const float* all = partials + tile * splits * per_cta + at;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.0f;
  }
#pragma unroll 4  // the splits' loads in flight together; the adds keep split order
  for (int64_t sp = 0; sp < splits; ++sp) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const float4 v = __ldcg(reinterpret_cast<const float4*>(all + sp * per_cta + (mt * 4 + nt) * 32 * 4));
        acc[mt][nt][0] += v.x, acc[mt][nt][1] += v.y, acc[mt][nt][2] += v.z, acc[mt][nt][3] += v.w;
      }
    }
  }
  if (threadIdx.x == 0) arrivals[tile] = 0;
  return true;
}

// K splits for `tiles` output tiles of 4-warp CTAs over `k_units` steps along
// K: none when the tiles alone fill the SMs, else enough for two CTAs per SM,
// each at least two steps, within the context's partials and tile counters.
inline int64_t split_k_count(int64_t tiles, int64_t k_units, int mt, int64_t partial_floats,
                             int64_t arrivals_count) {
  const int64_t sms = cuda_sm_count();
  if (tiles >= sms || tiles > arrivals_count || k_units < 4) return 1;
  const int64_t per_cta = int64_t(4) * mt * 4 * 32 * 4;
  const int64_t splits =
      std::min({(2 * sms + tiles - 1) / tiles, k_units / 2, partial_floats / (tiles * per_cta)});
  return splits < 2 ? 1 : splits;
}

// A tensor-core launch's grid: for each 128-output block its K splits, for each
// split its row tiles (the CTAs that read the same weight bytes run side by
// side, their repeats served by L2). K is `units_per_split` steps per split.
struct split_grid {
  int64_t out_blocks, row_tiles, splits, units_per_split;
  int64_t ctas() const { return out_blocks * splits * row_tiles; }
  // This CTA's output block, K split and row tile.
  __device__ void locate(int64_t& ob, int64_t& split, int64_t& rt) const {
    rt = int64_t(blockIdx.x) % row_tiles;
    split = int64_t(blockIdx.x) / row_tiles % splits;
    ob = int64_t(blockIdx.x) / row_tiles / splits;
  }
};

// The grid for `out_blocks` × `row_tiles` tiles of `mt` m-tiles over `k_units`
// K steps, split when the tiles alone leave SMs idle (split_k_count), no split empty.
inline split_grid plan_split_grid(int64_t out_blocks, int64_t row_tiles, int64_t k_units, int mt,
                                  int64_t partial_floats, int64_t arrivals_count) {
  split_grid g{out_blocks, row_tiles, 1, k_units};
  const int64_t splits = split_k_count(out_blocks * row_tiles, k_units, mt, partial_floats, arrivals_count);
  if (splits < 2) return g;
  g.units_per_split = (k_units + splits - 1) / splits;
  g.splits = (k_units + g.units_per_split - 1) / g.units_per_split;
  return g;
}

// How many output rows a warp takes (1, 2 or 4; every R gives the same
// results): the most that still leaves `min_blocks` CTAs of k_warps warps,
// so small layers keep every SM streaming, at most 2 for MT = 8 rows
// (registers), and at most the power of two dividing `row_offset` (a warp's
// rows must share a 128-row scale block).
inline int rows_per_warp(int64_t out, int64_t row_tiles, int mt_template, int k_warps, int64_t min_blocks,
                         int64_t row_offset = 0) {
  auto blocks = [&](int64_t r) { return (out + k_warps * r - 1) / (k_warps * r) * row_tiles; };
  if (mt_template <= 4 && row_offset % 4 == 0 && blocks(4) >= min_blocks) return 4;
  if (row_offset % 2 == 0 && blocks(2) >= min_blocks) return 2;
  return 1;
}

}  // namespace hart::linear_dev
