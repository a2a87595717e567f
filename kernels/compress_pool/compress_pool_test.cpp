// compress_pool_cpu against a double-precision per-channel softmax pooling
// written from v4-model.md §4.4: out[ch] = Σ_j softmax_j(gate_j[ch])·kv_j[ch],
// where −inf gates get weight 0 and a channel whose gates are all −inf pools to 0.
#include "kernels/compress_pool/compress_pool.h"

#include "kernels/testing/op_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
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
using testing::seed_trace;
using testing::test_seed;
using testing::unguarded;

const float k_ninf = -std::numeric_limits<float>::infinity();
constexpr float k_guard_val = 12345.0f;  // one guard on each side of the output

// Candidates as separate rows (the op takes row pointers, as gathered from a cache).
struct candidates {
  std::vector<std::vector<float>> kv, gate;
  std::vector<const float*> kv_ptr, gate_ptr;
  void index() {
    kv_ptr.clear();
    gate_ptr.clear();
    for (auto& r : kv) kv_ptr.push_back(r.data());
    for (auto& r : gate) gate_ptr.push_back(r.data());
  }
};

candidates random_candidates(std::mt19937& rng, int64_t n_cand, int64_t dim, float gate_sigma) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  candidates c;
  c.kv.assign(n_cand, std::vector<float>(dim));
  c.gate.assign(n_cand, std::vector<float>(dim));
  for (int64_t j = 0; j < n_cand; ++j) {
    for (int64_t ch = 0; ch < dim; ++ch) {
      c.kv[j][ch] = nd(rng);
      c.gate[j][ch] = gate_sigma * nd(rng);
    }
  }
  c.index();
  return c;
}

std::vector<float> run(const candidates& c, int64_t dim) {
  std::vector<float> out = guarded_buffer(dim, 1, k_nan, k_guard_val);
  compress_pool_params p;
  p.kv = c.kv_ptr.data();
  p.gate = c.gate_ptr.data();
  p.out = out.data() + 1;
  p.n_cand = int64_t(c.kv.size());
  p.dim = dim;
  const status st = compress_pool_cpu(p);
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_TRUE(guards_intact(out, 1, k_guard_val));
  return unguarded(out, 1);
}

// want[ch] and mag[ch] = Σ_j w_j·|kv_j[ch]| (bounds the rounding of the weighted sum).
void reference(const candidates& c, int64_t dim, std::vector<double>& want, std::vector<double>& mag) {
  want.assign(dim, 0.0);
  mag.assign(dim, 0.0);
  for (int64_t ch = 0; ch < dim; ++ch) {
    double mx = -INFINITY;
    for (const auto& g : c.gate) {
      if (g[ch] != k_ninf) mx = std::max(mx, double(g[ch]));
    }
    if (mx == -INFINITY) continue;  // no live candidate: 0
    double z = 0;
    for (const auto& g : c.gate) z += g[ch] == k_ninf ? 0.0 : std::exp(double(g[ch]) - mx);
    for (size_t j = 0; j < c.gate.size(); ++j) {
      if (c.gate[j][ch] == k_ninf) continue;
      const double w = std::exp(double(c.gate[j][ch]) - mx) / z;
      want[ch] += w * c.kv[j][ch];
      mag[ch] += w * std::fabs(c.kv[j][ch]);
    }
  }
}

// fp32 exp/divide per weight and an fp32 sum of n_cand products: a few ulps of
// Σ w·|kv|, and an error of δ in a gate moves its weight by about δ.
constexpr double k_rtol = 1e-5;

const int64_t k_n_cands[] = {1, 2, 3, 8, 19, 111, 128};
const int64_t k_dims[] = {1, 3, 19, 111, 512};

// -- tests -----------------------------------------------------------------------

TEST(compress_pool, matches_reference) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (int64_t n_cand : k_n_cands) {
    for (int64_t dim : k_dims) {
      SCOPED_TRACE("n_cand=" + std::to_string(n_cand) + " dim=" + std::to_string(dim));
      const auto c = random_candidates(rng, n_cand, dim, 3.0f);
      const auto got = run(c, dim);
      std::vector<double> want, mag;
      reference(c, dim, want, mag);
      EXPECT_TRUE(all_close(got.data(), got.size(), want, mag, k_rtol, 0.0));
    }
  }
}

// Gate logits of ±1e4 overflow a naive exp; the softmax must stay finite.
TEST(compress_pool, large_gates_are_stable) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (int64_t n_cand : {2, 8, 111}) {
    SCOPED_TRACE("n_cand=" + std::to_string(n_cand));
    auto c = random_candidates(rng, n_cand, 19, 1.0f);
    // offsets of ±1e4 with O(1) spread around them; fp32 spacing at 1e4 is ~1e-3,
    // which the reference sees exactly (it reads the same fp32 gates)
    for (int64_t j = 0; j < n_cand; ++j) {
      for (auto& g : c.gate[j]) g += (j % 2 ? 1e4f : -1e4f);
    }
    const auto got = run(c, 19);
    std::vector<double> want, mag;
    reference(c, 19, want, mag);
    EXPECT_TRUE(all_close(got.data(), got.size(), want, mag, k_rtol, 0.0));
  }
}

// One softmax per channel, not per token: channel 0 prefers candidate 0,
// channel 1 prefers candidate 1.
TEST(compress_pool, softmax_is_per_channel) {
  candidates c;
  c.kv = {{1.0f, 2.0f}, {3.0f, 4.0f}};
  c.gate = {{50.0f, -50.0f}, {-50.0f, 50.0f}};
  c.index();
  const auto got = run(c, 2);
  EXPECT_NEAR(got[0], 1.0f, 1e-6);
  EXPECT_NEAR(got[1], 4.0f, 1e-6);
  // equal gates: plain mean
  c.gate = {{0.5f, -3.0f}, {0.5f, -3.0f}};
  c.index();
  const auto mean = run(c, 2);
  EXPECT_NEAR(mean[0], 2.0f, 1e-6);
  EXPECT_NEAR(mean[1], 3.0f, 1e-6);
}

// −inf gates get weight exactly 0 (CSA block 0's absent "previous block"
// half): the result equals pooling over the live candidates only, whatever
// the dead candidates' kv holds.
TEST(compress_pool, neg_inf_gates_have_zero_weight) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  std::bernoulli_distribution dead(0.4);
  for (int64_t n_cand : {2, 3, 8, 19}) {
    for (int64_t dim : {1, 19, 111}) {
      SCOPED_TRACE("n_cand=" + std::to_string(n_cand) + " dim=" + std::to_string(dim));
      auto c = random_candidates(rng, n_cand, dim, 3.0f);
      for (int64_t j = 0; j < n_cand; ++j) {
        for (int64_t ch = 0; ch < dim; ++ch) {
          if (dead(rng)) {
            c.gate[j][ch] = k_ninf;
            c.kv[j][ch] = 1e30f;  // would dominate if it leaked in
          }
        }
      }
      const auto got = run(c, dim);
      std::vector<double> want, mag;
      reference(c, dim, want, mag);
      EXPECT_TRUE(all_close(got.data(), got.size(), want, mag, k_rtol, 0.0));
    }
  }
  // CSA block 0 layout: 4 dead "A" candidates, 4 live "B" candidates
  auto c = random_candidates(rng, 8, 128, 2.0f);
  auto live = c;
  live.kv.erase(live.kv.begin(), live.kv.begin() + 4);
  live.gate.erase(live.gate.begin(), live.gate.begin() + 4);
  live.index();
  for (int j = 0; j < 4; ++j) {
    for (auto& g : c.gate[j]) g = k_ninf;
  }
  const auto got = run(c, 128);
  const auto got_live = run(live, 128);
  std::vector<double> want, mag;
  reference(live, 128, want, mag);
  EXPECT_TRUE(all_close(got.data(), got.size(), want, mag, k_rtol, 0.0));
  for (int64_t ch = 0; ch < 128; ++ch) EXPECT_NEAR(got[ch], got_live[ch], 1e-6 * (mag[ch] + 1e-30)) << ch;
}

// A missing candidate's kv may hold anything (CSA block 0 has no previous
// block to read): with a −inf gate, even an Inf or NaN kv must not reach the
// output, since its weight is 0, not 0·kv.
TEST(compress_pool, neg_inf_gate_ignores_non_finite_kv) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const int64_t dim = 19;
  auto c = random_candidates(rng, 8, dim, 2.0f);
  for (int j = 0; j < 4; ++j) {
    for (int64_t ch = 0; ch < dim; ++ch) {
      c.gate[j][ch] = k_ninf;
      c.kv[j][ch] = ch % 2 ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
    }
  }
  const auto got = run(c, dim);
  std::vector<double> want, mag;
  reference(c, dim, want, mag);
  EXPECT_TRUE(all_close(got.data(), got.size(), want, mag, k_rtol, 0.0));
}

// A channel whose every gate is −inf pools to exactly 0 (not NaN); the other
// channels are unaffected.
TEST(compress_pool, all_neg_inf_channel_is_zero) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (int64_t n_cand : {1, 3, 8}) {
    auto c = random_candidates(rng, n_cand, 19, 3.0f);
    for (auto& g : c.gate) g[0] = g[7] = g[18] = k_ninf;
    const auto got = run(c, 19);
    EXPECT_EQ(got[0], 0.0f);
    EXPECT_EQ(got[7], 0.0f);
    EXPECT_EQ(got[18], 0.0f);
    std::vector<double> want, mag;
    reference(c, 19, want, mag);
    EXPECT_TRUE(all_close(got.data(), got.size(), want, mag, k_rtol, 0.0));
  }
}

// One candidate has weight exactly 1: out == kv bit for bit, whatever its gate.
TEST(compress_pool, single_candidate_returns_kv_exactly) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (int64_t dim : k_dims) {
    auto c = random_candidates(rng, 1, dim, 100.0f);
    c.gate[0][0] = 3e38f;
    c.gate[0][dim - 1] = -3e38f;
    const auto got = run(c, dim);
    for (int64_t ch = 0; ch < dim; ++ch) EXPECT_EQ(got[ch], c.kv[0][ch]) << "dim=" << dim << " ch=" << ch;
  }
}

TEST(compress_pool, rejects_bad_arguments) {
  candidates c;
  c.kv = {{1.0f}};
  c.gate = {{0.0f}};
  c.index();
  float out = 0;
  compress_pool_params p;
  p.kv = c.kv_ptr.data();
  p.gate = c.gate_ptr.data();
  p.out = &out;
  p.n_cand = 1;
  p.dim = 1;
  ASSERT_TRUE(compress_pool_cpu(p).ok());
  compress_pool_params q = p;
  q.dim = 0;
  EXPECT_FALSE(compress_pool_cpu(q).ok());
  q = p;
  q.gate = nullptr;
  EXPECT_FALSE(compress_pool_cpu(q).ok());
}

}  // namespace
}  // namespace hart
