#include "kernels/quant/quant.h"

#include "kernels/quant/quant_test_util.h"
#include "kernels/testing/op_test_util.h"
#include "runtime/core/codecs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace hart {
namespace {

using namespace quant_testing;

// -- independent brute-force reference --------------------------------------

// Nearest value of the table by a full scan, ties to the even code, keeping
// the sign of v (so -tiny -> -0). Saturates at the last entry.
double nearest(const std::vector<double>& mags, double v) {
  const double a = std::fabs(v);
  size_t best = 0;
  for (size_t c = 1; c < mags.size(); ++c) {
    const double d = std::fabs(mags[c] - a), db = std::fabs(mags[best] - a);
    if (d < db || (d == db && c % 2 == 0)) best = c;
  }
  return std::signbit(v) ? -mags[best] : mags[best];
}

// Smallest k with q_max * 2^k >= amax, by search.
int brute_exponent(double amax, double q_max) {
  int k = -300;
  while (std::ldexp(q_max, k) < amax) ++k;
  return k;
}

// The reference's scale: fast_log2_ceil(amax * fp32(1 / q_max)) on fp32 bits.
int bit_trick_exponent(float amax, float q_max) {
  const float prod = amax * (1.0f / q_max);
  uint32_t u;
  std::memcpy(&u, &prod, sizeof u);
  return static_cast<int>((u >> 23) & 0xff) - 127 + ((u & 0x7fffff) != 0 ? 1 : 0);
}

struct rule {
  std::vector<double> mags;
  double q_max;
  double floor;
};

const rule fp8_rule{e4m3_mags(), 448.0, 1e-4f};
const rule fp4_rule{e2m1_mags(), 6.0, std::ldexp(6.0, -126)};

// QDQ of one block in fp64; returns the exponent k used.
int brute_qdq_block(const rule& r, const float* x, float* y, int64_t n) {
  double amax = r.floor;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
  const int k = brute_exponent(amax, r.q_max);
  for (int64_t i = 0; i < n; ++i) {
    const double v = std::ldexp(static_cast<double>(x[i]), -k);
    y[i] = static_cast<float>(std::ldexp(nearest(r.mags, std::clamp(v, -r.q_max, r.q_max)), k));
  }
  return k;
}

// -- scale exponent -----------------------------------------------------------

TEST(quant_scale, exponent_is_exact_and_matches_reference_bit_trick) {
  seeded s;
  SCOPED_TRACE(s.trace());
  std::uniform_real_distribution<double> m(1.0, 2.0);
  std::uniform_int_distribution<int> e(-149, 127);
  for (float q_max : {448.0f, 6.0f}) {
    const float floor = q_max == 448.0f ? fp8_amax_floor : fp4_amax_floor;
    for (int i = 0; i < 200000; ++i) {
      const float amax = static_cast<float>(std::ldexp(m(s.rng), e(s.rng)));
      if (amax == 0.0f || std::isinf(amax)) continue;
      ASSERT_EQ(pow2_scale_exponent(amax, q_max), brute_exponent(amax, q_max)) << amax;
      if (amax >= floor) {
        ASSERT_EQ(pow2_scale_exponent(amax, q_max), bit_trick_exponent(amax, q_max)) << amax;
      }
    }
    // Exact powers of two times q_max and their float neighbours.
    for (int k = -120; k <= 120; ++k) {
      const float edge = std::ldexp(q_max, k);
      if (std::isinf(edge)) continue;  // 448 * 2^120 overflows
      for (float amax : {edge, std::nextafter(edge, 0.0f), std::nextafter(edge, FLT_MAX)}) {
        if (amax < floor) continue;
        const int expect = brute_exponent(amax, q_max);
        ASSERT_EQ(pow2_scale_exponent(amax, q_max), expect) << amax;
        ASSERT_EQ(bit_trick_exponent(amax, q_max), expect) << amax;
      }
      ASSERT_EQ(pow2_scale_exponent(edge, q_max), k);
    }
  }
  EXPECT_EQ(pow2_scale_exponent(fp8_amax_floor, 448.0f), -22);
  EXPECT_EQ(pow2_scale_exponent(fp4_amax_floor, 6.0f), -126);
  EXPECT_EQ(pow2_scale_exponent(FLT_MAX, 448.0f), 120);
  EXPECT_EQ(pow2_scale_exponent(INFINITY, 448.0f), 128);
}

// -- FP8 activations ------------------------------------------------------------

TEST(quant_act_fp8, qdq_matches_brute_force_and_is_bf16_exact) {
  seeded s;
  SCOPED_TRACE(s.trace());
  for (int64_t block : {128, 64, 7, 1}) {
    const int64_t n = block * 97;
    std::vector<float> x = random_blocks(s.rng, n, block, -40, 40);
    std::vector<float> expect(n);
    for (int64_t b = 0; b < n / block; ++b)
      brute_qdq_block(fp8_rule, &x[b * block], &expect[b * block], block);
    ASSERT_TRUE(act_quant_fp8_qdq(x.data(), n, block).ok());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(bits_of(x[i]), bits_of(expect[i])) << "block " << block << " i " << i;
      ASSERT_EQ(round_to_bf16(x[i]), x[i]) << "not bf16-exact at " << i;
    }
  }
}

TEST(quant_act_fp8, codes_scales_and_dequantize) {
  seeded s;
  SCOPED_TRACE(s.trace());
  const int64_t block = 128, n = block * 41;
  const std::vector<float> x = random_blocks(s.rng, n, block, -30, 30);
  std::vector<uint8_t> q(n);
  std::vector<float> scales(n / block), out(n), qdq = x, expect(n);
  ASSERT_TRUE(act_quant_fp8(x.data(), n, block, q.data(), scales.data()).ok());
  ASSERT_TRUE(act_dequant_fp8(q.data(), scales.data(), n, block, out.data()).ok());
  ASSERT_TRUE(act_quant_fp8_qdq(qdq.data(), n, block).ok());
  for (int64_t b = 0; b < n / block; ++b) {
    const int k = brute_qdq_block(fp8_rule, &x[b * block], &expect[b * block], block);
    ASSERT_EQ(scales[b], std::ldexp(1.0f, k)) << b;
  }
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(bits_of(out[i]), bits_of(expect[i])) << i;
    ASSERT_EQ(bits_of(out[i]), bits_of(qdq[i])) << i;
    ASSERT_EQ(static_cast<double>(f32_from_e4m3(q[i])) * scales[i / block], out[i]) << i;
  }
}

TEST(quant_act_fp8, edge_cases) {
  // All zeros: the floor 1e-4 gives s = 2^-22; zeros (and their signs) survive.
  std::vector<float> z(64, 0.0f);
  z[3] = -0.0f;
  std::vector<uint8_t> q(64);
  std::vector<float> sc(1);
  ASSERT_TRUE(act_quant_fp8(z.data(), 64, 64, q.data(), sc.data()).ok());
  EXPECT_EQ(sc[0], std::ldexp(1.0f, -22));
  EXPECT_EQ(q[0], 0x00);
  EXPECT_EQ(q[3], 0x80);
  ASSERT_TRUE(act_quant_fp8_qdq(z.data(), 64, 64).ok());
  for (float v : z) EXPECT_EQ(v, 0.0f);
  EXPECT_TRUE(std::signbit(z[3]));

  // One huge value: it takes the top of the range, small ones flush to zero.
  std::vector<float> h(64, 1e-3f);
  h[10] = -1e6f;
  ASSERT_TRUE(act_quant_fp8(h.data(), 64, 64, q.data(), sc.data()).ok());
  EXPECT_EQ(sc[0], 4096.0f);                 // ceil(log2(1e6 / 448)) = 12
  EXPECT_EQ(f32_from_e4m3(q[10]), -240.0f);  // 1e6 / 4096 = 244.1; grid step 16 here
  EXPECT_EQ(q[0], 0x00);

  // amax exactly q_max * 2^k uses s = 2^k, and the max element hits +-448.
  for (int k : {-10, 0, 3}) {
    std::vector<float> p(32, std::ldexp(1.0f, k));
    p[7] = -std::ldexp(448.0f, k);
    ASSERT_TRUE(act_quant_fp8(p.data(), 32, 32, q.data(), sc.data()).ok());
    EXPECT_EQ(sc[0], std::ldexp(1.0f, k)) << k;
    EXPECT_EQ(q[7], 0xfe) << k;
    p[7] = std::nextafter(p[7], -INFINITY);  // just past: next scale up
    ASSERT_TRUE(act_quant_fp8(p.data(), 32, 32, q.data(), sc.data()).ok());
    EXPECT_EQ(sc[0], std::ldexp(1.0f, k + 1)) << k;
  }

  // All-negative block is the mirror image of the positive one.
  seeded s;
  SCOPED_TRACE(s.trace());
  std::vector<float> pos = random_blocks(s.rng, 128, 128, 0, 0), neg(128);
  for (float& v : pos) v = std::fabs(v) + 1e-3f;
  for (int i = 0; i < 128; ++i) neg[i] = -pos[i];
  ASSERT_TRUE(act_quant_fp8_qdq(pos.data(), 128, 128).ok());
  ASSERT_TRUE(act_quant_fp8_qdq(neg.data(), 128, 128).ok());
  for (int i = 0; i < 128; ++i) EXPECT_EQ(neg[i], -pos[i]) << i;

  // A NaN element stays NaN and does not change the block's scale.
  std::vector<float> nan_block(16, 1.0f), clean(16, 1.0f);
  nan_block[2] = NAN;
  ASSERT_TRUE(act_quant_fp8_qdq(nan_block.data(), 16, 16).ok());
  ASSERT_TRUE(act_quant_fp8_qdq(clean.data(), 16, 16).ok());
  EXPECT_TRUE(std::isnan(nan_block[2]));
  EXPECT_EQ(nan_block[0], clean[0]);
}

TEST(quant_act_fp8, invalid_arguments) {
  std::vector<float> x(100, 1.0f);
  std::vector<uint8_t> q(100);
  std::vector<float> sc(100);
  EXPECT_EQ(act_quant_fp8_qdq(x.data(), 100, 64).code(), status_code::invalid_argument);
  EXPECT_EQ(act_quant_fp8_qdq(x.data(), 64, 0).code(), status_code::invalid_argument);
  EXPECT_EQ(act_quant_fp8_qdq(x.data(), -64, 64).code(), status_code::invalid_argument);
  EXPECT_EQ(act_quant_fp8_qdq(nullptr, 64, 64).code(), status_code::invalid_argument);
  EXPECT_TRUE(act_quant_fp8_qdq(nullptr, 0, 64).ok());
  status st = act_quant_fp8(x.data(), 100, 128, q.data(), sc.data());
  EXPECT_EQ(st.code(), status_code::invalid_argument);
  EXPECT_NE(st.message().find("act_quant_fp8: n=100 is not a multiple of block=128"), std::string::npos)
      << st.message();
  EXPECT_EQ(act_dequant_fp8(q.data(), sc.data(), 100, 3, x.data()).code(), status_code::invalid_argument);
  EXPECT_EQ(fp4_act_qdq(x.data(), 100, 32).code(), status_code::invalid_argument);
}

// -- FP4 activations --------------------------------------------------------------

TEST(quant_act_fp4, qdq_matches_brute_force_and_is_bf16_exact) {
  seeded s;
  SCOPED_TRACE(s.trace());
  for (int64_t block : {32, 16, 5}) {
    const int64_t n = block * 211;
    std::vector<float> x = random_blocks(s.rng, n, block, -130, 60);
    std::vector<float> expect(n);
    for (int64_t b = 0; b < n / block; ++b)
      brute_qdq_block(fp4_rule, &x[b * block], &expect[b * block], block);
    ASSERT_TRUE(fp4_act_qdq(x.data(), n, block).ok());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(bits_of(x[i]), bits_of(expect[i])) << "block " << block << " i " << i;
      ASSERT_EQ(round_to_bf16(x[i]), x[i]) << "not bf16-exact at " << i;
    }
  }
}

TEST(quant_act_fp4, edge_cases) {
  std::vector<float> z(32, 0.0f);
  ASSERT_TRUE(fp4_act_qdq(z.data(), 32, 32).ok());
  for (float v : z) EXPECT_EQ(v, 0.0f);
  // Below the floor 6 * 2^-126 the scale stays 2^-126; the results are
  // multiples of 2^-127, fp32 (and bf16) subnormals, still exact.
  std::vector<float> tiny(32, 0x1p-127f);
  tiny[0] = 0x1.8p-126f;
  tiny[1] = -0x1p-128f;
  ASSERT_TRUE(fp4_act_qdq(tiny.data(), 32, 32).ok());
  EXPECT_EQ(tiny[0], 0x1.8p-126f);
  EXPECT_EQ(tiny[2], 0x1p-127f);
  EXPECT_EQ(tiny[1], 0.0f);  // -0.25 * 2^-126 ties to -0
  EXPECT_TRUE(std::signbit(tiny[1]));
  // amax = 6 exactly: s = 1 and the grid is the e2m1 table itself.
  std::vector<float> g = {6.0f, -5.0f, 2.5f, 0.25f, 0.75f, 3.5f, -0.3f, 1.25f};
  ASSERT_TRUE(fp4_act_qdq(g.data(), 8, 8).ok());
  const std::vector<float> expect = {6.0f, -4.0f, 2.0f, 0.0f, 1.0f, 4.0f, -0.5f, 1.0f};
  EXPECT_EQ(g, expect);
}

// -- Hadamard -------------------------------------------------------------------

TEST(quant_hadamard, matches_sylvester_matrix) {
  seeded s;
  SCOPED_TRACE(s.trace());
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  for (int64_t n = 1; n <= 256; n *= 2) {
    std::vector<float> x(n);
    for (float& v : x) v = u(s.rng);
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(n)));
    std::vector<float> y = x;
    ASSERT_TRUE(hadamard_transform(y.data(), n, scale).ok());
    for (int64_t i = 0; i < n; ++i) {
      double acc = 0;
      for (int64_t j = 0; j < n; ++j) acc += (__builtin_popcountll(i & j) % 2 ? -1.0 : 1.0) * x[j];
      ASSERT_NEAR(y[i], acc * scale, 1e-6 * (1 + std::fabs(acc * scale))) << "n " << n << " i " << i;
    }
    // Orthonormal with scale n^-0.5: applying it twice is the identity.
    ASSERT_TRUE(hadamard_transform(y.data(), n, scale).ok());
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y[i], x[i], 1e-5) << "n " << n;
  }
}

TEST(quant_hadamard, basis_vectors_give_exact_rows_and_h_squared_is_n_identity) {
  for (int64_t n = 1; n <= 256; n *= 2) {
    for (int64_t j = 0; j < n; ++j) {
      std::vector<float> e(n, 0.0f);
      e[j] = 1.0f;
      ASSERT_TRUE(hadamard_transform(e.data(), n, 1.0f).ok());
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(e[i], __builtin_popcountll(i & j) % 2 ? -1.0f : 1.0f);
      ASSERT_TRUE(hadamard_transform(e.data(), n, 1.0f).ok());
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(e[i], i == j ? static_cast<float>(n) : 0.0f);
    }
  }
  std::vector<float> h4 = {1.0f, 2.0f, 3.0f, 4.0f};
  ASSERT_TRUE(hadamard_transform(h4.data(), 4, 0.5f).ok());
  EXPECT_EQ(h4, (std::vector<float>{5.0f, -1.0f, -2.0f, 0.0f}));
  std::vector<float> x(12);
  EXPECT_EQ(hadamard_transform(x.data(), 12, 1.0f).code(), status_code::invalid_argument);
  EXPECT_EQ(hadamard_transform(x.data(), 0, 1.0f).code(), status_code::invalid_argument);
  EXPECT_EQ(hadamard_transform(x.data(), 3, 1.0f).code(), status_code::invalid_argument);
}

// -- FP8 weights ------------------------------------------------------------------

TEST(quant_fp8_weight, quantize_dequantize_matches_brute_force_with_error_bound) {
  seeded s;
  SCOPED_TRACE(s.trace());
  struct shape {
    int64_t rows, cols, block;
  };
  for (shape sh : {shape{300, 200, 128}, shape{128, 256, 128}, shape{1, 1, 128}, shape{19, 111, 16}}) {
    const int64_t rows = sh.rows, cols = sh.cols, block = sh.block;
    const int64_t n_rb = (rows + block - 1) / block, n_cb = (cols + block - 1) / block;
    const std::vector<float> w = random_matrix(s.rng, rows, cols);
    std::vector<uint8_t> q(rows * cols), sc(n_rb * n_cb);
    std::vector<float> out(rows * cols), out_f(rows * cols);
    ASSERT_TRUE(fp8_block_quantize(w.data(), rows, cols, block, q.data(), sc.data()).ok());
    ASSERT_TRUE(fp8_block_dequantize(q.data(), sc.data(), rows, cols, block, out.data()).ok());
    std::vector<float> sc_f(n_rb * n_cb);
    for (size_t i = 0; i < sc.size(); ++i) sc_f[i] = f32_from_e8m0(sc[i]);
    ASSERT_TRUE(fp8_block_dequantize(q.data(), sc_f.data(), rows, cols, block, out_f.data()).ok());
    for (int64_t rb = 0; rb < n_rb; ++rb) {
      for (int64_t cb = 0; cb < n_cb; ++cb) {
        double amax = 1e-4f;
        for (int64_t r = rb * block; r < std::min(rows, (rb + 1) * block); ++r)
          for (int64_t c = cb * block; c < std::min(cols, (cb + 1) * block); ++c)
            amax = std::max(amax, std::fabs(static_cast<double>(w[r * cols + c])));
        const int k = brute_exponent(amax, 448.0);
        ASSERT_EQ(sc[rb * n_cb + cb], k + 127) << rb << "," << cb;
        for (int64_t r = rb * block; r < std::min(rows, (rb + 1) * block); ++r) {
          for (int64_t c = cb * block; c < std::min(cols, (cb + 1) * block); ++c) {
            const int64_t i = r * cols + c;
            const double v = nearest(fp8_rule.mags, std::ldexp(static_cast<double>(w[i]), -k));
            ASSERT_EQ(bits_of(f32_from_e4m3(q[i])), bits_of(static_cast<float>(v))) << r << "," << c;
            ASSERT_EQ(bits_of(out[i]), bits_of(static_cast<float>(std::ldexp(v, k))));
            ASSERT_EQ(bits_of(out_f[i]), bits_of(out[i]));
            const double err = std::fabs(out[i] - static_cast<double>(w[i]));
            ASSERT_LE(err, std::ldexp(amax, -4)) << "relative to the block max";
            ASSERT_LE(err, std::ldexp(std::fabs(w[i]), -4) + std::ldexp(1.0, k - 10)) << "per element";
          }
        }
      }
    }
  }
}

TEST(quant_fp8_weight, f32_scales_and_errors) {
  seeded s;
  SCOPED_TRACE(s.trace());
  // Non-power-of-two F32 scales (weight_scale_inv = amax / 448 checkpoints).
  const int64_t rows = 130, cols = 129, block = 128;
  std::vector<uint8_t> q(rows * cols);
  for (uint8_t& v : q) v = static_cast<uint8_t>(s.rng() % 0x7f);  // no NaN codes
  std::vector<float> sc = {0.0123f, 3.7f, 1e-5f, 255.5f}, out(rows * cols);
  ASSERT_TRUE(fp8_block_dequantize(q.data(), sc.data(), rows, cols, block, out.data()).ok());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      ASSERT_EQ(out[r * cols + c], f32_from_e4m3(q[r * cols + c]) * sc[(r / block) * 2 + c / block]);

  std::vector<uint8_t> sc8 = {127, 127, 0xff, 127};
  status st = fp8_block_dequantize(q.data(), sc8.data(), rows, cols, block, out.data());
  EXPECT_EQ(st.code(), status_code::data_loss);
  EXPECT_NE(st.message().find("scale_e8m0[1, 0]"), std::string::npos) << st.message();
  sc[3] = NAN;
  EXPECT_EQ(fp8_block_dequantize(q.data(), sc.data(), rows, cols, block, out.data()).code(),
            status_code::data_loss);
  std::vector<float> w(rows * cols, 1.0f);
  EXPECT_EQ(fp8_block_quantize(w.data(), rows, cols, 0, q.data(), sc8.data()).code(),
            status_code::invalid_argument);
  EXPECT_EQ(fp8_block_quantize(w.data(), -1, cols, block, q.data(), sc8.data()).code(),
            status_code::invalid_argument);
  w[5] = INFINITY;
  EXPECT_EQ(fp8_block_quantize(w.data(), rows, cols, block, q.data(), sc8.data()).code(),
            status_code::invalid_argument);
}

// -- MXFP4 weights ----------------------------------------------------------------

TEST(quant_mxfp4, hand_made_bytes) {
  std::vector<uint8_t> packed(2 * 16, 0), sc = {128, 126};  // scales 2 and 0.5
  packed[0] = 0x2b;   // row 0: k=0 low nibble 0xb = -1.5, k=1 high nibble 0x2 = 1.0
  packed[16] = 0x7f;  // row 1: k=0 0xf = -6, k=1 0x7 = 6
  packed[31] = 0x50;  // row 1: k=30 0x0 = 0, k=31 0x5 = 3
  std::vector<float> out(2 * 32);
  ASSERT_TRUE(mxfp4_dequantize(packed.data(), sc.data(), 2, 32, out.data()).ok());
  EXPECT_EQ(out[0], -3.0f);
  EXPECT_EQ(out[1], 2.0f);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_EQ(out[32], -3.0f);
  EXPECT_EQ(out[33], 3.0f);
  EXPECT_EQ(out[62], 0.0f);
  EXPECT_EQ(out[63], 1.5f);

  std::vector<float> w(32, 0.0f);
  w[0] = 1.0f, w[1] = -1.5f, w[2] = 6.0f, w[31] = -0.5f;
  ASSERT_TRUE(mxfp4_quantize(w.data(), 1, 32, packed.data(), sc.data()).ok());
  EXPECT_EQ(sc[0], 127);  // amax 6 -> s = 1
  EXPECT_EQ(packed[0], 0xb2);
  EXPECT_EQ(packed[1], 0x07);
  EXPECT_EQ(packed[15], 0x90);
}

TEST(quant_mxfp4, quantize_matches_brute_force_and_fp4_act_qdq) {
  seeded s;
  SCOPED_TRACE(s.trace());
  const int64_t rows = 37, cols = 7 * 32;
  const std::vector<float> w = random_blocks(s.rng, rows * cols, 32, -126, 100);
  std::vector<uint8_t> packed(rows * cols / 2), sc(rows * cols / 32);
  std::vector<float> out(rows * cols), expect(rows * cols), qdq = w;
  ASSERT_TRUE(mxfp4_quantize(w.data(), rows, cols, packed.data(), sc.data()).ok());
  ASSERT_TRUE(mxfp4_dequantize(packed.data(), sc.data(), rows, cols, out.data()).ok());
  ASSERT_TRUE(fp4_act_qdq(qdq.data(), rows * cols, 32).ok());
  for (int64_t g = 0; g < rows * cols / 32; ++g) {
    const int k = brute_qdq_block(fp4_rule, &w[g * 32], &expect[g * 32], 32);
    ASSERT_EQ(sc[g], k + 127) << g;
  }
  for (int64_t i = 0; i < rows * cols; ++i) {
    ASSERT_EQ(bits_of(out[i]), bits_of(expect[i])) << i;
    ASSERT_EQ(bits_of(out[i]), bits_of(qdq[i])) << i;
  }
  EXPECT_EQ(mxfp4_quantize(w.data(), 1, 48, packed.data(), sc.data()).code(), status_code::invalid_argument);
  EXPECT_EQ(mxfp4_dequantize(packed.data(), sc.data(), 1, 48, out.data()).code(),
            status_code::invalid_argument);
  sc[3] = 0xff;
  EXPECT_EQ(mxfp4_dequantize(packed.data(), sc.data(), rows, cols, out.data()).code(),
            status_code::data_loss);
}

}  // namespace
}  // namespace hart
