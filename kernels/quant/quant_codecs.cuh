// File: kernels/quant/quant_codecs.cuh — device copies of the minifloat codecs in
// runtime/core/codecs.cpp and of pow2_scale_exponent (quant_cpu.cpp), line for
// line in integer arithmetic, so the CUDA quantizers round exactly like the CPU
// reference (RNE, saturation, NaN handling) whatever the FPU mode or the
// hardware cvt instructions would do. Internal to kernels/quant.
#pragma once

#include <cfloat>
#include <cstdint>

namespace hart::quant_dev {

// v >> shift rounded to nearest, ties to even. Requires v < 2^24, shift >= 0.
__device__ __forceinline__ uint32_t rne_shift(uint32_t v, int shift) {
  if (shift == 0) return v;
  if (shift > 25) return 0;
  uint32_t q = v >> shift;
  const uint32_t rem = v & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return q;
}

// codecs.cpp minifloat_magnitude_code: m stored mantissa bits, emin smallest normal exponent.
__device__ __forceinline__ uint32_t minifloat_magnitude_code(uint32_t abs_bits, int m, int emin) {
  const int exp_field = int(abs_bits >> 23);
  const uint32_t frac = abs_bits & 0x7fffffu;
  if (exp_field == 0 && frac == 0) return 0;
  const uint32_t sig = exp_field ? (frac | 0x800000u) : frac;
  const int e = exp_field ? exp_field - 127 : -126;
  if (e >= emin) {
    const uint32_t q = rne_shift(sig, 23 - m);
    return (uint32_t(e - emin + 1) << m) + (q - (1u << m));
  }
  return rne_shift(sig, 23 + emin - m - e);
}

/// fp32 -> float8_e4m3fn, RNE, saturating at +-448 (inf included); NaN -> 0x7f.
__device__ __forceinline__ uint8_t e4m3_from_f32(float x) {
  const uint32_t u = __float_as_uint(x);
  const uint8_t sign = uint8_t((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7f;
  if (a >= __float_as_uint(448.0f)) return sign | 0x7e;
  uint32_t c = minifloat_magnitude_code(a, 3, -6);
  if (c > 0x7e) c = 0x7e;
  return uint8_t(sign | c);
}

/// float8_e4m3fn -> fp32, exact; 0x7f/0xff -> NaN.
__device__ __forceinline__ float f32_from_e4m3(uint8_t q) {
  const uint32_t sign = uint32_t(q & 0x80u) << 24;
  const uint32_t e = (q >> 3) & 0xfu;
  const uint32_t m = q & 0x7u;
  if ((q & 0x7fu) == 0x7fu) return __uint_as_float(sign | 0x7fc00000u);
  if (e == 0) return __uint_as_float(sign | __float_as_uint(float(m) * 0x1p-9f));
  return __uint_as_float(sign | ((e + 120u) << 23) | (m << 20));
}

/// fp32 -> e2m1 nibble, RNE, saturating at +-6 (inf included); NaN -> +6 (0x7).
__device__ __forceinline__ uint8_t e2m1_from_f32(float x) {
  const uint32_t u = __float_as_uint(x);
  const uint8_t sign = uint8_t((u >> 28) & 0x8u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7;
  if (a >= __float_as_uint(6.0f)) return sign | 0x7;
  uint32_t c = minifloat_magnitude_code(a, 1, 0);
  if (c > 0x7) c = 0x7;
  return uint8_t(sign | c);
}

/// e2m1 nibble -> fp32, exact; bits above bit 3 ignored.
__device__ __forceinline__ float f32_from_e2m1(uint8_t nibble) {
  // {0, .5, 1, 1.5, 2, 3, 4, 6} = (0.5 * m for m < 4), else 2^(e-1) * (1 + m/2)
  const uint32_t c = nibble & 0x7u;
  const float v =
      c < 2 ? 0.5f * float(c) : __uint_as_float(((c >> 1) + 126u) << 23) * (1.0f + 0.5f * float(c & 1u));
  return (nibble & 0x8u) ? -v : v;
}

/// 2^(e-127); 0xff -> NaN; 0 -> 2^-127 (subnormal).
__device__ __forceinline__ float f32_from_e8m0(uint8_t e) {
  if (e == 0xff) return __uint_as_float(0x7fc00000u);
  if (e == 0) return __uint_as_float(0x00400000u);
  return __uint_as_float(uint32_t(e) << 23);
}

/// Code of 2^e, e clamped to [-127, 127].
__device__ __forceinline__ uint8_t e8m0_from_exponent(int e) {
  e = e < -127 ? -127 : (e > 127 ? 127 : e);
  return uint8_t(e + 127);
}

/// quant_cpu.cpp pow2_scale_exponent: exact ceil(log2(amax / q_max)); 128 for inf/NaN.
__device__ __forceinline__ int pow2_scale_exponent(float amax, float q_max) {
  if (!(amax <= FLT_MAX)) return 128;
  int ea = 0, eq = 0;
  const float ma = frexpf(amax, &ea);
  const float mq = frexpf(q_max, &eq);
  return ea - eq + (ma > mq ? 1 : 0);
}

/// clamp(v, -q_max, q_max); NaN passes through.
__device__ __forceinline__ float clamp_q(float v, float q_max) {
  return v > q_max ? q_max : (v < -q_max ? -q_max : v);
}

}  // namespace hart::quant_dev
