// The grouped linear's MXFP4 groups on tensor cores (routed experts as the
// checkpoint ships them: W4A8). Each 32-channel block of a weight row is 16
// bytes of e2m1 pairs and one e8m0 scale; the pairs are in mxfp4_mma_order,
// so one 16-byte load gives a lane its 8 codes of each of a 128-channel
// block's four 32-blocks. A lane widens 8 codes (one word) to
// e4m3 by moving bits: nibble [s e1 e0 m] becomes the byte [s 0 0 e1 e0 m 0 0],
// an e4m3 holding exactly 2^-6 of the e2m1 value (normal and subnormal alike),
// the even codes in one register and the odd ones in another. One m16n8k32
// MMA then takes one whole 32-channel block: lane t supplies channels
// t*8..t*8+7 of it (the even ones as the MMA's k = t*4.., the odd ones as k =
// 16 + t*4..; the activations' codes are permuted the same way with byte
// permutes), so each MMA's partial from zero is exactly one block's sum and
// is scaled by s_x · 2^(scale - 127 + 6) into the fp32 accumulator, as the
// reference's fp4_gemm sums per 32. The CTA shapes are linear_grouped_tc.cu's:
// narrow tiles (decode, <= 8 rows) 16 warps = 4 groups of 32 outputs × 4
// K phases, the phases' sums added in phase order; wide tiles (prefill, up to
// 64 rows) 4 warps of 32 outputs, the rows in m-groups of 16 sharing the
// widened weights.
#include "kernels/linear/linear.h"
#include "kernels/linear/linear_fp8_device.cuh"
#include "kernels/linear/linear_grouped_fp4.h"

namespace hart {
namespace {

constexpr int64_t k_block = k_linear_fp8_block;  // the activations' scale block
constexpr int k_sub = 4;                         // MXFP4 blocks (32 channels) per 128
constexpr int k_phases = 4;
constexpr int k_warps = 4 * k_phases;
constexpr int k_wide_warps = 4;
constexpr int k_wide_groups = int(linear_grouped_wide_tile_rows / 16);

// Even / odd codes of a word of 8 e2m1 (low nibble first) as 4 e4m3 each, 2^-6 of their values.
__device__ __forceinline__ uint32_t fp4_even(uint32_t w) { return ((w << 4) & 0x80808080u) | ((w << 2) & 0x1c1c1c1cu); }
__device__ __forceinline__ uint32_t fp4_odd(uint32_t w) { return (w & 0x80808080u) | ((w >> 2) & 0x1c1c1c1cu); }

// 2^(c - 127) for byte j of a word of e8m0 codes, by placing c in the float's
// exponent field: exact for codes 1..254 (0, a 2^-127 scale, reads as 0; 255, NaN, as inf).
__device__ __forceinline__ float e8m0_byte(uint32_t codes, int j) {
  return __uint_as_float(j < 3 ? (codes << (23 - 8 * j)) & 0x7f800000u : (codes >> 1) & 0x7f800000u);
}

// The activations' 8 codes of one lane's channels in a 32-block, as the MMA's
// even (k = t*4..) and odd (k = 16 + t*4..) operands.
__device__ __forceinline__ void x_pair(const uint8_t* p, uint32_t& even, uint32_t& odd) {
  const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
  even = __byte_perm(v.x, v.y, 0x6420);
  odd = __byte_perm(v.x, v.y, 0x7531);
}

// One 128-channel block's weights of a lane: word j = its 8 codes of 32-block
// j of row wrow[nt]; scales: the 4 codes of that block for the lane's two
// output columns (rows 2t and 2t + 1 of each n-tile).
struct fp4_block {
  uint32_t w[4][k_sub];
  uint32_t s[4][2];
};

__device__ __forceinline__ void words(uint32_t (&w)[k_sub], const uint8_t* p) {
  const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
  w[0] = v.x;
  w[1] = v.y;
  w[2] = v.z;
  w[3] = v.w;
}

__device__ __forceinline__ void fp4_load(fp4_block& b, const uint8_t* const (&wrow)[4], const uint8_t* const (&srow)[4],
                                         int64_t scale_row, int64_t kb) {
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
    words(b.w[nt], wrow[nt] + kb * 64);
    b.s[nt][0] = __ldg(reinterpret_cast<const uint32_t*>(srow[nt] + kb * k_sub));
    b.s[nt][1] = __ldg(reinterpret_cast<const uint32_t*>(srow[nt] + scale_row + kb * k_sub));
  }
}

// Narrow tiles (decode): the weights are the MMA's A operand, so the 16 output
// rows of an m16 tile are the rows whose scales a lane applies (its C rows g
// and g + 8 are the A rows it loaded): each lane reads the scale words of its
// own four rows, and one MMA serves all of a tile's <= 8 tokens as the n8
// columns. A warp takes 32 output rows (two m16 tiles); per 128-channel block
// each 32-block's partial times 2^(scale - 127) is added into a block sum,
// which is then scaled by s_x · 2^6 into the accumulator.
__global__ void __launch_bounds__(k_warps * 32) grouped_fp4_kernel(linear_grouped_params p) {
  __shared__ float4 spill[k_phases - 1][4][2][32];  // later phases' sums, added by phase 0 in phase order
  const int tile = blockIdx.y;
  if (tile >= *p.n_tiles) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, ng = warp % 4, phase = warp / 4;
  const int g = lane >> 2, t = lane & 3;
  const linear_group_weight gw = p.groups[p.tile_group[tile]];
  const int64_t r0 = p.tile_row0[tile];
  const int mt = p.tile_rows[tile];
  const int64_t n0 = int64_t(blockIdx.x) * 128 + ng * 32;  // this warp's 32 outputs
  const int64_t in = p.in, nkb = in / k_block, scale_row = in / 32;
  // B column g: token g of the tile (lanes past it repeat its last, dropped); C columns 2t, 2t + 1.
  const uint8_t* xrow = p.x_codes + (r0 + min(g, mt - 1)) * in + t * 8;
  const float* xs0 = p.x_scales + (r0 + min(2 * t, mt - 1)) * nkb;
  const float* xs1 = p.x_scales + (r0 + min(2 * t + 1, mt - 1)) * nkb;
  // A rows: m16 tile mi, half h (rows g and g + 8).
  const uint8_t *wrow[2][2], *srow[2][2];
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = n0 + mi * 16 + h * 8 + g;
      wrow[mi][h] = static_cast<const uint8_t*>(gw.w) + row * (in / 2) + t * 16;
      srow[mi][h] = gw.w_scale + row * scale_row;
    }
  }
  struct block {
    uint32_t w[2][2][k_sub];  // [mi][h][j]: the lane's 8 codes of 32-block j
    uint32_t s[2][2];         // [mi][h]: the row's 4 scale codes of this 128-block
  };
  auto load = [&](block& b, int64_t kb) {
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        words(b.w[mi][h], wrow[mi][h] + kb * 64);
        b.s[mi][h] = __ldg(reinterpret_cast<const uint32_t*>(srow[mi][h] + kb * k_sub));
      }
    }
  };
  // Two blocks ahead in flight (~6 KB per warp): at batch 1 a layer's experts are ~100 CTAs.
  auto clamp = [&](int64_t kb) { return kb < nkb ? kb : nkb - 1; };
  float acc[2][4] = {};
  block cur, next;
  load(cur, clamp(phase));
  load(next, clamp(phase + k_phases));
  for (int64_t kb = phase; kb < nkb; kb += k_phases) {
    block after;
    load(after, clamp(kb + 2 * k_phases));
    float sum[2][4] = {};
#pragma unroll
    for (int j = 0; j < k_sub; ++j) {
      uint32_t b0, b1;
      x_pair(xrow + kb * k_block + j * 32, b0, b1);
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        linear_dev::mma_e4m3(part, fp4_even(cur.w[mi][0][j]), fp4_even(cur.w[mi][1][j]), fp4_odd(cur.w[mi][0][j]),
                             fp4_odd(cur.w[mi][1][j]), b0, b1);
        const float lo = e8m0_byte(cur.s[mi][0], j), hi = e8m0_byte(cur.s[mi][1], j);
        sum[mi][0] = fmaf(part[0], lo, sum[mi][0]);
        sum[mi][1] = fmaf(part[1], lo, sum[mi][1]);
        sum[mi][2] = fmaf(part[2], hi, sum[mi][2]);
        sum[mi][3] = fmaf(part[3], hi, sum[mi][3]);
      }
    }
    const float s0 = __ldg(xs0 + kb) * 64.0f, s1 = __ldg(xs1 + kb) * 64.0f;  // 2^6: the widened codes' scale
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
      acc[mi][0] = fmaf(sum[mi][0], s0, acc[mi][0]);
      acc[mi][1] = fmaf(sum[mi][1], s1, acc[mi][1]);
      acc[mi][2] = fmaf(sum[mi][2], s0, acc[mi][2]);
      acc[mi][3] = fmaf(sum[mi][3], s1, acc[mi][3]);
    }
    cur = next;
    next = after;
  }
  if (phase > 0) {
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
      spill[phase - 1][ng][mi][lane] = make_float4(acc[mi][0], acc[mi][1], acc[mi][2], acc[mi][3]);
    }
  }
  __syncthreads();
  if (phase > 0 || 2 * t >= mt) return;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int ph = 1; ph < k_phases; ++ph) {
      const float4 v = spill[ph - 1][ng][mi][lane];
      acc[mi][0] += v.x;
      acc[mi][1] += v.y;
      acc[mi][2] += v.z;
      acc[mi][3] += v.w;
    }
    const int64_t row = n0 + mi * 16 + g;
    float* y0 = p.y + (r0 + 2 * t) * p.out + row;
    y0[0] = acc[mi][0];
    y0[8] = acc[mi][2];
    if (2 * t + 1 < mt) {
      y0[p.out] = acc[mi][1];
      y0[p.out + 8] = acc[mi][3];
    }
  }
}

__global__ void __launch_bounds__(k_wide_warps * 32) grouped_fp4_wide_kernel(linear_grouped_params p) {
  const int tile = blockIdx.y;
  if (tile >= *p.n_tiles) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, t = lane & 3;
  const linear_group_weight gw = p.groups[p.tile_group[tile]];
  const int64_t r0 = p.tile_row0[tile];
  const int mt = p.tile_rows[tile], n_mg = (mt + 15) / 16;
  const int64_t n0 = int64_t(blockIdx.x) * 128 + warp * 32;
  const int64_t in = p.in, nkb = in / k_block, scale_row = in / 32;
  const uint8_t *wrow[4], *srow[4];
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
    wrow[nt] = static_cast<const uint8_t*>(gw.w) + (n0 + nt * 8 + g) * (in / 2) + t * 16;
    srow[nt] = gw.w_scale + (n0 + nt * 8 + 2 * t) * scale_row;
  }
  float acc[k_wide_groups][4][4] = {};
  fp4_block cur;
  fp4_load(cur, wrow, srow, scale_row, 0);
  for (int64_t kb = 0; kb < nkb; ++kb) {
    fp4_block next;
    fp4_load(next, wrow, srow, scale_row, kb + 1 < nkb ? kb + 1 : kb);
#pragma unroll
    for (int j = 0; j < k_sub; ++j) {
      uint32_t b0[4], b1[4];
      float ws[4][2];
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        b0[nt] = fp4_even(cur.w[nt][j]);
        b1[nt] = fp4_odd(cur.w[nt][j]);
        ws[nt][0] = e8m0_byte(cur.s[nt][0], j);
        ws[nt][1] = e8m0_byte(cur.s[nt][1], j);
      }
#pragma unroll
      for (int m = 0; m < k_wide_groups; ++m) {
        if (m >= n_mg) break;
        const int64_t lo = r0 + min(16 * m + g, mt - 1), hi = r0 + min(16 * m + 8 + g, mt - 1);
        uint32_t a0, a1, a2, a3;
        x_pair(p.x_codes + lo * in + kb * k_block + j * 32 + t * 8, a0, a2);
        x_pair(p.x_codes + hi * in + kb * k_block + j * 32 + t * 8, a1, a3);
        // 2^6: the widened codes' scale.
        const float slo = __ldg(p.x_scales + lo * nkb + kb) * 64.0f, shi = __ldg(p.x_scales + hi * nkb + kb) * 64.0f;
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          linear_dev::mma_e4m3(part, a0, a1, a2, a3, b0[nt], b1[nt]);
          acc[m][nt][0] = fmaf(part[0], slo * ws[nt][0], acc[m][nt][0]);
          acc[m][nt][1] = fmaf(part[1], slo * ws[nt][1], acc[m][nt][1]);
          acc[m][nt][2] = fmaf(part[2], shi * ws[nt][0], acc[m][nt][2]);
          acc[m][nt][3] = fmaf(part[3], shi * ws[nt][1], acc[m][nt][3]);
        }
      }
    }
    cur = next;
  }
#pragma unroll
  for (int m = 0; m < k_wide_groups; ++m) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = 16 * m + 8 * h + g;
      if (row >= mt) continue;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        *reinterpret_cast<float2*>(p.y + (r0 + row) * p.out + n0 + nt * 8 + 2 * t) =
            make_float2(acc[m][nt][2 * h], acc[m][nt][2 * h + 1]);
      }
    }
  }
}

}  // namespace

void launch_grouped_fp4(const linear_grouped_params& p, dim3 grid, cudaStream_t stream) {
  if (p.max_tile_rows > linear_grouped_tile_rows) {
    grouped_fp4_wide_kernel<<<grid, k_wide_warps * 32, 0, stream>>>(p);
  } else {
    grouped_fp4_kernel<<<grid, k_warps * 32, 0, stream>>>(p);
  }
}

}  // namespace hart
