// Speculative acceptance for one-token drafts (spec_accept.h) against
// non-speculative decoding of the same rows with the same seed: the emitted
// tokens, their log-probs and the sampler's state afterwards are the
// non-speculative ones for every draft count, every acceptance point and every
// sampling mode; over many seeds a draft is kept as often as the target gives
// it, and the first token follows the target distribution.
#include "runtime/sample/spec_accept.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace hart {
namespace {

constexpr int64_t k_vocab = 40;

// k + 1 rows of logits, a few tokens much likelier than the rest (so drafts are often right).
std::vector<float> random_rows(std::mt19937& rng, int64_t k) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> rows(size_t((k + 1) * k_vocab));
  for (float& v : rows) v = nd(rng);
  for (int64_t j = 0; j <= k; ++j) rows[size_t(j * k_vocab + (j * 7) % k_vocab)] += 4.0f;
  return rows;
}

TEST(spec_accept, emits_what_non_speculative_decoding_emits_and_leaves_the_sampler_as_it_would) {
  std::mt19937 rng(11);
  const sampling_params modes[] = {
      {0.0f, 0, 1.0f, 0.0f, 0},   // greedy
      {0.8f, 20, 1.0f, 0.0f, 5},  // temperature, top-k
      {1.0f, 0, 0.9f, 0.0f, 6},   // top-p
      {1.2f, 0, 1.0f, 0.05f, 7},  // min-p
  };
  for (const sampling_params& mode : modes) {
    for (int64_t k = 1; k <= 7; ++k) {
      const std::vector<float> rows = random_rows(rng, k);
      // Non-speculative decoding of the same rows: one draw per position.
      sampler plain(mode);
      std::vector<int32_t> want;
      std::vector<float> want_lp;
      for (int64_t j = 0; j <= k; ++j) {
        float lp = 0;
        want.push_back(plain.sample(rows.data() + j * k_vocab, k_vocab, &lp));
        want_lp.push_back(lp);
      }
      for (int64_t keep = 0; keep <= k; ++keep) {  // drafts right up to `keep`, then one wrong
        SCOPED_TRACE("T " + std::to_string(mode.temperature) + ", k " + std::to_string(k) + ", right " +
                     std::to_string(keep));
        std::vector<int32_t> drafts(want.begin(), want.begin() + k);
        if (keep < k) drafts[size_t(keep)] = (want[size_t(keep)] + 1) % int32_t(k_vocab);
        sampler s(mode);
        const spec_outcome o = spec_accept(s, rows.data(), k_vocab, drafts);
        EXPECT_EQ(o.accepted(), keep);
        ASSERT_EQ(o.tokens.size(), size_t(keep + 1));
        EXPECT_EQ(o.tokens, std::vector<int32_t>(want.begin(), want.begin() + keep + 1));
        EXPECT_EQ(o.logprobs, std::vector<float>(want_lp.begin(), want_lp.begin() + keep + 1));
        // The next position: the same draw as decoding that went token by token.
        sampler replay(mode);
        for (int64_t j = 0; j <= keep; ++j) replay.sample(rows.data() + j * k_vocab, k_vocab);
        const float* next = rows.data() + ((keep + 1) % (k + 1)) * k_vocab;
        EXPECT_EQ(s.sample(next, k_vocab), replay.sample(next, k_vocab));
      }
    }
  }
}

// One position, a one-hot draft off the mode: over 20000 seeds the draft is
// kept with the target's probability of it, and the first emitted token
// follows the target distribution (chi-square over the 40 tokens at a stated
// false-alarm rate of 1e-3; the seeds are fixed, so a run is reproducible).
TEST(spec_accept, keeps_a_draft_as_often_as_the_target_gives_it_and_follows_the_target) {
  std::vector<float> rows(2 * k_vocab);
  for (int64_t i = 0; i < k_vocab; ++i)
    rows[size_t(i)] = rows[size_t(k_vocab + i)] = std::sin(0.7f * float(i));
  const int32_t draft = 5;
  sampling_params p{1.0f, 0, 1.0f, 0.0f, 0};
  const sampling_distribution target = sampling_distribution_of(rows.data(), k_vocab, p);
  std::vector<double> prob(k_vocab, 0.0);
  for (size_t i = 0; i < target.ids.size(); ++i) prob[size_t(target.ids[i])] = target.probs[i];

  const int n = 20000;
  std::vector<int> first(k_vocab, 0);
  int kept = 0;
  for (int seed = 0; seed < n; ++seed) {
    p.seed = uint64_t(seed) * 0x9E3779B97F4A7C15ull + 1;
    sampler s(p);
    const spec_outcome o = spec_accept(s, rows.data(), k_vocab, {draft});
    kept += o.accepted() == 1;
    ++first[size_t(o.tokens[0])];
  }
  const double pd = prob[draft], sd = std::sqrt(n * pd * (1 - pd));
  EXPECT_NEAR(kept, n * pd, 5 * sd) << "kept " << kept << " of " << n << ", p(draft) " << pd;
  double chi2 = 0;
  int dof = -1;
  for (int64_t t = 0; t < k_vocab; ++t) {
    const double e = n * prob[size_t(t)];
    if (e < 5) continue;  // too rare to count on its own
    chi2 += (first[size_t(t)] - e) * (first[size_t(t)] - e) / e;
    ++dof;
  }
  ASSERT_GT(dof, 10);
  // Wilson-Hilferty: the chi-square quantile at 1 - 1e-3 (z = 3.09).
  const double z = 3.09, limit = dof * std::pow(1 - 2.0 / (9 * dof) + z * std::sqrt(2.0 / (9 * dof)), 3);
  EXPECT_LT(chi2, limit) << dof << " degrees of freedom";
}

TEST(spec_accept, no_drafts_is_one_plain_draw) {
  std::vector<float> row = {0.5f, 2.0f, -1.0f};
  sampler s({});
  const spec_outcome o = spec_accept(s, row.data(), 3, {});
  EXPECT_EQ(o.tokens, std::vector<int32_t>{1});
  EXPECT_EQ(o.accepted(), 0);
}

}  // namespace
}  // namespace hart
