// The shape a step_result must have for its plan: one sampled token per
// sampling item, a verify item's kept drafts (which must be its drafts) and
// one more, in item order, nothing left over.
#include "runtime/sched/step.h"

#include <gtest/gtest.h>

namespace hart::sched {
namespace {

step_plan plan_with_a_verify_item() {
  step_plan p;
  step_item plain;
  plain.seq_id = 1;
  plain.tokens = {5};
  plain.sample_last = true;
  step_item verify;
  verify.seq_id = 2;
  verify.tokens = {6, 7, 8};  // next token, drafts 7 and 8
  verify.draft_seeds = {1, 2};
  verify.sample_last = true;
  step_item prefill;  // a chunk that samples nothing
  prefill.seq_id = 3;
  prefill.tokens = {1, 2, 3};
  p.items = {plain, verify, prefill};
  return p;
}

step_result result_of(std::vector<std::pair<uint64_t, int32_t>> tokens) {
  step_result r;
  for (auto [seq, token] : tokens) r.sampled.push_back({seq, token, 0.0f, {}});
  return r;
}

TEST(step_result_shape, a_verify_item_gives_its_kept_drafts_then_one_token) {
  const step_plan p = plan_with_a_verify_item();
  for (const auto& ok : {result_of({{1, 9}, {2, 4}}),                     // no draft kept
                         result_of({{1, 9}, {2, 7}, {2, 4}}),             // one kept
                         result_of({{1, 9}, {2, 7}, {2, 8}, {2, 3}})}) {  // both, then the bonus token
    EXPECT_TRUE(sampled_match_plan(p, ok));
    EXPECT_EQ(item_sampled_count(p.items[1], ok, 1), int64_t(ok.sampled.size()) - 1);
    EXPECT_EQ(item_sampled_count(p.items[2], ok, ok.sampled.size()), 0);
  }
}

TEST(step_result_shape, anything_else_is_refused) {
  const step_plan p = plan_with_a_verify_item();
  EXPECT_FALSE(sampled_match_plan(p, result_of({{1, 9}})));                  // the verify item has none
  EXPECT_FALSE(sampled_match_plan(p, result_of({{1, 9}, {1, 9}, {2, 4}})));  // two for a plain item
  EXPECT_FALSE(sampled_match_plan(p, result_of({{1, 9}, {2, 5}, {2, 4}})));  // "kept" 5, not draft 7
  EXPECT_FALSE(sampled_match_plan(p, result_of({{1, 9}, {2, 7}, {2, 8}, {2, 3}, {2, 1}})));  // past the bonus
  EXPECT_FALSE(sampled_match_plan(p, result_of({{2, 4}, {1, 9}})));                          // out of order
  EXPECT_FALSE(sampled_match_plan(p, result_of({{1, 9}, {2, 4}, {3, 0}})));  // the prefill chunk samples none
}

TEST(step_result_shape, mtp_drafts_come_one_list_per_item_that_asks_within_its_count) {
  step_plan p = plan_with_a_verify_item();
  p.items[0].mtp_drafts = 2;
  p.items[1].mtp_drafts = 2;
  p.items[2].mtp_drafts = 2;  // samples nothing: no drafts
  step_result r = result_of({{1, 9}, {2, 4}});
  EXPECT_FALSE(sampled_match_plan(p, r)) << "drafts missing";
  r.drafts = {{1, {3, 4}}, {2, {5}}};
  EXPECT_TRUE(sampled_match_plan(p, r));
  r.drafts = {{2, {5}}, {1, {3, 4}}};
  EXPECT_FALSE(sampled_match_plan(p, r)) << "out of order";
  r.drafts = {{1, {3, 4, 5}}, {2, {5}}};
  EXPECT_FALSE(sampled_match_plan(p, r)) << "more than asked";
  r.drafts = {{1, {3}}, {2, {5}}, {3, {1}}};
  EXPECT_FALSE(sampled_match_plan(p, r)) << "for an item that samples nothing";
}

}  // namespace
}  // namespace hart::sched
