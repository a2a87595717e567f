// FP8 weights on unquantized fp32 inputs (wo_a: the reference applies the
// e4m3 values to the attention output as it is) on tensor cores. The
// CUDA-core dot pays its FMAs per row, so from a few rows it falls far below
// the weight stream (wo_a at 32 rows: ~290 us per layer for 33.5 MB).
//
// Every product stays exact: the e4m3 codes widen to bf16 exactly, each fp32
// input splits into three bf16 terms that sum to it exactly (linear_dev::split3),
// and m16n8k16 bf16 MMAs accumulate in fp32 per 128-channel block, which is
// then scaled by the block's power-of-two weight scale. Tiles as in
// linear_bf16w's tensor-core path: a CTA of 4 warps takes 128 output rows (one
// scale block) and 16 input rows, each warp 32 outputs; per 64 channels a lane
// multiplies 16 contiguous channels of its weight rows and input rows (the k
// index permuted identically for both operands). The next block's weights load
// while one multiplies. Grouped rows (x_group_rows) read their group's slice of x.
// Layers with fewer output tiles than SMs (wo_a below 48 rows) split K as
// linear_fp8_tc does.
#include "kernels/linear/linear.h"
#include "kernels/linear/linear_fp8_device.cuh"
#include "kernels/linear/linear_impl.h"

#include <climits>

namespace hart {
namespace {

constexpr int k_warps = 4;
constexpr int64_t k_block = k_linear_fp8_block;

// A lane's 16 codes of one weight row as 8 words of two bf16 (exact).
__device__ __forceinline__ void widen16(uint4 c, uint32_t (&w)[8]) {
  const uint32_t u[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float f[4];
    linear_dev::fp8x4_to_float(u[i], f);
    w[2 * i] = linear_dev::bf16x2(f[0], f[1]);
    w[2 * i + 1] = linear_dev::bf16x2(f[2], f[3]);
  }
}

__global__ void __launch_bounds__(k_warps * 32)
    fp8_raw_tc_kernel(linear_fp8_params p, int64_t xs, int64_t ys, linear_dev::split_grid grid,
                      float* __restrict__ partials, int* __restrict__ arrivals) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, t = lane & 3;
  int64_t ob, split, rt;
  grid.locate(ob, split, rt);
  const int64_t r0 = rt * 16;
  const int64_t n0 = ob * 128 + warp * 32, in = p.in, nkb = in / k_block;
  const int64_t kb0 = split * grid.units_per_split, kb1 = min(nkb, kb0 + grid.units_per_split);
  const float* x = p.x + (p.x_group_rows ? ob * 128 / p.x_group_rows * p.x_group_stride : 0);
  const uint8_t* wrow[4];
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) wrow[nt] = p.w + (n0 + nt * 8 + g) * in + t * 16;
  const float* xrow[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) xrow[h] = x + min(r0 + g + 8 * h, p.n_rows - 1) * xs + t * 16;
  const uint8_t* wscale = p.w_scale + ob * nkb;
  float acc[1][4][4] = {};
  uint4 cur[4][2];  // [n-tile][64-channel half of the block]
  linear_dev::mma_load_weights(cur, wrow, kb0 * k_block, 64);
  for (int64_t kb = kb0; kb < kb1; ++kb) {
    const int64_t kn = (kb + 1 < kb1 ? kb + 1 : kb) * k_block;
    uint4 next[4][2];
    linear_dev::mma_load_weights(next, wrow, kn, 64);
    float part[4][4] = {};
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      uint32_t bw[4][8];
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) widen16(cur[nt][half], bw[nt]);
      const int64_t k = kb * k_block + half * 64;
      linear_dev::mma_bf16x3_chunk(part, xrow[0] + k, xrow[1] + k, bw);
    }
    const float sw = linear_dev::e8m0_value(__ldg(wscale + kb));
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[0][nt][i] = fmaf(part[nt][i], sw, acc[0][nt][i]);
      cur[nt][0] = next[nt][0];
      cur[nt][1] = next[nt][1];
    }
  }
  if (grid.splits > 1 &&
      !linear_dev::split_k_gather(acc, partials, arrivals, ob * grid.row_tiles + rt, grid.splits, split)) {
    return;
  }
  linear_dev::store_mma_tile(acc[0], p.y, ys, r0, n0, p.n_rows, p.accumulate);
}

}  // namespace

bool linear_fp8_raw_tc_supported(const linear_fp8_params& p) {
  const int64_t xs = p.x_stride ? p.x_stride : p.in;
  return !p.quantize_input && p.w_scale_row_offset == 0 && p.in % k_block == 0 && p.out % 128 == 0 &&
         (p.x_group_rows == 0 || (p.x_group_rows % 128 == 0 && p.x_group_stride % 4 == 0)) && xs % 4 == 0 &&
         reinterpret_cast<uintptr_t>(p.w) % 16 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0;
}

status linear_fp8_raw_tc_cuda(const linear_fp8_params& p, linear_cuda_context& ctx, CUstream_st* stream) {
  if (!p.x || !p.w || !p.w_scale || !p.y) return invalid_argument("linear_fp8_raw_tc_cuda: null pointer");
  if (p.n_rows < 0 || p.in <= 0 || p.out <= 0) {
    return invalid_argument("linear_fp8_raw_tc_cuda: bad sizes n_rows=%lld in=%lld out=%lld",
                            (long long)p.n_rows, (long long)p.in, (long long)p.out);
  }
  if (!linear_fp8_raw_tc_supported(p)) {
    return unimplemented(
        "linear_fp8_raw_tc_cuda: needs unquantized inputs, in %% 128 == 0, out %% 128 == 0, groups of "
        "128k rows and 16-byte aligned rows (in=%lld out=%lld)",
        (long long)p.in, (long long)p.out);
  }
  const int64_t xs = p.x_stride ? p.x_stride : p.in, ys = p.y_stride ? p.y_stride : p.out;
  if (xs < p.in || ys < p.out)
    return invalid_argument("linear_fp8_raw_tc_cuda: row strides smaller than the rows");
  if (p.n_rows == 0) return {};
  if (p.out / 128 * ((p.n_rows + 15) / 16) > INT_MAX / 64) {
    return invalid_argument("linear_fp8_raw_tc_cuda: out=%lld x n_rows=%lld over the grid", (long long)p.out,
                            (long long)p.n_rows);
  }
  const linear_cuda_context::impl& s = ctx.state();
  const linear_dev::split_grid g = linear_dev::plan_split_grid(
      p.out / 128, (p.n_rows + 15) / 16, p.in / k_block, 1, s.tc_partial_floats, s.tc_arrivals_count);
  fp8_raw_tc_kernel<<<unsigned(g.ctas()), k_warps * 32, 0, stream>>>(p, xs, ys, g, s.tc_partials,
                                                                     s.tc_arrivals);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return internal_error("linear_fp8_raw_tc_cuda: %s", cudaGetErrorString(e));
  return {};
}

}  // namespace hart
