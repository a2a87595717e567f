// Prompt-lookup drafting: the longest suffix that occurred before, its most
// recent occurrence, continuation through the drafts, and no drafts without
// a match or outside the lookback.
#include "runtime/sample/ngram_draft.h"

#include <gtest/gtest.h>

namespace hart {
namespace {

using ids = std::vector<int32_t>;

TEST(ngram_draft, proposes_what_followed_the_most_recent_match_of_the_longest_suffix) {
  // Suffix "1 2" occurs at 0 (then 3) and at 4 (then 9): the most recent wins.
  EXPECT_EQ(ngram_draft({1, 2, 3, 0, 1, 2, 9, 5, 1, 2}, 2, {}), (ids{9, 5}));
  // The 3-token suffix "7 1 2" occurred once (then 4), the 1-token "2" more recently (then 9): longest first.
  EXPECT_EQ(ngram_draft({7, 1, 2, 4, 6, 2, 9, 7, 1, 2}, 1, {}), (ids{4}));
}

TEST(ngram_draft, a_repeating_span_is_drafted_past_the_end_of_the_sequence) {
  // Period 3: the match at the previous period runs into the drafts themselves.
  EXPECT_EQ(ngram_draft({5, 6, 7, 5, 6, 7}, 7, {}), (ids{5, 6, 7, 5, 6, 7, 5}));
  EXPECT_EQ(ngram_draft({4, 4, 4}, 3, {}), (ids{4, 4, 4}));
}

TEST(ngram_draft, no_match_no_drafts) {
  EXPECT_TRUE(ngram_draft({1, 2, 3, 4}, 3, {}).empty());
  EXPECT_TRUE(ngram_draft({1}, 3, {}).empty());
  EXPECT_TRUE(ngram_draft({}, 3, {}).empty());
  ngram_draft_params two;
  two.min_n = 2;
  EXPECT_TRUE(ngram_draft({1, 2, 3, 2}, 3, two).empty()) << "only a 1-token suffix matches";
}

TEST(ngram_draft, looks_back_no_further_than_the_lookback) {
  ids t = {8, 9};
  for (int i = 0; i < 20; ++i) t.push_back(100 + i);
  t.push_back(8);
  ngram_draft_params p;
  EXPECT_EQ(ngram_draft(t, 1, p), (ids{9}));
  p.lookback = 10;
  EXPECT_TRUE(ngram_draft(t, 1, p).empty());
}

TEST(ngram_draft, bad_parameters_are_refused) {
  ngram_draft_params p;
  EXPECT_TRUE(p.validate().ok());
  p.min_n = 0;
  EXPECT_FALSE(p.validate().ok());
  p = {};
  p.max_n = 0;
  EXPECT_FALSE(p.validate().ok());
  p = {};
  p.lookback = 4;
  EXPECT_FALSE(p.validate().ok());
}

}  // namespace
}  // namespace hart
