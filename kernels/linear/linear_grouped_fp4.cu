// The grouped linear's MXFP4 groups on tensor cores (routed experts as the
// checkpoint ships them: W4A8). Each 32-channel block of a weight row is 16
// bytes of e2m1 pairs and one e8m0 scale. A lane widens 8 codes (one word) to
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

// 2^(c - 127 + 6) for a scale code c <= 248 (the widened codes' 2^-6 undone).
__device__ __forceinline__ float fp4_scale(uint32_t c) { return __int_as_float(int(c + 6) << 23); }

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

__device__ __forceinline__ void fp4_load(fp4_block& b, const uint8_t* const (&wrow)[4], const uint8_t* const (&srow)[4],
                                         int64_t scale_row, int64_t kb) {
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
    for (int j = 0; j < k_sub; ++j) b.w[nt][j] = __ldg(reinterpret_cast<const uint32_t*>(wrow[nt] + kb * 64 + j * 16));
    b.s[nt][0] = __ldg(reinterpret_cast<const uint32_t*>(srow[nt] + kb * k_sub));
    b.s[nt][1] = __ldg(reinterpret_cast<const uint32_t*>(srow[nt] + scale_row + kb * k_sub));
  }
}

__global__ void __launch_bounds__(k_warps * 32) grouped_fp4_kernel(linear_grouped_params p) {
  __shared__ float2 spill[k_phases - 1][4][4][32];
  const int tile = blockIdx.y;
  if (tile >= *p.n_tiles) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, ng = warp % 4, phase = warp / 4;
  const int g = lane >> 2, t = lane & 3;
  const linear_group_weight gw = p.groups[p.tile_group[tile]];
  const int64_t r0 = p.tile_row0[tile];
  const int mt = p.tile_rows[tile];
  const int64_t n0 = int64_t(blockIdx.x) * 128 + ng * 32;
  const int64_t in = p.in, nkb = in / k_block, scale_row = in / 32;
  const int64_t row = r0 + min(g, mt - 1);  // lanes past the tile's rows repeat its last, dropped
  const uint8_t* xrow = p.x_codes + row * in + t * 8;
  const float* xs = p.x_scales + row * nkb;
  const uint8_t *wrow[4], *srow[4];
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
    wrow[nt] = static_cast<const uint8_t*>(gw.w) + (n0 + nt * 8 + g) * (in / 2) + t * 4;
    srow[nt] = gw.w_scale + (n0 + nt * 8 + 2 * t) * scale_row;
  }
  float acc[4][2] = {};
  fp4_block cur;
  fp4_load(cur, wrow, srow, scale_row, min(int64_t(phase), nkb - 1));
  for (int64_t kb = phase; kb < nkb; kb += k_phases) {
    fp4_block next;
    fp4_load(next, wrow, srow, scale_row, kb + k_phases < nkb ? kb + k_phases : kb);
    const float sx = __ldg(xs + kb);
#pragma unroll
    for (int j = 0; j < k_sub; ++j) {
      uint32_t a0, a2;
      x_pair(xrow + kb * k_block + j * 32, a0, a2);
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        linear_dev::mma_e4m3(part, a0, 0u, a2, 0u, fp4_even(cur.w[nt][j]), fp4_odd(cur.w[nt][j]));
        acc[nt][0] = fmaf(part[0], sx * fp4_scale((cur.s[nt][0] >> (8 * j)) & 0xff), acc[nt][0]);
        acc[nt][1] = fmaf(part[1], sx * fp4_scale((cur.s[nt][1] >> (8 * j)) & 0xff), acc[nt][1]);
      }
    }
    cur = next;
  }
  if (phase > 0) {
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) spill[phase - 1][ng][nt][lane] = make_float2(acc[nt][0], acc[nt][1]);
  }
  __syncthreads();
  if (phase > 0 || g >= mt) return;
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
    for (int ph = 1; ph < k_phases; ++ph) {
      const float2 v = spill[ph - 1][ng][nt][lane];
      acc[nt][0] += v.x;
      acc[nt][1] += v.y;
    }
    *reinterpret_cast<float2*>(p.y + (r0 + g) * p.out + n0 + nt * 8 + 2 * t) = make_float2(acc[nt][0], acc[nt][1]);
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
    wrow[nt] = static_cast<const uint8_t*>(gw.w) + (n0 + nt * 8 + g) * (in / 2) + t * 4;
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
        ws[nt][0] = fp4_scale((cur.s[nt][0] >> (8 * j)) & 0xff);
        ws[nt][1] = fp4_scale((cur.s[nt][1] >> (8 * j)) & 0xff);
      }
#pragma unroll
      for (int m = 0; m < k_wide_groups; ++m) {
        if (m >= n_mg) break;
        const int64_t lo = r0 + min(16 * m + g, mt - 1), hi = r0 + min(16 * m + 8 + g, mt - 1);
        uint32_t a0, a1, a2, a3;
        x_pair(p.x_codes + lo * in + kb * k_block + j * 32 + t * 8, a0, a2);
        x_pair(p.x_codes + hi * in + kb * k_block + j * 32 + t * 8, a1, a3);
        const float slo = __ldg(p.x_scales + lo * nkb + kb), shi = __ldg(p.x_scales + hi * nkb + kb);
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
