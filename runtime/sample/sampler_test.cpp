#include "runtime/sample/sampler.h"

#include <gtest/gtest.h>

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

TEST(sampler, invalid_params_are_errors) {
  EXPECT_FALSE((sampling_params{-1.0f}).validate().ok());
  EXPECT_FALSE((sampling_params{1.0f, -2}).validate().ok());
  EXPECT_FALSE((sampling_params{1.0f, 0, 0.0f}).validate().ok());
  EXPECT_FALSE((sampling_params{1.0f, 0, 1.0f, 2.0f}).validate().ok());
  EXPECT_TRUE((sampling_params{}).validate().ok());
}

}  // namespace
}  // namespace hart
