#include "runtime/core/codecs.h"

#include <array>
#include <cstring>

namespace hart {

namespace {

uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

float float_of(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

constexpr uint32_t f32_sign_mask = 0x80000000u;
constexpr uint32_t f32_abs_mask = 0x7fffffffu;
constexpr uint32_t f32_inf_bits = 0x7f800000u;
constexpr uint32_t f32_quiet_nan_bits = 0x7fc00000u;

// v >> shift rounded to nearest, ties to even. Requires v < 2^24, shift >= 0.
uint32_t rne_shift(uint32_t v, int shift) {
  if (shift == 0) return v;
  if (shift > 25) return 0;  // v < 2^24 <= half of one unit
  uint32_t q = v >> shift;
  uint32_t rem = v & ((1u << shift) - 1);
  uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return q;
}

// Magnitude code of a finite, non-negative fp32 (given as bits) in a minifloat
// with `m` stored mantissa bits and smallest normal exponent `emin`, i.e.
// (biased exponent << m) | mantissa where 2^emin has biased exponent 1 and
// subnormals step by 2^(emin - m). RNE; a carry out of the mantissa bumps the
// exponent. The result may exceed the format's largest code: callers saturate.
uint32_t minifloat_magnitude_code(uint32_t abs_bits, int m, int emin) {
  const int exp_field = static_cast<int>(abs_bits >> 23);
  const uint32_t frac = abs_bits & 0x7fffffu;
  if (exp_field == 0 && frac == 0) return 0;
  // value = sig * 2^(e - 23), sig < 2^24
  const uint32_t sig = exp_field ? (frac | 0x800000u) : frac;
  const int e = exp_field ? exp_field - 127 : -126;
  if (e >= emin) {
    const uint32_t q = rne_shift(sig, 23 - m);  // in [2^m, 2^(m+1)]
    return (static_cast<uint32_t>(e - emin + 1) << m) + (q - (1u << m));
  }
  // Target subnormal: count units of 2^(emin - m).
  return rne_shift(sig, 23 + emin - m - e);
}

std::array<float, 256> make_e4m3_table() {
  std::array<float, 256> t{};
  for (int i = 0; i < 256; ++i) t[i] = f32_from_e4m3(static_cast<uint8_t>(i));
  return t;
}

const std::array<float, 256>& e4m3_table() {
  static const std::array<float, 256> table = make_e4m3_table();
  return table;
}

}  // namespace

// -- bf16 -------------------------------------------------------------------

uint16_t bf16_from_f32(float x) {
  const uint32_t u = bits_of(x);
  if ((u & f32_abs_mask) > f32_inf_bits) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  // Adding 0x7fff plus the kept LSB rounds half to even; the carry may ripple
  // into the exponent, which is exactly the next binade (or inf).
  const uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

float f32_from_bf16(uint16_t b) {
  return float_of(static_cast<uint32_t>(b) << 16);
}

float round_to_bf16(float x) {
  return f32_from_bf16(bf16_from_f32(x));
}

// -- f16 --------------------------------------------------------------------

float f32_from_f16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu;
  const uint32_t m = h & 0x3ffu;
  if (e == 0x1f) return float_of(sign | (m ? (f32_quiet_nan_bits | (m << 13)) : f32_inf_bits));
  if (e == 0) return float_of(sign | bits_of(static_cast<float>(m) * 0x1p-24f));  // exact
  return float_of(sign | ((e + 112u) << 23) | (m << 13));
}

// -- e4m3 -------------------------------------------------------------------

uint8_t e4m3_from_f32(float x) {
  const uint32_t u = bits_of(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & f32_abs_mask;
  if (a > f32_inf_bits) return 0x7f;
  if (a >= bits_of(448.0f)) return sign | 0x7e;  // saturate, inf included
  uint32_t c = minifloat_magnitude_code(a, 3, -6);
  if (c > 0x7e) c = 0x7e;  // unreachable below 448; kept as the format's bound
  return static_cast<uint8_t>(sign | c);
}

float f32_from_e4m3(uint8_t q) {
  const uint32_t sign = static_cast<uint32_t>(q & 0x80u) << 24;
  const uint32_t e = (q >> 3) & 0xfu;
  const uint32_t m = q & 0x7u;
  if ((q & 0x7fu) == 0x7fu) return float_of(sign | f32_quiet_nan_bits);
  if (e == 0) return float_of(sign | bits_of(static_cast<float>(m) * 0x1p-9f));  // exact
  return float_of(sign | ((e + 120u) << 23) | (m << 20));
}

// -- e8m0 -------------------------------------------------------------------

float f32_from_e8m0(uint8_t e) {
  if (e == 0xff) return float_of(f32_quiet_nan_bits);
  if (e == 0) return float_of(0x00400000u);  // 2^-127, subnormal
  return float_of(static_cast<uint32_t>(e) << 23);
}

uint8_t e8m0_from_exponent(int e) {
  if (e < -127) e = -127;
  if (e > 127) e = 127;
  return static_cast<uint8_t>(e + 127);
}

// -- e2m1 -------------------------------------------------------------------

uint8_t e2m1_from_f32(float x) {
  const uint32_t u = bits_of(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 28) & 0x8u);
  const uint32_t a = u & f32_abs_mask;
  if (a > f32_inf_bits) return 0x7;
  if (a >= bits_of(6.0f)) return sign | 0x7;
  uint32_t c = minifloat_magnitude_code(a, 1, 0);
  if (c > 0x7) c = 0x7;
  return static_cast<uint8_t>(sign | c);
}

float f32_from_e2m1(uint8_t nibble) {
  static constexpr float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float v = mag[nibble & 0x7u];
  return (nibble & 0x8u) ? -v : v;
}

// -- bulk -------------------------------------------------------------------

void bf16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_from_bf16(src[i]);
}

void f32_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_from_f32(src[i]);
}

void f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_from_f16(src[i]);
}

void e4m3_to_f32(const uint8_t* src, float* dst, int64_t n) {
  const std::array<float, 256>& table = e4m3_table();
  for (int64_t i = 0; i < n; ++i) dst[i] = table[src[i]];
}

}  // namespace hart
