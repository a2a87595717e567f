// The step pipeline with a port that records what it sends and a loop that
// answers later, as the scheduler actor's mailbox does: a cache shard in
// process answers slots and pages ahead, a fake worker runs each plan
// (token 7 for everything; placeholders of plans made ahead filled from the
// plan before). Held: every request whole; the next plan leaves before the
// last step's events; two plans in flight only with overlap, and the same
// tokens either way; a swap only at a step boundary, alone, then the prefix
// cache flushed (kept for a relabel); a refused submit published as one
// refused finish; a retry when everything waits on memory; pages lost while
// idle retract and recompute. The shard's invariants hold after every answer.
#include "runtime/sched/step_pipeline.h"

#include "runtime/sched/in_process_shard.h"

#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <string>
#include <vector>

namespace hart::sched {
namespace {

serving_params params_with(int64_t full_pages, int64_t max_running = 8) {
  serving_params p;
  p.cache.page_size = 128;
  p.cache.n_full_pages = full_pages;
  p.cache.n_swa_pages = full_pages;
  p.cache.window = 32;
  p.sched.vocab_size = 512;
  p.sched.max_batch_tokens = 256;
  p.sched.prefill_chunk = 128;
  p.sched.max_running = max_running;
  return p;
}

gen_request make(uint64_t id, int64_t len, int64_t max_new) {
  gen_request r;
  r.id = id;
  for (int64_t i = 0; i < len; ++i) r.prompt.push_back(int32_t(2 + (i * 31 + int64_t(id)) % 500));
  r.max_new_tokens = max_new;
  return r;
}

class fake_runtime : public pipeline_port {
 public:
  explicit fake_runtime(const serving_params& p) : shard_(p.cache) {}

  void send_step(std::shared_ptr<const step_plan> plan, int64_t) override {
    steps_.push_back(std::move(plan));
    log.push_back("step");
    max_in_flight = std::max(max_in_flight, steps_.size());
  }
  void send_swap() override {
    ++swaps;
    log.push_back("swap");
  }
  void send_cache_ops(cache::cache_op_batch ops) override { shard_.apply(ops); }
  void ask_slots(cache::slot_request req) override { shard_.ask_slots(req); }  // checks one ask at a time
  void ask_reserve(cache::reserve_request req) override { shard_.ask_reserve(req); }
  void publish(event_batch ev) override {
    if (ev.empty()) return;
    log.push_back("events");
    for (const token_event& t : ev.tokens) tokens[t.request_id].push_back(t.token);
    for (const finish_event& f : ev.finishes) finishes[f.request_id].push_back(f);
  }
  void retry_after(std::chrono::milliseconds) override { ++retries; }

  /// Delivers as a mailbox would: the shard's answers, else the oldest step's
  /// outcome. False when nothing is pending.
  bool pump(step_pipeline& p) {
    if (shard_.pending()) {
      log.push_back("|shard");
      shard_.answer(p);
    } else if (!steps_.empty()) {
      log.push_back("|outcome");
      p.on_step_done(run_oldest(), ++now_us);
    } else {
      return false;
    }
    const status chk = shard_.check();
    EXPECT_TRUE(chk.ok()) << chk.to_string();
    return true;
  }

  /// The oldest plan's outcome, as a worker returns it; `lose` hands it back unrun with the pages lost.
  step_outcome run_oldest(bool lose = false) {
    step_plan plan = *steps_.front();
    steps_.pop_front();
    step_outcome o;
    o.exec_start_us = ++now_us;
    o.exec_end_us = ++now_us;
    if (lose) {
      o.result = status(status_code::unavailable, "worker process gone");
      o.pages_lost = o.not_run = true;
      return o;
    }
    if (const status s = fill_planned_ahead(plan, last_); !s.ok()) {
      ADD_FAILURE() << s.to_string();
      return o;
    }
    step_result r;
    r.step = plan.step;
    for (const step_item& it : plan.items) {
      if (it.sample_last) r.sampled.push_back({it.seq_id, 7, -0.5f, {}});
    }
    last_ = r;
    o.result = std::move(r);
    return o;
  }

  void run_until_quiet(step_pipeline& p) {
    for (int i = 0; i < 100000 && pump(p); ++i) {
    }
  }
  size_t steps_pending() const { return steps_.size(); }
  const cache::cache_metrics metrics() const { return shard_.metrics(); }

  std::vector<std::string> log;
  std::map<uint64_t, std::vector<int32_t>> tokens;
  std::map<uint64_t, std::vector<finish_event>> finishes;
  size_t max_in_flight = 0;
  int swaps = 0, retries = 0;
  int64_t now_us = 0;

 private:
  in_process_shard shard_;
  std::deque<std::shared_ptr<const step_plan>> steps_;
  step_result last_;
};

std::unique_ptr<step_pipeline> make_pipeline(const serving_params& p, bool overlap, fake_runtime* rt) {
  auto sched = scheduler::create(p, nullptr);
  EXPECT_TRUE(sched.ok()) << sched.get_status().to_string();
  auto pipe = std::make_unique<step_pipeline>(std::move(*sched), step_pipeline_params{overlap});
  pipe->attach(rt);
  return pipe;
}

void expect_whole(const fake_runtime& rt, const std::vector<gen_request>& reqs) {
  for (const gen_request& r : reqs) {
    ASSERT_EQ(rt.finishes.count(r.id), 1u) << "request " << r.id << " never finished";
    ASSERT_EQ(rt.finishes.at(r.id).size(), 1u) << "request " << r.id;
    EXPECT_EQ(rt.finishes.at(r.id)[0].reason, finish_reason::length) << "request " << r.id;
    EXPECT_EQ(rt.tokens.at(r.id), std::vector<int32_t>(size_t(r.max_new_tokens), 7)) << "request " << r.id;
  }
}

std::vector<gen_request> mix() {
  return {make(1, 300, 6), make(2, 40, 9), make(3, 130, 3), make(4, 5, 12)};
}

TEST(step_pipeline, requests_run_whole_and_the_next_plan_leaves_before_the_last_steps_events) {
  const serving_params p = params_with(32);
  for (const bool overlap : {false, true}) {
    SCOPED_TRACE(overlap ? "overlap" : "one plan at a time");
    fake_runtime rt(p);
    auto pipe = make_pipeline(p, overlap, &rt);
    for (const gen_request& r : mix()) pipe->submit(r);
    rt.run_until_quiet(*pipe);
    expect_whole(rt, mix());
    EXPECT_TRUE(pipe->sched().idle());
    EXPECT_EQ(pipe->in_flight(), 0u);
    EXPECT_EQ(rt.max_in_flight, overlap ? 2u : 1u) << "plans in flight at once";
    // Handling an outcome, the next plan (when one is due without asking the shard) leaves before
    // the outcome's events: the worker is never kept waiting for them.
    int nexts = 0;
    for (size_t i = 0; i < rt.log.size(); ++i) {
      if (rt.log[i] != "|outcome") continue;
      bool events = false;
      for (size_t j = i + 1; j < rt.log.size() && rt.log[j][0] != '|'; ++j) {
        events = events || rt.log[j] == "events";
        if (rt.log[j] == "step") {
          EXPECT_FALSE(events) << "an outcome's events before the next plan (log entry " << j << ")";
          ++nexts;
        }
      }
    }
    EXPECT_GE(nexts, 5) << "plans sent while handling an outcome (the rest waited for the shard)";
    pipe->sched().flush_cache();
    pipe->sync_shard();
    EXPECT_EQ(rt.metrics().full_pages_used, 0) << "pages held once the prefix cache is flushed";
    EXPECT_EQ(rt.metrics().swa_pages_used, 0);
  }
}

TEST(step_pipeline, a_swap_runs_alone_at_a_step_boundary_and_flushes_the_prefix_cache) {
  const serving_params p = params_with(32);
  for (const bool relabel : {false, true}) {
    SCOPED_TRACE(relabel ? "relabel" : "new weights");
    fake_runtime rt(p);
    auto pipe = make_pipeline(p, true, &rt);
    pipe->submit(make(1, 300, 2));  // fills the prefix cache
    rt.run_until_quiet(*pipe);
    pipe->submit(make(2, 200, 40));
    ASSERT_TRUE(rt.pump(*pipe));  // the first step of request 2 is out
    ASSERT_EQ(pipe->in_flight(), 1u);
    ASSERT_TRUE(pipe->request_swap(relabel).ok());
    EXPECT_EQ(pipe->request_swap(relabel).code(), status_code::failed_precondition) << "one swap at a time";
    EXPECT_EQ(rt.swaps, 0) << "a step is in flight";
    while (pipe->in_flight() > 0) ASSERT_TRUE(rt.pump(*pipe));
    EXPECT_EQ(rt.swaps, 1) << "at the step boundary";
    const size_t steps_before = rt.steps_pending();
    pipe->advance();
    EXPECT_EQ(rt.steps_pending(), steps_before) << "no step while the worker swaps";
    pipe->on_swapped(true);
    rt.run_until_quiet(*pipe);
    ASSERT_EQ(rt.finishes.count(2), 1u);
    EXPECT_EQ(rt.tokens.at(2).size(), 40u) << "the running request goes on after the swap";
    gen_request again = make(1, 300, 2);  // request 1's prompt: cached before the swap
    again.id = 3;
    pipe->submit(again);
    rt.run_until_quiet(*pipe);
    ASSERT_EQ(rt.finishes.count(3), 1u);
    EXPECT_EQ(rt.finishes.at(3)[0].cached_tokens > 0, relabel)
        << "the old weights' KV is flushed, a relabel keeps it";
    EXPECT_TRUE(pipe->request_swap(false).ok()) << "the next swap is accepted";
  }
}

TEST(step_pipeline, a_refused_submit_is_one_refused_finish) {
  const serving_params p = params_with(32);
  fake_runtime rt(p);
  auto pipe = make_pipeline(p, false, &rt);
  pipe->submit(make(5, 0, 4));  // no prompt
  ASSERT_EQ(rt.finishes.count(5), 1u);
  const finish_event& f = rt.finishes.at(5)[0];
  EXPECT_TRUE(f.refused);
  EXPECT_EQ(f.reason, finish_reason::error);
  EXPECT_EQ(f.code, status_code::invalid_argument);
  EXPECT_FALSE(f.message.empty());
  EXPECT_EQ(rt.steps_pending(), 0u);
}

TEST(step_pipeline, retries_while_every_request_waits_on_memory) {
  // Two pages of 128: request 1 (200 tokens) holds both while it runs; request 2 cannot be
  // admitted beside it, so a plan may come back empty and the pipeline asks to look again.
  const serving_params p = params_with(3, 1);
  fake_runtime rt(p);
  auto pipe = make_pipeline(p, false, &rt);
  pipe->submit(make(1, 200, 60));
  pipe->submit(make(2, 200, 5));
  for (int i = 0; i < 100000; ++i) {
    if (!rt.pump(*pipe)) {
      if (rt.retries == 0 || pipe->sched().idle()) break;
      rt.retries = 0;
      pipe->on_retry();
    }
  }
  expect_whole(rt, {make(1, 200, 60), make(2, 200, 5)});
}

TEST(step_pipeline, pages_lost_while_idle_retract_and_recompute) {
  const serving_params p = params_with(32);
  fake_runtime rt(p);
  auto pipe = make_pipeline(p, false, &rt);
  for (const gen_request& r : mix()) pipe->submit(r);
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(rt.pump(*pipe));
  ASSERT_EQ(pipe->in_flight(), 1u);
  pipe->on_step_done(rt.run_oldest(/*lose=*/true), ++rt.now_us);
  EXPECT_EQ(rt.metrics().tree_full_tokens, 0) << "the prefix cache is flushed";
  rt.run_until_quiet(*pipe);
  expect_whole(rt, mix());
  EXPECT_EQ(pipe->stats(rt.metrics()).worker_failures, 1);
}

}  // namespace
}  // namespace hart::sched
