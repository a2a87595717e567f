#include "runtime/sample/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

namespace hart {
namespace {

TEST(sampler, greedy_takes_argmax_lowest_id_on_ties) {
  sampler s({});
  std::vector<float> l = {0.f, 3.f, 3.f, 1.f};
  float lp = 1;
  EXPECT_EQ(s.sample(l.data(), 4, &lp), 1);
  EXPECT_EQ(lp, 0.0f);
}

TEST(sampler, same_seed_same_tokens_different_seed_differs) {
  std::vector<float> l(50);
  for (int i = 0; i < 50; ++i) l[i] = std::sin(i * 1.3f);
  sampler a({1.0f, 0, 1.0f, 0.0f, 7}), b({1.0f, 0, 1.0f, 0.0f, 7}), c({1.0f, 0, 1.0f, 0.0f, 8});
  int same = 0, diff = 0;
  for (int i = 0; i < 200; ++i) {
    const int32_t x = a.sample(l.data(), 50), y = b.sample(l.data(), 50), z = c.sample(l.data(), 50);
    same += x == y;
    diff += x != z;
  }
  EXPECT_EQ(same, 200);
  EXPECT_GT(diff, 0);
}

TEST(sampler, frequencies_follow_softmax_and_logprob_is_exact) {
  std::vector<float> l = {1.0f, 2.0f, 0.5f};
  sampler s({0.7f, 0, 1.0f, 0.0f, 123});
  std::map<int32_t, int> count;
  const int n = 40000;
  double z = 0;
  for (float v : l) z += std::exp(v / 0.7);
  for (int i = 0; i < n; ++i) {
    float lp;
    const int32_t t = s.sample(l.data(), 3, &lp);
    ++count[t];
    EXPECT_NEAR(lp, std::log(std::exp(l[t] / 0.7) / z), 1e-5);
  }
  for (int t = 0; t < 3; ++t) EXPECT_NEAR(count[t] / double(n), std::exp(l[t] / 0.7) / z, 0.01);
}

TEST(sampler, top_k_top_p_min_p_filter) {
  std::vector<float> l = {5.f, 4.f, 0.f, -1.f};
  sampler k1({1.0f, 1, 1.0f, 0.0f, 1});
  for (int i = 0; i < 50; ++i) EXPECT_EQ(k1.sample(l.data(), 4), 0);
  sampler p({1.0f, 0, 0.5f, 0.0f, 1});  // p(0) ≈ 0.72 already covers 0.5
  for (int i = 0; i < 50; ++i) EXPECT_EQ(p.sample(l.data(), 4), 0);
  sampler m({1.0f, 0, 1.0f, 0.3f, 1});  // p(1)/p(0) = e^-1 ≈ 0.37 ≥ 0.3 keeps {0,1}
  for (int i = 0; i < 200; ++i) EXPECT_LE(m.sample(l.data(), 4), 1);
}

// The top-k distribution comes from a partial sort; it must be the one a full
// stable sort gives (same ids in the same order, ties to the lower id, bitwise
// equal probabilities), on a vocabulary with many ties.
TEST(sampler, top_k_partial_sort_equals_the_full_sort) {
  const int64_t vocab = 4099;
  std::vector<float> l(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) l[size_t(i)] = float((i * 7919) % 97) * 0.25f;  // each value ~42 times
  for (int64_t k : {1, 2, 40, 43, 500, 4098, 4099}) {
    sampling_params p{0.8f, k, 1.0f, 0.0f, 1};
    const sampling_distribution d = sampling_distribution_of(l.data(), vocab, p);
    std::vector<int32_t> ids(static_cast<size_t>(vocab));
    for (int64_t i = 0; i < vocab; ++i) ids[size_t(i)] = int32_t(i);
    std::stable_sort(ids.begin(), ids.end(),
                     [&](int32_t a, int32_t b) { return l[size_t(a)] > l[size_t(b)]; });
    ids.resize(size_t(k));
    ASSERT_EQ(d.ids, ids) << "k " << k;
    const double mx = l[size_t(ids[0])] / 0.8f;
    std::vector<double> want;
    double sum = 0;
    for (int32_t id : ids) sum += want.emplace_back(std::exp(l[size_t(id)] / 0.8f - mx));
    for (double& v : want) v /= sum;
    double kept = 0;
    for (double v : want) kept += v;
    for (double& v : want) v /= kept;
    EXPECT_EQ(d.probs, want) << "k " << k;
  }
}

TEST(sampler, invalid_params_are_errors) {
  EXPECT_FALSE((sampling_params{-1.0f}).validate().ok());
  EXPECT_FALSE((sampling_params{1.0f, -2}).validate().ok());
  EXPECT_FALSE((sampling_params{1.0f, 0, 0.0f}).validate().ok());
  EXPECT_FALSE((sampling_params{1.0f, 0, 1.0f, 2.0f}).validate().ok());
  EXPECT_TRUE((sampling_params{}).validate().ok());
}

}  // namespace
}  // namespace hart
