// scheduler::admit_prefilled (prefill/decode disaggregation) with the cache
// shard in process and a fake worker: a sequence whose prompt was computed
// elsewhere joins the running set on the pages cache_shard::reserve_prefilled
// gave it, emits its first token, decodes from the prompt's end within those
// pages, and ends with nothing held; a prefix hit on this side; what it
// refuses changes nothing; the first token can end it at once.
#include "runtime/cache/cache_shard.h"
#include "runtime/sched/scheduler.h"

#include <gtest/gtest.h>

#include <memory>

namespace hart::sched {
namespace {

cache::cache_config small_cache() {
  cache::cache_config c;
  c.page_size = 128;
  c.n_full_pages = 16;
  c.n_swa_pages = 16;
  c.window = 32;
  return c;
}

gen_request make(uint64_t id, int64_t len, int64_t max_new) {
  gen_request r;
  r.id = id;
  for (int64_t i = 0; i < len; ++i) r.prompt.push_back(int32_t(2 + (i * 31) % 500));
  r.max_new_tokens = max_new;
  r.logprobs = true;
  return r;
}

struct prefilled_fixture : ::testing::Test {
  cache::cache_shard shard{small_cache()};
  scheduler_params sp = [] {
    scheduler_params p;
    p.vocab_size = 512;
    return p;
  }();
  scheduler s{sp, small_cache(), nullptr};

  // Pages for r's prompt and one step, as the decode server reserves them; its first token 7.
  prefilled reserve(const gen_request& r) {
    cache::prefill_reservation res;
    res.key = r.id;
    res.tokens = std::make_shared<const std::vector<int32_t>>(r.prompt);
    res.n_tokens = int64_t(r.prompt.size()) + 1;
    const cache::prefill_reserved g = shard.reserve_prefilled(res);
    EXPECT_TRUE(g.result.ok()) << g.result.to_string();
    prefilled p;
    p.cache_id = g.cache_id;
    p.n_cached = g.n_cached;
    p.full = g.full;
    p.swa = g.swa;
    p.first = {0, 7, -0.25f, {}};
    p.arrival_us = s.now_us();
    return p;
  }

  // Steps with a fake worker that samples 8 until idle; the tokens generated after the first.
  std::vector<int32_t> run(int64_t expect_from) {
    std::vector<int32_t> out;
    bool first = true;
    while (!s.idle()) {
      step_plan plan = s.schedule(shard);
      EXPECT_EQ(plan.items.size(), 1u);
      if (plan.items.empty()) break;
      const step_item& it = plan.items[0];
      if (first) {
        EXPECT_EQ(it.n_computed, expect_from) << "decoding from the prompt's end";
        EXPECT_EQ(it.tokens, std::vector<int32_t>{7}) << "fed the first token";
        first = false;
      }
      step_result r;
      r.step = plan.step;
      r.sampled.push_back({it.seq_id, 8, -0.5f, {}});
      event_batch ev = s.complete(plan, r);
      for (const token_event& t : ev.tokens) out.push_back(t.token);
    }
    shard.apply(s.take_cache_ops());
    return out;
  }

  void expect_nothing_held() {
    EXPECT_TRUE(shard.check().ok()) << shard.check().to_string();
    const cache::cache_metrics m = shard.metrics();
    EXPECT_EQ(m.full_pages_used * 128, m.tree_full_tokens) << "every used page the tree's";
  }
};

TEST_F(prefilled_fixture, joins_the_running_set_and_decodes) {
  const gen_request r = make(1, 300, 4);
  const prefilled p = reserve(r);
  EXPECT_EQ(p.n_cached, 0);
  auto ev = s.admit_prefilled(r, p);
  ASSERT_TRUE(ev.ok()) << ev.get_status().to_string();
  ASSERT_EQ(ev->tokens.size(), 1u);
  EXPECT_EQ(ev->tokens[0].token, 7);
  EXPECT_EQ(ev->tokens[0].logprob, -0.25f);
  EXPECT_TRUE(ev->finishes.empty());
  EXPECT_EQ(s.n_running(), 1);
  EXPECT_EQ(run(300), (std::vector<int32_t>{8, 8, 8}));
  EXPECT_EQ(s.counters().generated_tokens, 4);
  expect_nothing_held();
  EXPECT_EQ(shard.metrics().tree_full_tokens, 256) << "the prompt's and its decode's whole pages cached";

  // The same prompt again: a prefix hit on this side.
  gen_request again = make(2, 300, 2);
  const prefilled q = reserve(again);
  EXPECT_EQ(q.n_cached, 256);
  ASSERT_TRUE(s.admit_prefilled(again, q).ok());
  EXPECT_EQ(run(300), (std::vector<int32_t>{8}));
  ASSERT_EQ(shard.metrics().requests, 2);
  expect_nothing_held();
}

TEST_F(prefilled_fixture, the_first_token_may_end_it) {
  const gen_request r = make(1, 50, 1);
  auto ev = s.admit_prefilled(r, reserve(r));
  ASSERT_TRUE(ev.ok());
  ASSERT_EQ(ev->finishes.size(), 1u);
  EXPECT_EQ(ev->finishes[0].reason, finish_reason::length);
  EXPECT_EQ(ev->finishes[0].completion_tokens, 1);
  EXPECT_TRUE(s.idle());
  shard.apply(s.take_cache_ops());
  expect_nothing_held();
}

TEST_F(prefilled_fixture, what_it_refuses_changes_nothing) {
  gen_request two = make(1, 50, 4);
  two.n = 2;
  const prefilled p = reserve(two);
  EXPECT_EQ(s.admit_prefilled(two, p).get_status().code(), status_code::invalid_argument);
  gen_request bad = make(2, 50, 4);
  prefilled bad_token = p;
  bad_token.first.token = 512;
  EXPECT_EQ(s.admit_prefilled(bad, bad_token).get_status().code(), status_code::invalid_argument);
  prefilled short_pages = p;
  short_pages.full.clear();
  short_pages.swa.clear();
  EXPECT_EQ(s.admit_prefilled(bad, short_pages).get_status().code(), status_code::invalid_argument);
  EXPECT_TRUE(s.idle());
  EXPECT_TRUE(s.take_cache_ops().empty());
  // The caller still owns the pages: it releases them.
  shard.apply({{cache::cache_op::kind::abort, p.cache_id, 0, {}}});
  expect_nothing_held();
  EXPECT_EQ(shard.metrics().full_pages_used, 0);
}

}  // namespace
}  // namespace hart::sched
