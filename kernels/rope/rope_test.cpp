// rope_cpu against a double-precision rotation written from v4-model.md §8.2:
// the trailing rope_dim channels of each head form pairs (x[2i], x[2i+1]),
// rotated by angle pos·inv_freq[i] (x[2i]' = x[2i]cos − x[2i+1]sin,
// x[2i+1]' = x[2i+1]cos + x[2i]sin), by −angle when `inverse`. The first
// head_dim − rope_dim channels and the gaps between rows are never touched.
//
// NOTE: the reference builds its angle table as torch.outer(t, freqs) in fp32
// (v4-model.md §8.2 "computed in fp32"), so the expected angle here is the fp32
// product float(pos)·inv_freq[i]; cos/sin of it are then taken in double.
// large_positions additionally bounds the distance to the exact-angle rotation.
#include "kernels/rope/rope.h"

#include "kernels/testing/cuda_test_util.h"
#include "kernels/testing/op_test_util.h"
#include "runtime/core/codecs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace hart {
namespace {

// -- test helpers --------------------------------------------------------------

using testing::k_sentinel;  // fill of the gaps between rows
using testing::seed_trace;
using testing::test_seed;

constexpr double k_pi = 3.14159265358979323846;

// inv_freq[i] = theta^(-2i/rope_dim); with `yarn`, v4-model.md §8.3's
// NTK-by-parts ramp (factor 16, original context 65536, beta_fast 32, beta_slow 1).
std::vector<float> make_inv_freq(double theta, int64_t rope_dim, bool yarn) {
  const int64_t half = rope_dim / 2;
  std::vector<float> f(half);
  const double factor = 16, orig = 65536;
  const double low =
      std::max(0.0, std::floor(rope_dim * std::log(orig / (32 * 2 * k_pi)) / (2 * std::log(theta))));
  const double high = std::min(double(rope_dim - 1),
                               std::ceil(rope_dim * std::log(orig / (1 * 2 * k_pi)) / (2 * std::log(theta))));
  for (int64_t i = 0; i < half; ++i) {
    double fi = std::pow(theta, -2.0 * double(i) / double(rope_dim));
    if (yarn) {
      const double ramp = std::min(1.0, std::max(0.0, (double(i) - low) / std::max(high - low, 1e-3)));
      const double smooth = 1.0 - ramp;
      fi = fi * smooth + fi / factor * (1.0 - smooth);
    }
    f[i] = float(fi);
  }
  return f;
}

struct layout {
  int64_t n_rows, n_heads, head_dim, rope_dim, row_stride;  // row_stride 0 = packed
  int64_t stride() const { return row_stride ? row_stride : n_heads * head_dim; }
};

std::string describe(const layout& l) {
  return "n_rows=" + std::to_string(l.n_rows) + " n_heads=" + std::to_string(l.n_heads) +
         " head_dim=" + std::to_string(l.head_dim) + " rope_dim=" + std::to_string(l.rope_dim) +
         " row_stride=" + std::to_string(l.row_stride);
}

std::vector<float> random_rows(std::mt19937& rng, const layout& l) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(l.n_rows * l.stride(), k_sentinel);
  for (int64_t r = 0; r < l.n_rows; ++r) {
    for (int64_t c = 0; c < l.n_heads * l.head_dim; ++c) v[r * l.stride() + c] = nd(rng);
  }
  return v;
}

// Expected result of one call in double. `exact_angle`: pos·inv_freq in double
// instead of the fp32 product. mag[e] = |pair| bounds a rotation's rounding.
void reference(const std::vector<float>& x, const layout& l, const std::vector<int64_t>& pos,
               const std::vector<float>& inv_freq, double attention_factor, bool inverse, bool exact_angle,
               std::vector<double>& want, std::vector<double>& mag) {
  want.assign(x.begin(), x.end());
  mag.assign(x.size(), 0.0);
  const int64_t nope = l.head_dim - l.rope_dim;
  for (int64_t r = 0; r < l.n_rows; ++r) {
    for (int64_t h = 0; h < l.n_heads; ++h) {
      const int64_t base = r * l.stride() + h * l.head_dim + nope;
      for (int64_t i = 0; i < l.rope_dim / 2; ++i) {
        const double angle =
            exact_angle ? double(pos[r]) * double(inv_freq[i]) : double(float(pos[r]) * inv_freq[i]);
        const double c = std::cos(angle) * attention_factor;
        const double s = std::sin(angle) * attention_factor * (inverse ? -1.0 : 1.0);
        const double a = x[base + 2 * i], b = x[base + 2 * i + 1];
        want[base + 2 * i] = a * c - b * s;
        want[base + 2 * i + 1] = b * c + a * s;
        mag[base + 2 * i] = mag[base + 2 * i + 1] = std::hypot(a, b) * std::fabs(attention_factor);
      }
    }
  }
}

// Elements outside the rope channels must be bit-identical to `before`;
// rope channels must satisfy |got − want| <= rtol·mag.
::testing::AssertionResult check(const std::vector<float>& got, const std::vector<float>& before,
                                 const std::vector<double>& want, const std::vector<double>& mag,
                                 const layout& l, double rtol) {
  int64_t n_bad = 0;
  std::ostringstream os;
  os << std::setprecision(9);
  const int64_t nope = l.head_dim - l.rope_dim;
  for (int64_t r = 0; r < l.n_rows; ++r) {
    for (int64_t c = 0; c < l.stride(); ++c) {
      const int64_t e = r * l.stride() + c;
      const bool rotated = c < l.n_heads * l.head_dim && c % l.head_dim >= nope;
      bool ok;
      if (rotated) {
        ok = std::isfinite(got[e]) && std::fabs(got[e] - want[e]) <= rtol * mag[e];
      } else {
        ok = std::memcmp(&got[e], &before[e], sizeof(float)) == 0;
      }
      if (!ok && n_bad++ < 8) {
        os << "\n  row " << r << " col " << c << (rotated ? " (rope)" : " (untouched)") << " got " << got[e]
           << " want " << (rotated ? want[e] : double(before[e]));
      }
    }
  }
  if (n_bad) return ::testing::AssertionFailure() << n_bad << " elements differ:" << os.str();
  return ::testing::AssertionSuccess();
}

rope_params make_params(std::vector<float>& x, const layout& l, const std::vector<int64_t>& pos,
                        const std::vector<float>& inv_freq, bool inverse) {
  rope_params p;
  p.x = x.data();
  p.pos = pos.data();
  p.inv_freq = inv_freq.data();
  p.n_rows = l.n_rows;
  p.n_heads = l.n_heads;
  p.head_dim = l.head_dim;
  p.rope_dim = l.rope_dim;
  p.row_stride = l.row_stride;
  p.inverse = inverse;
  return p;
}

// A handful of fp32 roundings on a unit rotation.
constexpr double k_rtol = 1e-5;

const layout k_layouts[] = {
    {1, 1, 2, 2, 0},    {3, 1, 6, 2, 0},    {1, 3, 19, 8, 0},  {19, 1, 64, 64, 0},   {3, 3, 111, 64, 0},
    {2, 4, 128, 64, 0}, {5, 2, 512, 64, 0}, {3, 3, 19, 8, 61}, {4, 2, 128, 64, 300}, {1, 1, 3, 2, 0},
};

// -- tests -----------------------------------------------------------------------

TEST(rope, matches_reference) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> pos_dist(0, 1 << 20);
  for (const layout& l : k_layouts) {
    for (int variant = 0; variant < 4; ++variant) {
      const bool inverse = variant & 1, yarn = variant & 2;
      const double theta = yarn ? 160000.0 : 10000.0;
      SCOPED_TRACE(describe(l) + " inverse=" + std::to_string(inverse) + " theta=" + std::to_string(theta));
      const auto inv_freq = make_inv_freq(theta, l.rope_dim, yarn);
      std::vector<int64_t> pos(l.n_rows);
      for (auto& v : pos) v = pos_dist(rng);
      auto x = random_rows(rng, l);
      const auto before = x;
      rope_params p = make_params(x, l, pos, inv_freq, inverse);
      const status st = rope_cpu(p);
      ASSERT_TRUE(st.ok()) << st.to_string();
      std::vector<double> want, mag;
      reference(before, l, pos, inv_freq, 1.0, inverse, false, want, mag);
      EXPECT_TRUE(check(x, before, want, mag, l, k_rtol));
    }
  }
}

TEST(rope, attention_factor_scales_cos_and_sin) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const layout l{3, 2, 19, 8, 0};
  const auto inv_freq = make_inv_freq(10000.0, l.rope_dim, false);
  const std::vector<int64_t> pos = {0, 7, 1234};
  auto x = random_rows(rng, l);
  const auto before = x;
  rope_params p = make_params(x, l, pos, inv_freq, false);
  p.attention_factor = 0.75f;
  ASSERT_TRUE(rope_cpu(p).ok());
  std::vector<double> want, mag;
  reference(before, l, pos, inv_freq, 0.75, false, false, want, mag);
  EXPECT_TRUE(check(x, before, want, mag, l, k_rtol));
}

// cos 0 = 1 and sin 0 = 0: position 0 leaves every value bit-identical.
TEST(rope, position_zero_is_identity) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (const layout& l : k_layouts) {
    SCOPED_TRACE(describe(l));
    const auto inv_freq = make_inv_freq(160000.0, l.rope_dim, true);
    const std::vector<int64_t> pos(l.n_rows, 0);
    for (bool inverse : {false, true}) {
      auto x = random_rows(rng, l);
      const auto before = x;
      rope_params p = make_params(x, l, pos, inv_freq, inverse);
      ASSERT_TRUE(rope_cpu(p).ok());
      EXPECT_EQ(0, std::memcmp(x.data(), before.data(), x.size() * sizeof(float)));
    }
  }
}

// Position 1,000,000 with θ = 160000 (+ YaRN): matches the fp32-angle
// reference to 1e-5, and the exact double angle to within the fp32 rounding of
// the angle (≤ half an fp32 ulp of pos·inv_freq: ≤ 2^-4 rad at pos 2^20).
TEST(rope, large_positions) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const layout l{4, 2, 128, 64, 0};
  for (bool yarn : {false, true}) {
    SCOPED_TRACE("yarn=" + std::to_string(yarn));
    const auto inv_freq = make_inv_freq(160000.0, l.rope_dim, yarn);
    const std::vector<int64_t> pos = {1000000, 999999, 1 << 20, 65535};
    auto x = random_rows(rng, l);
    const auto before = x;
    rope_params p = make_params(x, l, pos, inv_freq, false);
    ASSERT_TRUE(rope_cpu(p).ok());
    std::vector<double> want, mag;
    reference(before, l, pos, inv_freq, 1.0, false, false, want, mag);
    EXPECT_TRUE(check(x, before, want, mag, l, k_rtol));
    reference(before, l, pos, inv_freq, 1.0, false, true, want, mag);
    const double max_angle_err = 0.5 * std::ldexp(1.0, std::ilogb(float(1 << 20) * inv_freq[0]) - 23);
    EXPECT_TRUE(check(x, before, want, mag, l, max_angle_err + k_rtol));
  }
}

// rope(pos) followed by inverse rope(pos) restores x; inverse rope(pos) equals
// rope(−pos).
TEST(rope, inverse_undoes_forward) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> pos_dist(0, 1000000);
  for (const layout& l : k_layouts) {
    SCOPED_TRACE(describe(l));
    const auto inv_freq = make_inv_freq(160000.0, l.rope_dim, true);
    std::vector<int64_t> pos(l.n_rows), neg(l.n_rows);
    for (int64_t r = 0; r < l.n_rows; ++r) neg[r] = -(pos[r] = pos_dist(rng));
    auto x = random_rows(rng, l);
    const auto before = x;
    rope_params fwd = make_params(x, l, pos, inv_freq, false);
    ASSERT_TRUE(rope_cpu(fwd).ok());
    rope_params inv = make_params(x, l, pos, inv_freq, true);
    ASSERT_TRUE(rope_cpu(inv).ok());
    std::vector<double> want(before.begin(), before.end()), mag, unused;
    reference(before, l, pos, inv_freq, 1.0, false, false, unused, mag);  // mag = |pair|
    EXPECT_TRUE(check(x, before, want, mag, l, 4 * k_rtol));

    auto a = before, b = before;
    rope_params p_inv = make_params(a, l, pos, inv_freq, true);
    rope_params p_neg = make_params(b, l, neg, inv_freq, false);
    ASSERT_TRUE(rope_cpu(p_inv).ok());
    ASSERT_TRUE(rope_cpu(p_neg).ok());
    std::vector<double> b_d(b.begin(), b.end());
    EXPECT_TRUE(check(a, before, b_d, mag, l, 2 * k_rtol));
  }
}

// Only the trailing rope_dim channels of each head move: head_dim 7 with
// rope_dim 4 leaves channels 0..2 of every head and the row gaps bit-identical.
TEST(rope, nope_dims_and_gaps_untouched) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const layout l{5, 3, 7, 4, 29};
  const auto inv_freq = make_inv_freq(10000.0, l.rope_dim, false);
  const std::vector<int64_t> pos = {1, 2, 3, 500, 77777};
  auto x = random_rows(rng, l);
  const auto before = x;
  rope_params p = make_params(x, l, pos, inv_freq, false);
  ASSERT_TRUE(rope_cpu(p).ok());
  std::vector<double> want, mag;
  reference(before, l, pos, inv_freq, 1.0, false, false, want, mag);
  EXPECT_TRUE(check(x, before, want, mag, l, k_rtol));  // check() compares non-rope bits exactly
  int64_t moved = 0;
  for (size_t e = 0; e < x.size(); ++e) moved += x[e] != before[e];
  EXPECT_GT(moved, 0) << "nothing rotated";
}

// Hand-computed: head_dim 6, rope_dim 4 → channels 2..5 are pairs (2,3) and
// (4,5), pair 0 at angle π/2, pair 1 at angle π. x = [9, 8, 1, 0, 0, 1]:
//   interleaved, x[2i]' = x[2i]cos − x[2i+1]sin, x[2i+1]' = x[2i+1]cos + x[2i]sin
//   → [9, 8, 0, 1, 0, −1].
// The opposite direction gives [.., 0, −1, 0, −1]; half-split pairing
// (x[i], x[i+rope_dim/2]) gives [.., 0, −1, 1, 0]; a leading-rope layout
// would change channels 0..3.
TEST(rope, interleaved_pairs_and_direction) {
  const float half_pi = float(k_pi / 2), pi = float(k_pi);
  const std::vector<float> inv_freq = {half_pi, pi};
  const std::vector<int64_t> pos = {1};
  std::vector<float> x = {9, 8, 1, 0, 0, 1};
  const layout l{1, 1, 6, 4, 0};
  rope_params p = make_params(x, l, pos, inv_freq, false);
  ASSERT_TRUE(rope_cpu(p).ok());
  const float want[6] = {9, 8, 0, 1, 0, -1};
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(x[i], want[i], 1e-6) << "channel " << i;

  // inverse: rotation by −angle → [9, 8, 0, −1, 0, −1]
  x = {9, 8, 1, 0, 0, 1};
  p = make_params(x, l, pos, inv_freq, true);
  ASSERT_TRUE(rope_cpu(p).ok());
  const float want_inv[6] = {9, 8, 0, -1, 0, -1};
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(x[i], want_inv[i], 1e-6) << "channel " << i;

  // a generic angle, pos 3 · 0.1 = 0.3 rad on pair (a, b) = (0.6, −1.7)
  std::vector<float> y = {0.6f, -1.7f};
  const std::vector<float> f = {0.1f};
  const std::vector<int64_t> pos3 = {3};
  const layout l2{1, 1, 2, 2, 0};
  p = make_params(y, l2, pos3, f, false);
  ASSERT_TRUE(rope_cpu(p).ok());
  const double ang = double(3.0f * 0.1f);
  EXPECT_NEAR(y[0], 0.6 * std::cos(ang) + 1.7 * std::sin(ang), 1e-6);
  EXPECT_NEAR(y[1], -1.7 * std::cos(ang) + 0.6 * std::sin(ang), 1e-6);
}

// q(m)·k(n) over the rope channels depends only on m − n: shifting both
// positions by the same amount leaves the dot product unchanged. Positions stay
// below 512 so the fp32 angle rounding (≤ 2^-15 rad) is far below the tolerance.
TEST(rope, relative_position_property) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> pos_dist(0, 255);
  const layout l{1, 1, 64, 64, 0};
  for (bool yarn : {false, true}) {
    const auto inv_freq = make_inv_freq(yarn ? 160000.0 : 10000.0, l.rope_dim, yarn);
    for (int trial = 0; trial < 20; ++trial) {
      const auto q0 = random_rows(rng, l), k0 = random_rows(rng, l);
      const int64_t m = pos_dist(rng), n = pos_dist(rng);
      double norm = 0;
      for (int64_t c = 0; c < l.head_dim; ++c) norm += std::fabs(double(q0[c]) * double(k0[c]));
      auto dot_at = [&](int64_t pm, int64_t pn) {
        auto q = q0, k = k0;
        const std::vector<int64_t> vm = {pm}, vn = {pn};
        rope_params pq = make_params(q, l, vm, inv_freq, false);
        rope_params pk = make_params(k, l, vn, inv_freq, false);
        EXPECT_TRUE(rope_cpu(pq).ok());
        EXPECT_TRUE(rope_cpu(pk).ok());
        double d = 0;
        for (int64_t c = 0; c < l.head_dim; ++c) d += double(q[c]) * double(k[c]);
        return d;
      };
      const double d0 = dot_at(m, n);
      const int64_t shift = pos_dist(rng);
      SCOPED_TRACE("m=" + std::to_string(m) + " n=" + std::to_string(n) + " shift=" + std::to_string(shift));
      EXPECT_NEAR(dot_at(m + shift, n + shift), d0, 1e-4 * norm);
      // relative to the key at position 0 (m − n may be negative)
      EXPECT_NEAR(dot_at(m - n + 256, 256), d0, 1e-4 * norm);
    }
  }
}

TEST(rope, rejects_bad_rope_dim) {
  std::vector<float> x(8, 1.0f);
  const std::vector<int64_t> pos = {3};
  const std::vector<float> inv_freq(8, 0.5f);
  for (int64_t rope_dim : {3, 10, 0}) {
    rope_params p = make_params(x, layout{1, 1, 8, rope_dim, 0}, pos, inv_freq, false);
    EXPECT_FALSE(rope_cpu(p).ok()) << "rope_dim=" << rope_dim;
  }
}

// bf16: rope_cpu then round_to_bf16 on the whole rows, bit for bit, when the input is
// bf16 already (the engine's indexer q and attention output); from fp32 input only the
// rotated channels are rounded.
TEST(rope, bf16_is_rope_then_round) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> pos_dist(0, 1 << 20);
  for (const layout& l : {layout{3, 64, 128, 64, 0}, layout{2, 64, 512, 64, 0}, layout{3, 3, 19, 8, 61}}) {
    for (bool inverse : {false, true}) {
      SCOPED_TRACE(describe(l) + " inverse=" + std::to_string(inverse));
      const auto inv_freq = make_inv_freq(160000.0, l.rope_dim, true);
      std::vector<int64_t> pos(l.n_rows);
      for (auto& v : pos) v = pos_dist(rng);
      const auto x = random_rows(rng, l);
      auto x_bf16 = x;
      for (float& v : x_bf16) v = v == k_sentinel ? v : round_to_bf16(v);
      auto apart = x_bf16, fused = x_bf16, fused_fp32 = x;
      ASSERT_TRUE(rope_cpu(make_params(apart, l, pos, inv_freq, inverse)).ok());
      for (float& v : apart) v = v == k_sentinel ? v : round_to_bf16(v);
      rope_params p = make_params(fused, l, pos, inv_freq, inverse);
      p.bf16 = true;
      ASSERT_TRUE(rope_cpu(p).ok());
      EXPECT_EQ(0, std::memcmp(fused.data(), apart.data(), fused.size() * sizeof(float)));

      auto rounded = x;  // fp32 input: rope_cpu, then the rotated channels rounded
      ASSERT_TRUE(rope_cpu(make_params(rounded, l, pos, inv_freq, inverse)).ok());
      p = make_params(fused_fp32, l, pos, inv_freq, inverse);
      p.bf16 = true;
      ASSERT_TRUE(rope_cpu(p).ok());
      for (size_t e = 0; e < x.size(); ++e) {
        const int64_t c = int64_t(e) % l.stride();
        const bool rotated = c < l.n_heads * l.head_dim && c % l.head_dim >= l.head_dim - l.rope_dim;
        const float want = rotated ? round_to_bf16(rounded[e]) : x[e];
        ASSERT_EQ(0, std::memcmp(&fused_fp32[e], &want, sizeof(float))) << "element " << e;
      }
    }
  }
}

// -- CUDA parity -------------------------------------------------------------------

#ifdef HART_CUDA

using testing::cuda_synced;
using testing::device_vec;

// rope_cuda vs rope_cpu: the same fp32 angle; cosf/sinf within 2 ulp on the
// device (1 in glibc), then the same four rounded products and one sum, so
// |Δ| <= ~6 ulp(1)·|pair| ≈ 4e-7·|pair|: rtol 1e-6 of |pair|·attention_factor.
constexpr double k_cuda_rtol = 1e-6;

// Runs rope_cuda on a copy of x and returns the device result.
std::vector<float> run_cuda(const std::vector<float>& x, const layout& l, const std::vector<int64_t>& pos,
                            const std::vector<float>& inv_freq, bool inverse, float attention_factor) {
  device_vec<float> d_x(x), d_f(inv_freq);
  device_vec<int64_t> d_pos(pos);
  rope_params p;
  p.x = d_x.get();
  p.pos = d_pos.get();
  p.inv_freq = d_f.get();
  p.n_rows = l.n_rows;
  p.n_heads = l.n_heads;
  p.head_dim = l.head_dim;
  p.rope_dim = l.rope_dim;
  p.row_stride = l.row_stride;
  p.attention_factor = attention_factor;
  p.inverse = inverse;
  const status st = rope_cuda(p, nullptr);
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_TRUE(cuda_synced(nullptr));
  return d_x.to_host();
}

TEST(rope, cuda_matches_cpu) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> pos_dist(0, 1 << 20);
  // k_layouts plus V4's shapes (q: 64 heads x 512, indexer q: 64 x 128, kv: 1 x 512),
  // many rows, and a row count / head count that is not a multiple of the block
  std::vector<layout> layouts(std::begin(k_layouts), std::end(k_layouts));
  layouts.push_back({3, 64, 512, 64, 0});
  layouts.push_back({300, 1, 512, 64, 0});
  layouts.push_back({5, 64, 128, 64, 64 * 128 + 9});
  layouts.push_back({1, 7, 300, 258, 0});
  for (const layout& l : layouts) {
    for (int variant = 0; variant < 8; ++variant) {
      const bool inverse = variant & 1, yarn = variant & 2;
      const float factor = (variant & 4) ? 0.75f : 1.0f;
      const double theta = yarn ? 160000.0 : 10000.0;
      SCOPED_TRACE(describe(l) + " inverse=" + std::to_string(inverse) + " theta=" + std::to_string(theta) +
                   " attention_factor=" + std::to_string(factor));
      const auto inv_freq = make_inv_freq(theta, l.rope_dim, yarn);
      std::vector<int64_t> pos(l.n_rows);
      for (auto& v : pos) v = pos_dist(rng);
      pos[0] = variant == 0 ? 1000000 : pos[0];
      const auto x = random_rows(rng, l);
      auto x_cpu = x;
      rope_params p = make_params(x_cpu, l, pos, inv_freq, inverse);
      p.attention_factor = factor;
      ASSERT_TRUE(rope_cpu(p).ok());
      const auto got = run_cuda(x, l, pos, inv_freq, inverse, factor);
      std::vector<double> want, mag;
      reference(x, l, pos, inv_freq, factor, inverse, false, want, mag);  // for mag (|pair|)
      want.assign(x_cpu.begin(), x_cpu.end());
      EXPECT_TRUE(check(got, x, want, mag, l, k_cuda_rtol));
    }
  }
}

// cos 0 = 1 and sin 0 = 0 on the device too: position 0 is bit-identical.
TEST(rope, cuda_position_zero_is_identity) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (const layout& l : k_layouts) {
    SCOPED_TRACE(describe(l));
    const auto inv_freq = make_inv_freq(160000.0, l.rope_dim, true);
    const std::vector<int64_t> pos(l.n_rows, 0);
    const auto x = random_rows(rng, l);
    for (bool inverse : {false, true}) {
      const auto got = run_cuda(x, l, pos, inv_freq, inverse, 1.0f);
      EXPECT_EQ(0, std::memcmp(got.data(), x.data(), x.size() * sizeof(float)));
    }
  }
}

TEST(rope, cuda_rejects_bad_arguments) {
  HART_SKIP_WITHOUT_CUDA();
  device_vec<float> d_x(std::vector<float>(8, 1.0f)), d_f(std::vector<float>(8, 0.5f));
  device_vec<int64_t> d_pos(std::vector<int64_t>{3});
  rope_params p;
  p.x = d_x.get();
  p.pos = d_pos.get();
  p.inv_freq = d_f.get();
  p.n_rows = 1;
  p.head_dim = 8;
  for (int64_t rope_dim : {3, 10, 0}) {
    p.rope_dim = rope_dim;
    EXPECT_EQ(rope_cuda(p, nullptr).code(), status_code::invalid_argument) << "rope_dim=" << rope_dim;
  }
  p.rope_dim = 8;
  p.pos = nullptr;
  EXPECT_EQ(rope_cuda(p, nullptr).code(), status_code::invalid_argument);
  p.pos = d_pos.get();
  p.n_rows = 0;
  EXPECT_TRUE(rope_cuda(p, nullptr).ok());
  ASSERT_TRUE(cuda_synced(nullptr));
  for (float v : d_x.to_host()) EXPECT_EQ(v, 1.0f);
}

// bf16 at V4's shapes (indexer q: 64 heads of 128, attention output: 64 heads of 512,
// inverse), 1, 2 and 1200+ rows, a row stride: every value within k_cuda_rtol·|pair| of
// rope_cpu's plus one bf16 step (2^-7·|v|: the fp32 results differ in their last bits,
// and bf16 may round them to neighbours), and bit-identical but where such a difference
// straddles a rounding boundary: measured 1.5e-5 of the rotated values, at most 1e-3 allowed.
TEST(rope, cuda_bf16_matches_cpu) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> pos_dist(0, 1 << 20);
  int64_t n_rotated = 0, n_diff = 0;
  for (const layout& l : {layout{1, 64, 128, 64, 0}, layout{2, 64, 512, 64, 0}, layout{1201, 64, 128, 64, 0},
                          layout{1200, 64, 512, 64, 0}, layout{5, 64, 512, 64, 64 * 512 + 9}}) {
    for (bool inverse : {false, true}) {
      SCOPED_TRACE(describe(l) + " inverse=" + std::to_string(inverse));
      const auto inv_freq = make_inv_freq(160000.0, l.rope_dim, true);
      std::vector<int64_t> pos(l.n_rows);
      for (auto& v : pos) v = pos_dist(rng);
      auto x = random_rows(rng, l);
      for (float& v : x) v = v == k_sentinel ? v : round_to_bf16(v);  // the engine's inputs
      auto want = x;
      rope_params p = make_params(want, l, pos, inv_freq, inverse);
      p.bf16 = true;
      ASSERT_TRUE(rope_cpu(p).ok());
      device_vec<float> d_x(x), d_f(inv_freq);
      device_vec<int64_t> d_pos(pos);
      p.x = d_x.get();
      p.pos = d_pos.get();
      p.inv_freq = d_f.get();
      ASSERT_TRUE(rope_cuda(p, nullptr).ok());
      ASSERT_TRUE(cuda_synced(nullptr));
      const auto got = d_x.to_host();
      std::vector<double> unused, mag, want_d(want.begin(), want.end());
      reference(x, l, pos, inv_freq, 1.0, inverse, false, unused, mag);  // mag = |pair|
      for (size_t e = 0; e < got.size(); ++e) {
        mag[e] = k_cuda_rtol * mag[e] + std::ldexp(std::fabs(want[e]), -7);
      }
      EXPECT_TRUE(check(got, x, want_d, mag, l, 1.0));  // non-rope channels and gaps: bit-identical
      for (size_t e = 0; e < got.size(); ++e) {
        const int64_t c = int64_t(e) % l.stride();
        if (c >= l.n_heads * l.head_dim || c % l.head_dim < l.head_dim - l.rope_dim) continue;
        n_rotated++;
        n_diff += std::memcmp(&got[e], &want[e], sizeof(float)) != 0;
      }
    }
  }
  EXPECT_LE(n_diff, n_rotated / 1000) << n_diff << " of " << n_rotated << " rotated values differ";
}

#endif  // HART_CUDA

}  // namespace
}  // namespace hart
