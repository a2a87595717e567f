// Speculative acceptance (spec_accept.h). One-token drafts against
// non-speculative decoding of the same rows with the same seed: the emitted
// tokens, their log-probs and the sampler's state afterwards are the
// non-speculative ones for every draft count, every acceptance point and every
// sampling mode; over many seeds a draft is kept as often as the target gives
// it, and the first token follows the target distribution. Sampled drafts
// (Leviathan/Chen): for drafter distributions equal to the target, uniform,
// one-hot off the mode and disjoint from it, the emitted tokens follow the
// target distribution; greedy keeps exactly the argmax.
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

// Whether `count` (n draws) fits the distribution `prob`: chi-square over the
// categories expected at least 5 times (at least `min_dof` degrees of freedom
// of them), at a stated false-alarm rate of 1e-3 (Wilson-Hilferty quantile;
// the seeds are fixed, so a run is reproducible).
::testing::AssertionResult follows(const std::vector<int>& count, const std::vector<double>& prob, int n,
                                   int min_dof = 5) {
  double chi2 = 0;
  int dof = -1;
  for (size_t t = 0; t < prob.size(); ++t) {
    const double e = n * prob[t];
    if (e < 5) continue;
    chi2 += (count[t] - e) * (count[t] - e) / e;
    ++dof;
  }
  if (dof < min_dof)
    return ::testing::AssertionFailure() << "too few categories (" << dof << " degrees of freedom)";
  const double z = 3.09, limit = dof * std::pow(1 - 2.0 / (9 * dof) + z * std::sqrt(2.0 / (9 * dof)), 3);
  if (chi2 < limit) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "chi-square " << chi2 << " over " << dof << " degrees of freedom, limit " << limit;
}

TEST(spec_accept, emits_what_non_speculative_decoding_emits_with_the_same_seeds) {
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
      std::vector<uint64_t> seeds;
      for (int64_t j = 0; j <= k; ++j) seeds.push_back(mode.seed * 1000 + uint64_t(j) * 7919 + 1);
      // Non-speculative decoding of the same rows: one draw per position, with that position's seed.
      std::vector<int32_t> want;
      std::vector<float> want_lp;
      for (int64_t j = 0; j <= k; ++j) {
        sampling_params at = mode;
        at.seed = seeds[size_t(j)];
        sampler plain(at);
        float lp = 0;
        want.push_back(plain.sample(rows.data() + j * k_vocab, k_vocab, &lp));
        want_lp.push_back(lp);
      }
      for (int64_t keep = 0; keep <= k; ++keep) {  // drafts right up to `keep`, then one wrong
        SCOPED_TRACE("T " + std::to_string(mode.temperature) + ", k " + std::to_string(k) + ", right " +
                     std::to_string(keep));
        std::vector<int32_t> drafts(want.begin(), want.begin() + k);
        if (keep < k) drafts[size_t(keep)] = (want[size_t(keep)] + 1) % int32_t(k_vocab);
        const spec_outcome o = spec_accept(mode, seeds, rows.data(), k_vocab, drafts);
        EXPECT_EQ(o.accepted(), keep);
        ASSERT_EQ(o.tokens.size(), size_t(keep + 1));
        EXPECT_EQ(o.tokens, std::vector<int32_t>(want.begin(), want.begin() + keep + 1));
        EXPECT_EQ(o.logprobs, std::vector<float>(want_lp.begin(), want_lp.begin() + keep + 1));
      }
    }
  }
}

// One position, a one-hot draft off the mode: over 20000 seeds the draft is
// kept with the target's probability of it, and the first emitted token
// follows the target distribution (chi-square over the 40 tokens).
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
    const uint64_t s0 = uint64_t(seed) * 0x9E3779B97F4A7C15ull + 1;
    const spec_outcome o = spec_accept(p, {s0, s0 + 1}, rows.data(), k_vocab, {draft});
    kept += o.accepted() == 1;
    ++first[size_t(o.tokens[0])];
  }
  const double pd = prob[draft], sd = std::sqrt(n * pd * (1 - pd));
  EXPECT_NEAR(kept, n * pd, 5 * sd) << "kept " << kept << " of " << n << ", p(draft) " << pd;
  EXPECT_TRUE(follows(first, prob, n, /*min_dof=*/11));
}

TEST(spec_accept_sampled, the_tokens_follow_the_target_whatever_the_drafter_proposes) {
  std::vector<float> rows(3 * k_vocab);
  for (int64_t i = 0; i < 3 * k_vocab; ++i)
    rows[size_t(i)] = std::sin(0.7f * float(i % k_vocab) + float(i / k_vocab));
  const sampling_params p{1.0f, 0, 1.0f, 0.0f, 0};
  std::vector<std::vector<double>> target(3, std::vector<double>(k_vocab, 0.0));
  std::vector<sampling_distribution> exact(3);
  for (int j = 0; j < 3; ++j) {
    exact[size_t(j)] = sampling_distribution_of(rows.data() + j * k_vocab, k_vocab, p);
    for (size_t i = 0; i < exact[size_t(j)].ids.size(); ++i)
      target[size_t(j)][size_t(exact[size_t(j)].ids[i])] = exact[size_t(j)].probs[i];
  }
  auto uniform = [] {
    sampling_distribution d;
    for (int32_t i = 0; i < int32_t(k_vocab); ++i)
      d.ids.push_back(i), d.probs.push_back(1.0 / double(k_vocab));
    return d;
  };
  auto least_likely = [&](int j, int n) {  // uniform over row j's n least likely tokens
    sampling_distribution d;
    for (int i = 0; i < n; ++i) {
      d.ids.push_back(exact[size_t(j)].ids[exact[size_t(j)].ids.size() - 1 - size_t(i)]);
      d.probs.push_back(1.0 / n);
    }
    return d;
  };
  struct drafter_case {
    const char* name;
    std::vector<sampling_distribution> q;  // for drafts 1 and 2
  };
  const drafter_case cases[] = {
      {"the target itself", {exact[0], exact[1]}},
      {"uniform", {uniform(), uniform()}},
      {"one-hot off the mode", {least_likely(0, 1), least_likely(1, 1)}},
      {"disjoint from the likely tokens", {least_likely(0, 10), least_likely(1, 10)}},
  };
  const int n = 20000;
  for (const drafter_case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<std::vector<int>> at(3, std::vector<int>(k_vocab, 0));  // emitted token at position 0, 1, 2
    std::vector<int> reached(3, 0);
    std::mt19937_64 drafts_rng(99), accept_rng(7);
    for (int trial = 0; trial < n; ++trial) {
      std::vector<int32_t> drafts;
      for (const sampling_distribution& q : c.q) {  // d_j ~ q_j, as the drafter samples
        std::discrete_distribution<size_t> pick(q.probs.begin(), q.probs.end());
        drafts.push_back(q.ids[pick(drafts_rng)]);
      }
      const spec_outcome o = spec_accept_sampled(accept_rng, p, rows.data(), k_vocab, drafts, c.q);
      for (size_t j = 0; j < o.tokens.size(); ++j) {
        ++at[j][size_t(o.tokens[j])];
        ++reached[j];
        EXPECT_FLOAT_EQ(o.logprobs[j], float(std::log(target[j][size_t(o.tokens[j])])));
      }
    }
    // Position 0 is always emitted; later ones only after a kept draft, and given that, they follow their
    // row.
    EXPECT_TRUE(follows(at[0], target[0], reached[0])) << "position 0";
    if (reached[1] > 2000) {
      EXPECT_TRUE(follows(at[1], target[1], reached[1])) << "position 1";
    }
  }
}

TEST(spec_accept_sampled, greedy_keeps_exactly_the_argmax) {
  std::vector<float> rows = {0.0f, 3.0f, 1.0f, 2.0f, /* row 1 */ 5.0f, 0.0f, 1.0f, 0.0f};
  sampling_distribution q;
  q.ids = {0, 1, 2, 3};
  q.probs = {0.25, 0.25, 0.25, 0.25};
  std::mt19937_64 rng(1);
  const spec_outcome right = spec_accept_sampled(rng, {}, rows.data(), 4, {1}, {q});
  EXPECT_EQ(right.tokens, (std::vector<int32_t>{1, 0})) << "the argmax kept, then the bonus argmax";
  const spec_outcome wrong = spec_accept_sampled(rng, {}, rows.data(), 4, {2}, {q});
  EXPECT_EQ(wrong.tokens, std::vector<int32_t>{1}) << "rejected, and the argmax drawn instead";
  EXPECT_EQ(wrong.logprobs, std::vector<float>{0.0f});
}

TEST(spec_accept, no_drafts_is_one_plain_draw) {
  std::vector<float> row = {0.5f, 2.0f, -1.0f};
  const spec_outcome o = spec_accept({}, {1}, row.data(), 3, {});
  EXPECT_EQ(o.tokens, std::vector<int32_t>{1});
  EXPECT_EQ(o.accepted(), 0);
}

}  // namespace
}  // namespace hart
