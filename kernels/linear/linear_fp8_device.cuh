// File: kernels/linear/linear_fp8_device.cuh — internal to kernels/linear: the
// per-warp dot products the FP8 linear and the grouped linear share, so both
// compute every output with the same operations in the same order.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

namespace hart::linear_dev {

constexpr int k_block = 128;  // k_linear_fp8_block

// 2^(c-127) for an e8m0 code (c = 255 is NaN).
__device__ __forceinline__ float e8m0_value(uint8_t c) {
  return c == 255 ? __int_as_float(0x7fc00000) : ldexpf(1.0f, int(c) - 127);
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

// One warp's partial sums of output row `w` (e4m3 codes, scale row `ws`) against
// the mt <= MT dense input rows at x (row stride `in`); the caller reduces acc
// over the warp. VEC: in % 16 == 0 and w 16-byte aligned (each lane's 16
// weights are one uint4 inside one 128-channel block). Each lane sums 16
// exact products in fp32, scales by the block's 2^k and accumulates: the
// order depends only on `in`, so results are batch-invariant.
// The 16 weights at w + k times the mt input rows, added into acc: the step
// fp8_dot_rows repeats along k.
template <int MT>
__device__ __forceinline__ void fp8_step(uint4 wv, float sw, const float* __restrict__ x, int64_t in, int64_t k,
                                         int mt, float (&acc)[MT]) {
  float wf[16];
  fp8x4_to_float(wv.x, wf);
  fp8x4_to_float(wv.y, wf + 4);
  fp8x4_to_float(wv.z, wf + 8);
  fp8x4_to_float(wv.w, wf + 12);
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    if (m >= mt) break;
    const float4* xr = reinterpret_cast<const float4*>(x + m * in + k);
    float part = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float4 xv = __ldg(xr + j);
      part = fmaf(wf[4 * j + 0], xv.x, part);
      part = fmaf(wf[4 * j + 1], xv.y, part);
      part = fmaf(wf[4 * j + 2], xv.z, part);
      part = fmaf(wf[4 * j + 3], xv.w, part);
    }
    acc[m] = fmaf(part, sw, acc[m]);
  }
}

constexpr int k_prefetch = 4;  // weight loads a lane issues before it uses the first

// One warp's partial sums of output row `w` (e4m3 codes, scale row `ws`) against
// the mt <= MT dense input rows at x (row stride `in`); the caller reduces acc
// over the warp. VEC: in % 16 == 0 and w 16-byte aligned (each lane's 16
// weights are one uint4 inside one 128-channel block). Each lane sums 16
// exact products in fp32, scales by the block's 2^k and accumulates: the
// order depends only on `in`, so results are batch-invariant. The weight loads
// of k_prefetch steps are issued together (the order of the sums is unchanged).
template <int MT, bool VEC>
__device__ __forceinline__ void fp8_dot_rows(const uint8_t* __restrict__ w, const uint8_t* __restrict__ ws,
                                             const float* __restrict__ x, int64_t in, int mt, int lane,
                                             float (&acc)[MT]) {
#pragma unroll
  for (int m = 0; m < MT; ++m) acc[m] = 0.0f;
  if (VEC) {
    constexpr int64_t step = 32 * 16;
    int64_t k = int64_t(lane) * 16;
    for (; k + (k_prefetch - 1) * step < in; k += k_prefetch * step) {
      uint4 wv[k_prefetch];
      uint8_t sc[k_prefetch];
#pragma unroll
      for (int u = 0; u < k_prefetch; ++u) {
        wv[u] = __ldg(reinterpret_cast<const uint4*>(w + k + u * step));
        sc[u] = __ldg(ws + (k + u * step) / k_block);
      }
#pragma unroll
      for (int u = 0; u < k_prefetch; ++u) fp8_step(wv[u], e8m0_value(sc[u]), x, in, k + u * step, mt, acc);
    }
    for (; k < in; k += step) {
      fp8_step(__ldg(reinterpret_cast<const uint4*>(w + k)), e8m0_value(__ldg(ws + k / k_block)), x, in, k, mt, acc);
    }
  } else {
    for (int64_t k = lane; k < in; k += 32) {
      const float wf =
          float(__half(__nv_cvt_fp8_to_halfraw(__ldg(w + k), __NV_E4M3))) * e8m0_value(__ldg(ws + k / k_block));
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        if (m >= mt) break;
        acc[m] = fmaf(wf, x[m * in + k], acc[m]);
      }
    }
  }
}

// The same for fp32 weights: lane-strided 16-wide runs when VEC (in % 16 == 0,
// w 16-byte aligned), one channel per lane otherwise.
template <int MT, bool VEC>
__device__ __forceinline__ void f32_dot_rows(const float* __restrict__ w, const float* __restrict__ x, int64_t in,
                                             int mt, int lane, float (&acc)[MT]) {
#pragma unroll
  for (int m = 0; m < MT; ++m) acc[m] = 0.0f;
  if (VEC) {
    for (int64_t k = int64_t(lane) * 16; k < in; k += 32 * 16) {
      float4 wv[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) wv[j] = __ldg(reinterpret_cast<const float4*>(w + k) + j);
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        if (m >= mt) break;
        const float4* xr = reinterpret_cast<const float4*>(x + m * in + k);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float4 xv = __ldg(xr + j);
          acc[m] = fmaf(wv[j].x, xv.x, acc[m]);
          acc[m] = fmaf(wv[j].y, xv.y, acc[m]);
          acc[m] = fmaf(wv[j].z, xv.z, acc[m]);
          acc[m] = fmaf(wv[j].w, xv.w, acc[m]);
        }
      }
    }
  } else {
    for (int64_t k = lane; k < in; k += 32) {
      const float wf = __ldg(w + k);
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        if (m >= mt) break;
        acc[m] = fmaf(wf, x[m * in + k], acc[m]);
      }
    }
  }
}

// Sums acc over the warp (butterfly: every lane ends with the total).
template <int MT>
__device__ __forceinline__ void warp_sum(float (&acc)[MT]) {
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    for (int off = 16; off > 0; off >>= 1) acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], off);
  }
}

}  // namespace hart::linear_dev
