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

#include "kernels/mhc/mhc_test_util.h"
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

using namespace mhc_testing;

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

void ref_hc_post(const std::vector<float>& x, const std::vector<float>& y, const std::vector<float>& post,
                 const std::vector<float>& comb, int64_t n_tokens, int64_t n, int64_t dim,
                 std::vector<double>& want, std::vector<double>& mag) {
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

// -- bf16 --------------------------------------------------------------------------

::testing::AssertionResult same_bits(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << got.size() << " != " << want.size();
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      return ::testing::AssertionFailure() << "[" << i << "] got " << got[i] << " want " << want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// bf16 is the CPU engine's former sequence inside the op: the op with `official`, then
// round_to_bf16 of collapsed (hc_pre, hc_head) or out (hc_post), post and comb as
// `official` leaves them; bit for bit, on bf16 streams as the engine holds them.
TEST(mhc, bf16_is_official_then_rounded) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  std::vector<shape> shapes(std::begin(k_shapes), std::end(k_shapes));
  shapes.push_back({3, 4, 512});
  shapes.push_back({2, 4, 4096});
  for (const shape& s : shapes) {
    SCOPED_TRACE(describe(s));
    const int64_t n = s.n_hc;
    auto in = make_pre_inputs(rng, s.n_tokens, n, s.dim, (2 + n) * n);
    round_all_to_bf16(in.x);
    auto want = run_hc_pre(in, s.n_tokens, n, s.dim, 20, /*official=*/true);
    round_all_to_bf16(want.collapsed);
    const auto got = run_hc_pre(in, s.n_tokens, n, s.dim, 20, /*official=*/false, /*bf16=*/true);
    EXPECT_TRUE(same_bits(got.collapsed, want.collapsed)) << "hc_pre collapsed";
    EXPECT_TRUE(same_bits(got.post, want.post)) << "hc_pre post";
    EXPECT_TRUE(same_bits(got.comb, want.comb)) << "hc_pre comb";

    auto y = normal_vec(rng, s.n_tokens * s.dim, 1.0f);
    round_all_to_bf16(y);
    auto streams = run_hc_post(in.x, y, want.post, want.comb, s.n_tokens, n, s.dim, /*official=*/true);
    round_all_to_bf16(streams);
    EXPECT_TRUE(
        same_bits(run_hc_post(in.x, y, want.post, want.comb, s.n_tokens, n, s.dim, false, true), streams))
        << "hc_post";

    auto head_in = make_pre_inputs(rng, s.n_tokens, n, s.dim, n);
    round_all_to_bf16(head_in.x);
    auto head = run_hc_head(head_in, s.n_tokens, n, s.dim, /*official=*/true);
    round_all_to_bf16(head);
    EXPECT_TRUE(same_bits(run_hc_head(head_in, s.n_tokens, n, s.dim, false, true), head)) << "hc_head";
  }
}

}  // namespace
}  // namespace hart
