// Scheduler policy with a fake worker (no engine): chunking and budget,
// priority, abort while a step is in flight, page accounting.
#include "runtime/sched/scheduler.h"

#include <gtest/gtest.h>

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

/// Samples token 7 for everything.
step_result fake_execute(const step_plan& p) {
  step_result r;
  r.step = p.step;
  for (const step_item& it : p.items) {
    if (it.sample_last) r.sampled.push_back({it.seq_id, 7, -0.5f, {}});
  }
  return r;
}

gen_request make(uint64_t id, int64_t len, int64_t max_new, int32_t priority = 0) {
  gen_request r;
  r.id = id;
  for (int64_t i = 0; i < len; ++i) r.prompt.push_back(int32_t(2 + (i * 31 + int64_t(id)) % 500));
  r.max_new_tokens = max_new;
  r.priority = priority;
  return r;
}

TEST(scheduler, chunked_prefill_respects_budget_then_decodes) {
  cache::cache_shard c(small_cache());
  scheduler_params sp;
  sp.max_batch_tokens = 200;
  sp.prefill_chunk = 128;
  sp.vocab_size = 512;
  scheduler s(sp, small_cache(), nullptr);
  ASSERT_TRUE(s.submit(make(1, 300, 3)).ok());
  std::vector<int64_t> fed;
  int64_t tokens = 0, finishes = 0;
  while (!s.idle()) {
    step_plan p = s.schedule(c);
    ASSERT_FALSE(p.empty());
    EXPECT_LE(p.n_tokens(), sp.max_batch_tokens);
    fed.push_back(p.n_tokens());
    event_batch ev = s.complete(p, fake_execute(p));
    tokens += int64_t(ev.tokens.size());
    finishes += int64_t(ev.finishes.size());
    c.apply(s.take_cache_ops());
    ASSERT_TRUE(c.check().ok());
  }
  EXPECT_EQ(fed, (std::vector<int64_t>{128, 128, 44, 1, 1}));
  EXPECT_EQ(tokens, 3);
  EXPECT_EQ(finishes, 1);
  c.index().flush();
  EXPECT_EQ(c.metrics().full_pages_used, 0);
  EXPECT_EQ(c.metrics().swa_pages_used, 0);
}

TEST(scheduler, higher_priority_is_admitted_first) {
  cache::cache_shard c(small_cache());
  scheduler_params sp;
  sp.max_running = 1;
  sp.vocab_size = 512;
  scheduler s(sp, small_cache(), nullptr);
  ASSERT_TRUE(s.submit(make(1, 10, 1, 0)).ok());
  ASSERT_TRUE(s.submit(make(2, 10, 1, 5)).ok());
  EXPECT_FALSE(s.submit(make(2, 10, 1)).ok()) << "duplicate live id";
  step_plan p = s.schedule(c);
  ASSERT_EQ(p.items.size(), 1u);
  EXPECT_EQ(p.items[0].request_id, 2u);
  event_batch ev = s.complete(p, fake_execute(p));
  ASSERT_EQ(ev.finishes.size(), 1u);
  EXPECT_EQ(ev.finishes[0].reason, finish_reason::length);
}

TEST(scheduler, abort_while_in_flight_ends_now_and_frees_in_complete) {
  cache::cache_shard c(small_cache());
  scheduler_params sp;
  sp.vocab_size = 512;
  scheduler s(sp, small_cache(), nullptr);
  ASSERT_TRUE(s.submit(make(1, 50, 10)).ok());
  step_plan p = s.schedule(c);
  event_batch first = s.complete(p, fake_execute(p));
  EXPECT_EQ(first.tokens.size(), 1u);
  p = s.schedule(c);
  event_batch ab = s.abort(1);
  ASSERT_EQ(ab.finishes.size(), 1u);
  EXPECT_EQ(ab.finishes[0].reason, finish_reason::abort);
  EXPECT_EQ(ab.finishes[0].completion_tokens, 1);
  event_batch ev = s.complete(p, fake_execute(p));
  EXPECT_TRUE(ev.empty()) << "an aborted sequence reports nothing more";
  EXPECT_TRUE(s.idle());
  c.apply(s.take_cache_ops());
  ASSERT_TRUE(c.check().ok());
  c.index().flush();
  EXPECT_EQ(c.metrics().full_pages_used, 0);
}

TEST(scheduler, invalid_requests_are_refused) {
  cache::cache_shard c(small_cache());
  scheduler_params sp;
  sp.vocab_size = 512;
  scheduler s(sp, small_cache(), nullptr);
  gen_request r = make(1, 5, 1);
  r.prompt[2] = 512;
  EXPECT_EQ(s.submit(r).code(), status_code::invalid_argument);
  r = make(1, 0, 1);
  EXPECT_EQ(s.submit(r).code(), status_code::invalid_argument);
  r = make(1, 5, 1);
  r.n = 0;
  EXPECT_EQ(s.submit(r).code(), status_code::invalid_argument);
  EXPECT_TRUE(s.idle());
}

}  // namespace
}  // namespace hart::sched
