// File: kernels/mhc/mhc_test_util.h — double-precision references and input
// builders shared by the two halves of the mhc tests, mhc_test.cpp (CPU) and
// mhc_cuda_test.cpp (CUDA parity).
#pragma once

#include "kernels/mhc/mhc.h"
#include "kernels/testing/op_test_util.h"
#include "runtime/core/codecs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace hart::mhc_testing {

// -- test helpers --------------------------------------------------------------

using testing::all_close;
using testing::normal_vec;
using testing::seed_trace;
using testing::test_seed;

inline double sigmoid(double v) {
  return 1.0 / (1.0 + std::exp(-v));
}

// mix[o] = (x · fn[o]) · rsqrt(mean(x²) + eps), x = one token's n·dim values
inline std::vector<double> ref_mix(const float* x, const std::vector<float>& fn, int64_t n_out, int64_t width,
                                   double eps) {
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

inline hc_pre_want ref_hc_pre(const std::vector<float>& x, const std::vector<float>& fn,
                              const std::vector<float>& base, const std::vector<float>& scale,
                              int64_t n_tokens, int64_t n, int64_t dim, int64_t iters, double norm_eps,
                              double hc_eps) {
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
inline pre_inputs make_pre_inputs(std::mt19937& rng, int64_t n_tokens, int64_t n, int64_t dim,
                                  int64_t n_out) {
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

inline pre_outputs run_hc_pre(const pre_inputs& in, int64_t n_tokens, int64_t n, int64_t dim, int64_t iters,
                              bool official = false, bool bf16 = false) {
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
  p.official = official;
  p.bf16 = bf16;
  const status st = hc_pre_cpu(p);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

inline std::vector<float> run_hc_head(const pre_inputs& in, int64_t n_tokens, int64_t n, int64_t dim,
                                      bool official = false, bool bf16 = false) {
  std::vector<float> out(n_tokens * dim, NAN);
  hc_head_params p;
  p.x = in.x.data();
  p.fn = in.fn.data();
  p.base = in.base.data();
  p.scale = in.scale.data();
  p.out = out.data();
  p.n_tokens = n_tokens;
  p.n_hc = n;
  p.dim = dim;
  p.official = official;
  p.bf16 = bf16;
  const status st = hc_head_cpu(p);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

inline std::vector<double> ones(size_t n) {
  return std::vector<double>(n, 1.0);
}

// The engine's residual streams and sublayer outputs are bf16 values under bf16.
inline void round_all_to_bf16(std::vector<float>& v) {
  for (float& e : v) e = round_to_bf16(e);
}

// The rsqrt statistic and the 24 dot products are fp32-rounded once; the
// Sinkhorn loop runs 20 fp32 iterations on values in [0, 1].
constexpr double k_rtol = 1e-5;
constexpr double k_comb_atol = 2e-5;

struct shape {
  int64_t n_tokens, n_hc, dim;
};
const shape k_shapes[] = {{1, 4, 1},    {3, 4, 3},  {19, 4, 19}, {2, 4, 111},
                          {1, 4, 1024}, {3, 1, 19}, {2, 3, 111}, {5, 2, 7}};

inline std::string describe(const shape& s) {
  return "n_tokens=" + std::to_string(s.n_tokens) + " n_hc=" + std::to_string(s.n_hc) +
         " dim=" + std::to_string(s.dim);
}

inline std::vector<float> run_hc_post(const std::vector<float>& x, const std::vector<float>& y,
                                      const std::vector<float>& post, const std::vector<float>& comb,
                                      int64_t n_tokens, int64_t n, int64_t dim, bool official = false,
                                      bool bf16 = false) {
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
  p.official = official;
  p.bf16 = bf16;
  const status st = hc_post_cpu(p);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

}  // namespace hart::mhc_testing
