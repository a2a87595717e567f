// sparse_attention_cpu against a double-precision attention with a sink,
// written from v4-model.md §4.6:
//   l_j = (q_h · kv_j)·scale;  o_h = Σ_j e^{l_j} kv_j / (Σ_j e^{l_j} + e^{sink_h})
// (the sink is an extra logit with a zero value and is not scaled). Edges:
// no keys (output 0), a very negative sink (plain softmax), a very large sink
// (output ~0), large logits (no overflow), repeated key pointers.
#include "kernels/sparse_attention/sparse_attention.h"

#include "kernels/testing/op_test_util.h"
#include "runtime/core/codecs.h"

#include <gtest/gtest.h>

#include <algorithm>
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
using testing::guarded_buffer;
using testing::guards_intact;
using testing::k_nan;
using testing::normal_vec;
using testing::seed_trace;
using testing::test_seed;
using testing::unguarded;

struct problem {
  int64_t n_heads = 0, head_dim = 0;
  std::vector<float> q, sink;
  std::vector<std::vector<float>> rows;  // distinct kv rows
  std::vector<const float*> kv;          // gathered picks (may repeat a row)
  float scale = 1.0f;
};

problem random_problem(std::mt19937& rng, int64_t n_heads, int64_t head_dim, int64_t n_kv, float q_sigma) {
  problem pr;
  pr.n_heads = n_heads;
  pr.head_dim = head_dim;
  pr.q = normal_vec(rng, n_heads * head_dim, q_sigma);
  pr.sink = normal_vec(rng, n_heads, 1.0f);
  const int64_t n_rows = std::max<int64_t>(1, n_kv);
  for (int64_t j = 0; j < n_rows; ++j) pr.rows.push_back(normal_vec(rng, head_dim, 1.0f));
  std::uniform_int_distribution<int64_t> pick(0, n_rows - 1);
  for (int64_t j = 0; j < n_kv; ++j) pr.kv.push_back(pr.rows[pick(rng)].data());  // scattered, some repeated
  pr.scale = 1.0f / std::sqrt(float(head_dim));
  return pr;
}

std::vector<float> run(const problem& pr) {
  std::vector<float> out =
      guarded_buffer(pr.n_heads * pr.head_dim, 1, k_nan, 4321.0f);  // one guard each side
  sparse_attention_params p;
  p.q = pr.q.data();
  p.kv = pr.kv.empty() ? nullptr : pr.kv.data();
  p.sink = pr.sink.data();
  p.out = out.data() + 1;
  p.n_heads = pr.n_heads;
  p.head_dim = pr.head_dim;
  p.n_kv = int64_t(pr.kv.size());
  p.scale = pr.scale;
  const status st = sparse_attention_cpu(p);
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_TRUE(guards_intact(out, 1, 4321.0f));
  return unguarded(out, 1);
}

// Expected output and a per-element error bound. The op's fp32 logits carry an
// error up to about head_dim·2^-24·scale·Σ_d|q_d·kv_d| (fp32 dot product), which
// moves each softmax weight relatively by twice that; the weighted sum itself
// adds a few ulps of Σ_j p_j|kv_j[d]|. tol = (1e-5 + 2·max logit error)·Σ_j p_j|kv_j[d]|,
// plus 1e-35 for weights that underflow fp32 (kv values are O(1) here).
void reference(const problem& pr, std::vector<double>& want, std::vector<double>& tol) {
  const int64_t n_kv = int64_t(pr.kv.size()), D = pr.head_dim;
  want.assign(pr.n_heads * D, 0.0);
  tol.assign(pr.n_heads * D, 0.0);
  for (int64_t h = 0; h < pr.n_heads; ++h) {
    std::vector<double> l(n_kv);
    double mx = pr.sink[h], l_err = 0;
    for (int64_t j = 0; j < n_kv; ++j) {
      double dot = 0, dot_mag = 0;
      for (int64_t d = 0; d < D; ++d) {
        dot += double(pr.q[h * D + d]) * pr.kv[j][d];
        dot_mag += std::fabs(double(pr.q[h * D + d]) * pr.kv[j][d]);
      }
      l[j] = dot * pr.scale;
      l_err = std::max(l_err, double(D + 2) * std::ldexp(1.0, -24) * dot_mag * pr.scale);
      mx = std::max(mx, l[j]);
    }
    double z = std::exp(double(pr.sink[h]) - mx);
    for (int64_t j = 0; j < n_kv; ++j) z += std::exp(l[j] - mx);
    for (int64_t j = 0; j < n_kv; ++j) {
      const double p = std::exp(l[j] - mx) / z;
      for (int64_t d = 0; d < D; ++d) {
        want[h * D + d] += p * pr.kv[j][d];
        tol[h * D + d] += p * std::fabs(pr.kv[j][d]);
      }
    }
    for (int64_t d = 0; d < D; ++d) tol[h * D + d] = tol[h * D + d] * (1e-5 + 2 * l_err) + 1e-35;
  }
}

// -- tests -----------------------------------------------------------------------

TEST(sparse_attention, matches_reference) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (int64_t n_heads : {1, 3, 16}) {
    for (int64_t head_dim : {1, 3, 19, 111, 512}) {
      for (int64_t n_kv : {1, 3, 19, 111, 300}) {
        SCOPED_TRACE("n_heads=" + std::to_string(n_heads) + " head_dim=" + std::to_string(head_dim) +
                     " n_kv=" + std::to_string(n_kv));
        const auto pr = random_problem(rng, n_heads, head_dim, n_kv, 1.5f);
        const auto got = run(pr);
        std::vector<double> want, tol;
        reference(pr, want, tol);
        EXPECT_TRUE(all_close(got.data(), got.size(), want, tol, 1.0, 0.0));  // |got - want| <= tol
      }
    }
  }
}

// The official kernel's numerics (bf16): an online softmax over blocks of 64
// slots, masked (null) slots anywhere, probabilities and output rounded to bf16.
// Against the exact softmax over the unmasked keys: within the two bf16
// roundings (2^-8 of Σ p·|v| and of |out|), bf16 values out, and a slot
// list whose every block but one is masked gives the same as that block alone.
TEST(sparse_attention, official_bf16_online_softmax) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (int64_t n_kv : {1, 63, 64, 65, 200}) {
    SCOPED_TRACE("n_kv=" + std::to_string(n_kv));
    const auto pr = random_problem(rng, 16, 512, n_kv, 1.5f);
    std::vector<const float*> slots;  // the keys with a masked slot after every third
    for (size_t j = 0; j < pr.kv.size(); ++j) {
      slots.push_back(pr.kv[j]);
      if (j % 3 == 2) slots.push_back(nullptr);
    }
    std::vector<float> got(size_t(16 * 512));
    sparse_attention_params p;
    p.q = pr.q.data();
    p.kv = slots.data();
    p.sink = pr.sink.data();
    p.out = got.data();
    p.n_heads = 16;
    p.head_dim = 512;
    p.n_kv = int64_t(slots.size());
    p.scale = pr.scale;
    p.bf16 = true;
    ASSERT_TRUE(sparse_attention_cpu(p).ok());
    std::vector<double> want, tol, mass, unused;
    reference(pr, want, tol);
    problem abs_pr = pr;  // Σ p·|v|: the same softmax over the rows' magnitudes
    for (auto& row : abs_pr.rows) {
      for (float& v : row) v = std::fabs(v);
    }
    for (size_t j = 0; j < pr.kv.size(); ++j) {
      const size_t r =
          size_t(std::find_if(pr.rows.begin(), pr.rows.end(),
                              [&](const std::vector<float>& x) { return x.data() == pr.kv[j]; }) -
                 pr.rows.begin());
      abs_pr.kv[j] = abs_pr.rows[r].data();
    }
    reference(abs_pr, mass, unused);
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i], round_to_bf16(got[i])) << i;
      tol[i] += 0x1p-8 * (mass[i] + std::fabs(want[i]));
    }
    EXPECT_TRUE(all_close(got.data(), got.size(), want, tol, 1.0, 0.0));
  }
  // Masked blocks contribute nothing: 64 masked slots, then 10 keys == the 10 keys alone.
  const auto pr = random_problem(rng, 16, 64, 10, 1.0f);
  std::vector<const float*> padded(64, nullptr);
  padded.insert(padded.end(), pr.kv.begin(), pr.kv.end());
  std::vector<float> a(16 * 64), b(16 * 64);
  sparse_attention_params p;
  p.q = pr.q.data();
  p.sink = pr.sink.data();
  p.n_heads = 16;
  p.head_dim = 64;
  p.scale = pr.scale;
  p.bf16 = true;
  p.kv = padded.data();
  p.n_kv = int64_t(padded.size());
  p.out = a.data();
  ASSERT_TRUE(sparse_attention_cpu(p).ok());
  p.kv = pr.kv.data();
  p.n_kv = int64_t(pr.kv.size());
  p.out = b.data();
  ASSERT_TRUE(sparse_attention_cpu(p).ok());
  EXPECT_EQ(a, b);
}

// Logits of several hundred would overflow exp() without the max shift.
TEST(sparse_attention, large_logits_are_stable) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (int64_t n_kv : {1, 19, 111}) {
    SCOPED_TRACE("n_kv=" + std::to_string(n_kv));
    auto pr = random_problem(rng, 3, 64, n_kv, 1.0f);
    for (auto& v : pr.q) v *= 100.0f;  // logits ~ N(0, 100²)
    pr.sink = {300.0f, -300.0f, 0.0f};
    const auto got = run(pr);
    std::vector<double> want, tol;
    reference(pr, want, tol);
    EXPECT_TRUE(all_close(got.data(), got.size(), want, tol, 1.0, 0.0));  // |got - want| <= tol
  }
}

// n_kv = 0 (kv may be null): only the sink is left, whose value is 0.
TEST(sparse_attention, sink_only_gives_zero) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (int64_t head_dim : {1, 19, 512}) {
    auto pr = random_problem(rng, 3, head_dim, 0, 1.0f);
    pr.sink = {-50.0f, 0.0f, 50.0f};
    const auto got = run(pr);
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], 0.0f) << "head_dim=" << head_dim << " i=" << i;
  }
}

// Sink → −∞ leaves a plain softmax over the keys (written out separately here).
TEST(sparse_attention, very_negative_sink_is_plain_softmax) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (float sink : {-1e4f, -1e30f, -std::numeric_limits<float>::infinity()}) {
    for (int64_t n_kv : {1, 3, 111}) {
      SCOPED_TRACE("sink=" + std::to_string(sink) + " n_kv=" + std::to_string(n_kv));
      auto pr = random_problem(rng, 2, 19, n_kv, 1.0f);
      pr.sink.assign(2, sink);
      const auto got = run(pr);
      for (int64_t h = 0; h < 2; ++h) {
        std::vector<double> l(n_kv);
        double mx = -INFINITY;
        for (int64_t j = 0; j < n_kv; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < 19; ++d) dot += double(pr.q[h * 19 + d]) * pr.kv[j][d];
          mx = std::max(mx, l[j] = dot * pr.scale);
        }
        double z = 0;
        for (int64_t j = 0; j < n_kv; ++j) z += std::exp(l[j] - mx);
        for (int64_t d = 0; d < 19; ++d) {
          double want = 0, mag = 0;
          for (int64_t j = 0; j < n_kv; ++j) {
            want += std::exp(l[j] - mx) / z * pr.kv[j][d];
            mag += std::exp(l[j] - mx) / z * std::fabs(pr.kv[j][d]);
          }
          EXPECT_NEAR(got[h * 19 + d], want, 1e-5 * mag) << "h=" << h << " d=" << d;
        }
      }
      if (n_kv == 1) {  // one key, no sink mass: the output is that key
        for (int64_t h = 0; h < 2; ++h) {
          for (int64_t d = 0; d < 19; ++d)
            EXPECT_NEAR(got[h * 19 + d], pr.kv[0][d], 1e-6 * std::fabs(pr.kv[0][d]));
        }
      }
    }
  }
}

// A sink far above every logit takes all the mass: the output is ~0.
TEST(sparse_attention, very_large_sink_gives_near_zero) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (int64_t n_kv : {1, 19, 111}) {
    auto pr = random_problem(rng, 2, 64, n_kv, 1.0f);
    pr.sink = {100.0f, 1e4f};  // logits are O(1): e^{l−100} < 1e-40
    const auto got = run(pr);
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_LE(std::fabs(got[i]), 1e-30f) << "n_kv=" << n_kv << " i=" << i;
  }
}

// The sink is not multiplied by `scale`: with q = 0 (logit 0) and one key v,
// o = v / (1 + e^{sink}); scaling the sink by 0.5 would give v / (1 + e^{0.5}).
TEST(sparse_attention, sink_is_not_scaled) {
  problem pr;
  pr.n_heads = 2;
  pr.head_dim = 3;
  pr.q.assign(6, 0.0f);
  pr.sink = {1.0f, -2.0f};
  pr.rows = {{2.0f, -4.0f, 8.0f}};
  pr.kv = {pr.rows[0].data()};
  pr.scale = 0.5f;
  const auto got = run(pr);
  for (int64_t h = 0; h < 2; ++h) {
    const double f = 1.0 / (1.0 + std::exp(double(pr.sink[h])));
    for (int64_t d = 0; d < 3; ++d)
      EXPECT_NEAR(got[h * 3 + d], pr.rows[0][d] * f, 1e-6) << "h=" << h << " d=" << d;
  }
}

// Per-head sinks and queries: heads don't share state. Head 1 has a huge sink
// (output ~0); head 0 has none (plain softmax over two keys, hand computed).
TEST(sparse_attention, heads_are_independent) {
  problem pr;
  pr.n_heads = 2;
  pr.head_dim = 2;
  pr.q = {1.0f, 0.0f, 1.0f, 0.0f};
  pr.sink = {-1e30f, 1e30f};
  pr.rows = {{1.0f, 0.0f}, {0.0f, 1.0f}};
  pr.kv = {pr.rows[0].data(), pr.rows[1].data()};
  pr.scale = 1.0f;
  const auto got = run(pr);
  const double p0 = std::exp(1.0) / (std::exp(1.0) + 1.0);  // logits 1 and 0
  EXPECT_NEAR(got[0], p0, 1e-6);
  EXPECT_NEAR(got[1], 1.0 - p0, 1e-6);
  EXPECT_EQ(got[2], 0.0f);
  EXPECT_EQ(got[3], 0.0f);
}

}  // namespace
}  // namespace hart
