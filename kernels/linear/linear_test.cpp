// linear_cpu against a double-precision y[r][o] = Σ_i x[r][i]·W[o][i] written
// in this file, plus the contract's edges: n_rows = 0, accumulate mode,
// overwrite mode (y's old contents never leak in), non-square W.
#include "kernels/linear/linear.h"

#include "kernels/testing/op_test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace hart {
namespace {

// -- test helpers --------------------------------------------------------------

using testing::all_close;
using testing::guards_intact;
using testing::k_sentinel;
using testing::normal_vec;
using testing::seed_trace;
using testing::test_seed;

constexpr int64_t k_guard = 16;  // sentinels on each side of y

// y0 (if given) + x W^T in double; mag = |y0| + Σ_i |x_i·w_i| bounds the rounding.
void reference(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>* y0,
               int64_t n_rows, int64_t in, int64_t out, std::vector<double>& want, std::vector<double>& mag) {
  want.assign(n_rows * out, 0.0);
  mag.assign(n_rows * out, 0.0);
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double acc = y0 ? double((*y0)[r * out + o]) : 0.0;
      double m = std::fabs(acc);
      for (int64_t i = 0; i < in; ++i) {
        const double t = double(x[r * in + i]) * double(w[o * in + i]);
        acc += t;
        m += std::fabs(t);
      }
      want[r * out + o] = acc;
      mag[r * out + o] = m;
    }
  }
}

// fp32 GEMM with fp32 accumulation: the error is a small multiple of eps·Σ|x·w|.
constexpr double k_rtol = 1e-5;

struct shape {
  int64_t n_rows, in, out;
};

const shape k_shapes[] = {
    {1, 1, 1}, {1, 3, 19}, {3, 19, 1}, {19, 111, 3}, {111, 19, 111}, {7, 1, 111}, {2, 989, 5}, {33, 128, 64},
};

void run_case(std::mt19937& rng, const shape& s, bool accumulate) {
  SCOPED_TRACE("n_rows=" + std::to_string(s.n_rows) + " in=" + std::to_string(s.in) +
               " out=" + std::to_string(s.out) + " accumulate=" + std::to_string(accumulate));
  const auto x = normal_vec(rng, s.n_rows * s.in, 1.0f);
  const auto w = normal_vec(rng, s.out * s.in, 1.0f);
  const auto y0 = normal_vec(rng, s.n_rows * s.out, 1.0f);
  std::vector<float> y(s.n_rows * s.out + 2 * k_guard, k_sentinel);
  for (int64_t i = 0; i < s.n_rows * s.out; ++i) {
    // overwrite mode must ignore what y held (NaN would poison a beta·y term)
    y[k_guard + i] = accumulate ? y0[i] : std::numeric_limits<float>::quiet_NaN();
  }
  linear_params p;
  p.x = x.data();
  p.w = w.data();
  p.y = y.data() + k_guard;
  p.n_rows = s.n_rows;
  p.in = s.in;
  p.out = s.out;
  p.accumulate = accumulate;
  const status st = linear_cpu(p);
  ASSERT_TRUE(st.ok()) << st.to_string();
  std::vector<double> want, mag;
  reference(x, w, accumulate ? &y0 : nullptr, s.n_rows, s.in, s.out, want, mag);
  EXPECT_TRUE(all_close(y.data() + k_guard, size_t(s.n_rows * s.out), want, mag, k_rtol, 0.0));
  EXPECT_TRUE(guards_intact(y, k_guard));
}

// -- tests -----------------------------------------------------------------------

TEST(linear, matches_reference) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (const shape& s : k_shapes) run_case(rng, s, /*accumulate=*/false);
}

TEST(linear, accumulate_adds_to_y) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (const shape& s : k_shapes) run_case(rng, s, /*accumulate=*/true);
}

// W is [out][in] row-major: with in != out a transposed read cannot match.
TEST(linear, non_square_hand_computed) {
  const float x[2 * 2] = {1, 2, -3, 0.5f};    // 2 rows, in = 2
  const float w[3 * 2] = {1, 0, 0, 1, 1, 1};  // out = 3
  const float want[2 * 3] = {1, 2, 3, -3, 0.5f, -2.5f};
  float y[2 * 3];
  linear_params p;
  p.x = x;
  p.w = w;
  p.y = y;
  p.n_rows = 2;
  p.in = 2;
  p.out = 3;
  ASSERT_TRUE(linear_cpu(p).ok());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(y[i], want[i]) << "i=" << i;
  // accumulate: y += x W^T once more doubles it
  p.accumulate = true;
  ASSERT_TRUE(linear_cpu(p).ok());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(y[i], 2 * want[i]) << "i=" << i;
}

TEST(linear, zero_rows_touches_nothing) {
  const float x[4] = {1, 2, 3, 4};
  const float w[4 * 3] = {};
  for (bool accumulate : {false, true}) {
    std::vector<float> y(2 * k_guard, k_sentinel);
    linear_params p;
    p.x = x;
    p.w = w;
    p.y = y.data() + k_guard;
    p.n_rows = 0;
    p.in = 4;
    p.out = 3;
    p.accumulate = accumulate;
    const status st = linear_cpu(p);
    EXPECT_TRUE(st.ok()) << st.to_string();
    EXPECT_TRUE(guards_intact(y, k_guard));
  }
}

TEST(linear, rejects_bad_arguments) {
  float x[4] = {}, w[4] = {}, y[4] = {};
  linear_params p;
  p.x = x;
  p.w = w;
  p.y = y;
  p.n_rows = 1;
  p.in = 2;
  p.out = 2;
  ASSERT_TRUE(linear_cpu(p).ok());
  linear_params q = p;
  q.in = 0;
  EXPECT_FALSE(linear_cpu(q).ok());
  q = p;
  q.out = 0;
  EXPECT_FALSE(linear_cpu(q).ok());
  q = p;
  q.n_rows = -1;
  EXPECT_FALSE(linear_cpu(q).ok());
  q = p;
  q.w = nullptr;
  EXPECT_FALSE(linear_cpu(q).ok());
}

}  // namespace
}  // namespace hart
