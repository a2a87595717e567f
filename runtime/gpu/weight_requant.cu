// The fused fp8 weight re-quantization: one CTA per 128x128 tile does the
// whole chain of weight_requant.h in registers (raw read once; v, codes and the
// tile's scale written once), so the pass costs one read and 1.25 writes of the
// weight instead of the five kernels and seven passes it took op by op. The
// arithmetic is kernels/quant's (quant_codecs.cuh, a NaN-skipping max; x / 2^k
// as x · 2^-k, the same single rounding of the same value, without the cost of
// a division), so the results are bit-exact with fp8_block_quantize /
// fp8_block_dequantize on the host (the build has no flush-to-zero flags).
#include "runtime/gpu/weight_requant.h"

#include <cfloat>
#include <climits>

#include "kernels/quant/quant.h"
#include "kernels/quant/quant_codecs.cuh"

namespace hart::gpu {
namespace {

namespace qd = quant_dev;

constexpr int k_tile = 128;
constexpr int k_threads = 512;               // 16 warps; 8 rows x 4 columns per thread (32 registers of values)
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

// e4m3(clamp(x / s)) with s a power of two, as x times its exact reciprocal.
__device__ __forceinline__ uint8_t quantize(float x, float inv_s) {
  return qd::e4m3_from_f32(qd::clamp_q(__fmul_rn(x, inv_s), e4m3_max));
}

// Vec: cols % 4 == 0 and w 16-byte aligned, so every 4-column group of a tile
// is whole and loads as a float4. Full: also re-quantize v and check it.
// counts (when set): [0] += values the codes do not reproduce (Full), [1] +=
// raw values that are not finite (the host quantizer refuses those).
template <bool Vec, bool Full>
__global__ void __launch_bounds__(k_threads) requant_tile_kernel(float* w, int64_t rows, int64_t cols, uint8_t* codes,
                                                           uint8_t* scales, uint32_t* counts) {
  __shared__ float smem[k_warps];
  const int64_t r0 = int64_t(blockIdx.y) * k_tile, c0 = int64_t(blockIdx.x) * k_tile;
  const int h = rows - r0 < k_tile ? int(rows - r0) : k_tile, wd = cols - c0 < k_tile ? int(cols - c0) : k_tile;
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
    for (int j = 0; j < 4; ++j) {
      x[k][j] = __fmul_rn(qd::f32_from_e4m3(quantize(x[k][j], inv_s)), s);  // v = QDQ(raw)
      const float a = fabsf(x[k][j]);
      if (a > amax) amax = a;
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
      for (int j = 0; j < 4; ++j) {
        q[j] = quantize(x[k][j], inv_s2);
        const float back = __fmul_rn(qd::f32_from_e4m3(q[j]), s);
        differ += (r < h && col + j < wd) && __float_as_uint(back) != __float_as_uint(x[k][j]);
      }
    }
    if (Vec) {
      if (r < h && col < wd) {
        *reinterpret_cast<float4*>(row) = make_float4(x[k][0], x[k][1], x[k][2], x[k][3]);
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
          row[j] = x[k][j];
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
  if (out < 0 || in < 0) return invalid_argument("%s: negative shape %lldx%lld", op, (long long)out, (long long)in);
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

}  // namespace

status weight_qdq_fp8(float* w, int64_t out, int64_t in, uint32_t* counts, cudaStream_t stream) {
  return launch_requant<false>(w, out, in, nullptr, nullptr, counts, stream, "weight_qdq_fp8");
}

status weight_requant_fp8_async(float* w, int64_t out, int64_t in, uint8_t* codes, uint8_t* scales,
                                uint32_t* counts, cudaStream_t stream) {
  return launch_requant<true>(w, out, in, codes, scales, counts, stream, "weight_requant_fp8");
}

}  // namespace hart::gpu
