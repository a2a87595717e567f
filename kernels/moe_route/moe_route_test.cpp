// moe_route_cpu against a double-precision router written from v4-model.md §6.1:
//   s = sqrt(softplus(logits))  (torch softplus: beta 1, threshold 20, so x > 20 → x)
//   selection: top_k of s + bias (bias for selection only), or the fixed hash ids
//   weights = s[sel] / (Σ s[sel] + 1e-20) · route_scale
// The order of the k selected experts is not part of the contract, so the
// comparisons here treat each token's (expert, weight) pairs as a set.
#include "kernels/moe_route/moe_route.h"

#include "kernels/testing/cuda_test_util.h"
#include "kernels/testing/op_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace hart {
namespace {

// -- test helpers --------------------------------------------------------------

using testing::normal_vec;
using testing::seed_trace;
using testing::test_seed;

// torch.nn.functional.softplus(x) (beta 1, threshold 20), then sqrt, in double
double ref_score(float x) {
  const double v = x;
  return std::sqrt(v > 20.0 ? v : std::log1p(std::exp(v)));
}

struct routed {
  std::vector<int32_t> experts;
  std::vector<float> weights;
  status st;
};

routed run(const std::vector<float>& logits, const std::vector<float>* bias, const std::vector<int32_t>* hash,
           int64_t n_tokens, int64_t n_experts, int64_t top_k, float route_scale) {
  routed r;
  r.experts.assign(n_tokens * top_k, -99);
  r.weights.assign(n_tokens * top_k, NAN);
  moe_route_params p;
  p.logits = logits.data();
  p.bias = bias ? bias->data() : nullptr;
  p.hash_ids = hash ? hash->data() : nullptr;
  p.experts = r.experts.data();
  p.weights = r.weights.data();
  p.n_tokens = n_tokens;
  p.n_experts = n_experts;
  p.top_k = top_k;
  p.route_scale = route_scale;
  r.st = moe_route_cpu(p);
  return r;
}

// Checks one token: the selected experts are distinct and valid; the set is
// the top_k of s + bias (exactly, unless the k-th and (k+1)-th keys are
// within fp32 rounding, where either choice is accepted); each weight equals
// s[e] / Σ s[sel] · route_scale for the op's own selection.
void check_token(const routed& r, const std::vector<float>& logits, const std::vector<float>* bias, int64_t t,
                 int64_t n_experts, int64_t top_k, float route_scale) {
  SCOPED_TRACE("token " + std::to_string(t));
  std::vector<double> s(n_experts), key(n_experts);
  for (int64_t e = 0; e < n_experts; ++e) {
    s[e] = ref_score(logits[t * n_experts + e]);
    key[e] = s[e] + (bias ? (*bias)[e] : 0.0f);
  }
  std::set<int32_t> sel;
  for (int64_t k = 0; k < top_k; ++k) {
    const int32_t e = r.experts[t * top_k + k];
    ASSERT_TRUE(e >= 0 && e < n_experts) << "expert id " << e;
    EXPECT_TRUE(sel.insert(e).second) << "expert " << e << " selected twice";
  }
  // every selected key >= every unselected key, up to fp32 rounding of the keys
  double min_in = INFINITY, max_out = -INFINITY, key_mag = 0;
  for (int64_t e = 0; e < n_experts; ++e) {
    key_mag = std::max(key_mag, std::fabs(key[e]));
    if (sel.count(int32_t(e))) {
      min_in = std::min(min_in, key[e]);
    } else {
      max_out = std::max(max_out, key[e]);
    }
  }
  EXPECT_GE(min_in, max_out - 4e-7 * key_mag) << "a better expert was left out";
  std::vector<int32_t> order(n_experts);
  for (int64_t e = 0; e < n_experts; ++e) order[e] = int32_t(e);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return key[a] > key[b]; });
  const bool clear_gap = top_k == n_experts || key[order[top_k - 1]] - key[order[top_k]] > 4e-7 * key_mag;
  if (clear_gap) {
    const std::set<int32_t> want(order.begin(), order.begin() + top_k);
    EXPECT_EQ(sel, want);
  }
  double sum = 0;
  for (int32_t e : sel) sum += s[e];
  for (int64_t k = 0; k < top_k; ++k) {
    const int32_t e = r.experts[t * top_k + k];
    const double want = s[e] / (sum + 1e-20) * route_scale;
    EXPECT_NEAR(r.weights[t * top_k + k], want, 1e-5 * route_scale + 1e-5 * std::fabs(want))
        << "weight of expert " << e;
  }
}

// -- tests -----------------------------------------------------------------------

TEST(moe_route, matches_reference) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (int64_t n_experts : {1, 3, 19, 111, 256}) {
    for (int64_t top_k : {int64_t(1), int64_t(3), int64_t(6), n_experts}) {
      if (top_k > n_experts) continue;
      for (bool with_bias : {false, true}) {
        for (int64_t n_tokens : {1, 3, 19}) {
          SCOPED_TRACE("n_experts=" + std::to_string(n_experts) + " top_k=" + std::to_string(top_k) +
                       " bias=" + std::to_string(with_bias) + " n_tokens=" + std::to_string(n_tokens));
          const auto logits = normal_vec(rng, n_tokens * n_experts, 3.0f);
          const auto bias = normal_vec(rng, n_experts, 0.5f);
          const float route_scale = with_bias ? 2.5f : 1.5f;
          const auto r =
              run(logits, with_bias ? &bias : nullptr, nullptr, n_tokens, n_experts, top_k, route_scale);
          ASSERT_TRUE(r.st.ok()) << r.st.to_string();
          for (int64_t t = 0; t < n_tokens; ++t) {
            check_token(r, logits, with_bias ? &bias : nullptr, t, n_experts, top_k, route_scale);
          }
        }
      }
    }
  }
}

// The weights of every token sum to route_scale.
TEST(moe_route, weights_sum_to_route_scale) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const int64_t n_tokens = 19, n_experts = 256, top_k = 6;
  for (float route_scale : {1.0f, 1.5f, 2.5f}) {
    const auto logits = normal_vec(rng, n_tokens * n_experts, 2.0f);
    const auto bias = normal_vec(rng, n_experts, 1.0f);
    const auto r = run(logits, &bias, nullptr, n_tokens, n_experts, top_k, route_scale);
    ASSERT_TRUE(r.st.ok()) << r.st.to_string();
    for (int64_t t = 0; t < n_tokens; ++t) {
      double sum = 0;
      for (int64_t k = 0; k < top_k; ++k) {
        EXPECT_GT(r.weights[t * top_k + k], 0.0f);
        sum += r.weights[t * top_k + k];
      }
      EXPECT_NEAR(sum, route_scale, 1e-5 * route_scale) << "token " << t;
    }
  }
}

// softplus follows torch's threshold: above 20 it is the identity, so logits
// of 100 and 1000 give s = sqrt(x) (a plain log1p(exp(x)) in fp32 overflows to
// inf there); a very negative logit gives s = 0.
TEST(moe_route, softplus_threshold_20) {
  const std::vector<float> logits = {-1000.0f, 0.0f, 19.5f, 20.0f, 20.5f, 100.0f, 1000.0f, 3.0e38f};
  const int64_t n_experts = int64_t(logits.size());
  const auto r = run(logits, nullptr, nullptr, 1, n_experts, n_experts, 1.0f);
  ASSERT_TRUE(r.st.ok()) << r.st.to_string();
  // 3e38 (s ≈ 1.7e19) dominates this sum, so the other weights are ~0 here;
  // the second call below checks the x > 20 ratios without it.
  std::vector<double> s(n_experts);
  double sum = 0;
  for (int64_t e = 0; e < n_experts; ++e) sum += (s[e] = ref_score(logits[e]));
  for (int64_t k = 0; k < n_experts; ++k) {
    const int32_t e = r.experts[k];
    ASSERT_TRUE(e >= 0 && e < n_experts);
    ASSERT_TRUE(std::isfinite(r.weights[k])) << "expert " << e << " logit " << logits[e];
    EXPECT_NEAR(r.weights[k], s[e] / sum, 1e-6 + 1e-5 * s[e] / sum)
        << "expert " << e << " logit " << logits[e];
  }
  // without the 3e38 expert, the x > 20 entries are exactly sqrt(x) relative to each other
  const std::vector<float> mid = {0.0f, 20.5f, 100.0f, 1000.0f};
  const auto r2 = run(mid, nullptr, nullptr, 1, 4, 4, 1.0f);
  ASSERT_TRUE(r2.st.ok());
  double w[4] = {};
  for (int k = 0; k < 4; ++k) w[r2.experts[k]] = r2.weights[k];
  const double s0 = std::sqrt(std::log(2.0)), s_sum = s0 + std::sqrt(20.5) + 10.0 + std::sqrt(1000.0);
  EXPECT_NEAR(w[0], s0 / s_sum, 1e-6);
  EXPECT_NEAR(w[1], std::sqrt(20.5) / s_sum, 1e-6);
  EXPECT_NEAR(w[2], 10.0 / s_sum, 1e-6);
  EXPECT_NEAR(w[3], std::sqrt(1000.0) / s_sum, 1e-6);
  EXPECT_NEAR(w[3] / w[2], std::sqrt(10.0), 1e-5);
}

// A large bias on the weakest expert gets it selected, but its weight still
// comes from the unbiased score; a very negative bias drops the strongest.
TEST(moe_route, bias_changes_selection_not_weights) {
  const std::vector<float> logits = {3.0f, -4.0f, 2.0f, 1.0f, 0.0f};
  const std::vector<float> zero(5, 0.0f);
  std::vector<float> bias(5, 0.0f);
  bias[1] = 10.0f;   // weakest expert forced in
  bias[0] = -10.0f;  // strongest expert forced out
  const auto r = run(logits, &bias, nullptr, 1, 5, 2, 1.0f);
  ASSERT_TRUE(r.st.ok()) << r.st.to_string();
  std::set<int32_t> sel(r.experts.begin(), r.experts.end());
  EXPECT_EQ(sel, (std::set<int32_t>{1, 2}));
  const double s1 = ref_score(-4.0f), s2 = ref_score(2.0f);
  for (int k = 0; k < 2; ++k) {
    const double want = (r.experts[k] == 1 ? s1 : s2) / (s1 + s2);
    EXPECT_NEAR(r.weights[k], want, 1e-6) << "expert " << r.experts[k];
  }
  // zero bias and null bias agree; the selection is then by score alone
  const auto a = run(logits, &zero, nullptr, 1, 5, 2, 1.0f);
  const auto b = run(logits, nullptr, nullptr, 1, 5, 2, 1.0f);
  ASSERT_TRUE(a.st.ok() && b.st.ok());
  EXPECT_EQ(std::set<int32_t>(a.experts.begin(), a.experts.end()), (std::set<int32_t>{0, 2}));
  EXPECT_EQ(a.experts, b.experts);
  EXPECT_EQ(a.weights, b.weights);
}

// Hash layers: the experts are the given ids, in order, and the weights are
// the renormalised scores of those ids.
TEST(moe_route, hash_ids_fix_the_selection) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (int64_t n_experts : {1, 19, 256}) {
    for (int64_t top_k : {int64_t(1), std::min<int64_t>(6, n_experts)}) {
      SCOPED_TRACE("n_experts=" + std::to_string(n_experts) + " top_k=" + std::to_string(top_k));
      const int64_t n_tokens = 19;
      const auto logits = normal_vec(rng, n_tokens * n_experts, 3.0f);
      std::vector<int32_t> hash(n_tokens * top_k);
      std::vector<int32_t> perm(n_experts);
      for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t e = 0; e < n_experts; ++e) perm[e] = int32_t(e);
        std::shuffle(perm.begin(), perm.end(), rng);
        for (int64_t k = 0; k < top_k; ++k) hash[t * top_k + k] = perm[k];
      }
      const auto r = run(logits, nullptr, &hash, n_tokens, n_experts, top_k, 1.5f);
      ASSERT_TRUE(r.st.ok()) << r.st.to_string();
      EXPECT_EQ(r.experts, hash);
      for (int64_t t = 0; t < n_tokens; ++t) {
        double sum = 0;
        for (int64_t k = 0; k < top_k; ++k) sum += ref_score(logits[t * n_experts + hash[t * top_k + k]]);
        for (int64_t k = 0; k < top_k; ++k) {
          const double want = ref_score(logits[t * n_experts + hash[t * top_k + k]]) / sum * 1.5;
          EXPECT_NEAR(r.weights[t * top_k + k], want, 1e-5 * 1.5) << "token " << t << " k " << k;
        }
      }
    }
  }
}

// A hash id outside [0, n_experts) is an error, not a wild read.
TEST(moe_route, hash_id_out_of_range_is_an_error) {
  const std::vector<float> logits(2 * 8, 0.5f);
  for (int32_t bad : {-1, 8, 1000}) {
    const std::vector<int32_t> hash = {0, 1, 2, bad};  // token 1's second id
    const auto r = run(logits, nullptr, &hash, 2, 8, 2, 1.0f);
    EXPECT_FALSE(r.st.ok()) << "hash id " << bad;
  }
}

TEST(moe_route, rejects_bad_top_k) {
  const std::vector<float> logits(4, 0.5f);
  EXPECT_FALSE(run(logits, nullptr, nullptr, 1, 4, 0, 1.0f).st.ok());
  EXPECT_FALSE(run(logits, nullptr, nullptr, 1, 4, 5, 1.0f).st.ok());
}

// -- CUDA parity -------------------------------------------------------------------

#ifdef HART_CUDA

using testing::cuda_synced;
using testing::device_vec;

// moe_route_cuda vs moe_route_cpu, slot by slot (both write best first).
// Scores: CUDA's expf/log1pf differ from glibc's in the last bits, so s (and the
// weights s / Σs · scale) agree to rtol 1e-6 (~3 ulp through softplus, sqrt
// halves it, then one sum and a division). The same last bits can reorder two
// keys that are within that rounding of each other ("near tie"): such a slot is
// accepted only if the two CPU keys are within 1e-6 of the largest |key|, and
// such tokens' weights are not compared. Exact ties (equal logits and biases)
// give bit-equal keys on both sides, so there the lowest id must win exactly.
constexpr double k_cuda_rtol = 1e-6;
constexpr double k_near_tie = 1e-6;
constexpr int64_t k_out_guard = 9;

routed run_cuda(const std::vector<float>& logits, const std::vector<float>* bias,
                const std::vector<int32_t>* hash, int64_t n_tokens, int64_t n_experts, int64_t top_k,
                float route_scale) {
  device_vec<float> d_logits(logits), d_bias(bias ? *bias : std::vector<float>());
  device_vec<int32_t> d_hash(hash ? *hash : std::vector<int32_t>());
  // outputs poisoned, with k_out_guard sentinels on each side
  device_vec<int32_t> d_ids(std::vector<int32_t>(n_tokens * top_k + 2 * k_out_guard, -99));
  device_vec<float> d_w(std::vector<float>(n_tokens * top_k + 2 * k_out_guard, NAN));
  moe_route_params p;
  p.logits = d_logits.get();
  p.bias = bias ? d_bias.get() : nullptr;
  p.hash_ids = hash ? d_hash.get() : nullptr;
  p.experts = d_ids.get() + k_out_guard;
  p.weights = d_w.get() + k_out_guard;
  p.n_tokens = n_tokens;
  p.n_experts = n_experts;
  p.top_k = top_k;
  p.route_scale = route_scale;
  routed r;
  r.st = moe_route_cuda(p, nullptr);
  EXPECT_TRUE(cuda_synced(nullptr));
  const auto ids = d_ids.to_host();
  const auto weights = d_w.to_host();
  for (int64_t i = 0; i < k_out_guard; ++i) {
    EXPECT_EQ(ids[i], -99) << "expert guard before the output clobbered";
    EXPECT_EQ(ids[ids.size() - 1 - i], -99) << "expert guard after the output clobbered";
    EXPECT_TRUE(std::isnan(weights[i]) && std::isnan(weights[weights.size() - 1 - i]))
        << "weight guard clobbered";
  }
  r.experts.assign(ids.begin() + k_out_guard, ids.end() - k_out_guard);
  r.weights.assign(weights.begin() + k_out_guard, weights.end() - k_out_guard);
  return r;
}

// exact: ids must match slot for slot (no near-tie allowance)
void compare(const routed& got, const routed& want, const std::vector<float>& logits,
             const std::vector<float>* bias, int64_t n_tokens, int64_t n_experts, int64_t top_k, bool exact) {
  ASSERT_TRUE(got.st.ok()) << got.st.to_string();
  ASSERT_TRUE(want.st.ok()) << want.st.to_string();
  int64_t n_near = 0;
  for (int64_t t = 0; t < n_tokens; ++t) {
    std::vector<float> key(n_experts);
    float key_mag = 0;
    for (int64_t e = 0; e < n_experts; ++e) {
      key[e] = float(ref_score(logits[t * n_experts + e])) + (bias ? (*bias)[e] : 0.0f);
      key_mag = std::max(key_mag, std::fabs(key[e]));
    }
    bool same_ids = true;
    for (int64_t k = 0; k < top_k; ++k) {
      const int32_t g = got.experts[t * top_k + k], w = want.experts[t * top_k + k];
      if (g == w) continue;
      same_ids = false;
      ASSERT_FALSE(exact) << "token " << t << " slot " << k << ": got expert " << g << " want " << w;
      ASSERT_TRUE(g >= 0 && g < n_experts) << "token " << t << " slot " << k << ": expert id " << g;
      EXPECT_LE(std::fabs(key[g] - key[w]), k_near_tie * key_mag)
          << "token " << t << " slot " << k << ": got expert " << g << " want " << w << " (not a near tie)";
    }
    if (!same_ids) {
      ++n_near;
      continue;
    }
    for (int64_t k = 0; k < top_k; ++k) {
      const double g = got.weights[t * top_k + k], w = want.weights[t * top_k + k];
      EXPECT_NEAR(g, w, k_cuda_rtol * std::fabs(w) + 1e-30) << "token " << t << " slot " << k;
    }
  }
  if (n_near)
    std::printf("moe_route cuda: %lld token(s) with a near tie resolved differently\n", (long long)n_near);
}

TEST(moe_route, cuda_matches_cpu) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (int64_t n_experts : {1, 3, 19, 256, 257, 384, 2048}) {
    for (int64_t top_k : {int64_t(1), int64_t(6), int64_t(8), n_experts}) {
      if (top_k > n_experts) continue;
      for (bool with_bias : {false, true}) {
        for (int64_t n_tokens : {1, 3, 300}) {
          SCOPED_TRACE("n_experts=" + std::to_string(n_experts) + " top_k=" + std::to_string(top_k) +
                       " bias=" + std::to_string(with_bias) + " n_tokens=" + std::to_string(n_tokens));
          auto logits = normal_vec(rng, n_tokens * n_experts, 4.0f);
          logits[0] = 25.0f;  // past the softplus threshold
          const auto bias = normal_vec(rng, n_experts, 0.3f);
          const auto want =
              run(logits, with_bias ? &bias : nullptr, nullptr, n_tokens, n_experts, top_k, 1.5f);
          const auto got =
              run_cuda(logits, with_bias ? &bias : nullptr, nullptr, n_tokens, n_experts, top_k, 1.5f);
          compare(got, want, logits, with_bias ? &bias : nullptr, n_tokens, n_experts, top_k, false);
        }
      }
    }
  }
}

// Logits and biases from small sets: many keys tie exactly (-150 and -200 both
// give s = +0, bias ±0 are equal), and the lowest expert id must win every tie,
// in the same slot order as the CPU.
TEST(moe_route, cuda_exact_ties_take_lowest_ids) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const float logit_set[] = {-200.0f, -150.0f, -1.0f, 0.0f, 0.5f, 2.0f, 30.0f};
  const float bias_set[] = {0.0f, -0.0f, 0.25f, -0.5f};
  std::uniform_int_distribution<int> pick_l(0, 6), pick_b(0, 3);
  for (int64_t n_experts : {8, 256, 385}) {
    for (int64_t top_k : {int64_t(1), int64_t(6), n_experts - 1}) {
      for (bool with_bias : {false, true}) {
        const int64_t n_tokens = 67;
        SCOPED_TRACE("n_experts=" + std::to_string(n_experts) + " top_k=" + std::to_string(top_k) +
                     " bias=" + std::to_string(with_bias));
        std::vector<float> logits(n_tokens * n_experts), bias(n_experts);
        for (auto& v : logits) v = logit_set[pick_l(rng)];
        for (auto& v : bias) v = bias_set[pick_b(rng)];
        for (int64_t e = 0; e < n_experts; ++e) logits[e] = 0.5f;  // token 0: all equal
        const auto want = run(logits, with_bias ? &bias : nullptr, nullptr, n_tokens, n_experts, top_k, 2.5f);
        const auto got =
            run_cuda(logits, with_bias ? &bias : nullptr, nullptr, n_tokens, n_experts, top_k, 2.5f);
        compare(got, want, logits, with_bias ? &bias : nullptr, n_tokens, n_experts, top_k, true);
      }
    }
  }
}

TEST(moe_route, cuda_hash_ids) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const int64_t n_tokens = 129, n_experts = 256, top_k = 6;
  const auto logits = normal_vec(rng, n_tokens * n_experts, 4.0f);
  std::vector<int32_t> hash(n_tokens * top_k);
  std::uniform_int_distribution<int32_t> ex(0, n_experts - 1);
  for (auto& e : hash) e = ex(rng);
  const auto bias = normal_vec(rng, n_experts, 1.0f);  // must not matter with hash ids
  const auto want = run(logits, nullptr, &hash, n_tokens, n_experts, top_k, 1.5f);
  const auto got = run_cuda(logits, &bias, &hash, n_tokens, n_experts, top_k, 1.5f);
  compare(got, want, logits, nullptr, n_tokens, n_experts, top_k, true);
  // out of range: the documented device result (expert -1, weight 0), not a crash
  hash[3] = int32_t(n_experts);
  const auto bad = run_cuda(logits, nullptr, &hash, n_tokens, n_experts, top_k, 1.5f);
  ASSERT_TRUE(bad.st.ok());
  EXPECT_EQ(bad.experts[3], -1);
  EXPECT_EQ(bad.weights[3], 0.0f);
}

// NaN keys are never selected: a token of NaN logits gets -1 ids (and weight 0).
TEST(moe_route, cuda_nan_logits_are_never_selected) {
  HART_SKIP_WITHOUT_CUDA();
  const int64_t n_experts = 19, top_k = 6;
  std::vector<float> logits(2 * n_experts, NAN);
  for (int64_t e = 0; e < n_experts; e += 4) logits[n_experts + e] = float(e);  // token 1: 5 valid
  const auto got = run_cuda(logits, nullptr, nullptr, 2, n_experts, top_k, 1.0f);
  ASSERT_TRUE(got.st.ok());
  for (int64_t k = 0; k < top_k; ++k) {
    EXPECT_EQ(got.experts[k], -1);
    EXPECT_EQ(got.weights[k], 0.0f);
  }
  const int32_t want1[] = {16, 12, 8, 4, 0, -1};
  for (int64_t k = 0; k < top_k; ++k) EXPECT_EQ(got.experts[top_k + k], want1[k]) << "slot " << k;
}

TEST(moe_route, cuda_rejects_bad_arguments) {
  HART_SKIP_WITHOUT_CUDA();
  const std::vector<float> logits(4096, 0.0f);
  EXPECT_EQ(run_cuda(logits, nullptr, nullptr, 1, 4, 0, 1.0f).st.code(), status_code::invalid_argument);
  EXPECT_EQ(run_cuda(logits, nullptr, nullptr, 1, 4, 5, 1.0f).st.code(), status_code::invalid_argument);
  EXPECT_EQ(run_cuda(logits, nullptr, nullptr, 1, 4096, 6, 1.0f).st.code(), status_code::invalid_argument);
  const auto none = run_cuda(logits, nullptr, nullptr, 0, 4, 2, 1.0f);
  EXPECT_TRUE(none.st.ok());
}

#endif  // HART_CUDA

}  // namespace
}  // namespace hart
