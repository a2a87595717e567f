// The grouped FP8 linear on tensor cores (MoE experts): each CTA takes 32
// output rows of one tile's expert (a quarter of one weight scale block), the
// tile's <= 8 input rows as the low half of an m16n8k32 e4m3 MMA (the high half
// is zero: a tile never has more than 8 rows). Per 128-channel block the MMA
// accumulates from zero and the block's partial is scaled by s_x · s_w into
// fp32, as in linear_fp8_tc_cuda. Its 4 warps are 4 phases taking every fourth
// block (four times the weight loads in flight of one phase), each with its
// next block's weights loading while it multiplies; phase 0 adds the other
// phases' sums in phase order. Small CTAs, 3 per SM (4 spill registers and ran
// 10% slower): at batch 1 a layer's w1 (6 experts) is 384 CTAs for 132 SMs,
// where 128 outputs per CTA gave 96 CTAs, one per SM (perf-notes M1 v4). A
// row's sums involve only its own codes, so the result does not depend on
// which rows share a tile (batch-invariant).
// Wide tiles (prefill, up to 64 rows of one expert) run grouped_tc_wide_kernel:
// every 16 of the tile's rows fill one whole MMA per block of weights, so an
// expert's weights are read once per 64 rows instead of once per 8.
#include "kernels/linear/linear.h"
#include "kernels/linear/linear_fp8_device.cuh"
#include "kernels/linear/linear_grouped_fp4.h"

#include <climits>

#include <cstdint>

namespace hart {
namespace {

constexpr int k_phases = 4;        // warps splitting K: block kb goes to phase kb % k_phases
constexpr int k_warps = k_phases;  // one warp of 32 outputs per phase
constexpr int k_narrow_outs = 32;
constexpr int64_t k_block = k_linear_fp8_block;
static_assert(linear_grouped_tile_rows <= 8, "a tile fills the low half of the MMA's 16 rows");

__global__ void __launch_bounds__(k_warps * 32, 3) grouped_tc_kernel(linear_grouped_params p) {
  __shared__ float2 spill[k_phases - 1][4][32];  // later phases' sums, added by phase 0 in phase order
  const int tile = blockIdx.y;
  if (tile >= *p.n_tiles) return;
  const int lane = threadIdx.x % 32, phase = threadIdx.x / 32;
  const int g = lane >> 2, t = lane & 3;
  const linear_group_weight gw = p.groups[p.tile_group[tile]];
  const int64_t r0 = p.tile_row0[tile];
  const int mt = p.tile_rows[tile];
  const int64_t n0 = int64_t(blockIdx.x) * k_narrow_outs;  // the CTA's 32 outputs
  const int64_t in = p.in, nkb = in / k_block;
  const int64_t row = r0 + min(g, mt - 1);  // lanes past the tile's rows repeat its last, dropped
  const uint8_t* xrow = p.x_codes + row * in + t * 32;
  const float* xs = p.x_scales + row * nkb;
  const uint8_t* wrow[4];
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
    wrow[nt] = static_cast<const uint8_t*>(gw.w) + (n0 + nt * 8 + g) * in + t * 32;
  const uint8_t* wscale = gw.w_scale + (n0 / k_block) * nkb;
  float acc[4][2] = {};
  // This phase's blocks, the next one's weights in flight while one multiplies
  // (a phase with no block reloads block 0, harmlessly, and adds nothing).
  uint4 bw[4][2];
  linear_dev::mma_load_weights(bw, wrow, min(int64_t(phase), nkb - 1) * k_block, 16);
  for (int64_t kb = phase; kb < nkb; kb += k_phases) {
    const int64_t k0 = kb * k_block;
    uint4 next[4][2];
    linear_dev::mma_load_weights(next, wrow, (kb + k_phases < nkb ? kb + k_phases : kb) * k_block, 16);
    uint4 ax[2];
    ax[0] = __ldg(reinterpret_cast<const uint4*>(xrow + k0));
    ax[1] = __ldg(reinterpret_cast<const uint4*>(xrow + k0 + 16));
    float part[4][4];
    linear_dev::mma_block<false>(part, ax, ax, bw);
    const float sc = __ldg(xs + kb) * linear_dev::e8m0_value(__ldg(wscale + kb));
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      acc[nt][0] = fmaf(part[nt][0], sc, acc[nt][0]);
      acc[nt][1] = fmaf(part[nt][1], sc, acc[nt][1]);
      bw[nt][0] = next[nt][0];
      bw[nt][1] = next[nt][1];
    }
  }
  if (phase > 0) {
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) spill[phase - 1][nt][lane] = make_float2(acc[nt][0], acc[nt][1]);
  }
  __syncthreads();
  if (phase > 0 || g >= mt) return;
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
    for (int ph = 1; ph < k_phases; ++ph) {
      const float2 v = spill[ph - 1][nt][lane];
      acc[nt][0] += v.x;
      acc[nt][1] += v.y;
    }
    *reinterpret_cast<float2*>(p.y + (r0 + g) * p.out + n0 + nt * 8 + 2 * t) =
        make_float2(acc[nt][0], acc[nt][1]);
  }
}

// Wide tiles: 4 warps of 32 outputs (128 per CTA, one weight scale block),
// one K phase (prefill has CTAs enough), the tile's rows in m-groups of 16
// (rows g and g + 8 of each), the blocks summed in order. Rows past the tile
// repeat its last and are dropped.
constexpr int k_wide_warps = 4;
constexpr int k_wide_groups = int(linear_grouped_wide_tile_rows / 16);

__global__ void __launch_bounds__(k_wide_warps * 32) grouped_tc_wide_kernel(linear_grouped_params p) {
  const int tile = blockIdx.y;
  if (tile >= *p.n_tiles) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, t = lane & 3;
  const linear_group_weight gw = p.groups[p.tile_group[tile]];
  const int64_t r0 = p.tile_row0[tile];
  const int mt = p.tile_rows[tile], n_mg = (mt + 15) / 16;
  const int64_t n0 = int64_t(blockIdx.x) * 128 + warp * 32;  // this warp's 32 outputs
  const int64_t in = p.in, nkb = in / k_block;
  const uint8_t* wrow[4];
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
    wrow[nt] = static_cast<const uint8_t*>(gw.w) + (n0 + nt * 8 + g) * in + t * 32;
  const uint8_t* wscale = gw.w_scale + (n0 / k_block) * nkb;
  float acc[k_wide_groups][4][4] = {};
  uint4 bw[4][2];
  linear_dev::mma_load_weights(bw, wrow, 0, 16);
  for (int64_t kb = 0; kb < nkb; ++kb) {
    const int64_t k0 = kb * k_block;
    uint4 next[4][2];
    linear_dev::mma_load_weights(next, wrow, (kb + 1 < nkb ? kb + 1 : kb) * k_block, 16);
    const float ws = linear_dev::e8m0_value(__ldg(wscale + kb));
#pragma unroll
    for (int j = 0; j < k_wide_groups; ++j) {
      if (j >= n_mg) break;
      const int64_t lo = r0 + min(16 * j + g, mt - 1), hi = r0 + min(16 * j + 8 + g, mt - 1);
      const uint8_t* xlo = p.x_codes + lo * in + t * 32 + k0;
      const uint8_t* xhi = p.x_codes + hi * in + t * 32 + k0;
      const uint4 alo[2] = {__ldg(reinterpret_cast<const uint4*>(xlo)),
                            __ldg(reinterpret_cast<const uint4*>(xlo + 16))};
      const uint4 ahi[2] = {__ldg(reinterpret_cast<const uint4*>(xhi)),
                            __ldg(reinterpret_cast<const uint4*>(xhi + 16))};
      float part[4][4];
      linear_dev::mma_block<true>(part, alo, ahi, bw);
      const float slo = __ldg(p.x_scales + lo * nkb + kb) * ws, shi = __ldg(p.x_scales + hi * nkb + kb) * ws;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        acc[j][nt][0] = fmaf(part[nt][0], slo, acc[j][nt][0]);
        acc[j][nt][1] = fmaf(part[nt][1], slo, acc[j][nt][1]);
        acc[j][nt][2] = fmaf(part[nt][2], shi, acc[j][nt][2]);
        acc[j][nt][3] = fmaf(part[nt][3], shi, acc[j][nt][3]);
      }
    }
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      bw[nt][0] = next[nt][0];
      bw[nt][1] = next[nt][1];
    }
  }
#pragma unroll
  for (int j = 0; j < k_wide_groups; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = 16 * j + 8 * h + g;
      if (row >= mt) continue;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        *reinterpret_cast<float2*>(p.y + (r0 + row) * p.out + n0 + nt * 8 + 2 * t) =
            make_float2(acc[j][nt][2 * h], acc[j][nt][2 * h + 1]);
      }
    }
  }
}

}  // namespace

status linear_grouped_tc_cuda(const linear_grouped_params& p, CUstream_st* stream) {
  if (!p.x_codes || !p.x_scales || !p.y || !p.groups || !p.tile_group || !p.tile_row0 || !p.tile_rows ||
      !p.n_tiles) {
    return invalid_argument("linear_grouped_tc_cuda: null pointer");
  }
  if (p.in <= 0 || p.out <= 0 || p.n_rows < 0 || p.n_groups < 0 || p.max_tiles < 0) {
    return invalid_argument("linear_grouped_tc_cuda: bad sizes in=%lld out=%lld n_rows=%lld", (long long)p.in,
                            (long long)p.out, (long long)p.n_rows);
  }
  if (p.in % k_block != 0 || p.out % 128 != 0) {
    return unimplemented(
        "linear_grouped_tc_cuda: needs in %% 128 == 0 and out %% 128 == 0 (in=%lld out=%lld)",
        (long long)p.in, (long long)p.out);
  }
  if (p.out / 128 > INT_MAX || p.max_tiles > 65535) {
    return invalid_argument("linear_grouped_tc_cuda: out=%lld / max_tiles=%lld exceed the grid",
                            (long long)p.out, (long long)p.max_tiles);
  }
  if (p.max_tile_rows < 1 || p.max_tile_rows > linear_grouped_wide_tile_rows) {
    return invalid_argument("linear_grouped_tc_cuda: max_tile_rows=%lld outside [1, %lld]",
                            (long long)p.max_tile_rows, (long long)linear_grouped_wide_tile_rows);
  }
  if (p.max_tiles == 0) return {};
  if (reinterpret_cast<uintptr_t>(p.x_codes) % 16 != 0) {
    return invalid_argument("linear_grouped_tc_cuda: x_codes must be 16-byte aligned");
  }
  const dim3 grid{unsigned(p.out / 128), unsigned(p.max_tiles)};
  cudaError_t e = cudaSuccess;
  if (p.w_mxfp4) {
    e = launch_grouped_fp4(p, grid, stream);
  } else if (p.max_tile_rows > linear_grouped_tile_rows) {
    grouped_tc_wide_kernel<<<grid, k_wide_warps * 32, 0, stream>>>(p);
  } else {
    const dim3 narrow{grid.x * unsigned(128 / k_narrow_outs), grid.y};  // grid.x counts 128 outputs
    grouped_tc_kernel<<<narrow, k_warps * 32, 0, stream>>>(p);
  }
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e != cudaSuccess) return internal_error("linear_grouped_tc_cuda: %s", cudaGetErrorString(e));
  return {};
}

}  // namespace hart
