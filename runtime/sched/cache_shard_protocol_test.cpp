// The batched cache-shard protocol (scheduler + cache_shard through
// serving_core: one slot_request per step, or none within grants, and cache
// ops after every call) against the scheduler as it was, calling a ShadowRadix
// synchronously per reservation (sync_scheduler_oracle). Random request mixes
// over a small cache (shared prefixes, n samples, priorities, deadlines,
// preemption, prompts that never fit, aborts in flight, every pause mode,
// flushes, failed steps with and without lost pages): every plan (page tables
// included), every event and the cache's metrics must be identical, both
// caches consistent after every step, and no page leaked at the end.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "runtime/sched/serving_core.h"
#include "runtime/sched/sync_scheduler_oracle.h"

namespace hart::sched {
namespace {

void expect_same_plan(const step_plan& got, const step_plan& want, int64_t it) {
  ASSERT_EQ(got.step, want.step) << "iteration " << it;
  ASSERT_EQ(got.items.size(), want.items.size()) << "iteration " << it << " step " << want.step;
  for (size_t i = 0; i < want.items.size(); ++i) {
    const step_item& g = got.items[i];
    const step_item& w = want.items[i];
    SCOPED_TRACE("iteration " + std::to_string(it) + " step " + std::to_string(want.step) + " item " + std::to_string(i));
    EXPECT_EQ(g.seq_id, w.seq_id);
    EXPECT_EQ(g.request_id, w.request_id);
    EXPECT_EQ(g.sample, w.sample);
    EXPECT_EQ(g.tokens, w.tokens);
    EXPECT_EQ(g.full_pages, w.full_pages);
    EXPECT_EQ(g.swa_pages, w.swa_pages);
    EXPECT_EQ(g.n_computed, w.n_computed);
    EXPECT_EQ(g.sample_last, w.sample_last);
    EXPECT_EQ(g.sampling.seed, w.sampling.seed);
    EXPECT_EQ(g.logprobs, w.logprobs);
  }
}

void expect_same_events(const event_batch& got, const event_batch& want, int64_t it) {
  SCOPED_TRACE("iteration " + std::to_string(it));
  ASSERT_EQ(got.tokens.size(), want.tokens.size());
  for (size_t i = 0; i < want.tokens.size(); ++i) {
    EXPECT_EQ(got.tokens[i].request_id, want.tokens[i].request_id);
    EXPECT_EQ(got.tokens[i].sample, want.tokens[i].sample);
    EXPECT_EQ(got.tokens[i].token, want.tokens[i].token);
    EXPECT_EQ(got.tokens[i].logprob, want.tokens[i].logprob);
  }
  ASSERT_EQ(got.finishes.size(), want.finishes.size());
  for (size_t i = 0; i < want.finishes.size(); ++i) {
    const finish_event& g = got.finishes[i];
    const finish_event& w = want.finishes[i];
    EXPECT_EQ(g.request_id, w.request_id);
    EXPECT_EQ(g.sample, w.sample);
    EXPECT_EQ(g.reason, w.reason);
    EXPECT_EQ(g.message, w.message);
    EXPECT_EQ(g.prompt_tokens, w.prompt_tokens);
    EXPECT_EQ(g.completion_tokens, w.completion_tokens);
    EXPECT_EQ(g.cached_tokens, w.cached_tokens);
    EXPECT_EQ(g.queued_us, w.queued_us);
    EXPECT_EQ(g.ttft_us, w.ttft_us);
    EXPECT_EQ(g.total_us, w.total_us);
  }
}

void expect_same_metrics(const cache::cache_metrics& g, const cache::cache_metrics& w, int64_t it) {
  SCOPED_TRACE("iteration " + std::to_string(it));
  EXPECT_EQ(g.requests, w.requests);
  EXPECT_EQ(g.prompt_tokens, w.prompt_tokens);
  EXPECT_EQ(g.cached_tokens, w.cached_tokens);
  EXPECT_EQ(g.evicted_full_pages, w.evicted_full_pages);
  EXPECT_EQ(g.full_pages_used, w.full_pages_used);
  EXPECT_EQ(g.swa_pages_used, w.swa_pages_used);
  EXPECT_EQ(g.tree_full_tokens, w.tree_full_tokens);
  EXPECT_EQ(g.tree_swa_tokens, w.tree_swa_tokens);
}

struct mix_totals {
  int64_t steps = 0, preemptions = 0, cached_tokens = 0;
};

/// One random mix; returns what it exercised.
mix_totals run_mix(uint32_t seed) {
  std::mt19937 rng(seed);
  auto uni = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };

  serving_params p;
  p.cache.page_size = 128;
  p.cache.window = uni(0, 1) ? 64 : 128;
  p.cache.n_swa_pages = p.cache.min_swa_pages() + uni(0, 8);
  p.cache.n_full_pages = uni(6, 20);
  p.cache.enable_prefix_cache = !chance(0.15);
  p.sched.max_batch_tokens = uni(48, 400);
  p.sched.max_running = uni(1, 8);
  p.sched.prefill_chunk = uni(16, 256);
  p.sched.vocab_size = 64;
  p.sched.eos_token_id = chance(0.5) ? 3 : -1;
  p.sched.max_context = chance(0.2) ? uni(300, 900) : 0;

  int64_t now = 1000;
  auto clock = [&now] { return now; };
  auto core = serving_core::create(p, nullptr, clock);
  EXPECT_TRUE(core.ok()) << core.get_status().to_string();
  serving_core& got = **core;
  cache::shadow_radix ref_cache(p.cache);
  testing::sync_scheduler_oracle ref(p.sched, ref_cache, nullptr, clock);

  std::vector<std::vector<int32_t>> bases;
  for (int b = 0; b < 3; ++b) {
    std::vector<int32_t> v;
    for (int64_t i = 0, n = uni(100, 500); i < n; ++i) v.push_back(int32_t(uni(4, 63)));
    bases.push_back(std::move(v));
  }
  uint64_t next_id = 1;
  std::vector<uint64_t> ids;
  mix_totals t;
  const int64_t iterations = 300;
  for (int64_t it = 0; it < iterations; ++it) {
    now += uni(1, 50);
    // Arrivals and control between steps.
    for (int64_t k = uni(0, it < iterations - 60 ? 2 : 0); k > 0; --k) {
      gen_request r;
      r.id = next_id++;
      const auto& base = bases[size_t(uni(0, 2))];
      r.prompt.assign(base.begin(), base.begin() + uni(1, int64_t(base.size())));
      for (int64_t i = uni(0, 150); i > 0; --i) r.prompt.push_back(int32_t(uni(4, 63)));
      if (chance(0.05)) r.prompt.resize(std::min<size_t>(r.prompt.size() * 8, 2800), 9);  // may never fit
      r.max_new_tokens = uni(1, 40);
      r.n = int32_t(uni(1, 3));
      r.priority = int32_t(uni(0, 2));
      r.ignore_eos = chance(0.5);
      r.logprobs = chance(0.3);
      r.temperature = chance(0.5) ? 0.8f : 0.0f;
      r.seed = r.id;
      if (chance(0.1)) r.deadline_us = now + uni(10, 2000);
      const status a = got.submit(r), b = ref.submit(r);
      EXPECT_EQ(a.code(), b.code()) << a.to_string() << " vs " << b.to_string();
      if (a.ok()) ids.push_back(r.id);
    }
    if (!ids.empty() && chance(0.05)) {
      const uint64_t id = ids[size_t(uni(0, int64_t(ids.size()) - 1))];
      expect_same_events(got.abort(id), ref.abort(id), it);
    }
    if (chance(0.02)) {
      const pause_mode m = pause_mode(uni(0, 2));
      expect_same_events(got.pause(m), ref.pause(m), it);
    }
    if (ref.paused() && chance(0.3)) {
      got.resume();
      ref.resume();
    }
    if (chance(0.03)) {
      got.flush_cache();
      ref.flush_cache();
    }

    // One step on both.
    const step_plan gp = got.plan_step();
    const step_plan wp = ref.schedule();
    expect_same_plan(gp, wp, it);
    expect_same_events(got.take_events(), ref.take_events(), it);
    if (::testing::Test::HasFailure()) return t;
    if (!wp.empty()) {
      ++t.steps;
      // Abort while the step runs.
      if (chance(0.05)) {
        const uint64_t id = wp.items[size_t(uni(0, int64_t(wp.items.size()) - 1))].request_id;
        expect_same_events(got.abort(id), ref.abort(id), it);
      }
      now += uni(1, 100);
      step_result res;
      res.step = wp.step;
      for (const step_item& item : wp.items) {
        if (!item.sample_last) continue;
        const int64_t pos = item.n_computed + int64_t(item.tokens.size());
        res.sampled.push_back({item.seq_id, int32_t((item.request_id * 7 + uint64_t(item.sample) * 13 + uint64_t(pos) * 5) % 64),
                               -0.25f * float(pos % 7), {}});
      }
      if (chance(0.01)) res.error = status(status_code::internal, "model step failed");
      step_timing timing;
      timing.exec_end_us = now;
      if (chance(0.02)) {  // a dead worker
        const bool lost = chance(0.5);
        const status dead(status_code::unavailable, "worker process gone");
        expect_same_events(got.finish_step(gp, dead, lost, timing), [&] {
          step_result failed;
          failed.step = wp.step;
          failed.error = status(dead.code(), "worker failed: " + dead.message());
          event_batch ev = ref.complete(wp, failed);
          if (lost) {
            const bool was_paused = ref.paused();
            ev.append(ref.pause(pause_mode::retract));
            ref.flush_cache();
            if (!was_paused) ref.resume();
          }
          return ev;
        }(), it);
      } else {
        expect_same_events(got.finish_step(gp, res, false, timing), ref.complete(wp, res), it);
      }
    }
    const status gc = got.cache().check(), rc = ref_cache.check();
    EXPECT_TRUE(gc.ok()) << gc.to_string();
    EXPECT_TRUE(rc.ok()) << rc.to_string();
    expect_same_metrics(got.cache().metrics(), ref_cache.metrics(), it);
    if (::testing::Test::HasFailure()) return t;
  }
  // Drain: everything ends, then nothing is held.
  got.resume();
  ref.resume();
  expect_same_events(got.abort_all(), ref.abort_all(), iterations);
  got.flush_cache();
  ref.flush_cache();
  const cache::cache_metrics m = got.cache().metrics();
  EXPECT_EQ(m.full_pages_used, 0);
  EXPECT_EQ(m.swa_pages_used, 0);
  expect_same_metrics(m, ref_cache.metrics(), iterations);
  t.preemptions = got.sched().counters().preemptions;
  t.cached_tokens = m.cached_tokens;
  return t;
}

TEST(cache_shard_protocol, batched_protocol_plans_like_the_synchronous_calls_on_random_mixes) {
  mix_totals all;
  for (uint32_t seed = 1; seed <= 40 && !::testing::Test::HasFailure(); ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const mix_totals t = run_mix(seed);
    all.steps += t.steps;
    all.preemptions += t.preemptions;
    all.cached_tokens += t.cached_tokens;
  }
  // The mixes must exercise what they claim to.
  EXPECT_GT(all.steps, 2000);
  EXPECT_GT(all.preemptions, 20);
  EXPECT_GT(all.cached_tokens, 0);
  std::printf("%lld steps, %lld preemptions, %lld cached prompt tokens over 40 mixes\n", (long long)all.steps,
              (long long)all.preemptions, (long long)all.cached_tokens);
}

}  // namespace
}  // namespace hart::sched
