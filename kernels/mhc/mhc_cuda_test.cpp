// CUDA parity of hc_pre / hc_post / hc_head (kernels/mhc/mhc.cu) against the CPU
// ops on fresh random inputs, outputs guarded; skipped without a device.
#include "kernels/mhc/mhc.h"
#include "kernels/mhc/mhc_test_util.h"
#include "kernels/testing/cuda_test_util.h"
#include "kernels/testing/op_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
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

const shape k_cuda_shapes[] = {{1, 4, 1},   {3, 4, 3},    {19, 4, 19},  {2, 4, 111}, {5, 4, 4096}, {1, 4, 7168},
                               {300, 4, 33}, {3, 1, 19},  {2, 3, 111}, {5, 2, 7},   {1, 7, 300}, {8, 4, 64}};

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
      for (const auto& [tiny, split] : {std::pair{false, false}, {true, false}, {false, true}, {true, true}}) {
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
