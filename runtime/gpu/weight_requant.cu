// The fused fp8 weight re-quantization: one CTA per 128x128 tile does the
// whole chain of weight_requant.h in registers (raw read once; codes and the
// tile's scale written once; v only by the QDQ pass, which the rare inexact
// linear needs), so the pass costs one read and a quarter write of the weight
// instead of the five kernels and seven passes it took op by op. The
// arithmetic is kernels/quant's (quant_codecs.cuh, a NaN-skipping max; x / 2^k
// as x · 2^-k, the same single rounding of the same value, without the cost of
// a division), so the results are bit-exact with fp8_block_quantize /
// fp8_block_dequantize on the host (the build has no flush-to-zero flags).
#include "kernels/quant/quant.h"
#include "kernels/quant/quant_codecs.cuh"
#include "runtime/gpu/weight_requant.h"

#include <climits>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cfloat>

namespace hart::gpu {
namespace {

namespace qd = quant_dev;

constexpr int k_tile = 128;
constexpr int k_threads = 512;  // 16 warps; 8 rows x 4 columns per thread (32 registers of values)
constexpr int k_warps = k_threads / 32;
constexpr int k_rows_per_thread = k_tile / k_warps;  // a warp's 32 lanes x 4 columns span the tile

// max over the CTA (partials are >= the floor, never NaN); every thread gets it.
__device__ float tile_max(float v, float* smem) {
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  __syncthreads();  // smem may still be read from the previous reduction
  if (threadIdx.x % 32 == 0) smem[threadIdx.x / 32] = v;
  __syncthreads();
  v = smem[0];
  for (int i = 1; i < k_warps; ++i) v = smem[i] > v ? smem[i] : v;
  return v;
}

__device__ __forceinline__ float scale_of(float amax, uint8_t* code) {
  *code = qd::e8m0_from_exponent(qd::pow2_scale_exponent(amax, e4m3_max));
  return qd::f32_from_e8m0(*code);
}

// e4m3(clamp(x / s)) for two values, s a power of two, as x times its exact
// reciprocal. The hardware conversion (round to nearest even, saturating) is
// quant_codecs.cuh's e4m3_from_f32 for every finite value after the clamp;
// NaN becomes that codec's 0x7f whatever its sign.
__device__ __forceinline__ void quantize2(float a, float b, float inv_s, uint8_t* q) {
  const float2 v{qd::clamp_q(__fmul_rn(a, inv_s), e4m3_max), qd::clamp_q(__fmul_rn(b, inv_s), e4m3_max)};
  const __nv_fp8x2_storage_t c = __nv_cvt_float2_to_fp8x2(v, __NV_SATFINITE, __NV_E4M3);
  q[0] = isnan(v.x) ? 0x7f : uint8_t(c & 0xff);
  q[1] = isnan(v.y) ? 0x7f : uint8_t(c >> 8);
}

// Two codes back to fp32 (exact: e4m3 -> half -> float).
__device__ __forceinline__ float2 dequantize2(const uint8_t* q) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(q[0] | q[1] << 8), __NV_E4M3);
  return __half22float2(__half2(h));
}

// Vec: cols % 4 == 0 and w 16-byte aligned, so every 4-column group of a tile
// is whole and loads as a float4. !Full: w = v. Full: codes and scales of v and
// the check, w left as it was (v is needed only when the check fails).
// counts (when set): [0] += values the codes do not reproduce (Full), [1] +=
// raw values that are not finite (the host quantizer refuses those).
template <bool Vec, bool Full>
__global__ void __launch_bounds__(k_threads)
    requant_tile_kernel(float* w, int64_t rows, int64_t cols, uint8_t* codes, uint8_t* scales,
                        uint32_t* counts) {
  __shared__ float smem[k_warps];
  const int64_t r0 = int64_t(blockIdx.y) * k_tile, c0 = int64_t(blockIdx.x) * k_tile;
  const int h = rows - r0 < k_tile ? int(rows - r0) : k_tile,
            wd = cols - c0 < k_tile ? int(cols - c0) : k_tile;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int col = 4 * lane;

  float x[k_rows_per_thread][4];
  float amax = fp8_amax_floor;
  uint32_t non_finite = 0;
#pragma unroll
  for (int k = 0; k < k_rows_per_thread; ++k) {
    const int r = warp + k_warps * k;
    float* row = w + (r0 + r) * cols + c0 + col;
    if (Vec) {
      float4 f = make_float4(0.f, 0.f, 0.f, 0.f);
      if (r < h && col < wd) f = *reinterpret_cast<const float4*>(row);
      x[k][0] = f.x, x[k][1] = f.y, x[k][2] = f.z, x[k][3] = f.w;
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) x[k][j] = (r < h && col + j < wd) ? row[j] : 0.f;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float a = fabsf(x[k][j]);
      if (a > amax) amax = a;  // out-of-tile zeros never exceed the floor
      non_finite += !(a <= FLT_MAX);
    }
  }
  uint8_t code = 0;
  float s = scale_of(tile_max(amax, smem), &code);
  const float inv_s = 1.0f / s;  // s = 2^k: x·2^-k rounds as x / s does (one IEEE rounding of the same value)
  amax = fp8_amax_floor;
#pragma unroll
  for (int k = 0; k < k_rows_per_thread; ++k) {
#pragma unroll
    for (int j = 0; j < 4; j += 2) {
      uint8_t q[2];
      quantize2(x[k][j], x[k][j + 1], inv_s, q);
      const float2 d = dequantize2(q);
      x[k][j] = __fmul_rn(d.x, s);  // v = QDQ(raw)
      x[k][j + 1] = __fmul_rn(d.y, s);
      amax = fmaxf(amax, fmaxf(fabsf(x[k][j]), fabsf(x[k][j + 1])));
    }
  }
  uint32_t differ = 0;
  float inv_s2 = 0.f;
  if (Full) {
    s = scale_of(tile_max(amax, smem), &code);
    inv_s2 = 1.0f / s;
    if (threadIdx.x == 0) scales[int64_t(blockIdx.y) * gridDim.x + blockIdx.x] = code;
  }
#pragma unroll
  for (int k = 0; k < k_rows_per_thread; ++k) {
    const int r = warp + k_warps * k;
    float* row = w + (r0 + r) * cols + c0 + col;
    uint8_t q[4] = {0, 0, 0, 0};
    if (Full) {
#pragma unroll
      for (int j = 0; j < 4; j += 2) {
        quantize2(x[k][j], x[k][j + 1], inv_s2, q + j);
        const float2 d = dequantize2(q + j);
        differ += (r < h && col + j < wd) && __float_as_uint(__fmul_rn(d.x, s)) != __float_as_uint(x[k][j]);
        differ +=
            (r < h && col + j + 1 < wd) && __float_as_uint(__fmul_rn(d.y, s)) != __float_as_uint(x[k][j + 1]);
      }
    }
    if (Vec) {
      if (r < h && col < wd) {
        if (!Full) *reinterpret_cast<float4*>(row) = make_float4(x[k][0], x[k][1], x[k][2], x[k][3]);
        if (Full) {
          uint8_t* dst = codes + (r0 + r) * cols + c0 + col;  // 4-byte aligned: cols % 4 == 0
          *reinterpret_cast<uint32_t*>(dst) =
              uint32_t(q[0]) | uint32_t(q[1]) << 8 | uint32_t(q[2]) << 16 | uint32_t(q[3]) << 24;
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (r < h && col + j < wd) {
          if (!Full) row[j] = x[k][j];
          if (Full) codes[(r0 + r) * cols + c0 + col + j] = q[j];
        }
      }
    }
  }
  if (counts) {
    for (int o = 16; o > 0; o >>= 1) {
      differ += __shfl_xor_sync(0xffffffffu, differ, o);
      non_finite += __shfl_xor_sync(0xffffffffu, non_finite, o);
    }
    if (lane == 0 && differ) atomicAdd(counts, differ);
    if (lane == 0 && non_finite) atomicAdd(counts + 1, non_finite);
  }
}

template <bool Full>
status launch_requant(float* w, int64_t out, int64_t in, uint8_t* codes, uint8_t* scales, uint32_t* counts,
                      cudaStream_t stream, const char* op) {
  if (out < 0 || in < 0)
    return invalid_argument("%s: negative shape %lldx%lld", op, (long long)out, (long long)in);
  if (out == 0 || in == 0) return {};
  if (!w || (Full && (!codes || !scales || !counts))) return invalid_argument("%s: null pointer", op);
  const int64_t n_rt = (out + k_tile - 1) / k_tile, n_ct = (in + k_tile - 1) / k_tile;
  if (n_rt > 65535 || n_ct > INT_MAX) {
    return invalid_argument("%s: %lldx%lld tiles exceed the grid", op, (long long)n_rt, (long long)n_ct);
  }
  const dim3 grid{unsigned(n_ct), unsigned(n_rt)};
  const bool vec = in % 4 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0 &&
                   (!Full || reinterpret_cast<uintptr_t>(codes) % 4 == 0);
  if (vec) {
    requant_tile_kernel<true, Full><<<grid, k_threads, 0, stream>>>(w, out, in, codes, scales, counts);
  } else {
    requant_tile_kernel<false, Full><<<grid, k_threads, 0, stream>>>(w, out, in, codes, scales, counts);
  }
  return cuda_status(cudaGetLastError(), op);
}

// MXFP4 of raw weights: a thread takes 8 channels (one 4-byte piece of
// mxfp4_mma_order), 4 neighbouring lanes a 32-channel block, whose amax they
// share by two shuffles. The arithmetic is mxfp4_quantize's (quant_codecs.cuh:
// the NaN-skipping max from the floor, the power-of-two scale, x / 2^k as
// x · 2^-k, the same RNE e2m1 codec), so the codes and scales are bit-exact
// with the host's; the pieces land where mxfp4_mma_order puts them.
constexpr int k_mxfp4_threads = 256;

__global__ void __launch_bounds__(k_mxfp4_threads)
    requant_mxfp4_kernel(const float* w, int64_t rows, int64_t cols, uint8_t* pairs, uint8_t* scales,
                         uint32_t* counts) {
  const int64_t piece = int64_t(blockIdx.x) * k_mxfp4_threads + threadIdx.x, per_row = cols / 8;
  const bool live = piece < rows * per_row;
  const int64_t row = live ? piece / per_row : 0, c = live ? piece % per_row * 8 : 0;
  float x[8] = {};
  if (live) {
    const float4 a = *reinterpret_cast<const float4*>(w + row * cols + c);
    const float4 b = *reinterpret_cast<const float4*>(w + row * cols + c + 4);
    x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
  }
  float amax = fp4_amax_floor;
  uint32_t non_finite = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float a = fabsf(x[i]);
    if (a > amax) amax = a;
    non_finite += !(a <= FLT_MAX);
  }
  // The 4 lanes of a 32-block are lanes 4k..4k+3 of one warp (cols % 128 == 0 keeps blocks within rows).
#pragma unroll
  for (int o = 1; o < 4; o <<= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, amax, o);
    amax = v > amax ? v : amax;
  }
  const uint8_t code = qd::e8m0_from_exponent(qd::pow2_scale_exponent(amax, e2m1_max));
  const float inv_s = 1.0f / qd::f32_from_e8m0(code);
  uint32_t word = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    word |= uint32_t(qd::e2m1_from_f32(qd::clamp_q(__fmul_rn(x[i], inv_s), e2m1_max))) << (4 * i);
  }
  if (live) {
    const int64_t kb = c / 128;
    const int j = int(c % 128) / 32, t = int(c % 32) / 8;
    *reinterpret_cast<uint32_t*>(pairs + row * (cols / 2) + kb * 64 + t * 16 + j * 4) = word;
    if (t == 0) scales[row * (cols / 32) + c / 32] = code;
  }
  if (counts) {
    for (int o = 16; o > 0; o >>= 1) non_finite += __shfl_xor_sync(0xffffffffu, non_finite, o);
    if (threadIdx.x % 32 == 0 && non_finite) atomicAdd(counts + 1, non_finite);
  }
}

}  // namespace

status weight_requant_mxfp4_async(const float* w, int64_t out, int64_t in, uint8_t* pairs, uint8_t* scales,
                                  uint32_t* counts, cudaStream_t stream) {
  const char* op = "weight_requant_mxfp4";
  if (out < 0 || in < 0 || in % 128)
    return invalid_argument("%s: shape %lldx%lld (columns a multiple of 128)", op, (long long)out,
                            (long long)in);
  if (out == 0 || in == 0) return {};
  if (!w || !pairs || !scales) return invalid_argument("%s: null pointer", op);
  if (reinterpret_cast<uintptr_t>(w) % 16 || reinterpret_cast<uintptr_t>(pairs) % 4)
    return invalid_argument("%s: w must be 16-byte and the pairs 4-byte aligned", op);
  const int64_t blocks = (out * (in / 8) + k_mxfp4_threads - 1) / k_mxfp4_threads;
  if (blocks > INT_MAX)
    return invalid_argument("%s: %lldx%lld exceeds the grid", op, (long long)out, (long long)in);
  requant_mxfp4_kernel<<<unsigned(blocks), k_mxfp4_threads, 0, stream>>>(w, out, in, pairs, scales, counts);
  return cuda_status(cudaGetLastError(), op);
}

status weight_qdq_fp8(float* w, int64_t out, int64_t in, uint32_t* counts, cudaStream_t stream) {
  return launch_requant<false>(w, out, in, nullptr, nullptr, counts, stream, "weight_qdq_fp8");
}

status weight_requant_fp8_async(float* w, int64_t out, int64_t in, uint8_t* codes, uint8_t* scales,
                                uint32_t* counts, cudaStream_t stream) {
  return launch_requant<true>(w, out, in, codes, scales, counts, stream, "weight_requant_fp8");
}

}  // namespace hart::gpu
