// The FP8 linear on tensor cores (perf target G1 at more than a few rows):
// the rows are quantized to e4m3 codes + one power-of-two scale per 128
// channels (the very values linear_fp8_cuda multiplies), and each warp runs
// mma.sync m16n8k32 e4m3 x e4m3 -> fp32 over 16-row x 8-output tiles. A
// 128-channel block's four k-steps accumulate from zero in the MMA, then the
// block's partial is scaled by s_x · s_w (both powers of two) and added to the
// fp32 result, so the block scales stay exact as in DeepGEMM's promotion.
//
// Tiles: a CTA of 4 warps takes 128 output rows (one weight scale block) and
// 16 · MT input rows (MT = 1 or 2); each warp 32 outputs (4 n-tiles) x MT m-tiles. Per
// 128-channel block a lane loads 32 contiguous bytes of its weight row and of
// its two input rows (rows g and g + 8 of each m-tile): the MMA's k index is
// permuted the same way for both operands (lane group t's bytes t·32 + 8s + j
// are k-step s's channels 4t + j and 16 + 4t + j), which a dot product allows.
// Full-width coalesced loads, no shared memory, the next block's weights in
// flight while this one multiplies; the row tiles of one weight block are
// adjacent in the grid, so the weights come from DRAM about once. Layers with
// fewer output tiles than SMs split K over CTAs (plan_split_grid), the last CTA of a
// tile adding the partials in a fixed order.
#include "kernels/linear/linear.h"
#include "kernels/linear/linear_fp8_device.cuh"
#include "kernels/linear/linear_impl.h"

#include <climits>

#include <algorithm>

namespace hart {
namespace {

constexpr int k_warps = 4;
constexpr int64_t k_block = k_linear_fp8_block;

template <int MT>
__global__ void __launch_bounds__(k_warps * 32)
    fp8_tc_kernel(linear_fp8_params p, const uint8_t* __restrict__ xq, const float* __restrict__ xs,
                  int64_t ys, linear_dev::split_grid grid, float* __restrict__ partials,
                  int* __restrict__ arrivals) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, t = lane & 3;
  int64_t ob, split, rt;
  grid.locate(ob, split, rt);
  const int64_t n0 = ob * 128 + warp * 32;  // this warp's 32 outputs
  const int64_t r0 = rt * 16 * MT;
  const int64_t in = p.in, nkb = in / k_block;
  const int64_t kb0 = split * grid.units_per_split, kb1 = min(nkb, kb0 + grid.units_per_split);
  const uint8_t* wrow[4];
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) wrow[nt] = p.w + (n0 + nt * 8 + g) * in + t * 32;
  const uint8_t* xrow[MT][2];
  int64_t row[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      row[mt][h] = r0 + mt * 16 + g + 8 * h;
      xrow[mt][h] =
          xq + min(row[mt][h], p.n_rows - 1) * in + t * 32;  // rows past the end read the last, dropped
    }
  }
  const uint8_t* wscale = p.w_scale + (n0 / k_block) * nkb;
  float acc[MT][4][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.0f;
  }
  // Weights one block ahead: the next block's loads are in flight while this one multiplies.
  uint4 bw[4][2];
  linear_dev::mma_load_weights(bw, wrow, kb0 * k_block, 16);
  for (int64_t kb = kb0; kb < kb1; ++kb) {
    const int64_t k0 = kb * k_block;
    uint4 next[4][2];
    linear_dev::mma_load_weights(next, wrow, (kb + 1 < kb1 ? kb + 1 : kb) * k_block,
                                 16);  // the last reloads itself
    const float sw = linear_dev::e8m0_value(__ldg(wscale + kb));
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {  // one m-tile at a time: its inputs and partials only
      uint4 ax[2][2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        ax[h][0] = __ldg(reinterpret_cast<const uint4*>(xrow[mt][h] + k0));
        ax[h][1] = __ldg(reinterpret_cast<const uint4*>(xrow[mt][h] + k0 + 16));
      }
      float part[4][4];
      linear_dev::mma_block<true>(part, ax[0], ax[1], bw);
      const float s_lo = __ldg(xs + min(row[mt][0], p.n_rows - 1) * nkb + kb) * sw;
      const float s_hi = __ldg(xs + min(row[mt][1], p.n_rows - 1) * nkb + kb) * sw;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        acc[mt][nt][0] = fmaf(part[nt][0], s_lo, acc[mt][nt][0]);
        acc[mt][nt][1] = fmaf(part[nt][1], s_lo, acc[mt][nt][1]);
        acc[mt][nt][2] = fmaf(part[nt][2], s_hi, acc[mt][nt][2]);
        acc[mt][nt][3] = fmaf(part[nt][3], s_hi, acc[mt][nt][3]);
      }
    }
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) bw[nt][0] = next[nt][0], bw[nt][1] = next[nt][1];
  }
  if (grid.splits > 1 &&
      !linear_dev::split_k_gather(acc, partials, arrivals, ob * grid.row_tiles + rt, grid.splits, split)) {
    return;
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    linear_dev::store_mma_tile(acc[mt], p.y, ys, r0 + mt * 16, n0, p.n_rows, p.accumulate);
  }
}

template <int MT>
void launch(const linear_fp8_params& p, const uint8_t* xq, const float* xs, int64_t ys,
            const linear_cuda_context::impl& s, cudaStream_t stream) {
  const linear_dev::split_grid g =
      linear_dev::plan_split_grid(p.out / 128, (p.n_rows + 16 * MT - 1) / (16 * MT), p.in / k_block, MT,
                                  s.tc_partial_floats, s.tc_arrivals_count);
  fp8_tc_kernel<MT>
      <<<unsigned(g.ctas()), k_warps * 32, 0, stream>>>(p, xq, xs, ys, g, s.tc_partials, s.tc_arrivals);
}

}  // namespace

bool linear_fp8_tc_supported(const linear_fp8_params& p) {
  return p.quantize_input && p.x_group_rows == 0 && p.w_scale_row_offset == 0 && p.in % k_block == 0 &&
         p.out % 128 == 0 && reinterpret_cast<uintptr_t>(p.w) % 16 == 0;
}

status linear_fp8_tc_cuda(const linear_fp8_params& p, linear_cuda_context& ctx, CUstream_st* stream) {
  if (!p.x || !p.w || !p.w_scale || !p.y) return invalid_argument("linear_fp8_tc_cuda: null pointer");
  if (p.n_rows < 0 || p.in <= 0 || p.out <= 0) {
    return invalid_argument("linear_fp8_tc_cuda: bad sizes n_rows=%lld in=%lld out=%lld", (long long)p.n_rows,
                            (long long)p.in, (long long)p.out);
  }
  if (!linear_fp8_tc_supported(p)) {
    return unimplemented(
        "linear_fp8_tc_cuda: needs quantized inputs, in %% 128 == 0, out %% 128 == 0 (in=%lld out=%lld)",
        (long long)p.in, (long long)p.out);
  }
  const int64_t xs = p.x_stride ? p.x_stride : p.in, ys = p.y_stride ? p.y_stride : p.out;
  if (xs < p.in || ys < p.out)
    return invalid_argument("linear_fp8_tc_cuda: row strides smaller than the rows");
  const linear_cuda_context::impl& s = ctx.state();
  if (p.n_rows > s.max_fp8_rows || p.in > s.max_fp8_in) {
    return resource_exhausted(
        "linear_fp8_tc_cuda: n_rows=%lld in=%lld over the context's %lld x %lld fp8 buffer",
        (long long)p.n_rows, (long long)p.in, (long long)s.max_fp8_rows, (long long)s.max_fp8_in);
  }
  if (p.out / 128 * ((p.n_rows + 15) / 16) > INT_MAX) {
    return invalid_argument("linear_fp8_tc_cuda: out=%lld x n_rows=%lld over the grid", (long long)p.out,
                            (long long)p.n_rows);
  }
  if (p.n_rows == 0) return {};
  // The context's fp32 input buffer holds the codes (1 byte each) and, 16-byte
  // aligned after them, the per-block scales: 4 bytes per element cover both.
  auto* codes = reinterpret_cast<uint8_t*>(s.x_qdq);
  auto* scales = reinterpret_cast<float*>(codes + (p.n_rows * p.in + 15) / 16 * 16);
  HART_RETURN_IF_ERROR(fp8_act_quant_cuda(p.x, xs, codes, scales, p.n_rows, p.in, stream));
  if (p.n_rows <= 16)
    launch<1>(p, codes, scales, ys, s, stream);
  else
    launch<2>(p, codes, scales, ys, s, stream);  // 32-row tiles (4 would spill registers)
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return internal_error("linear_fp8_tc_cuda: %s", cudaGetErrorString(e));
  return {};
}

}  // namespace hart
