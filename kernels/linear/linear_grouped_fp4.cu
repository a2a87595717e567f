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
// reference's fp4_gemm sums per 32. Narrow tiles (decode, <= 8 rows): 4 warps
// = 32 outputs × 4 K phases, the phases' sums added in phase order
// (linear_grouped_tc.cu's FP8 sums, in CTAs a quarter as wide); wide tiles (prefill, up to
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
// Narrow tiles: one group of 32 outputs per CTA (4 warps at 127 registers: 4 CTAs per SM).
// 4 groups (one 512-thread CTA per SM) left a batch-1 w1 (6 experts) 96 CTAs for 132 SMs;
// measured, 1.3x slower at every batch (perf-notes M1 v3).
constexpr int k_groups = 1;
constexpr int k_warps = k_groups * k_phases;
constexpr int k_narrow_outs = 32 * k_groups;
constexpr int k_wide_warps = 4;
constexpr int k_wide_groups = int(linear_grouped_wide_tile_rows / 16);
// The wide kernel's shared-memory stages: one 128-channel block each, of the
// CTA's 128 outputs' pairs [128][64 B] and scale words [128], and the tile's
// activation codes [64][k_x_pitch] and scales [64]. A staged row of codes is
// 128 + 32 bytes, so a half-warp's 8-byte reads (rows g, pieces t) fall on 32
// distinct banks. Three stages (57.6 KB): three CTAs per SM.
constexpr int k_wide_outs = 128;
constexpr int k_wide_rows = int(linear_grouped_wide_tile_rows);
constexpr int k_x_pitch = 160;
constexpr int k_stage_w = 0;
constexpr int k_stage_ws = k_stage_w + k_wide_outs * 64;
constexpr int k_stage_x = k_stage_ws + k_wide_outs * 4;
constexpr int k_stage_xs = k_stage_x + k_wide_rows * k_x_pitch;
constexpr int k_stage_bytes = k_stage_xs + k_wide_rows * 4;
constexpr int k_wide_stages = 3;
constexpr int k_wide_ctas_per_sm = 3;
constexpr int k_wide_smem = k_wide_stages * k_stage_bytes;

// Even / odd codes of a word of 8 e2m1 (low nibble first) as 4 e4m3 each, 2^-6 of their values.
__device__ __forceinline__ uint32_t fp4_even(uint32_t w) {
  return ((w << 4) & 0x80808080u) | ((w << 2) & 0x1c1c1c1cu);
}
__device__ __forceinline__ uint32_t fp4_odd(uint32_t w) {
  return (w & 0x80808080u) | ((w >> 2) & 0x1c1c1c1cu);
}

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

// The same from shared memory (the wide kernel's staged rows).
__device__ __forceinline__ void x_pair_shared(const uint8_t* p, uint32_t& even, uint32_t& odd) {
  const uint2 v = *reinterpret_cast<const uint2*>(p);
  even = __byte_perm(v.x, v.y, 0x6420);
  odd = __byte_perm(v.x, v.y, 0x7531);
}

__device__ __forceinline__ uint32_t shared_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared_addr(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(shared_addr(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// A lane's 8 codes of each of a 128-channel block's four 32-blocks (one 16-byte load).
__device__ __forceinline__ void words(uint32_t (&w)[k_sub], const uint8_t* p) {
  const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
  w[0] = v.x;
  w[1] = v.y;
  w[2] = v.z;
  w[3] = v.w;
}

// Narrow tiles (decode): the weights are the MMA's A operand, so the 16 output
// rows of an m16 tile are the rows whose scales a lane applies (its C rows g
// and g + 8 are the A rows it loaded): each lane reads the scale words of its
// own four rows, and one MMA serves all of a tile's <= 8 tokens as the n8
// columns. A warp takes 32 output rows (two m16 tiles); per 128-channel block
// each 32-block's partial times 2^(scale - 127) is added into a block sum,
// which is then scaled by s_x · 2^6 into the accumulator.
__global__ void __launch_bounds__(k_warps * 32, 4) grouped_fp4_kernel(linear_grouped_params p) {
  __shared__ float4
      spill[k_phases - 1][k_groups][2][32];  // later phases' sums, added by phase 0 in phase order
  const int tile = blockIdx.y;
  if (tile >= *p.n_tiles) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, ng = warp % k_groups, phase = warp / k_groups;
  const int g = lane >> 2, t = lane & 3;
  const linear_group_weight gw = p.groups[p.tile_group[tile]];
  const int64_t r0 = p.tile_row0[tile];
  const int mt = p.tile_rows[tile];
  const int64_t n0 = int64_t(blockIdx.x) * k_narrow_outs + ng * 32;  // this warp's 32 outputs
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
        linear_dev::mma_e4m3(part, fp4_even(cur.w[mi][0][j]), fp4_even(cur.w[mi][1][j]),
                             fp4_odd(cur.w[mi][0][j]), fp4_odd(cur.w[mi][1][j]), b0, b1);
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

// Wide tiles (prefill): a CTA takes 128 outputs of one tile's expert and its
// <= 64 rows, block kb's weights (8 KB of pairs, 512 B of scales) and the
// tile's activation codes and scales staged in shared memory by cp.async,
// k_wide_stages blocks in flight, so every byte is read from global memory
// once per CTA (v1 read the activations once per warp, straight from L2, and
// waited on each read: 4 warps at 204 registers held too few bytes in flight).
// Each warp widens its 32 outputs' codes once per 32-block and runs them
// against every m-group of 16 rows; the sums are v1's, in v1's order.
__global__ void __launch_bounds__(k_wide_warps * 32, k_wide_ctas_per_sm)
    grouped_fp4_wide_kernel(linear_grouped_params p) {
  extern __shared__ __align__(16) uint8_t stages[];
  const int tile = blockIdx.y;
  if (tile >= *p.n_tiles) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, t = lane & 3;
  const linear_group_weight gw = p.groups[p.tile_group[tile]];
  const int64_t r0 = p.tile_row0[tile];
  const int mt = p.tile_rows[tile], n_mg = (mt + 15) / 16, x_rows = 16 * n_mg;
  const int64_t c0 = int64_t(blockIdx.x) * k_wide_outs;  // the CTA's first output
  const int64_t in = p.in, nkb = in / k_block, scale_row = in / 32;
  const uint8_t* w_rows = static_cast<const uint8_t*>(gw.w) + c0 * (in / 2);
  const uint8_t* s_rows = gw.w_scale + c0 * scale_row;
  // Block kb into stage st. Rows past the tile's last repeat it (their sums are dropped).
  auto issue = [&](int64_t kb, int st) {
    uint8_t* s = stages + st * k_stage_bytes;
    for (int i = threadIdx.x; i < k_wide_outs * 4; i += blockDim.x) {
      cp_async16(s + k_stage_w + (i / 4) * 64 + (i % 4) * 16,
                 w_rows + (i / 4) * (in / 2) + kb * 64 + (i % 4) * 16);
    }
    for (int r = threadIdx.x; r < k_wide_outs; r += blockDim.x) {
      cp_async4(s + k_stage_ws + r * 4, s_rows + r * scale_row + kb * k_sub);
    }
    for (int i = threadIdx.x; i < x_rows * 8; i += blockDim.x) {
      const int64_t row = r0 + min(i / 8, mt - 1);
      cp_async16(s + k_stage_x + (i / 8) * k_x_pitch + (i % 8) * 16,
                 p.x_codes + row * in + kb * k_block + (i % 8) * 16);
    }
    for (int r = threadIdx.x; r < x_rows; r += blockDim.x) {
      cp_async4(s + k_stage_xs + r * 4, p.x_scales + (r0 + min(r, mt - 1)) * nkb + kb);
    }
  };
  float acc[k_wide_groups][4][4] = {};
  for (int st = 0; st < k_wide_stages - 1; ++st) {
    if (st < nkb) issue(st, st);
    cp_async_commit();
  }
  for (int64_t kb = 0; kb < nkb; ++kb) {
    cp_async_wait<k_wide_stages - 2>();  // block kb's group has landed (this thread's copies)
    __syncthreads();                     // everyone's, and block kb - 1's stage is free again
    if (kb + k_wide_stages - 1 < nkb)
      issue(kb + k_wide_stages - 1, int((kb + k_wide_stages - 1) % k_wide_stages));
    cp_async_commit();
    const uint8_t* s = stages + (kb % k_wide_stages) * k_stage_bytes;
    const float* xs = reinterpret_cast<const float*>(s + k_stage_xs);
    uint32_t w[4][k_sub], sc[4][2];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int r = warp * 32 + nt * 8;
      const uint4 v = *reinterpret_cast<const uint4*>(s + k_stage_w + (r + g) * 64 + t * 16);
      w[nt][0] = v.x;
      w[nt][1] = v.y;
      w[nt][2] = v.z;
      w[nt][3] = v.w;
      sc[nt][0] = *reinterpret_cast<const uint32_t*>(s + k_stage_ws + (r + 2 * t) * 4);
      sc[nt][1] = *reinterpret_cast<const uint32_t*>(s + k_stage_ws + (r + 2 * t + 1) * 4);
    }
#pragma unroll
    for (int j = 0; j < k_sub; ++j) {
      uint32_t b0[4], b1[4];
      float ws[4][2];
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        b0[nt] = fp4_even(w[nt][j]);
        b1[nt] = fp4_odd(w[nt][j]);
        ws[nt][0] = e8m0_byte(sc[nt][0], j);
        ws[nt][1] = e8m0_byte(sc[nt][1], j);
      }
#pragma unroll
      for (int m = 0; m < k_wide_groups; ++m) {
        if (m >= n_mg) break;
        const uint8_t* xlo = s + k_stage_x + (16 * m + g) * k_x_pitch + j * 32 + t * 8;
        uint32_t a0, a1, a2, a3;
        x_pair_shared(xlo, a0, a2);
        x_pair_shared(xlo + 8 * k_x_pitch, a1, a3);
        // 2^6: the widened codes' scale.
        const float slo = xs[16 * m + g] * 64.0f, shi = xs[16 * m + 8 + g] * 64.0f;
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
  }
  const int64_t n0 = c0 + warp * 32;
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

cudaError_t launch_grouped_fp4(const linear_grouped_params& p, dim3 grid, cudaStream_t stream) {
  if (p.max_tile_rows > linear_grouped_tile_rows) {
    // Over the default 48 KB: set on every launch, since it is per device.
    const cudaError_t e = cudaFuncSetAttribute(grouped_fp4_wide_kernel,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, k_wide_smem);
    if (e != cudaSuccess) return e;
    grouped_fp4_wide_kernel<<<grid, k_wide_warps * 32, k_wide_smem, stream>>>(p);
  } else {
    const dim3 narrow{grid.x * unsigned(128 / k_narrow_outs), grid.y};  // grid.x counts 128 outputs
    grouped_fp4_kernel<<<narrow, k_warps * 32, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

}  // namespace hart
