// CUDA FP8 linear (fp8 precision mode): per-row per-128 activation QDQ, then a
// CUDA-core product against e4m3 weights with 128x128 power-of-two block scales.
//
// Numerics: x' = e4m3(x/s)·s exactly as kernels/quant; each product
// e4m3(w)·x' is exact in fp32 (4+4 significant bits), the per-lane sum of 16
// products is rounded in fp32, scaled by the weight block's 2^k (exact) and
// accumulated in fp32 in an order that depends only on `in` (batch-invariant).
#include "kernels/linear/linear.h"
#include "kernels/linear/linear_fp8_device.cuh"
#include "kernels/linear/linear_impl.h"
#include "kernels/quant/quant.h"

#include <cuda_fp8.h>

#include <algorithm>

namespace hart {
namespace {

constexpr int k_block = int(k_linear_fp8_block);

// -- activation QDQ: one warp per (row, 128-channel block), 4 channels per lane --

__device__ float e4m3_qdq(float v) {
  const __nv_fp8_storage_t q = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
  return float(__half(__nv_cvt_fp8_to_halfraw(q, __NV_E4M3)));
}

// Exact ceil(log2(amax / 448)) as pow2_scale_exponent; 128 for inf/NaN.
__device__ int scale_exponent(float amax) {
  if (!(amax <= 3.402823466e38f)) return 128;
  int ea = 0, eq = 0;
  const float ma = frexpf(amax, &ea), mq = frexpf(e4m3_max, &eq);
  return ea - eq + (ma > mq ? 1 : 0);
}

// One warp's QDQ of one 128-channel block of a row (xr: its first channel, len
// <= 128 channels, 4 per lane): the kernels/quant rule. The dequantized values
// go to out[i] (global or shared memory), or with CODES the e4m3 codes to
// codes[i] and the block's scale to *scale.
template <bool CODES>
__device__ __forceinline__ void act_qdq_block(const float* __restrict__ xr, int64_t len, int lane, float* out,
                                              uint8_t* codes, float* scale) {
  float v[4];
  float amax = fp8_amax_floor;  // fmaxf drops NaN like block_amax; inf is kept
  for (int j = 0; j < 4; ++j) {
    const int64_t i = lane * 4 + j;
    v[j] = i < len ? xr[i] : 0.0f;
    amax = fmaxf(amax, fabsf(v[j]));
  }
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float s = ldexpf(1.0f, scale_exponent(amax));
  if (CODES && lane == 0) *scale = s;
  for (int j = 0; j < 4; ++j) {
    const int64_t i = lane * 4 + j;
    if (i >= len) continue;
    const float t = __fdiv_rn(v[j], s);  // NaN for NaN input and for ±inf / inf
    const float c = isnan(t) ? t : fminf(fmaxf(t, -e4m3_max), e4m3_max);  // fminf/fmaxf drop NaN
    if (CODES) {
      codes[i] = __nv_cvt_float_to_fp8(c, __NV_SATFINITE, __NV_E4M3);
    } else {
      out[i] = e4m3_qdq(c) * s;
    }
  }
}

// CODES: writes the e4m3 codes (codes[r * in + k]) and each block's scale
// (scales[r * n_blocks_k + kb], or scales[kb * n_rows + r] when block_major)
// instead of the dequantized values (out).
template <bool CODES>
__global__ void act_qdq_kernel(const float* __restrict__ x, int64_t xs, float* __restrict__ out,
                               uint8_t* __restrict__ codes, float* __restrict__ scales, int64_t in,
                               int64_t n_blocks_k, int64_t n_work, bool block_major) {
  const int64_t work = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (work >= n_work) return;  // whole warps exit together
  const int64_t r = work / n_blocks_k, kb = work % n_blocks_k, k0 = kb * k_block;
  const int64_t si = block_major ? kb * (n_work / n_blocks_k) + r : work;
  act_qdq_block<CODES>(x + r * xs + k0, min(int64_t(k_block), in - k0), lane,
                       CODES ? nullptr : out + r * in + k0, CODES ? codes + r * in + k0 : nullptr,
                       CODES ? scales + si : nullptr);
}

// -- product: one warp per R output features, MT input rows at a time ---------------

constexpr int k_warps = 8;  // 256 threads: 8R output features per block

// One input row quantized in the kernel (decode): every block QDQs the row into
// shared memory first, the same values act_qdq_kernel writes, so the product is
// bitwise the two-launch one without the launch between them.
template <int R>
__global__ void __launch_bounds__(k_warps * 32)
    fp8_linear_row_kernel(linear_fp8_params p, int64_t ys, int64_t n_kb) {
  extern __shared__ float xq[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t kb = warp; kb < n_kb; kb += k_warps) {
    act_qdq_block<false>(p.x + kb * k_block, min(int64_t(k_block), p.in - kb * k_block), lane,
                         xq + kb * k_block, nullptr, nullptr);
  }
  __syncthreads();
  const int64_t o0 = (int64_t(blockIdx.x) * k_warps + warp) * R;
  if (o0 >= p.out) return;
  const int nr = int(min(int64_t(R), p.out - o0));
  float acc[R][1];
  const uint8_t* ws = p.w_scale + ((p.w_scale_row_offset + o0) / k_block) * n_kb;
  linear_dev::fp8_dot_rows<1, R, true, true>(p.w + o0 * p.in, nr, ws, xq, p.in, p.in, 1, lane, acc);
  linear_dev::warp_sum(acc);
  if (lane == 0) linear_dev::store_rows(acc, p.y, ys, 0, o0, nr, 1, p.accumulate);
}

// VEC: in % 16 == 0, w and x 16-byte aligned, xs % 4 == 0, so every lane's 16
// weights are one aligned uint4 inside one 128-channel block. Otherwise one
// channel per lane per step. x: the QDQ'd inputs (or the raw ones), row stride xs.
template <int MT, int R, bool VEC>
__global__ void __launch_bounds__(k_warps * 32)
    fp8_linear_kernel(linear_fp8_params p, const float* __restrict__ x, int64_t xs, int64_t ys,
                      int64_t n_kb) {
  const int lane = threadIdx.x % 32;
  const int64_t row_tiles =
      (p.n_rows + MT - 1) / MT;  // block b: row tile b % row_tiles of output block b / row_tiles
  const int64_t o0 = (int64_t(blockIdx.x) / row_tiles * k_warps + threadIdx.x / 32) * R;
  const int64_t r0 = int64_t(blockIdx.x) % row_tiles * MT;
  if (o0 >= p.out) return;
  const int mt = int(min(int64_t(MT), p.n_rows - r0));
  const int nr = int(min(int64_t(R), p.out - o0));
  float acc[R][MT];
  const float* xg = p.x_group_rows > 0 ? x + (o0 / p.x_group_rows) * p.x_group_stride : x;
  linear_dev::fp8_dot_rows<MT, R, VEC>(p.w + o0 * p.in, nr,
                                       p.w_scale + ((p.w_scale_row_offset + o0) / k_block) * n_kb,
                                       xg + r0 * xs, xs, p.in, mt, lane, acc);
  linear_dev::warp_sum(acc);
  if (lane == 0) linear_dev::store_rows(acc, p.y, ys, r0, o0, nr, mt, p.accumulate);
}

template <int MT, int R, bool VEC>
void launch_kernel(const linear_fp8_params& p, const float* x, int64_t xs, int64_t ys, int64_t n_kb,
                   cudaStream_t stream) {
  // The row tiles of one output block are adjacent in the grid: they run together
  // and read the block's weights once from DRAM, the repeats from L2.
  const int64_t blocks = (p.out + k_warps * R - 1) / (k_warps * R) * ((p.n_rows + MT - 1) / MT);
  fp8_linear_kernel<MT, R, VEC><<<unsigned(blocks), k_warps * 32, 0, stream>>>(p, x, xs, ys, n_kb);
}

template <int MT>
cudaError_t launch_product(const linear_fp8_params& p, const float* x, int64_t xs, int64_t ys,
                           cudaStream_t stream) {
  const int64_t n_kb = (p.in + k_block - 1) / k_block;
  if (p.in % 16 == 0 && reinterpret_cast<uintptr_t>(p.w) % 16 == 0 &&
      reinterpret_cast<uintptr_t>(x) % 16 == 0 && xs % 4 == 0 && p.x_group_stride % 4 == 0) {
    const int64_t row_tiles = (p.n_rows + MT - 1) / MT;
    const int64_t align =
        p.w_scale_row_offset | p.x_group_rows;  // a warp's rows share a scale block and a group
    switch (linear_dev::rows_per_warp(p.out, row_tiles, MT, k_warps, cuda_sm_count(), align)) {
      case 4:
        if constexpr (MT <= 4) {
          launch_kernel<MT, 4, true>(p, x, xs, ys, n_kb, stream);
          break;
        }
        [[fallthrough]];
      case 2:
        launch_kernel<MT, 2, true>(p, x, xs, ys, n_kb, stream);
        break;
      default:
        launch_kernel<MT, 1, true>(p, x, xs, ys, n_kb, stream);
        break;
    }
  } else {
    launch_kernel<MT, 1, false>(p, x, xs, ys, n_kb, stream);
  }
  return cudaGetLastError();
}

// The fused 1-row path: a quantized input, whole 16-channel steps, aligned
// weights, an input row that fits the default shared memory.
constexpr int64_t k_row_kernel_max_in = 48 * 1024 / 4;

bool row_kernel_fits(const linear_fp8_params& p) {
  return p.quantize_input && p.n_rows == 1 && p.x_group_rows == 0 && p.in % 16 == 0 &&
         p.in <= k_row_kernel_max_in && reinterpret_cast<uintptr_t>(p.w) % 16 == 0;
}

cudaError_t launch_row(const linear_fp8_params& p, int64_t ys, cudaStream_t stream) {
  const int64_t n_kb = (p.in + k_block - 1) / k_block;
  const size_t smem = size_t(p.in) * sizeof(float);
  auto launch = [&](auto kernel, int64_t r) {
    kernel<<<unsigned((p.out + k_warps * r - 1) / (k_warps * r)), k_warps * 32, smem, stream>>>(p, ys, n_kb);
  };
  switch (linear_dev::rows_per_warp(p.out, 1, 1, k_warps, cuda_sm_count(), p.w_scale_row_offset)) {
    case 4:
      launch(fp8_linear_row_kernel<4>, 4);
      break;
    case 2:
      launch(fp8_linear_row_kernel<2>, 2);
      break;
    default:
      launch(fp8_linear_row_kernel<1>, 1);
      break;
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t linear_fp8_act_qdq_launch(const float* x, int64_t x_stride, float* out, int64_t n_rows,
                                      int64_t in, cudaStream_t stream) {
  const int64_t n_kb = (in + k_block - 1) / k_block, n_work = n_rows * n_kb;
  if (n_work == 0) return cudaSuccess;
  constexpr int threads = 256;  // 8 blocks of 128 channels per CUDA block
  const int64_t grid = (n_work * 32 + threads - 1) / threads;
  act_qdq_kernel<false>
      <<<unsigned(grid), threads, 0, stream>>>(x, x_stride, out, nullptr, nullptr, in, n_kb, n_work, false);
  return cudaGetLastError();
}

status fp8_act_quant_cuda(const float* x, int64_t x_stride, uint8_t* codes, float* scales, int64_t n_rows,
                          int64_t in, CUstream_st* stream, bool block_major_scales) {
  if (!x || !codes || !scales) return invalid_argument("fp8_act_quant_cuda: null pointer");
  if (n_rows < 0 || in <= 0 || x_stride < in) {
    return invalid_argument("fp8_act_quant_cuda: bad sizes n_rows=%lld in=%lld x_stride=%lld",
                            (long long)n_rows, (long long)in, (long long)x_stride);
  }
  const int64_t n_kb = (in + k_block - 1) / k_block, n_work = n_rows * n_kb;
  if (n_work == 0) return {};
  constexpr int threads = 256;
  const int64_t grid = (n_work * 32 + threads - 1) / threads;
  act_qdq_kernel<true><<<unsigned(grid), threads, 0, stream>>>(x, x_stride, nullptr, codes, scales, in, n_kb,
                                                               n_work, block_major_scales);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return internal_error("fp8_act_quant_cuda: %s", cudaGetErrorString(e));
  return {};
}

status block_scaled_fp8_check(const char* op, const linear_fp8_params& p, bool supported,
                              const linear_cuda_context::impl& s) {
  if (!p.x || !p.w || !p.w_scale || !p.y) return invalid_argument("%s: null pointer", op);
  if (p.n_rows < 0 || p.in <= 0 || p.out <= 0 || p.n_rows > INT32_MAX || p.in > INT32_MAX ||
      p.out > INT32_MAX) {
    return invalid_argument("%s: bad sizes n_rows=%lld in=%lld out=%lld", op, (long long)p.n_rows,
                            (long long)p.in, (long long)p.out);
  }
  if (!supported) {
    return unimplemented(
        "%s: needs quantized inputs, in %% 128 == 0, out %% 128 == 0, aligned rows (in=%lld "
        "out=%lld)",
        op, (long long)p.in, (long long)p.out);
  }
  const int64_t xs = p.x_stride ? p.x_stride : p.in, ys = p.y_stride ? p.y_stride : p.out;
  if (xs < p.in || ys < p.out) return invalid_argument("%s: row strides smaller than the rows", op);
  if (p.n_rows > s.max_fp8_rows || p.in > s.max_fp8_in) {
    return resource_exhausted("%s: n_rows=%lld in=%lld over the context's %lld x %lld fp8 buffer", op,
                              (long long)p.n_rows, (long long)p.in, (long long)s.max_fp8_rows,
                              (long long)s.max_fp8_in);
  }
  return {};
}

status quantize_block_major(const linear_fp8_params& p, int64_t rows, linear_cuda_context::impl& s,
                            cudaStream_t stream, block_major_input* out) {
  out->codes = reinterpret_cast<uint8_t*>(s.x_qdq);  // 4 bytes per element cover the codes and the scales
  out->scales = reinterpret_cast<float*>(out->codes + (rows * p.in + 15) / 16 * 16);
  return fp8_act_quant_cuda(p.x, p.x_stride ? p.x_stride : p.in, out->codes, out->scales, rows, p.in, stream,
                            /*block_major_scales=*/true);
}

status linear_fp8_cuda(const linear_fp8_params& p, linear_cuda_context& ctx, CUstream_st* stream) {
  if (!p.x || !p.w || !p.w_scale || !p.y) return invalid_argument("linear_fp8_cuda: null pointer");
  if (p.n_rows < 0 || p.in <= 0 || p.out <= 0) {
    return invalid_argument("linear_fp8_cuda: bad sizes n_rows=%lld in=%lld out=%lld", (long long)p.n_rows,
                            (long long)p.in, (long long)p.out);
  }
  const int64_t xs = p.x_stride ? p.x_stride : p.in, ys = p.y_stride ? p.y_stride : p.out;
  if (xs < p.in || ys < p.out) return invalid_argument("linear_fp8_cuda: row strides smaller than the rows");
  const linear_cuda_context::impl& s = ctx.state();
  if (p.quantize_input && (p.n_rows > s.max_fp8_rows || p.in > s.max_fp8_in)) {
    return resource_exhausted(
        "linear_fp8_cuda: n_rows=%lld in=%lld over the context's %lld x %lld fp8 buffer", (long long)p.n_rows,
        (long long)p.in, (long long)s.max_fp8_rows, (long long)s.max_fp8_in);
  }
  if (p.x_group_rows < 0 || (p.x_group_rows > 0 && (p.quantize_input || p.x_group_stride < 0))) {
    return invalid_argument(
        "linear_fp8_cuda: input groups (%lld rows) need unquantized inputs and a stride >= 0",
        (long long)p.x_group_rows);
  }
  if (p.w_scale_row_offset < 0 || p.w_scale_row_offset >= k_block) {
    return invalid_argument("linear_fp8_cuda: w_scale_row_offset=%lld outside [0, 128)",
                            (long long)p.w_scale_row_offset);
  }
  if ((p.out + k_warps - 1) / k_warps * ((p.n_rows + 7) / 8) > INT32_MAX) {
    return invalid_argument("linear_fp8_cuda: out=%lld x n_rows=%lld too large", (long long)p.out,
                            (long long)p.n_rows);
  }
  if (p.n_rows == 0) return {};
  cudaError_t e = cudaSuccess;
  if (row_kernel_fits(p)) {  // decode: the row's QDQ inside the product's launch
    e = launch_row(p, ys, stream);
    if (e != cudaSuccess) return internal_error("linear_fp8_cuda: %s", cudaGetErrorString(e));
    return {};
  }
  const float* x = p.x;
  int64_t x_rows = xs;
  if (p.quantize_input) {
    e = linear_fp8_act_qdq_launch(p.x, xs, s.x_qdq, p.n_rows, p.in, stream);
    x = s.x_qdq;
    x_rows = p.in;
  }
  // MT input rows share each weight load; 8 keeps the accumulators in registers.
  if (e == cudaSuccess) {
    if (p.n_rows == 1)
      e = launch_product<1>(p, x, x_rows, ys, stream);
    else if (p.n_rows == 2)
      e = launch_product<2>(p, x, x_rows, ys, stream);
    else if (p.n_rows <= 4)
      e = launch_product<4>(p, x, x_rows, ys, stream);
    else
      e = launch_product<8>(p, x, x_rows, ys, stream);
  }
  if (e != cudaSuccess) return internal_error("linear_fp8_cuda: %s", cudaGetErrorString(e));
  return {};
}

}  // namespace hart
