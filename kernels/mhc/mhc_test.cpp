// hc_pre / hc_post / hc_head against double-precision implementations written
// from v4-model.md §5.2–5.3:
//   r = rsqrt(mean(x²) + norm_eps) over the flattened n_hc·dim streams
//   mix = (x · fn^T)·r
//   pre[i]  = sigmoid(mix[i]·scale[0] + base[i]) + hc_eps
//   post[i] = 2·sigmoid(mix[n+i]·scale[1] + base[n+i])               (no eps)
//   comb    = row softmax(mix[2n..]·scale[2] + base[2n..]) + hc_eps, column
//             normalise, then (iters − 1) × (row normalise, column normalise),
//             each normalisation dividing by (sum + hc_eps)
//   collapsed = Σ_i pre[i]·X[i]
//   hc_post: out[k] = post[k]·y + Σ_j comb[j][k]·X[j]   (comb transposed)
//   hc_head: out = Σ_i (sigmoid(mix[i]·scale[0] + base[i]) + hc_eps)·X[i]
#include "kernels/mhc/mhc.h"

#include "kernels/testing/cuda_test_util.h"
#include "kernels/testing/op_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace hart {
namespace {

// -- test helpers --------------------------------------------------------------

using testing::all_close;
using testing::normal_vec;
using testing::seed_trace;
using testing::test_seed;

double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// mix[o] = (x · fn[o]) · rsqrt(mean(x²) + eps), x = one token's n·dim values
std::vector<double> ref_mix(const float* x, const std::vector<float>& fn, int64_t n_out, int64_t width, double eps) {
  double ss = 0;
  for (int64_t i = 0; i < width; ++i) ss += double(x[i]) * x[i];
  const double r = 1.0 / std::sqrt(ss / double(width) + eps);
  std::vector<double> mix(n_out);
  for (int64_t o = 0; o < n_out; ++o) {
    double acc = 0;
    for (int64_t i = 0; i < width; ++i) acc += double(x[i]) * fn[o * width + i];
    mix[o] = acc * r;
  }
  return mix;
}

struct hc_pre_want {
  std::vector<double> collapsed, collapsed_mag, post, comb;
};

hc_pre_want ref_hc_pre(const std::vector<float>& x, const std::vector<float>& fn, const std::vector<float>& base,
                       const std::vector<float>& scale, int64_t n_tokens, int64_t n, int64_t dim, int64_t iters,
                       double norm_eps, double hc_eps) {
  hc_pre_want w;
  w.collapsed.resize(n_tokens * dim);
  w.collapsed_mag.resize(n_tokens * dim);
  w.post.resize(n_tokens * n);
  w.comb.resize(n_tokens * n * n);
  const int64_t width = n * dim;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = x.data() + t * width;
    const auto mix = ref_mix(xt, fn, (2 + n) * n, width, norm_eps);
    std::vector<double> pre(n);
    for (int64_t i = 0; i < n; ++i) {
      pre[i] = sigmoid(mix[i] * scale[0] + base[i]) + hc_eps;
      w.post[t * n + i] = 2.0 * sigmoid(mix[n + i] * scale[1] + base[n + i]);
    }
    // C[j][k], j = input stream (row), k = output stream (column)
    std::vector<std::vector<double>> C(n, std::vector<double>(n));
    for (int64_t j = 0; j < n; ++j) {
      double mx = -INFINITY;
      for (int64_t k = 0; k < n; ++k) {
        C[j][k] = mix[2 * n + j * n + k] * scale[2] + base[2 * n + j * n + k];
        mx = std::max(mx, C[j][k]);
      }
      double z = 0;
      for (int64_t k = 0; k < n; ++k) z += std::exp(C[j][k] - mx);
      for (int64_t k = 0; k < n; ++k) C[j][k] = std::exp(C[j][k] - mx) / z + hc_eps;
    }
    auto col_norm = [&] {
      for (int64_t k = 0; k < n; ++k) {
        double s = 0;
        for (int64_t j = 0; j < n; ++j) s += C[j][k];
        for (int64_t j = 0; j < n; ++j) C[j][k] /= s + hc_eps;
      }
    };
    auto row_norm = [&] {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t k = 0; k < n; ++k) s += C[j][k];
        for (int64_t k = 0; k < n; ++k) C[j][k] /= s + hc_eps;
      }
    };
    col_norm();
    for (int64_t it = 0; it + 1 < iters; ++it) {
      row_norm();
      col_norm();
    }
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t k = 0; k < n; ++k) w.comb[t * n * n + j * n + k] = C[j][k];
    }
    for (int64_t d = 0; d < dim; ++d) {
      double acc = 0, mag = 0;
      for (int64_t i = 0; i < n; ++i) {
        acc += pre[i] * xt[i * dim + d];
        mag += std::fabs(pre[i] * xt[i * dim + d]);
      }
      w.collapsed[t * dim + d] = acc;
      w.collapsed_mag[t * dim + d] = mag;
    }
  }
  return w;
}

struct pre_inputs {
  std::vector<float> x, fn, base, scale;
};

// fn scaled so that |mix| is O(1) (x is normalised by r, so mix ≈ N(0, fn_sigma²·width))
pre_inputs make_pre_inputs(std::mt19937& rng, int64_t n_tokens, int64_t n, int64_t dim, int64_t n_out) {
  pre_inputs in;
  std::uniform_real_distribution<float> ud(0.1f, 3.0f);
  in.x = normal_vec(rng, n_tokens * n * dim, ud(rng));
  in.fn = normal_vec(rng, n_out * n * dim, 1.0f / std::sqrt(float(n * dim)));
  in.base = normal_vec(rng, n_out, 1.0f);
  in.scale = {ud(rng), ud(rng), ud(rng) / 2};
  return in;
}

struct pre_outputs {
  std::vector<float> collapsed, post, comb;
};

pre_outputs run_hc_pre(const pre_inputs& in, int64_t n_tokens, int64_t n, int64_t dim, int64_t iters) {
  pre_outputs out;
  out.collapsed.assign(n_tokens * dim, NAN);
  out.post.assign(n_tokens * n, NAN);
  out.comb.assign(n_tokens * n * n, NAN);
  hc_pre_params p;
  p.x = in.x.data();
  p.fn = in.fn.data();
  p.base = in.base.data();
  p.scale = in.scale.data();
  p.collapsed = out.collapsed.data();
  p.post = out.post.data();
  p.comb = out.comb.data();
  p.n_tokens = n_tokens;
  p.n_hc = n;
  p.dim = dim;
  p.sinkhorn_iters = iters;
  const status st = hc_pre_cpu(p);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

std::vector<double> ones(size_t n) { return std::vector<double>(n, 1.0); }

// The rsqrt statistic and the 24 dot products are fp32-rounded once; the
// Sinkhorn loop runs 20 fp32 iterations on values in [0, 1].
constexpr double k_rtol = 1e-5;
constexpr double k_comb_atol = 2e-5;

struct shape {
  int64_t n_tokens, n_hc, dim;
};
const shape k_shapes[] = {{1, 4, 1}, {3, 4, 3}, {19, 4, 19}, {2, 4, 111}, {1, 4, 1024}, {3, 1, 19}, {2, 3, 111},
                          {5, 2, 7}};

std::string describe(const shape& s) {
  return "n_tokens=" + std::to_string(s.n_tokens) + " n_hc=" + std::to_string(s.n_hc) +
         " dim=" + std::to_string(s.dim);
}

// -- hc_pre ------------------------------------------------------------------------

TEST(mhc, hc_pre_matches_reference) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (const shape& s : k_shapes) {
    for (int64_t iters : {1, 2, 20}) {
      SCOPED_TRACE(describe(s) + " iters=" + std::to_string(iters));
      const int64_t n = s.n_hc;
      const auto in = make_pre_inputs(rng, s.n_tokens, n, s.dim, (2 + n) * n);
      const auto got = run_hc_pre(in, s.n_tokens, n, s.dim, iters);
      const auto want = ref_hc_pre(in.x, in.fn, in.base, in.scale, s.n_tokens, n, s.dim, iters, 1e-6, 1e-6);
      EXPECT_TRUE(all_close(got.post.data(), got.post.size(), want.post, ones(want.post.size()), k_rtol, 0.0))
          << "post";
      EXPECT_TRUE(
          all_close(got.comb.data(), got.comb.size(), want.comb, ones(want.comb.size()), 0.0, k_comb_atol))
          << "comb";
      EXPECT_TRUE(all_close(got.collapsed.data(), got.collapsed.size(), want.collapsed, want.collapsed_mag,
                            k_rtol, 0.0))
          << "collapsed";
    }
  }
}

// After the default 20 iterations comb is (near) doubly stochastic: the last
// step normalises columns, so columns sum to 1 up to hc_eps; rows converge to
// 1 at a rate set by the spread of the logits. With logits of spread ~0.7 (a
// trained model's are of that order) 20 iterations bring rows within 1e-3;
// much wider random logits can leave rows ~1e-2 off in exact arithmetic too,
// which hc_pre_matches_reference covers against the double reference.
TEST(mhc, comb_is_doubly_stochastic_after_20_iters) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const int64_t n_tokens = 19, n = 4, dim = 64;
  auto in = make_pre_inputs(rng, n_tokens, n, dim, (2 + n) * n);
  in.scale[2] = 0.5f;
  for (int64_t o = 2 * n; o < (2 + n) * n; ++o) in.base[o] *= 0.5f;
  const auto got = run_hc_pre(in, n_tokens, n, dim, 20);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t a = 0; a < n; ++a) {
      double row = 0, col = 0;
      for (int64_t b = 0; b < n; ++b) {
        row += got.comb[t * n * n + a * n + b];
        col += got.comb[t * n * n + b * n + a];
        EXPECT_GE(got.comb[t * n * n + a * n + b], 0.0f);
      }
      EXPECT_NEAR(col, 1.0, 1e-5) << "token " << t << " column " << a;
      EXPECT_NEAR(row, 1.0, 1e-3) << "token " << t << " row " << a;
    }
  }
}

// fn = 0 makes mix 0, so every gate is sigmoid(base): base −1000 gives
// pre = hc_eps exactly-ish and post = 0 (no eps on post); base +1000 gives
// pre = 1 + hc_eps and post = 2 (the ×2). Equal comb logits give a uniform
// comb, 1/n each.
TEST(mhc, hc_pre_gate_ranges) {
  const int64_t n = 4, dim = 3, n_out = (2 + n) * n;
  std::vector<float> x(n * dim);
  for (int64_t i = 0; i < n * dim; ++i) x[i] = float(i + 1);
  const std::vector<float> fn(n_out * n * dim, 0.0f), scale = {1, 1, 1};
  for (float b : {-1000.0f, 1000.0f}) {
    std::vector<float> base(n_out, b);
    const auto got = run_hc_pre({x, fn, base, scale}, 1, n, dim, 20);
    const double pre = b < 0 ? 1e-6 : 1.0 + 1e-6;
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_NEAR(got.post[i], b < 0 ? 0.0 : 2.0, 1e-7) << "post " << i;  // an eps would show as >= 1e-6
      for (int64_t k = 0; k < n; ++k) EXPECT_NEAR(got.comb[i * n + k], 0.25, 1e-5);
    }
    for (int64_t d = 0; d < dim; ++d) {
      double want = 0;
      for (int64_t i = 0; i < n; ++i) want += pre * x[i * dim + d];
      EXPECT_NEAR(got.collapsed[d], want, 1e-5 * std::fabs(want) + 1e-12) << "collapsed " << d;
    }
  }
}

// Saturated comb logits (100 on column 0, 0 elsewhere): the row softmax is
// [1, ~0, ~0, ~0], and the "+ hc_eps" after it is what keeps the other columns
// alive — the first column normalisation turns their eps entries into
// eps / (4·eps + eps) = 0.2. Without that eps they stay 0.
TEST(mhc, hc_pre_comb_eps_after_saturated_softmax) {
  const int64_t n = 4, dim = 3, n_out = (2 + n) * n;
  std::vector<float> x(n * dim);
  for (int64_t i = 0; i < n * dim; ++i) x[i] = float(i % 5) - 2.0f;
  const std::vector<float> fn(n_out * n * dim, 0.0f), scale = {1, 1, 1};
  std::vector<float> base(n_out, 0.0f);
  for (int64_t j = 0; j < n; ++j) base[2 * n + j * n + 0] = 100.0f;
  for (int64_t iters : {1, 2, 20}) {
    SCOPED_TRACE("iters=" + std::to_string(iters));
    const pre_inputs in{x, fn, base, scale};
    const auto got = run_hc_pre(in, 1, n, dim, iters);
    const auto want = ref_hc_pre(x, fn, base, scale, 1, n, dim, iters, 1e-6, 1e-6);
    EXPECT_TRUE(
        all_close(got.comb.data(), got.comb.size(), want.comb, ones(want.comb.size()), 0.0, k_comb_atol));
    if (iters == 1) {
      for (int64_t j = 0; j < n; ++j) {
        EXPECT_NEAR(got.comb[j * n + 1], 0.2, 1e-4) << "row " << j;
      }
    }
  }
}

// norm_eps sits inside the rsqrt: streams of RMS ~1e-4 (mean square 1e-8,
// well below eps 1e-6) give mix ≈ (x·fn)/1e-3, not (x·fn)/1e-4.
TEST(mhc, hc_pre_and_head_norm_eps_with_tiny_streams) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const int64_t n_tokens = 3, n = 4, dim = 19;
  auto in = make_pre_inputs(rng, n_tokens, n, dim, (2 + n) * n);
  const auto x_unit = normal_vec(rng, n_tokens * n * dim, 1.0f);
  for (size_t i = 0; i < in.x.size(); ++i) in.x[i] = 1e-4f * x_unit[i];
  const auto got = run_hc_pre(in, n_tokens, n, dim, 20);
  const auto want = ref_hc_pre(in.x, in.fn, in.base, in.scale, n_tokens, n, dim, 20, 1e-6, 1e-6);
  EXPECT_TRUE(all_close(got.post.data(), got.post.size(), want.post, ones(want.post.size()), k_rtol, 0.0))
      << "post";
  EXPECT_TRUE(
      all_close(got.comb.data(), got.comb.size(), want.comb, ones(want.comb.size()), 0.0, k_comb_atol))
      << "comb";
  EXPECT_TRUE(
      all_close(got.collapsed.data(), got.collapsed.size(), want.collapsed, want.collapsed_mag, k_rtol, 0.0))
      << "collapsed";
}

// -- hc_post -----------------------------------------------------------------------

std::vector<float> run_hc_post(const std::vector<float>& x, const std::vector<float>& y,
                               const std::vector<float>& post, const std::vector<float>& comb, int64_t n_tokens,
                               int64_t n, int64_t dim) {
  std::vector<float> out(n_tokens * n * dim, NAN);
  hc_post_params p;
  p.x = x.data();
  p.y = y.data();
  p.post = post.data();
  p.comb = comb.data();
  p.out = out.data();
  p.n_tokens = n_tokens;
  p.n_hc = n;
  p.dim = dim;
  const status st = hc_post_cpu(p);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

void ref_hc_post(const std::vector<float>& x, const std::vector<float>& y, const std::vector<float>& post,
                 const std::vector<float>& comb, int64_t n_tokens, int64_t n, int64_t dim, std::vector<double>& want,
                 std::vector<double>& mag) {
  want.assign(n_tokens * n * dim, 0.0);
  mag.assign(n_tokens * n * dim, 0.0);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t k = 0; k < n; ++k) {
      for (int64_t d = 0; d < dim; ++d) {
        double acc = double(post[t * n + k]) * y[t * dim + d];
        double m = std::fabs(acc);
        for (int64_t j = 0; j < n; ++j) {
          const double term = double(comb[t * n * n + j * n + k]) * x[(t * n + j) * dim + d];
          acc += term;
          m += std::fabs(term);
        }
        want[(t * n + k) * dim + d] = acc;
        mag[(t * n + k) * dim + d] = m;
      }
    }
  }
}

TEST(mhc, hc_post_matches_reference) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  for (const shape& s : k_shapes) {
    SCOPED_TRACE(describe(s));
    const int64_t n = s.n_hc;
    const auto x = normal_vec(rng, s.n_tokens * n * s.dim, 1.0f);
    const auto y = normal_vec(rng, s.n_tokens * s.dim, 1.0f);
    std::vector<float> post(s.n_tokens * n), comb(s.n_tokens * n * n);
    for (auto& v : post) v = 2 * ud(rng);
    for (auto& v : comb) v = ud(rng);  // arbitrary, non-symmetric
    const auto got = run_hc_post(x, y, post, comb, s.n_tokens, n, s.dim);
    std::vector<double> want, mag;
    ref_hc_post(x, y, post, comb, s.n_tokens, n, s.dim, want, mag);
    EXPECT_TRUE(all_close(got.data(), got.size(), want, mag, k_rtol, 0.0));
  }
}

// comb[j][k] = 1 iff k = (j + 1) mod 4 (input j feeds output j+1), post = 0:
// out[k] = X[k − 1]. Reading comb untransposed (Σ_j comb[k][j]·X[j]) would
// give X[k + 1] instead.
TEST(mhc, hc_post_uses_comb_transposed) {
  const int64_t n = 4, dim = 5;
  std::vector<float> x(n * dim);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t d = 0; d < dim; ++d) x[j * dim + d] = float(10 * (j + 1) + d);
  }
  const std::vector<float> y(dim, 1000.0f);
  std::vector<float> post(n, 0.0f), comb(n * n, 0.0f);
  for (int64_t j = 0; j < n; ++j) comb[j * n + (j + 1) % n] = 1.0f;
  auto got = run_hc_post(x, y, post, comb, 1, n, dim);
  for (int64_t k = 0; k < n; ++k) {
    for (int64_t d = 0; d < dim; ++d) {
      EXPECT_EQ(got[k * dim + d], x[((k + n - 1) % n) * dim + d]) << "out stream " << k << " d " << d;
    }
  }
  // post[k]·y is added per output stream: post = {1, 0, 0.5, 0}
  post = {1.0f, 0.0f, 0.5f, 0.0f};
  got = run_hc_post(x, y, post, comb, 1, n, dim);
  for (int64_t k = 0; k < n; ++k) {
    for (int64_t d = 0; d < dim; ++d) {
      EXPECT_EQ(got[k * dim + d], post[k] * 1000.0f + x[((k + n - 1) % n) * dim + d]) << "stream " << k;
    }
  }
}

TEST(mhc, hc_post_rejects_aliased_output) {
  std::vector<float> x(8, 1.0f), y(2, 1.0f), post(4, 1.0f), comb(16, 0.25f);
  hc_post_params p;
  p.x = x.data();
  p.y = y.data();
  p.post = post.data();
  p.comb = comb.data();
  p.out = x.data();
  p.n_tokens = 1;
  p.n_hc = 4;
  p.dim = 2;
  EXPECT_FALSE(hc_post_cpu(p).ok());
}

// hc_pre then hc_post with y = 0: each output stream is Σ_j comb[j][k]·X[j], a
// convex combination (columns of comb sum to 1), so a constant stream set
// X[j] = c stays c.
TEST(mhc, pre_then_post_keeps_constant_streams) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const int64_t n = 4, dim = 19, n_tokens = 3;
  auto in = make_pre_inputs(rng, n_tokens, n, dim, (2 + n) * n);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t d = 0; d < dim; ++d) in.x[(t * n + j) * dim + d] = float(d + 1);
    }
  }
  const auto pre = run_hc_pre(in, n_tokens, n, dim, 20);
  const std::vector<float> y(n_tokens * dim, 0.0f);
  const auto got = run_hc_post(in.x, y, pre.post, pre.comb, n_tokens, n, dim);
  for (size_t e = 0; e < got.size(); ++e) EXPECT_NEAR(got[e], in.x[e], 1e-5 * std::fabs(in.x[e])) << e;
}

// -- hc_head -----------------------------------------------------------------------

TEST(mhc, hc_head_matches_reference) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (const shape& s : k_shapes) {
    SCOPED_TRACE(describe(s));
    const int64_t n = s.n_hc, width = n * s.dim;
    auto in = make_pre_inputs(rng, s.n_tokens, n, s.dim, n);
    if (s.n_tokens == 3) {
      for (auto& v : in.x) v *= 1e-4f;  // mean square below norm_eps: the eps matters
    }
    std::vector<float> out(s.n_tokens * s.dim, NAN);
    hc_head_params p;
    p.x = in.x.data();
    p.fn = in.fn.data();
    p.base = in.base.data();
    p.scale = in.scale.data();  // only scale[0] is read
    p.out = out.data();
    p.n_tokens = s.n_tokens;
    p.n_hc = n;
    p.dim = s.dim;
    const status st = hc_head_cpu(p);
    ASSERT_TRUE(st.ok()) << st.to_string();
    std::vector<double> want(s.n_tokens * s.dim), mag(s.n_tokens * s.dim);
    for (int64_t t = 0; t < s.n_tokens; ++t) {
      const float* xt = in.x.data() + t * width;
      const auto mix = ref_mix(xt, in.fn, n, width, 1e-6);
      for (int64_t d = 0; d < s.dim; ++d) {
        double acc = 0, m = 0;
        for (int64_t i = 0; i < n; ++i) {
          const double pre = sigmoid(mix[i] * in.scale[0] + in.base[i]) + 1e-6;
          acc += pre * xt[i * s.dim + d];
          m += std::fabs(pre * xt[i * s.dim + d]);
        }
        want[t * s.dim + d] = acc;
        mag[t * s.dim + d] = m;
      }
    }
    EXPECT_TRUE(all_close(out.data(), out.size(), want, mag, k_rtol, 0.0));
  }
}

// fn = 0, base = +1000: every weight is 1 + hc_eps (no ×2, unlike post);
// base = −1000: every weight is hc_eps.
TEST(mhc, hc_head_weight_range) {
  const int64_t n = 4, dim = 2;
  const std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<float> fn(n * n * dim, 0.0f), scale = {1.0f};
  for (float b : {-1000.0f, 1000.0f}) {
    const std::vector<float> base(n, b);
    std::vector<float> out(dim, NAN);
    hc_head_params p;
    p.x = x.data();
    p.fn = fn.data();
    p.base = base.data();
    p.scale = scale.data();
    p.out = out.data();
    p.n_tokens = 1;
    p.n_hc = n;
    p.dim = dim;
    ASSERT_TRUE(hc_head_cpu(p).ok());
    const double w = b < 0 ? 1e-6 : 1.0 + 1e-6;
    EXPECT_NEAR(out[0], w * (1 + 3 + 5 + 7), 1e-5 * w * 16);
    EXPECT_NEAR(out[1], w * (2 + 4 + 6 + 8), 1e-5 * w * 20);
  }
}

// -- CUDA parity -------------------------------------------------------------------

#ifdef HART_CUDA

using testing::cuda_synced;
using testing::device_vec;
using testing::guarded_buffer;
using testing::guards_intact;
using testing::unguarded;

// hc_pre / hc_head on the device differ from the CPU only in the fp64 summation
// order of the dot products (flips the fp32 rounding of a mix value by one ulp
// at most, rarely) and in expf (2 ulp vs 1): both enter the gates as ~1e-7
// relative, and Sinkhorn, a contraction, does not amplify them. So post and
// collapsed: rtol 1e-6 (of |post|, of Σ|pre·x|); comb (entries in [0, 1]): atol 2e-6.
// hc_post is the same fp32 operations in the same order: bit-identical (tolerance 0).
constexpr double k_cuda_rtol = 1e-6;
constexpr double k_cuda_comb_atol = 2e-6;
constexpr size_t k_guard = 16;

const shape k_cuda_shapes[] = {{1, 4, 1},   {3, 4, 3},    {19, 4, 19},  {2, 4, 111}, {5, 4, 4096}, {1, 4, 7168},
                               {300, 4, 33}, {3, 1, 19},  {2, 3, 111}, {5, 2, 7},   {1, 7, 300}};

std::vector<double> as_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// The device output with its guards checked and stripped.
std::vector<float> host_body(const device_vec<float>& d) {
  const auto h = d.to_host();
  EXPECT_TRUE(guards_intact(h, k_guard));
  return unguarded(h, k_guard);
}

TEST(mhc, cuda_hc_pre_matches_cpu) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (const shape& s : k_cuda_shapes) {
    for (int64_t iters : {1, 2, 20}) {
      for (bool tiny : {false, true}) {
        SCOPED_TRACE(describe(s) + " iters=" + std::to_string(iters) + " tiny=" + std::to_string(tiny));
        const int64_t n = s.n_hc;
        auto in = make_pre_inputs(rng, s.n_tokens, n, s.dim, (2 + n) * n);
        if (tiny) {
          for (auto& v : in.x) v *= 1e-4f;  // mean square below norm_eps
        }
        const auto want = run_hc_pre(in, s.n_tokens, n, s.dim, iters);
        device_vec<float> d_x(in.x), d_fn(in.fn), d_base(in.base), d_scale(in.scale);
        device_vec<float> d_col(guarded_buffer(s.n_tokens * s.dim, k_guard, NAN));
        device_vec<float> d_post(guarded_buffer(s.n_tokens * n, k_guard, NAN));
        device_vec<float> d_comb(guarded_buffer(s.n_tokens * n * n, k_guard, NAN));
        hc_pre_params p;
        p.x = d_x.get();
        p.fn = d_fn.get();
        p.base = d_base.get();
        p.scale = d_scale.get();
        p.collapsed = d_col.get() + k_guard;
        p.post = d_post.get() + k_guard;
        p.comb = d_comb.get() + k_guard;
        p.n_tokens = s.n_tokens;
        p.n_hc = n;
        p.dim = s.dim;
        p.sinkhorn_iters = iters;
        const status st = hc_pre_cuda(p, nullptr);
        ASSERT_TRUE(st.ok()) << st.to_string();
        ASSERT_TRUE(cuda_synced(nullptr));
        const auto post = host_body(d_post), comb = host_body(d_comb), col = host_body(d_col);
        std::vector<double> post_mag(want.post.size()), col_mag(want.collapsed.size());
        for (size_t i = 0; i < post_mag.size(); ++i) post_mag[i] = std::fabs(want.post[i]);
        // Σ_i |pre_i·x_i| bounded by (1 + eps)·Σ_i |x_i| (pre is a sigmoid + eps)
        for (int64_t t = 0; t < s.n_tokens; ++t) {
          for (int64_t d = 0; d < s.dim; ++d) {
            double m = 0;
            for (int64_t i = 0; i < n; ++i) m += std::fabs(in.x[(t * n + i) * s.dim + d]);
            col_mag[t * s.dim + d] = m;
          }
        }
        EXPECT_TRUE(all_close(post.data(), post.size(), as_double(want.post), post_mag, k_cuda_rtol, 0.0)) << "post";
        EXPECT_TRUE(all_close(comb.data(), comb.size(), as_double(want.comb), ones(comb.size()), 0.0,
                              k_cuda_comb_atol))
            << "comb";
        EXPECT_TRUE(all_close(col.data(), col.size(), as_double(want.collapsed), col_mag, k_cuda_rtol, 0.0))
            << "collapsed";
      }
    }
  }
}

TEST(mhc, cuda_hc_post_bit_identical) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  for (const shape& s : k_cuda_shapes) {
    SCOPED_TRACE(describe(s));
    const int64_t n = s.n_hc;
    const auto x = normal_vec(rng, s.n_tokens * n * s.dim, 1.0f);
    const auto y = normal_vec(rng, s.n_tokens * s.dim, 1.0f);
    std::vector<float> post(s.n_tokens * n), comb(s.n_tokens * n * n);
    for (auto& v : post) v = 2 * ud(rng);
    for (auto& v : comb) v = ud(rng);
    const auto want = run_hc_post(x, y, post, comb, s.n_tokens, n, s.dim);
    device_vec<float> d_x(x), d_y(y), d_post(post), d_comb(comb);
    device_vec<float> d_out(guarded_buffer(s.n_tokens * n * s.dim, k_guard, NAN));
    hc_post_params p;
    p.x = d_x.get();
    p.y = d_y.get();
    p.post = d_post.get();
    p.comb = d_comb.get();
    p.out = d_out.get() + k_guard;
    p.n_tokens = s.n_tokens;
    p.n_hc = n;
    p.dim = s.dim;
    const status st = hc_post_cuda(p, nullptr);
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_TRUE(cuda_synced(nullptr));
    const auto got = host_body(d_out);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
  }
}

TEST(mhc, cuda_hc_head_matches_cpu) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (const shape& s : k_cuda_shapes) {
    for (bool tiny : {false, true}) {
      SCOPED_TRACE(describe(s) + " tiny=" + std::to_string(tiny));
      const int64_t n = s.n_hc;
      auto in = make_pre_inputs(rng, s.n_tokens, n, s.dim, n);
      if (tiny) {
        for (auto& v : in.x) v *= 1e-4f;
      }
      std::vector<float> want(s.n_tokens * s.dim, NAN);
      hc_head_params p;
      p.x = in.x.data();
      p.fn = in.fn.data();
      p.base = in.base.data();
      p.scale = in.scale.data();
      p.out = want.data();
      p.n_tokens = s.n_tokens;
      p.n_hc = n;
      p.dim = s.dim;
      ASSERT_TRUE(hc_head_cpu(p).ok());
      device_vec<float> d_x(in.x), d_fn(in.fn), d_base(in.base), d_scale(in.scale);
      device_vec<float> d_out(guarded_buffer(s.n_tokens * s.dim, k_guard, NAN));
      p.x = d_x.get();
      p.fn = d_fn.get();
      p.base = d_base.get();
      p.scale = d_scale.get();
      p.out = d_out.get() + k_guard;
      const status st = hc_head_cuda(p, nullptr);
      ASSERT_TRUE(st.ok()) << st.to_string();
      ASSERT_TRUE(cuda_synced(nullptr));
      const auto got = host_body(d_out);
      std::vector<double> mag(want.size());
      for (int64_t t = 0; t < s.n_tokens; ++t) {
        for (int64_t d = 0; d < s.dim; ++d) {
          double m = 0;
          for (int64_t i = 0; i < n; ++i) m += std::fabs(in.x[(t * n + i) * s.dim + d]);
          mag[t * s.dim + d] = m;
        }
      }
      EXPECT_TRUE(all_close(got.data(), got.size(), as_double(want), mag, k_cuda_rtol, 0.0));
    }
  }
}

TEST(mhc, cuda_bad_arguments) {
  HART_SKIP_WITHOUT_CUDA();
  device_vec<float> d(std::vector<float>(64, 1.0f)), d_out(std::vector<float>(64, 1.0f));
  hc_post_params q;
  q.x = d.get();
  q.y = d.get();
  q.post = d.get();
  q.comb = d.get();
  q.out = d.get();
  q.n_tokens = 1;
  q.n_hc = 4;
  q.dim = 2;
  EXPECT_EQ(hc_post_cuda(q, nullptr).code(), status_code::invalid_argument);  // out aliases x
  q.out = d_out.get();
  q.dim = 0;
  EXPECT_EQ(hc_post_cuda(q, nullptr).code(), status_code::invalid_argument);
  hc_pre_params p;
  p.x = p.fn = p.base = p.scale = d.get();
  p.collapsed = p.post = p.comb = d_out.get();
  p.n_tokens = 1;
  p.dim = 2;
  p.sinkhorn_iters = 0;
  EXPECT_EQ(hc_pre_cuda(p, nullptr).code(), status_code::invalid_argument);
  p.sinkhorn_iters = 20;
  p.fn = nullptr;
  EXPECT_EQ(hc_pre_cuda(p, nullptr).code(), status_code::invalid_argument);
  hc_head_params h;
  h.x = h.fn = h.base = h.scale = d.get();
  h.out = d_out.get();
  h.n_tokens = 1;
  h.dim = 2;
  h.n_hc = 0;
  EXPECT_EQ(hc_head_cuda(h, nullptr).code(), status_code::invalid_argument);
  h.n_hc = 4;
  h.n_tokens = 0;  // nothing to do, nothing written
  EXPECT_TRUE(hc_head_cuda(h, nullptr).ok());
  ASSERT_TRUE(cuda_synced(nullptr));
  for (float v : d_out.to_host()) EXPECT_EQ(v, 1.0f);
}

#endif  // HART_CUDA

}  // namespace
}  // namespace hart
