// moe_route_cpu against a double-precision router written from v4-model.md §6.1:
//   s = sqrt(softplus(logits))  (torch softplus: beta 1, threshold 20, so x > 20 → x)
//   selection: top_k of s + bias (bias for selection only), or the fixed hash ids
//   weights = s[sel] / (Σ s[sel] + 1e-20) · route_scale
// The order of the k selected experts is not part of the contract, so the
// comparisons here treat each token's (expert, weight) pairs as a set.
#include "kernels/moe_route/moe_route.h"

#include "kernels/testing/op_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
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
          const auto r = run(logits, with_bias ? &bias : nullptr, nullptr, n_tokens, n_experts, top_k, route_scale);
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
    EXPECT_NEAR(r.weights[k], s[e] / sum, 1e-6 + 1e-5 * s[e] / sum) << "expert " << e << " logit " << logits[e];
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

}  // namespace
}  // namespace hart
