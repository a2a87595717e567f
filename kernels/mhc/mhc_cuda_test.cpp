// CUDA parity of hc_pre / hc_post / hc_head (kernels/mhc/mhc.cu) against the CPU
// ops on fresh random inputs, outputs guarded; skipped without a device.
#include "kernels/mhc/mhc.h"
#include "kernels/mhc/mhc_test_util.h"
#include "kernels/testing/cuda_test_util.h"
#include "kernels/testing/op_test_util.h"

#include <climits>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace hart {
namespace {

using namespace mhc_testing;

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

const shape k_cuda_shapes[] = {{1, 4, 1},    {3, 4, 3},  {19, 4, 19}, {2, 4, 111}, {5, 4, 4096}, {1, 4, 7168},
                               {300, 4, 33}, {3, 1, 19}, {2, 3, 111}, {5, 2, 7},   {1, 7, 300},  {8, 4, 64}};

std::vector<double> as_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

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
      for (const auto& [tiny, split] :
           {std::pair{false, false}, {true, false}, {false, true}, {true, true}}) {
        SCOPED_TRACE(describe(s) + " iters=" + std::to_string(iters) + " tiny=" + std::to_string(tiny) +
                     " split=" + std::to_string(split));
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
        // With a workspace, up to 8 tokens' sums are split over many blocks first.
        const size_t ws_bytes = split ? hc_pre_workspace_bytes(s.n_tokens, n, s.dim) : 0;
        if (split && ws_bytes == 0) continue;
        device_vec<double> d_ws(std::vector<double>(std::max<size_t>(ws_bytes / sizeof(double), 1), NAN));
        if (split) p.workspace = d_ws.get();
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
        EXPECT_TRUE(all_close(post.data(), post.size(), as_double(want.post), post_mag, k_cuda_rtol, 0.0))
            << "post";
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

// -- official / bf16 ------------------------------------------------------------------

// With `official` or `bf16` the device does the CPU's arithmetic (the torch-order mean
// square, rsqrt rounded once, glibc's expf, hc_post's sum first, the same fp32 operations
// in the same order) but for one thing: the fp64 order of hc_pre's / hc_head's dot
// products with fn. That flips a dot product's fp32 rounding when its fp64 sums straddle
// a rounding boundary, ~2^-22 of the time (their error ~sqrt(width)·2^-53 relative
// against fp32's 2^-24; 0 flips in 2·10^5 simulated 16384-wide dots). So bitwise but on
// a rare token: at most 1 + n/1000 tokens may differ, within the fp32 tolerances above
// (post, comb, fp32 outputs); such a token's pre moves by an ulp or two, which flips a
// bf16 rounding of its collapse on ~2^-15 of its channels: at most 4 such one-ulp flips
// per token allowed to differ. hc_post: bitwise.
int64_t mix_flip_tokens(int64_t n_tokens) {
  return 1 + n_tokens / 1000;
}

// got against want, token by token (per_token values each): values and tokens that
// differ, and the largest distance in units in the last place of the output's format
// (bf16 outputs hold bf16 values: one bf16 ulp is 2^16 fp32 ulps).
struct token_diff {
  int64_t values = 0, tokens = 0, max_ulps = 0;
};

int64_t ordered_bits(float v) {
  int32_t i;
  std::memcpy(&i, &v, sizeof(i));
  return i < 0 ? int64_t(INT32_MIN) - i : i;
}

token_diff diff_tokens(const std::vector<float>& got, const std::vector<float>& want, int64_t per_token,
                       bool bf16) {
  token_diff d;
  EXPECT_EQ(got.size(), want.size());
  const int64_t n_tokens = int64_t(std::min(got.size(), want.size())) / per_token;
  for (int64_t t = 0; t < n_tokens; ++t) {
    int64_t differ = 0;
    for (int64_t i = t * per_token; i < (t + 1) * per_token; ++i) {
      if (std::memcmp(&got[i], &want[i], sizeof(float)) == 0) continue;
      ++differ;
      const int64_t ulps = std::abs(ordered_bits(got[i]) - ordered_bits(want[i])) >> (bf16 ? 16 : 0);
      d.max_ulps = std::max(d.max_ulps, std::isfinite(got[i]) ? ulps : INT64_MAX);
    }
    d.values += differ;
    d.tokens += differ > 0;
  }
  return d;
}

std::string describe(const token_diff& d) {
  return std::to_string(d.values) + " values in " + std::to_string(d.tokens) + " tokens differ, up to " +
         std::to_string(d.max_ulps) + " ulps";
}

// The collapse (hc_pre's or hc_head's) against the CPU's, as the comment above allows.
void expect_collapse_matches(const std::vector<float>& got, const std::vector<float>& want,
                             const pre_inputs& in, int64_t n_tokens, int64_t n, int64_t dim, bool bf16) {
  const token_diff d = diff_tokens(got, want, dim, bf16);
  EXPECT_LE(d.tokens, mix_flip_tokens(n_tokens)) << describe(d);
  if (bf16) {
    EXPECT_LE(d.max_ulps, 1) << describe(d);
    EXPECT_LE(d.values, 4 * mix_flip_tokens(n_tokens)) << describe(d);
    return;
  }
  std::vector<double> mag(want.size());
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t c = 0; c < dim; ++c) {
      double m = 0;
      for (int64_t i = 0; i < n; ++i) m += std::fabs(in.x[(t * n + i) * dim + c]);
      mag[t * dim + c] = m;
    }
  }
  EXPECT_TRUE(all_close(got.data(), got.size(), as_double(want), mag, k_cuda_rtol, 0.0)) << describe(d);
}

struct official_case {
  int64_t n_tokens, n_hc, dim;
  bool split = false;      // with hc_pre's workspace (<= 8 tokens)
  bool unaligned = false;  // x one float off 16-byte alignment: the one-block-per-token kernels
  float x_scale = 1.0f;    // 1e-4: mean square below norm_eps
};

std::string describe(const official_case& c) {
  return describe(shape{c.n_tokens, c.n_hc, c.dim}) + " split=" + std::to_string(c.split) +
         " unaligned=" + std::to_string(c.unaligned) + " x_scale=" + std::to_string(c.x_scale);
}

// V4's shapes (n_hc 4; hidden 4096, 7168 and the tests' 512; decode to prefill token
// counts, the few-token ones with and without the split workspace), then edge cases:
// widths % 4 != 0 (the exactly rounded Σx²), fewer than 32 torch lanes, a last float4
// row only some lanes reach, n_hc != 4 and unaligned rows (one block per token), tiny streams.
std::vector<official_case> official_cases() {
  std::vector<official_case> cases;
  for (int64_t dim : {512, 4096, 7168}) {
    for (int64_t n_tokens : {1, 2, 8, 64, 1200}) {
      cases.push_back({n_tokens, 4, dim});
      if (n_tokens <= 8) cases.push_back({n_tokens, 4, dim, true});
    }
    cases.push_back({2, 4, dim, false, true});
  }
  cases.push_back({64, 4, 512, false, true});
  cases.push_back({3, 4, 3});
  cases.push_back({3, 4, 4, true});
  cases.push_back({300, 4, 33});
  cases.push_back({2, 4, 19, false, true});
  cases.push_back({2, 3, 111});
  cases.push_back({5, 2, 7});
  cases.push_back({1, 7, 300});
  cases.push_back({3, 4, 4096, false, false, 1e-4f});
  cases.push_back({3, 4, 4096, true, false, 1e-4f});
  return cases;
}

// x on the device, one float past a 16-byte boundary when `unaligned`
struct device_streams {
  device_streams(const std::vector<float>& x, bool unaligned)
      : buf(padded(x, unaligned)), offset(unaligned) {}
  static std::vector<float> padded(const std::vector<float>& x, bool unaligned) {
    std::vector<float> v(unaligned ? 1 : 0, 0.0f);
    v.insert(v.end(), x.begin(), x.end());
    return v;
  }
  const float* get() const { return buf.get() + offset; }
  device_vec<float> buf;
  size_t offset;
};

TEST(mhc, cuda_hc_pre_official_matches_cpu) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (const official_case& c : official_cases()) {
    const int64_t n = c.n_hc;
    auto in = make_pre_inputs(rng, c.n_tokens, n, c.dim, (2 + n) * n);
    for (auto& v : in.x) v *= c.x_scale;
    round_all_to_bf16(in.x);
    for (bool bf16 : {false, true}) {
      SCOPED_TRACE(describe(c) + " bf16=" + std::to_string(bf16));
      const auto want = run_hc_pre(in, c.n_tokens, n, c.dim, 20, /*official=*/true, bf16);
      device_streams d_x(in.x, c.unaligned);
      device_vec<float> d_fn(in.fn), d_base(in.base), d_scale(in.scale);
      device_vec<float> d_col(guarded_buffer(c.n_tokens * c.dim, k_guard, NAN));
      device_vec<float> d_post(guarded_buffer(c.n_tokens * n, k_guard, NAN));
      device_vec<float> d_comb(guarded_buffer(c.n_tokens * n * n, k_guard, NAN));
      hc_pre_params p;
      p.x = d_x.get();
      p.fn = d_fn.get();
      p.base = d_base.get();
      p.scale = d_scale.get();
      p.collapsed = d_col.get() + k_guard;
      p.post = d_post.get() + k_guard;
      p.comb = d_comb.get() + k_guard;
      p.n_tokens = c.n_tokens;
      p.n_hc = n;
      p.dim = c.dim;
      p.sinkhorn_iters = 20;
      p.official = !bf16;  // bf16 implies it
      p.bf16 = bf16;
      const size_t ws_bytes = c.split ? hc_pre_workspace_bytes(c.n_tokens, n, c.dim) : 0;
      ASSERT_EQ(c.split, ws_bytes > 0);
      device_vec<double> d_ws(std::vector<double>(std::max<size_t>(ws_bytes / sizeof(double), 1), NAN));
      if (c.split) p.workspace = d_ws.get();
      const status st = hc_pre_cuda(p, nullptr);
      ASSERT_TRUE(st.ok()) << st.to_string();
      ASSERT_TRUE(cuda_synced(nullptr));
      const auto post = host_body(d_post), comb = host_body(d_comb), col = host_body(d_col);
      const token_diff post_diff = diff_tokens(post, want.post, n, false);
      const token_diff comb_diff = diff_tokens(comb, want.comb, n * n, false);
      EXPECT_LE(post_diff.tokens, mix_flip_tokens(c.n_tokens)) << "post: " << describe(post_diff);
      EXPECT_LE(comb_diff.tokens, mix_flip_tokens(c.n_tokens)) << "comb: " << describe(comb_diff);
      std::vector<double> post_mag(want.post.size());
      for (size_t i = 0; i < post_mag.size(); ++i) post_mag[i] = std::fabs(want.post[i]);
      EXPECT_TRUE(all_close(post.data(), post.size(), as_double(want.post), post_mag, k_cuda_rtol, 0.0))
          << "post";
      EXPECT_TRUE(
          all_close(comb.data(), comb.size(), as_double(want.comb), ones(comb.size()), 0.0, k_cuda_comb_atol))
          << "comb";
      expect_collapse_matches(col, want.collapsed, in, c.n_tokens, n, c.dim, bf16);
    }
  }
}

TEST(mhc, cuda_hc_post_official_bit_identical) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  for (const official_case& c : official_cases()) {
    if (c.split) continue;  // hc_pre's
    const int64_t n = c.n_hc;
    auto x = normal_vec(rng, c.n_tokens * n * c.dim, c.x_scale);
    auto y = normal_vec(rng, c.n_tokens * c.dim, c.x_scale);
    round_all_to_bf16(x);
    round_all_to_bf16(y);
    std::vector<float> post(c.n_tokens * n), comb(c.n_tokens * n * n);
    for (auto& v : post) v = 2 * ud(rng);
    for (auto& v : comb) v = ud(rng);
    for (bool bf16 : {false, true}) {
      SCOPED_TRACE(describe(c) + " bf16=" + std::to_string(bf16));
      const auto want = run_hc_post(x, y, post, comb, c.n_tokens, n, c.dim, /*official=*/true, bf16);
      device_streams d_x(x, c.unaligned);
      device_vec<float> d_y(y), d_post(post), d_comb(comb);
      device_vec<float> d_out(guarded_buffer(c.n_tokens * n * c.dim, k_guard, NAN));
      hc_post_params p;
      p.x = d_x.get();
      p.y = d_y.get();
      p.post = d_post.get();
      p.comb = d_comb.get();
      p.out = d_out.get() + k_guard;
      p.n_tokens = c.n_tokens;
      p.n_hc = n;
      p.dim = c.dim;
      p.official = !bf16;
      p.bf16 = bf16;
      const status st = hc_post_cuda(p, nullptr);
      ASSERT_TRUE(st.ok()) << st.to_string();
      ASSERT_TRUE(cuda_synced(nullptr));
      const token_diff d = diff_tokens(host_body(d_out), want, n * c.dim, bf16);
      EXPECT_EQ(d.values, 0) << describe(d);
    }
  }
}

TEST(mhc, cuda_hc_head_official_matches_cpu) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (const official_case& c : official_cases()) {
    if (c.split) continue;  // hc_pre's
    const int64_t n = c.n_hc;
    auto in = make_pre_inputs(rng, c.n_tokens, n, c.dim, n);
    for (auto& v : in.x) v *= c.x_scale;
    round_all_to_bf16(in.x);
    for (bool bf16 : {false, true}) {
      SCOPED_TRACE(describe(c) + " bf16=" + std::to_string(bf16));
      const auto want = run_hc_head(in, c.n_tokens, n, c.dim, /*official=*/true, bf16);
      device_streams d_x(in.x, c.unaligned);
      device_vec<float> d_fn(in.fn), d_base(in.base), d_scale(in.scale);
      device_vec<float> d_out(guarded_buffer(c.n_tokens * c.dim, k_guard, NAN));
      hc_head_params p;
      p.x = d_x.get();
      p.fn = d_fn.get();
      p.base = d_base.get();
      p.scale = d_scale.get();
      p.out = d_out.get() + k_guard;
      p.n_tokens = c.n_tokens;
      p.n_hc = n;
      p.dim = c.dim;
      p.official = !bf16;
      p.bf16 = bf16;
      const status st = hc_head_cuda(p, nullptr);
      ASSERT_TRUE(st.ok()) << st.to_string();
      ASSERT_TRUE(cuda_synced(nullptr));
      expect_collapse_matches(host_body(d_out), want, in, c.n_tokens, n, c.dim, bf16);
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
