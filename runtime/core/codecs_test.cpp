#include "runtime/core/codecs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace hart {
namespace {

// -- independent reference helpers -------------------------------------------

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

const float nan_f = std::numeric_limits<float>::quiet_NaN();
const float inf_f = std::numeric_limits<float>::infinity();

// Nearest entry of an increasing magnitude table (index = magnitude code) to
// a >= 0; exact ties go to the even index; beyond the last entry saturates.
uint32_t nearest_code(const std::vector<double>& mags, double a) {
  auto it = std::lower_bound(mags.begin(), mags.end(), a);
  if (it == mags.end()) return static_cast<uint32_t>(mags.size() - 1);
  const uint32_t hi = static_cast<uint32_t>(it - mags.begin());
  if (hi == 0 || *it == a) return hi;
  const uint32_t lo = hi - 1;
  const double d_lo = a - mags[lo], d_hi = mags[hi] - a;
  if (d_lo < d_hi) return lo;
  if (d_hi < d_lo) return hi;
  return (lo % 2 == 0) ? lo : hi;
}

// Value formulas written from the format definitions, not from codecs.cpp.
double e4m3_formula(uint32_t c) {
  const int e = (c >> 3) & 0xf, m = c & 7;
  const double mag = e == 0 ? std::ldexp(m, -9) : std::ldexp(1.0 + m / 8.0, e - 7);
  return (c & 0x80) ? -mag : mag;
}

double e2m1_formula(uint32_t c) {
  const int e = (c >> 1) & 3, m = c & 1;
  const double mag = e == 0 ? 0.5 * m : std::ldexp(1.0 + m / 2.0, e - 1);
  return (c & 8) ? -mag : mag;
}

// Magnitude tables; bf16 code 0x7f80 (inf) counts as 2^128 for rounding (IEEE).
std::vector<double> bf16_mags() {
  std::vector<double> t;
  for (uint32_t c = 0; c < 0x7f80; ++c) t.push_back(f32_from_bf16(static_cast<uint16_t>(c)));
  t.push_back(std::ldexp(1.0, 128));
  return t;
}

std::vector<double> e4m3_mags() {
  std::vector<double> t;
  for (uint32_t c = 0; c <= 0x7e; ++c) t.push_back(e4m3_formula(c));
  return t;
}

std::vector<double> e2m1_mags() {
  std::vector<double> t;
  for (uint32_t c = 0; c <= 7; ++c) t.push_back(e2m1_formula(c));
  return t;
}

uint32_t bf16_reference(float x) {
  const uint32_t sign = (bits_of(x) >> 16) & 0x8000u;
  return sign | nearest_code(bf16_mags(), std::fabs(static_cast<double>(x)));
}

// Random fp32 with uniform bit patterns (NaN excluded) and log-uniform values.
float random_bits_float(std::mt19937& rng) {
  for (;;) {
    const float x = float_of(static_cast<uint32_t>(rng()));
    if (!std::isnan(x)) return x;
  }
}

float random_log_float(std::mt19937& rng, int lo_exp, int hi_exp) {
  std::uniform_real_distribution<double> m(1.0, 2.0);
  std::uniform_int_distribution<int> e(lo_exp, hi_exp);
  const float v = static_cast<float>(std::ldexp(m(rng), e(rng)));
  return (rng() & 1) ? -v : v;
}

std::string seed_trace(uint32_t seed) {
  return "seed=" + std::to_string(seed);
}

// -- bf16 -------------------------------------------------------------------

TEST(codecs_bf16, exhaustive_round_trip) {
  for (uint32_t c = 0; c < 65536; ++c) {
    const uint16_t b = static_cast<uint16_t>(c);
    const float f = f32_from_bf16(b);
    ASSERT_EQ(bits_of(f), c << 16) << c;
    const uint16_t back = bf16_from_f32(f);
    if ((c & 0x7f80) == 0x7f80 && (c & 0x7f)) {
      ASSERT_TRUE(std::isnan(f)) << c;
      ASSERT_TRUE(std::isnan(f32_from_bf16(back))) << c;
      ASSERT_EQ(back, c | 0x40u) << "NaN keeps sign and payload, becomes quiet: " << c;
    } else {
      ASSERT_EQ(back, b) << c;
    }
  }
}

TEST(codecs_bf16, midpoints_tie_to_even) {
  for (uint32_t c = 0; c < 0x7f80; ++c) {
    const double lo = f32_from_bf16(static_cast<uint16_t>(c));
    const double hi = c + 1 == 0x7f80 ? std::ldexp(1.0, 128) : f32_from_bf16(c + 1);
    const float mid = static_cast<float>((lo + hi) / 2);  // exact: one more bit
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    const uint32_t even = (c % 2 == 0) ? c : c + 1;
    ASSERT_EQ(bf16_from_f32(mid), even) << c;
    ASSERT_EQ(bf16_from_f32(-mid), even | 0x8000u) << c;
    ASSERT_EQ(bf16_from_f32(std::nextafter(mid, 0.0f)), c) << c;
    ASSERT_EQ(bf16_from_f32(std::nextafter(mid, inf_f)), c + 1) << c;
  }
}

TEST(codecs_bf16, random_matches_table_search) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const std::vector<double> mags = bf16_mags();
  for (int i = 0; i < 300000; ++i) {
    const float x = (i % 2) ? random_bits_float(rng) : random_log_float(rng, -140, 127);
    const uint32_t sign = (bits_of(x) >> 16) & 0x8000u;
    ASSERT_EQ(bf16_from_f32(x), sign | nearest_code(mags, std::fabs(static_cast<double>(x))))
        << "x bits " << std::hex << bits_of(x);
  }
}

TEST(codecs_bf16, specials) {
  EXPECT_EQ(bf16_from_f32(FLT_MAX), 0x7f80) << "overflow rounds to inf";
  EXPECT_EQ(bf16_from_f32(-FLT_MAX), 0xff80);
  EXPECT_EQ(bf16_from_f32(inf_f), 0x7f80);
  EXPECT_EQ(bf16_from_f32(-inf_f), 0xff80);
  EXPECT_EQ(bf16_from_f32(float_of(0x7f800001u)), 0x7fc0) << "signaling NaN becomes quiet";
  EXPECT_EQ(bf16_from_f32(float_of(0xffa00000u)), 0xffe0);
  EXPECT_EQ(bf16_from_f32(-0.0f), 0x8000);
  EXPECT_EQ(bf16_from_f32(float_of(1)), 0x0000) << "smallest fp32 subnormal";
  EXPECT_EQ(bf16_from_f32(-float_of(1)), 0x8000);
  EXPECT_EQ(round_to_bf16(1.0f + 0x1p-8f), 1.0f);
  EXPECT_EQ(round_to_bf16(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);
  EXPECT_EQ(round_to_bf16(3.14159f), 3.140625f);
  EXPECT_EQ(bf16_reference(3.14159f), bf16_from_f32(3.14159f));
}

// -- f16 --------------------------------------------------------------------

TEST(codecs_f16, exhaustive_decode) {
  for (uint32_t c = 0; c < 65536; ++c) {
    const float f = f32_from_f16(static_cast<uint16_t>(c));
    const int e = (c >> 10) & 0x1f, m = c & 0x3ff;
    const bool neg = c & 0x8000;
    if (e == 0x1f && m) {
      ASSERT_TRUE(std::isnan(f)) << c;
      ASSERT_EQ(std::signbit(f), neg) << c;
      continue;
    }
    double mag = e == 0x1f ? HUGE_VAL : e == 0 ? std::ldexp(m, -24) : std::ldexp(1.0 + m / 1024.0, e - 15);
    ASSERT_EQ(static_cast<double>(f), neg ? -mag : mag) << c;
    ASSERT_EQ(std::signbit(f), neg) << c;
  }
}

// -- e4m3 -------------------------------------------------------------------

TEST(codecs_e4m3, exhaustive_round_trip) {
  for (uint32_t c = 0; c < 256; ++c) {
    const uint8_t q = static_cast<uint8_t>(c);
    const float f = f32_from_e4m3(q);
    if ((c & 0x7f) == 0x7f) {
      ASSERT_TRUE(std::isnan(f)) << c;
      ASSERT_EQ(e4m3_from_f32(f), 0x7f) << c;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), e4m3_formula(c)) << c;
    ASSERT_EQ(std::signbit(f), (c & 0x80) != 0) << c;
    ASSERT_EQ(e4m3_from_f32(f), q) << c;
  }
  EXPECT_EQ(f32_from_e4m3(0x7e), 448.0f);
  EXPECT_EQ(f32_from_e4m3(0x01), 0x1p-9f);
  EXPECT_EQ(f32_from_e4m3(0x08), 0x1p-6f);
  EXPECT_EQ(f32_from_e4m3(0x38), 1.0f);
}

TEST(codecs_e4m3, midpoints_tie_to_even) {
  for (uint32_t c = 0; c < 0x7e; ++c) {
    const double lo = e4m3_formula(c), hi = e4m3_formula(c + 1);
    const float mid = static_cast<float>((lo + hi) / 2);
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    const uint32_t even = (c % 2 == 0) ? c : c + 1;
    ASSERT_EQ(e4m3_from_f32(mid), even) << c;
    ASSERT_EQ(e4m3_from_f32(-mid), even | 0x80u) << c;
    ASSERT_EQ(e4m3_from_f32(std::nextafter(mid, 0.0f)), c) << c;
    ASSERT_EQ(e4m3_from_f32(std::nextafter(mid, inf_f)), c + 1) << c;
  }
}

TEST(codecs_e4m3, random_matches_table_scan) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const std::vector<double> mags = e4m3_mags();
  for (int i = 0; i < 300000; ++i) {
    const float x = (i % 4 == 0) ? random_bits_float(rng) : random_log_float(rng, -12, 10);
    const uint32_t sign = (bits_of(x) >> 24) & 0x80u;
    ASSERT_EQ(e4m3_from_f32(x), sign | nearest_code(mags, std::fabs(static_cast<double>(x)))) << "x=" << x;
  }
}

TEST(codecs_e4m3, saturation_nan_subnormals_signed_zero) {
  for (float v : {448.0f, 449.0f, 464.0f, 465.0f, 480.0f, 1e6f, FLT_MAX, inf_f}) {
    EXPECT_EQ(e4m3_from_f32(v), 0x7e) << v;
    EXPECT_EQ(e4m3_from_f32(-v), 0xfe) << v;
  }
  EXPECT_EQ(e4m3_from_f32(nan_f), 0x7f);
  EXPECT_EQ(e4m3_from_f32(-nan_f), 0x7f);
  EXPECT_EQ(e4m3_from_f32(416.0f), 0x7d);
  EXPECT_EQ(e4m3_from_f32(400.0f), 0x7c) << "midpoint of 384 (0x7c) and 416 (0x7d)";
  EXPECT_EQ(e4m3_from_f32(432.0f), 0x7e) << "midpoint of 416 (0x7d) and 448 (0x7e)";
  EXPECT_EQ(e4m3_from_f32(0x1p-9f), 0x01);
  EXPECT_EQ(e4m3_from_f32(0x1p-10f), 0x00) << "half of min subnormal ties to zero";
  EXPECT_EQ(e4m3_from_f32(std::nextafter(0x1p-10f, 1.0f)), 0x01);
  EXPECT_EQ(e4m3_from_f32(3 * 0x1p-10f), 0x02) << "1.5 units ties to 2 units";
  EXPECT_EQ(e4m3_from_f32(15 * 0x1p-10f), 0x08) << "7.5 units ties to 2^-6 (code 8)";
  EXPECT_EQ(e4m3_from_f32(-0x1p-10f), 0x80);
  EXPECT_EQ(e4m3_from_f32(float_of(1)), 0x00);
  EXPECT_EQ(e4m3_from_f32(-float_of(1)), 0x80);
  EXPECT_EQ(e4m3_from_f32(-0.0f), 0x80);
  EXPECT_TRUE(std::signbit(f32_from_e4m3(0x80)));
  EXPECT_EQ(f32_from_e4m3(0x80), 0.0f);
}

// -- e8m0 -------------------------------------------------------------------

TEST(codecs_e8m0, exhaustive) {
  for (int e = 0; e < 255; ++e) {
    const float f = f32_from_e8m0(static_cast<uint8_t>(e));
    ASSERT_EQ(static_cast<double>(f), std::ldexp(1.0, e - 127)) << e;
    ASSERT_EQ(e8m0_from_exponent(e - 127), e) << e;
    int exp = 0;
    ASSERT_EQ(std::frexp(f, &exp), 0.5f) << e;
    ASSERT_EQ(exp - 1, e - 127) << e;
  }
  EXPECT_TRUE(std::isnan(f32_from_e8m0(0xff)));
  EXPECT_EQ(e8m0_from_exponent(-128), 0);
  EXPECT_EQ(e8m0_from_exponent(-1000), 0);
  EXPECT_EQ(e8m0_from_exponent(128), 254);
  EXPECT_EQ(e8m0_from_exponent(1000), 254);
  EXPECT_EQ(f32_from_e8m0(127), 1.0f);
}

// -- e2m1 -------------------------------------------------------------------

TEST(codecs_e2m1, exhaustive_round_trip) {
  const float expect[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (uint32_t c = 0; c < 16; ++c) {
    const float f = f32_from_e2m1(static_cast<uint8_t>(c));
    ASSERT_EQ(static_cast<double>(f), e2m1_formula(c)) << c;
    ASSERT_EQ(std::fabs(f), expect[c & 7]) << c;
    ASSERT_EQ(std::signbit(f), (c & 8) != 0) << c;
    ASSERT_EQ(e2m1_from_f32(f), c) << c;
  }
  EXPECT_EQ(f32_from_e2m1(0xf3), 1.5f) << "bits above bit 3 are ignored";
  EXPECT_EQ(f32_from_e2m1(0x1b), -1.5f) << "bits above bit 3 are ignored";
}

TEST(codecs_e2m1, midpoints_tie_to_even) {
  for (uint32_t c = 0; c < 7; ++c) {
    const double lo = e2m1_formula(c), hi = e2m1_formula(c + 1);
    const float mid = static_cast<float>((lo + hi) / 2);
    const uint32_t even = (c % 2 == 0) ? c : c + 1;
    ASSERT_EQ(e2m1_from_f32(mid), even) << c;
    ASSERT_EQ(e2m1_from_f32(-mid), even | 8u) << c;
    ASSERT_EQ(e2m1_from_f32(std::nextafter(mid, 0.0f)), c) << c;
    ASSERT_EQ(e2m1_from_f32(std::nextafter(mid, inf_f)), c + 1) << c;
  }
  // The same ties spelled out: 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4.
  const float in[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  const float out[] = {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 4.0f, 4.0f};
  for (int i = 0; i < 7; ++i) EXPECT_EQ(f32_from_e2m1(e2m1_from_f32(in[i])), out[i]) << in[i];
}

TEST(codecs_e2m1, random_saturation_nan) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const std::vector<double> mags = e2m1_mags();
  for (int i = 0; i < 200000; ++i) {
    const float x = (i % 4 == 0) ? random_bits_float(rng) : random_log_float(rng, -4, 4);
    const uint32_t sign = (bits_of(x) >> 28) & 0x8u;
    ASSERT_EQ(e2m1_from_f32(x), sign | nearest_code(mags, std::fabs(static_cast<double>(x)))) << "x=" << x;
  }
  for (float v : {6.0f, 6.5f, 7.0f, 8.0f, 1e9f, FLT_MAX, inf_f}) {
    EXPECT_EQ(e2m1_from_f32(v), 0x7) << v;
    EXPECT_EQ(e2m1_from_f32(-v), 0xf) << v;
  }
  EXPECT_EQ(e2m1_from_f32(nan_f), 0x7);
  EXPECT_EQ(e2m1_from_f32(-0.0f), 0x8);
  EXPECT_EQ(e2m1_from_f32(-0.1f), 0x8);
  EXPECT_EQ(e2m1_from_f32(float_of(1)), 0x0);
}

// -- bulk -------------------------------------------------------------------

TEST(codecs_bulk, matches_scalar) {
  std::vector<uint16_t> codes16(65536);
  for (uint32_t c = 0; c < 65536; ++c) codes16[c] = static_cast<uint16_t>(c);
  std::vector<float> out(65536);
  bf16_to_f32(codes16.data(), out.data(), 65536);
  for (uint32_t c = 0; c < 65536; ++c) ASSERT_EQ(bits_of(out[c]), bits_of(f32_from_bf16(codes16[c])));
  std::vector<uint16_t> back(65536);
  f32_to_bf16(out.data(), back.data(), 65536);
  for (uint32_t c = 0; c < 65536; ++c) ASSERT_EQ(back[c], bf16_from_f32(out[c]));
  f16_to_f32(codes16.data(), out.data(), 65536);
  for (uint32_t c = 0; c < 65536; ++c) ASSERT_EQ(bits_of(out[c]), bits_of(f32_from_f16(codes16[c])));
  std::vector<uint8_t> codes8(256);
  for (uint32_t c = 0; c < 256; ++c) codes8[c] = static_cast<uint8_t>(c);
  e4m3_to_f32(codes8.data(), out.data(), 256);
  for (uint32_t c = 0; c < 256; ++c) ASSERT_EQ(bits_of(out[c]), bits_of(f32_from_e4m3(codes8[c])));
  bf16_to_f32(codes16.data(), out.data(), 0);  // n = 0 is a no-op
}

}  // namespace
}  // namespace hart
