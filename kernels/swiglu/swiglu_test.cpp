// swiglu_cpu against a double-precision clamped SwiGLU written from
// v4-model.md §6.2:
//   h = silu(min(g, limit)) · clamp(u, −limit, limit) · row_weight,  silu(x) = x·sigmoid(x)
// The gate is clamped only from above, the up projection from both sides;
// limit 0 means no clamp; row_weight null means 1.
#include "kernels/swiglu/swiglu.h"

#include "kernels/testing/cuda_test_util.h"
#include "kernels/testing/op_test_util.h"
#include "runtime/core/codecs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iomanip>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace hart {
namespace {

// -- test helpers --------------------------------------------------------------

using testing::guarded_buffer;
using testing::guards_intact;
using testing::k_nan;
using testing::seed_trace;
using testing::test_seed;
using testing::unguarded;

double ref_swiglu(float g, float u, double limit, double w) {
  double gg = g, uu = u;
  if (limit > 0) {
    gg = std::min(gg, limit);
    uu = std::min(std::max(uu, -limit), limit);
  }
  return gg / (1.0 + std::exp(-gg)) * uu * w;
}

struct layout {
  int64_t n_rows, dim, in_stride;  // in_stride 0 = dim
  int64_t stride() const { return in_stride ? in_stride : dim; }
};

// out has k_guard sentinels on both sides of its n_rows·dim body
constexpr int64_t k_guard = 8;

std::vector<float> run(const std::vector<float>& gate, const std::vector<float>& up,
                       const std::vector<float>* rw, const layout& l, float limit) {
  std::vector<float> out = guarded_buffer(l.n_rows * l.dim, k_guard, k_nan);
  swiglu_params p;
  p.gate = gate.data();
  p.up = up.data();
  p.row_weight = rw ? rw->data() : nullptr;
  p.out = out.data() + k_guard;
  p.n_rows = l.n_rows;
  p.dim = l.dim;
  p.in_stride = l.in_stride;
  p.limit = limit;
  const status st = swiglu_cpu(p);
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_TRUE(guards_intact(out, k_guard));
  return unguarded(out, k_guard);
}

// exp, divide and two or three products in fp32: a few ulps of |h|
constexpr double k_rtol = 1e-5;
constexpr double k_atol = 1e-30;  // values underflowing fp32 (silu of a very negative gate)

::testing::AssertionResult matches(const std::vector<float>& got, const std::vector<float>& gate,
                                   const std::vector<float>& up, const std::vector<float>* rw,
                                   const layout& l, double limit) {
  int64_t n_bad = 0;
  std::ostringstream os;
  os << std::setprecision(9);
  for (int64_t r = 0; r < l.n_rows; ++r) {
    for (int64_t i = 0; i < l.dim; ++i) {
      const int64_t src = r * l.stride() + i;
      const double want = ref_swiglu(gate[src], up[src], limit, rw ? (*rw)[r] : 1.0);
      const double g = got[r * l.dim + i];
      if (!(std::isfinite(g) && std::fabs(g - want) <= k_atol + k_rtol * std::fabs(want)) && n_bad++ < 8) {
        os << "\n  row " << r << " [" << i << "] gate " << gate[src] << " up " << up[src] << ": got " << g
           << " want " << want;
      }
    }
  }
  if (n_bad) return ::testing::AssertionFailure() << n_bad << " elements differ:" << os.str();
  return ::testing::AssertionSuccess();
}

// gate/up rows at in_stride, the gaps NaN (a wrong stride reads them)
std::vector<float> random_rows(std::mt19937& rng, const layout& l, float sigma) {
  std::normal_distribution<float> nd(0.0f, sigma);
  std::vector<float> v(l.n_rows * l.stride(), k_nan);
  for (int64_t r = 0; r < l.n_rows; ++r) {
    for (int64_t i = 0; i < l.dim; ++i) v[r * l.stride() + i] = nd(rng);
  }
  return v;
}

const layout k_layouts[] = {{1, 1, 0},    {3, 3, 0},   {19, 19, 0},   {3, 111, 0},
                            {2, 2048, 0}, {3, 19, 23}, {5, 111, 128}, {1, 1, 7}};

// -- tests -----------------------------------------------------------------------

// sigma 8 puts many values past the limit of 10 on both sides.
TEST(swiglu, matches_reference) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> ud(0.0f, 2.0f);
  for (const layout& l : k_layouts) {
    for (float limit : {0.0f, 10.0f, 7.0f}) {
      for (bool weighted : {false, true}) {
        SCOPED_TRACE("n_rows=" + std::to_string(l.n_rows) + " dim=" + std::to_string(l.dim) +
                     " in_stride=" + std::to_string(l.in_stride) + " limit=" + std::to_string(limit) +
                     " weighted=" + std::to_string(weighted));
        const auto gate = random_rows(rng, l, 8.0f);
        const auto up = random_rows(rng, l, 8.0f);
        std::vector<float> rw(l.n_rows);
        for (auto& w : rw) w = ud(rng);
        const auto got = run(gate, up, weighted ? &rw : nullptr, l, limit);
        EXPECT_TRUE(matches(got, gate, up, weighted ? &rw : nullptr, l, limit));
      }
    }
  }
}

// Hand-picked values around limit 10:
//   gate −20 stays −20 (clamped only from above): silu(−20) ≈ −4.1e-8, not silu(−10) ≈ −4.5e-4
//   gate 50 → 10: silu(10) ≈ 9.9995
//   up ±50 → ±10, up ±10.5 → ±10, up 9 stays 9
TEST(swiglu, clamp_semantics) {
  const std::vector<float> gate = {-20.0f, 50.0f, 1.0f, 1.0f, 1.0f, 1.0f, 10.5f, -10.5f};
  const std::vector<float> up = {1.0f, 1.0f, 50.0f, -50.0f, -10.5f, 9.0f, 1.0f, 1.0f};
  const layout l{1, 8, 0};
  const auto got = run(gate, up, nullptr, l, 10.0f);
  auto silu = [](double x) { return x / (1.0 + std::exp(-x)); };
  const double want[8] = {silu(-20.0),     silu(10.0),    silu(1.0) * 10, silu(1.0) * -10,
                          silu(1.0) * -10, silu(1.0) * 9, silu(10.0),     silu(-10.5)};
  for (int i = 0; i < 8; ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-6 * std::fabs(want[i]))
        << "i=" << i << " gate " << gate[i] << " up " << up[i];
  }
}

// limit 0: nothing is clamped, so silu(50)·50 = 2500.
TEST(swiglu, limit_zero_means_no_clamp) {
  const std::vector<float> gate = {50.0f, -30.0f, 12.0f}, up = {50.0f, -40.0f, -11.0f};
  const layout l{1, 3, 0};
  const auto got = run(gate, up, nullptr, l, 0.0f);
  EXPECT_NEAR(got[0], 2500.0, 1e-3);
  const double want1 = -30.0 / (1.0 + std::exp(30.0)) * -40.0;  // ~1.1e-10: the gate is not clamped up to 0
  EXPECT_NEAR(got[1], want1, 1e-5 * want1);
  EXPECT_NEAR(got[2], 12.0 / (1.0 + std::exp(-12.0)) * -11.0, 1e-4);
}

// Row r is scaled by row_weight[r]; a null row_weight is weight 1.
TEST(swiglu, row_weights) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const layout l{4, 19, 0};
  const auto gate = random_rows(rng, l, 3.0f);
  const auto up = random_rows(rng, l, 3.0f);
  const std::vector<float> rw = {0.0f, 1.0f, -0.5f, 2.5f};
  const auto plain = run(gate, up, nullptr, l, 10.0f);
  const auto weighted = run(gate, up, &rw, l, 10.0f);
  EXPECT_TRUE(matches(weighted, gate, up, &rw, l, 10.0));
  for (int64_t r = 0; r < l.n_rows; ++r) {
    for (int64_t i = 0; i < l.dim; ++i) {
      const float a = plain[r * l.dim + i] * rw[r], b = weighted[r * l.dim + i];
      EXPECT_NEAR(b, a, 1e-6 * std::fabs(a) + 1e-30) << "row " << r << " i " << i;
    }
  }
}

// bf16 (the official experts): gate and up are read rounded to bf16 and the
// weighted product is rounded, i.e. exactly round(swiglu(round(g), round(u))·w)
// of the fp32 op, which the CPU engine computed as separate steps before.
TEST(swiglu, bf16_rounds_inputs_and_output) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const layout l{5, 111, 128};
  const auto gate = random_rows(rng, l, 8.0f);
  const auto up = random_rows(rng, l, 8.0f);
  std::vector<float> rw = {0.25f, 1.0f, -0.5f, 0.7f, 1.5f};
  std::vector<float> gate_r = gate, up_r = up;
  for (float& v : gate_r) v = round_to_bf16(v);
  for (float& v : up_r) v = round_to_bf16(v);
  std::vector<float> want = run(gate_r, up_r, &rw, l, 10.0f);
  for (float& v : want) v = round_to_bf16(v);
  std::vector<float> got(l.n_rows * l.dim);
  swiglu_params p{gate.data(), up.data(), rw.data(), got.data(), l.n_rows, l.dim, l.in_stride, 10.0f};
  p.bf16 = true;
  ASSERT_TRUE(swiglu_cpu(p).ok());
  int64_t n_inexact = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i], want[i]) << "i=" << i;
    n_inexact += got[i] != round_to_bf16(got[i]);
  }
  EXPECT_EQ(n_inexact, 0) << "outputs are bf16 values";
}

TEST(swiglu, zero_rows_and_bad_arguments) {
  const std::vector<float> gate = {1.0f}, up = {1.0f};
  const layout l{0, 1, 0};
  const auto got = run(gate, up, nullptr, l, 10.0f);  // checks the guards
  EXPECT_TRUE(got.empty());
  float out = 0;
  swiglu_params p;
  p.gate = gate.data();
  p.up = up.data();
  p.out = &out;
  p.n_rows = 1;
  p.dim = 0;
  EXPECT_FALSE(swiglu_cpu(p).ok());
  p.dim = 1;
  p.up = nullptr;
  EXPECT_FALSE(swiglu_cpu(p).ok());
}

// -- CUDA parity -------------------------------------------------------------------

#ifdef HART_CUDA

using testing::all_close;
using testing::cuda_synced;
using testing::device_vec;
using testing::k_inf;
using testing::k_sentinel;

// swiglu_cuda vs swiglu_cpu on the same inputs. CUDA's expf is within 2 ulp
// (glibc's within 1) and the rest is the same three rounded operations in the
// same order, so |Δ| <= ~5 ulp of |h|: rtol 1e-6. atol 1e-37 covers results that
// are fp32 subnormals (silu of a very negative gate), where ulps are absolute.
constexpr double k_cuda_rtol = 1e-6;
constexpr double k_cuda_atol = 1e-37;

void run_cuda_case(std::mt19937& rng, const layout& l, float limit, bool weighted, bool specials) {
  SCOPED_TRACE("n_rows=" + std::to_string(l.n_rows) + " dim=" + std::to_string(l.dim) +
               " in_stride=" + std::to_string(l.in_stride) + " limit=" + std::to_string(limit) +
               " weighted=" + std::to_string(weighted) + " specials=" + std::to_string(specials));
  auto gate = random_rows(rng, l, 8.0f);
  auto up = random_rows(rng, l, 8.0f);
  if (specials && l.dim >= 4) {
    // NaN and ±inf must come through exactly as on the CPU (clamps pass NaN through)
    const float sp[4] = {k_nan, k_inf, -k_inf, -200.0f};
    for (int i = 0; i < 4; ++i) {
      gate[i] = sp[i];
      up[l.stride() * (l.n_rows - 1) + l.dim - 1 - i] = sp[(i + 1) % 4];
    }
  }
  std::vector<float> rw(l.n_rows);
  std::uniform_real_distribution<float> ud(-1.0f, 2.0f);
  for (auto& w : rw) w = ud(rng);
  const auto want_f = run(gate, up, weighted ? &rw : nullptr, l, limit);
  const std::vector<double> want(want_f.begin(), want_f.end());
  std::vector<double> mag(want.size());
  for (size_t i = 0; i < want.size(); ++i) mag[i] = std::fabs(want[i]);

  device_vec<float> d_gate(gate), d_up(up), d_rw(rw);
  device_vec<float> d_out(guarded_buffer(l.n_rows * l.dim, k_guard, k_nan));
  swiglu_params p;
  p.gate = d_gate.get();
  p.up = d_up.get();
  p.row_weight = weighted ? d_rw.get() : nullptr;
  p.out = d_out.get() + k_guard;
  p.n_rows = l.n_rows;
  p.dim = l.dim;
  p.in_stride = l.in_stride;
  p.limit = limit;
  const status st = swiglu_cuda(p, nullptr);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_TRUE(cuda_synced(nullptr));
  const auto out = d_out.to_host();
  EXPECT_TRUE(guards_intact(out, k_guard));
  const auto got = unguarded(out, k_guard);
  EXPECT_TRUE(all_close(got.data(), got.size(), want, mag, k_cuda_rtol, k_cuda_atol));
}

TEST(swiglu, cuda_matches_cpu) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  // not multiples of the 256-thread block, one row, many rows, V4's 2048/3072 and a long row
  const layout cuda_layouts[] = {{1, 1, 0},    {3, 3, 0},       {19, 19, 23},  {1, 257, 0},  {300, 111, 128},
                                 {7, 2048, 0}, {5, 3072, 3100}, {2, 20001, 0}, {1025, 5, 0}, {1, 1, 7}};
  for (const layout& l : cuda_layouts) {
    for (float limit : {0.0f, 10.0f, 7.0f}) {
      for (bool weighted : {false, true}) run_cuda_case(rng, l, limit, weighted, false);
    }
    run_cuda_case(rng, l, 10.0f, true, true);
    run_cuda_case(rng, l, 0.0f, false, true);
  }
}

// bf16: the same rounded operations as the CPU but CUDA's expf (within 2 ulp
// of glibc's), so an output whose fp32 value lies within a few ulp of a bf16
// rounding midpoint can round the other way: at most one bf16 ulp apart, on
// about 2^-13 of the elements for random inputs (allowed: 1e-3, at least 2).
TEST(swiglu, cuda_bf16_matches_cpu) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const layout cuda_layouts[] = {{1, 2048, 0}, {6, 2048, 0}, {300, 111, 128}, {64, 3072, 0}};
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  for (const layout& l : cuda_layouts) {
    SCOPED_TRACE("n_rows=" + std::to_string(l.n_rows) + " dim=" + std::to_string(l.dim));
    const auto gate = random_rows(rng, l, 4.0f);
    const auto up = random_rows(rng, l, 4.0f);
    std::vector<float> rw(l.n_rows);
    for (auto& w : rw) w = ud(rng);
    std::vector<float> want(l.n_rows * l.dim);
    swiglu_params p{gate.data(), up.data(), rw.data(), want.data(), l.n_rows, l.dim, l.in_stride, 10.0f};
    p.bf16 = true;
    ASSERT_TRUE(swiglu_cpu(p).ok());
    device_vec<float> d_gate(gate), d_up(up), d_rw(rw), d_out(std::vector<float>(want.size(), k_nan));
    p.gate = d_gate.get();
    p.up = d_up.get();
    p.row_weight = d_rw.get();
    p.out = d_out.get();
    ASSERT_TRUE(swiglu_cuda(p, nullptr).ok());
    ASSERT_TRUE(cuda_synced(nullptr));
    const auto got = d_out.to_host();
    int64_t n_diff = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i] == want[i]) continue;
      ++n_diff;
      const float ulp =
          std::fabs(round_to_bf16(want[i]) - f32_from_bf16(uint16_t(bf16_from_f32(want[i]) + 1)));
      EXPECT_LE(std::fabs(got[i] - want[i]), ulp) << "i=" << i << " got " << got[i] << " want " << want[i];
      EXPECT_EQ(got[i], round_to_bf16(got[i])) << "i=" << i;
    }
    EXPECT_LE(n_diff, std::max<int64_t>(2, int64_t(got.size()) / 1000)) << "of " << got.size();
  }
}

TEST(swiglu, cuda_zero_rows_and_bad_arguments) {
  HART_SKIP_WITHOUT_CUDA();
  device_vec<float> d_in(std::vector<float>{1.0f}), d_out(std::vector<float>{k_sentinel});
  swiglu_params p;
  p.gate = d_in.get();
  p.up = d_in.get();
  p.out = d_out.get();
  p.n_rows = 0;
  p.dim = 1;
  EXPECT_TRUE(swiglu_cuda(p, nullptr).ok());
  ASSERT_TRUE(cuda_synced(nullptr));
  EXPECT_EQ(d_out.to_host()[0], k_sentinel);
  p.n_rows = 1;
  p.dim = 0;
  EXPECT_EQ(swiglu_cuda(p, nullptr).code(), status_code::invalid_argument);
  p.dim = 1;
  p.up = nullptr;
  EXPECT_EQ(swiglu_cuda(p, nullptr).code(), status_code::invalid_argument);
  p.up = d_in.get();
  p.limit = -1.0f;
  EXPECT_EQ(swiglu_cuda(p, nullptr).code(), status_code::invalid_argument);
}

#endif  // HART_CUDA

}  // namespace
}  // namespace hart
