// CUDA linear with bf16 weights and fp32 inputs (the checkpoint's bf16
// tensors kept at their size: LM head, compressors, router, indexer weights):
// fp32 accumulation and output, the weights widened exactly.
//   <= k_gemv_max_rows rows (decode): one warp per R output rows streams the
//   weights once; the row tiles of one weight block are adjacent in the grid,
//   so their repeated weight reads come from L2. From 2 rows they run on
//   tensor cores instead: x split exactly into three bf16 terms, bf16 MMAs
//   with fp32 accumulation, K split over CTAs for layers with few outputs.
//   more rows (prefill): chunks of output rows widened to fp32 into the
//   context's buffer and multiplied by cuBLASLt (fp32 compute), where a GEMV
//   would be bound by its input loads.
#include "kernels/linear/linear.h"
#include "kernels/linear/linear_fp8_device.cuh"
#include "kernels/linear/linear_impl.h"

#include <climits>
#include <cuda_bf16.h>

namespace hart {
namespace {

constexpr int k_warps = 8;
constexpr int64_t k_gemv_max_rows = 64;

__device__ __forceinline__ void bf16x8_to_float(uint4 u, float* f) {
  const uint32_t v[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(v[i] << 16);
    f[2 * i + 1] = __uint_as_float(v[i] & 0xffff0000u);
  }
}

// The 16 weights at k of each of the R rows times the mt <= MT input rows at
// x, added into acc[r][m]: the step bf16_dot_rows repeats along k.
template <int MT, int R>
__device__ __forceinline__ void bf16_fma_step(const float (&wf)[R][16], const float* __restrict__ x,
                                              int64_t xs, int64_t k, int mt, float (&acc)[R][MT]) {
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    if (m >= mt) break;
    const float4* xr = reinterpret_cast<const float4*>(x + m * xs + k);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float4 xv = __ldg(xr + j);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        acc[r][m] = fmaf(wf[r][4 * j + 0], xv.x, acc[r][m]);
        acc[r][m] = fmaf(wf[r][4 * j + 1], xv.y, acc[r][m]);
        acc[r][m] = fmaf(wf[r][4 * j + 2], xv.z, acc[r][m]);
        acc[r][m] = fmaf(wf[r][4 * j + 3], xv.w, acc[r][m]);
      }
    }
  }
}

// One warp's partial sums of the R weight rows `row` against the mt <= MT
// input rows at x (row stride xs). VEC: in % 16 == 0, rows 16-byte aligned,
// x 16-byte aligned with xs % 4 == 0 (each lane takes 16 channels per step).
// With few accumulators the weight loads of P steps are issued before the
// first is used (one row's 8 KB took 16 dependent loads per lane: ~8 µs for
// a compressor at batch 1); the sums keep their order.
template <int MT, int R, bool VEC>
__device__ __forceinline__ void bf16_dot_rows(const uint16_t* const* row, const float* __restrict__ x,
                                              int64_t xs, int64_t in, int mt, int lane, float (&acc)[R][MT]) {
  if (VEC) {
    constexpr int64_t step = 32 * 16;
    constexpr int P = R == 1 ? 4 : (R == 2 && MT <= 2) ? 2 : 1;  // more spills registers
    int64_t k = int64_t(lane) * 16;
    if constexpr (P > 1) {
      for (; k + (P - 1) * step < in; k += P * step) {
        uint4 raw[P][R][2];
#pragma unroll
        for (int u = 0; u < P; ++u) {
#pragma unroll
          for (int r = 0; r < R; ++r) {
            const uint4* wr = reinterpret_cast<const uint4*>(row[r] + k + u * step);
            raw[u][r][0] = __ldg(wr);
            raw[u][r][1] = __ldg(wr + 1);
          }
        }
#pragma unroll
        for (int u = 0; u < P; ++u) {
          float wf[R][16];
#pragma unroll
          for (int r = 0; r < R; ++r) {
            bf16x8_to_float(raw[u][r][0], wf[r]);
            bf16x8_to_float(raw[u][r][1], wf[r] + 8);
          }
          bf16_fma_step<MT, R>(wf, x, xs, k + u * step, mt, acc);
        }
      }
    }
    for (; k < in; k += step) {
      float wf[R][16];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const uint4* wr = reinterpret_cast<const uint4*>(row[r] + k);
        bf16x8_to_float(__ldg(wr), wf[r]);
        bf16x8_to_float(__ldg(wr + 1), wf[r] + 8);
      }
      bf16_fma_step<MT, R>(wf, x, xs, k, mt, acc);
    }
  } else {
    for (int64_t k = lane; k < in; k += 32) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float wf = __uint_as_float(uint32_t(__ldg(row[r] + k)) << 16);
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          if (m >= mt) break;
          acc[r][m] = fmaf(wf, x[m * xs + k], acc[r][m]);
        }
      }
    }
  }
}

// Block b: row tile b % row_tiles of output block b / row_tiles (k_warps · R rows).
template <int MT, int R, bool VEC>
__global__ void __launch_bounds__(k_warps * 32)
    bf16w_gemv_kernel(linear_bf16w_params p, int64_t xs, int64_t ys, int64_t row_tiles) {
  const int64_t tile = blockIdx.x % row_tiles, ob = blockIdx.x / row_tiles;
  const int lane = threadIdx.x % 32;
  const int64_t o0 = (ob * k_warps + threadIdx.x / 32) * R;
  if (o0 >= p.out) return;
  const int64_t r0 = tile * MT;
  const int mt = int(min(int64_t(MT), p.n_rows - r0));
  const int nr = int(min(int64_t(R), p.out - o0));
  const uint16_t* row[R];
  float acc[R][MT];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    row[r] = p.w + (o0 + (r < nr ? r : nr - 1)) * p.in;
#pragma unroll
    for (int m = 0; m < MT; ++m) acc[r][m] = 0.0f;
  }
  bf16_dot_rows<MT, R, VEC>(row, p.x + r0 * xs, xs, p.in, mt, lane, acc);
  linear_dev::warp_sum(acc);
  if (lane == 0) linear_dev::store_rows(acc, p.y, ys, r0, o0, nr, mt, p.accumulate);
}

template <int MT, int R, bool VEC>
void launch_gemv(const linear_bf16w_params& p, int64_t xs, int64_t ys, cudaStream_t stream) {
  const int64_t row_tiles = (p.n_rows + MT - 1) / MT;
  const int64_t out_blocks = (p.out + k_warps * R - 1) / (k_warps * R);
  bf16w_gemv_kernel<MT, R, VEC>
      <<<unsigned(out_blocks * row_tiles), k_warps * 32, 0, stream>>>(p, xs, ys, row_tiles);
}

template <int MT>
void gemv(const linear_bf16w_params& p, int64_t xs, int64_t ys, cudaStream_t stream) {
  const bool vec = p.in % 16 == 0 && reinterpret_cast<uintptr_t>(p.w) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && xs % 4 == 0;
  if (!vec) return launch_gemv<MT, 1, false>(p, xs, ys, stream);
  const int64_t row_tiles = (p.n_rows + MT - 1) / MT;
  // Four output rows per warp at every MT (no prefetch arrays here, so 8 rows
  // of accumulators fit): each x float4 then feeds 4 rows' FMAs, which keeps
  // the L1 from bounding the larger row tiles.
  switch (linear_dev::rows_per_warp(p.out, row_tiles, 4, k_warps, 2 * cuda_sm_count())) {
    case 4:
      return launch_gemv<MT, 4, true>(p, xs, ys, stream);
    case 2:
      return launch_gemv<MT, 2, true>(p, xs, ys, stream);
    default:
      return launch_gemv<MT, 1, true>(p, xs, ys, stream);
  }
}

// Tensor cores for 2..k_gemv_max_rows rows: a CTA of 4 warps takes 128
// outputs and 16 input rows, each warp 32 outputs; per 64 channels a lane loads
// 16 contiguous bf16 of its weight row and 16 fp32 of its two input rows, split
// into bf16 hi / mid / lo terms, and issues three m16n8k16 MMAs per k-step (the
// k index permuted the same way for both operands, as in linear_fp8_tc). Every
// product is exact; the sums are the MMA's fp32 accumulation, the next chunk's
// weights loading while one multiplies. Layers with fewer output tiles than
// SMs (compressors, router) split K over CTAs as linear_fp8_tc does.
constexpr int k_tc_warps = 4;
constexpr int64_t k_tc_chunk = 64;

__global__ void __launch_bounds__(k_tc_warps * 32)
    bf16w_tc_kernel(linear_bf16w_params p, int64_t xs, int64_t ys, linear_dev::split_grid grid,
                    float* __restrict__ partials, int* __restrict__ arrivals) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, t = lane & 3;
  int64_t ob, split, rt;
  grid.locate(ob, split, rt);
  const int64_t n0 = ob * 128 + warp * 32;
  const bool live = n0 < p.out;  // out % 32 == 0: whole warps; the others only join the split's barriers
  const int64_t r0 = rt * 16, in = p.in, n_chunks = in / k_tc_chunk;
  const int64_t c0 = split * grid.units_per_split, c1 = min(n_chunks, c0 + grid.units_per_split);
  const uint16_t* wrow[4];
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) wrow[nt] = p.w + ((live ? n0 : 0) + nt * 8 + g) * in + t * 16;
  const float* xrow[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) xrow[h] = p.x + min(r0 + g + 8 * h, p.n_rows - 1) * xs + t * 16;
  float acc[1][4][4] = {};
  uint4 bw[4][2];
  linear_dev::mma_load_weights(bw, wrow, c0 * k_tc_chunk, 8);
  for (int64_t c = c0; c < c1; ++c) {
    const int64_t kn = (c + 1 < c1 ? c + 1 : c) * k_tc_chunk;
    uint4 next[4][2];
    linear_dev::mma_load_weights(next, wrow, kn, 8);
    uint32_t w[4][8];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
      for (int i = 0; i < 8; ++i) w[nt][i] = linear_dev::mma_word(bw[nt], i);
    }
    linear_dev::mma_bf16x3_chunk(acc[0], xrow[0] + c * k_tc_chunk, xrow[1] + c * k_tc_chunk, w);
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) bw[nt][0] = next[nt][0], bw[nt][1] = next[nt][1];
  }
  if (grid.splits > 1 &&
      !linear_dev::split_k_gather(acc, partials, arrivals, ob * grid.row_tiles + rt, grid.splits, split)) {
    return;
  }
  if (live) linear_dev::store_mma_tile(acc[0], p.y, ys, r0, n0, p.n_rows, p.accumulate);
}

// The tensor-core path needs whole warps of outputs, 64-channel chunks and
// 16-byte aligned rows; layers with fewer output tiles than SMs split K.
bool tc_fits(const linear_bf16w_params& p, int64_t xs) {
  const int64_t ctas = (p.out + 127) / 128 * ((p.n_rows + 15) / 16);
  return p.n_rows >= 2 && p.out % 32 == 0 && p.in % k_tc_chunk == 0 && xs % 4 == 0 &&
         reinterpret_cast<uintptr_t>(p.w) % 16 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0 &&
         ctas <= INT_MAX / 64;
}

__global__ void widen_kernel(const uint16_t* __restrict__ w, float* __restrict__ out, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = __uint_as_float(uint32_t(w[i]) << 16);
  }
}

}  // namespace

status linear_bf16w_cuda(const linear_bf16w_params& p, linear_cuda_context& ctx, CUstream_st* stream) {
  if (!p.x || !p.w || !p.y) return invalid_argument("linear_bf16w_cuda: null pointer");
  if (p.n_rows < 0 || p.in <= 0 || p.out <= 0) {
    return invalid_argument("linear_bf16w_cuda: bad sizes n_rows=%lld in=%lld out=%lld", (long long)p.n_rows,
                            (long long)p.in, (long long)p.out);
  }
  const int64_t xs = p.x_stride ? p.x_stride : p.in, ys = p.y_stride ? p.y_stride : p.out;
  if (xs < p.in || ys < p.out)
    return invalid_argument("linear_bf16w_cuda: row strides smaller than the rows");
  if (p.n_rows == 0) return {};
  const linear_cuda_context::impl& s = ctx.state();
  // One row stays on the GEMV: split-K tensor cores measured 175 us against its 123 for a b=1
  // step's 16 small layers (ncu, H200).
  if (p.n_rows <= k_gemv_max_rows && !p.row_invariant && tc_fits(p, xs)) {
    const linear_dev::split_grid g =
        linear_dev::plan_split_grid((p.out + 127) / 128, (p.n_rows + 15) / 16, p.in / k_tc_chunk, 1,
                                    s.tc_partial_floats, s.tc_arrivals_count);
    bf16w_tc_kernel<<<unsigned(g.ctas()), k_tc_warps * 32, 0, stream>>>(p, xs, ys, g, s.tc_partials,
                                                                        s.tc_arrivals);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return internal_error("linear_bf16w_cuda: %s", cudaGetErrorString(e));
    return {};
  }
  if (p.n_rows <= k_gemv_max_rows || p.row_invariant) {
    if ((p.out + k_warps - 1) / k_warps * ((p.n_rows + 7) / 8) > INT_MAX) {
      return invalid_argument("linear_bf16w_cuda: out=%lld too large", (long long)p.out);
    }
    if (p.n_rows == 1)
      gemv<1>(p, xs, ys, stream);
    else if (p.n_rows == 2)
      gemv<2>(p, xs, ys, stream);
    else if (p.n_rows <= 4)
      gemv<4>(p, xs, ys, stream);
    else
      gemv<8>(p, xs, ys, stream);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return internal_error("linear_bf16w_cuda: %s", cudaGetErrorString(e));
    return {};
  }
  const int64_t chunk = s.widen_floats / p.in;
  if (chunk == 0) {
    return resource_exhausted("linear_bf16w_cuda: in=%lld over the context's %lld-float widening buffer",
                              (long long)p.in, (long long)s.widen_floats);
  }
  for (int64_t o = 0; o < p.out; o += chunk) {
    const int64_t c = std::min(chunk, p.out - o);
    widen_kernel<<<unsigned(std::min<int64_t>((c * p.in + 255) / 256, 4096)), 256, 0, stream>>>(
        p.w + o * p.in, s.widen, c * p.in);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return internal_error("linear_bf16w_cuda: widen: %s", cudaGetErrorString(e));
    linear_params f{p.x, s.widen, p.y + o, p.n_rows, p.in, c, xs, ys, p.accumulate};
    HART_RETURN_IF_ERROR(linear_cuda(f, ctx, stream));
  }
  return {};
}

}  // namespace hart
