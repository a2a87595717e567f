// The batched cache-shard protocol (scheduler + cache_shard through
// serving_core: one slot_request per step, or none within grants, and cache
// ops after every call) against the scheduler as it was, calling a ShadowRadix
// synchronously per reservation (sync_scheduler_oracle). Random request mixes
// over a small cache (shared prefixes, n samples, priorities, deadlines,
// preemption, prompts that never fit, aborts in flight, every pause mode,
// flushes, failed steps with and without lost pages): every plan (page tables
// included), every event and the cache's metrics must be identical, both
// caches consistent after every step, and no page leaked at the end.
// The same mixes again with pages reserved ahead (scheduler::reserve_ahead,
// as the scheduler actor asks for them), whose answers arrive at random
// points: every position a step reads holds its sequence's token (a fake
// worker's KV), the shard stays consistent and no page is leaked.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <set>

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

int64_t uniform(std::mt19937& rng, int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); }
bool bernoulli(std::mt19937& rng, double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; }

/// A small cache (preemption, prompts that never fit) and batching limits.
serving_params random_params(std::mt19937& rng) {
  auto uni = [&](int64_t lo, int64_t hi) { return uniform(rng, lo, hi); };
  auto chance = [&](double p) { return bernoulli(rng, p); };
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
  return p;
}

/// Three token bases the prompts share prefixes of.
std::vector<std::vector<int32_t>> random_bases(std::mt19937& rng) {
  std::vector<std::vector<int32_t>> bases;
  for (int b = 0; b < 3; ++b) {
    std::vector<int32_t> v;
    for (int64_t i = 0, n = uniform(rng, 100, 500); i < n; ++i) v.push_back(int32_t(uniform(rng, 4, 63)));
    bases.push_back(std::move(v));
  }
  return bases;
}

/// A request on one of the bases: n samples, priorities, maybe a deadline,
/// maybe a prompt that never fits.
gen_request random_request(std::mt19937& rng, const std::vector<std::vector<int32_t>>& bases, uint64_t id, int64_t now) {
  auto uni = [&](int64_t lo, int64_t hi) { return uniform(rng, lo, hi); };
  auto chance = [&](double p) { return bernoulli(rng, p); };
  gen_request r;
  r.id = id;
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
  return r;
}

/// The worker's sampled token at `pos`: a function of the sequence and the position only.
sampled_token fake_token(const step_item& item) {
  const int64_t pos = item.n_computed + int64_t(item.tokens.size());
  return {item.seq_id, int32_t((item.request_id * 7 + uint64_t(item.sample) * 13 + uint64_t(pos) * 5) % 64),
          -0.25f * float(pos % 7), {}};
}

/// One random mix; returns what it exercised.
mix_totals run_mix(uint32_t seed) {
  std::mt19937 rng(seed);
  auto uni = [&](int64_t lo, int64_t hi) { return uniform(rng, lo, hi); };
  auto chance = [&](double p) { return bernoulli(rng, p); };

  serving_params p = random_params(rng);
  int64_t now = 1000;
  auto clock = [&now] { return now; };
  auto core = serving_core::create(p, nullptr, clock);
  EXPECT_TRUE(core.ok()) << core.get_status().to_string();
  serving_core& got = **core;
  cache::shadow_radix ref_cache(p.cache);
  testing::sync_scheduler_oracle ref(p.sched, ref_cache, nullptr, clock);

  const std::vector<std::vector<int32_t>> bases = random_bases(rng);
  uint64_t next_id = 1;
  std::vector<uint64_t> ids;
  mix_totals t;
  const int64_t iterations = 300;
  for (int64_t it = 0; it < iterations; ++it) {
    now += uni(1, 50);
    // Arrivals and control between steps.
    for (int64_t k = uni(0, it < iterations - 60 ? 2 : 0); k > 0; --k) {
      const gen_request r = random_request(rng, bases, next_id++, now);
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
        if (item.sample_last) res.sampled.push_back(fake_token(item));
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

/// Summed over mixes.
struct ahead_totals {
  int64_t steps = 0, preemptions = 0;
  int64_t asked = 0, reserved = 0, pages_ahead = 0;  // reservations asked, made by the shard; pages applied
  int64_t decode_steps = 0, decode_steps_with_shard = 0;
};

/// One random mix through scheduler + cache_shard as the scheduler actor
/// drives them: the shard is asked only when schedule_begin says so, pages
/// ahead once each plan is out, and their answers are applied at random
/// points (before the step's outcome, after it, or after the next plan, when
/// its sequences may have been preempted, readmitted or ended). A fake worker
/// keeps one token per full-page slot: every position a step reads must hold
/// its sequence's token, so a page table naming a page the sequence does not
/// own is caught once another sequence writes it; no two items write one page.
void run_ahead_mix(uint32_t seed, ahead_totals& t) {
  std::mt19937 rng(seed);
  auto uni = [&](int64_t lo, int64_t hi) { return uniform(rng, lo, hi); };
  auto chance = [&](double p) { return bernoulli(rng, p); };

  const serving_params p = random_params(rng);
  const int64_t P = p.cache.page_size;
  int64_t now = 1000;
  scheduler s(p.sched, p.cache, nullptr, [&now] { return now; });
  cache::cache_shard shard(p.cache);
  auto sync = [&] { shard.apply(s.take_cache_ops()); };
  std::vector<int32_t> kv(size_t(p.cache.n_full_pages * P), -1);  // by full slot

  const std::vector<std::vector<int32_t>> bases = random_bases(rng);
  std::map<uint64_t, std::vector<int32_t>> prompts;
  std::map<std::pair<uint64_t, int32_t>, std::vector<int32_t>> generated;
  std::map<uint64_t, cache::request_id> cache_of;  // by seq, as last admitted
  auto record = [&](const event_batch& ev) {
    for (const token_event& te : ev.tokens) generated[{te.request_id, te.sample}].push_back(te.token);
  };
  // Answers not applied yet, with when they will be: k_before_outcome,
  // k_after_outcome, or after plan number n (a late answer: the scheduler
  // actor applies it after the first plan that awaits the shard, at worst).
  constexpr int64_t k_before_outcome = -1, k_after_outcome = -2;
  int64_t n_plans = 0;
  std::vector<std::pair<cache::reserve_grants, int64_t>> answers;
  auto deliver = [&](int64_t when) {
    for (auto a = answers.begin(); a != answers.end();) {
      if (a->second == when) {
        s.apply_reserved(a->first);
        a = answers.erase(a);
      } else {
        ++a;
      }
    }
  };

  uint64_t next_id = 1;
  std::vector<uint64_t> ids;
  for (int64_t it = 0; it < 300; ++it) {
    SCOPED_TRACE("iteration " + std::to_string(it));
    now += uni(1, 50);
    for (int64_t k = uni(0, it < 240 ? 2 : 0); k > 0; --k) {
      gen_request r = random_request(rng, bases, next_id++, now);
      if (chance(0.5)) r.max_new_tokens = uni(100, 400);  // decodes that cross pages
      if (s.submit(r).ok()) {
        ids.push_back(r.id);
        prompts[r.id] = r.prompt;
      }
    }
    if (!ids.empty() && chance(0.05)) s.abort(ids[size_t(uni(0, int64_t(ids.size()) - 1))]);
    if (chance(0.02)) s.pause(pause_mode(uni(0, 2)));
    if (s.paused() && chance(0.3)) s.resume();
    if (chance(0.03)) s.flush_cache();

    const std::optional<cache::slot_request> req = s.schedule_begin();
    sync();
    step_plan plan;
    if (req) {
      const cache::slot_grants g = shard.plan(*req);
      for (const cache::slot_decision& d : g.decisions) {
        if (d.admitted) cache_of[d.seq] = d.cache_id;
      }
      plan = s.schedule_end(&g);
    } else {
      plan = s.schedule_end(nullptr);
    }
    s.take_events();
    ++n_plans;
    // Each item's page tables are the shard's for its cache request, but for
    // pages reserved ahead whose answer is not applied yet.
    for (const step_item& item : plan.items) {
      const cache::request_pages& pg = shard.index().pages(cache_of.at(item.seq_id));
      ASSERT_LE(item.full_pages.size(), pg.full.size()) << "seq " << item.seq_id;
      EXPECT_TRUE(std::equal(item.full_pages.begin(), item.full_pages.end(), pg.full.begin())) << "seq " << item.seq_id;
      EXPECT_TRUE(std::equal(item.swa_pages.begin(), item.swa_pages.end(), pg.swa.begin())) << "seq " << item.seq_id;
    }
    deliver(n_plans);
    if (plan.empty()) continue;
    ++t.steps;
    if (std::all_of(plan.items.begin(), plan.items.end(), [](const step_item& i) { return i.tokens.size() == 1; })) {
      ++t.decode_steps;
      t.decode_steps_with_shard += req.has_value();
    }
    // The plan is out: the cache ops, then the pages ahead (the shard answers in order).
    sync();
    const cache::reserve_request ahead = s.reserve_ahead();
    if (!ahead.empty()) {
      const int64_t when = uni(-2, 3);
      answers.push_back({shard.reserve(ahead), when < 0 ? when : n_plans + 1 + when});
      t.asked += int64_t(ahead.size());
      t.reserved += int64_t(answers.back().first.size());
    }
    deliver(k_before_outcome);
    if (chance(0.05)) s.abort(plan.items[size_t(uni(0, int64_t(plan.items.size()) - 1))].request_id);

    // The worker.
    now += uni(1, 100);
    step_result res;
    res.step = plan.step;
    std::set<cache::page_id> written;
    for (const step_item& item : plan.items) {
      std::vector<int32_t> seq = prompts.at(item.request_id);
      const std::vector<int32_t>& out = generated[{item.request_id, item.sample}];
      seq.insert(seq.end(), out.begin(), out.end());
      const int64_t end = item.n_computed + int64_t(item.tokens.size());
      ASSERT_LE(end, int64_t(seq.size())) << "seq " << item.seq_id;
      ASSERT_LE(end, int64_t(item.full_pages.size()) * P) << "seq " << item.seq_id;
      EXPECT_TRUE(std::equal(item.tokens.begin(), item.tokens.end(), seq.begin() + item.n_computed));
      for (int64_t pos = 0; pos < item.n_computed; ++pos) {
        ASSERT_EQ(kv[size_t(item.full_pages[size_t(pos / P)] * P + pos % P)], seq[size_t(pos)])
            << "seq " << item.seq_id << " reads position " << pos << " of page " << item.full_pages[size_t(pos / P)];
      }
      std::set<cache::page_id> mine;
      for (int64_t pos = item.n_computed; pos < end; ++pos) {
        const cache::page_id page = item.full_pages[size_t(pos / P)];
        mine.insert(page);
        kv[size_t(page * P + pos % P)] = seq[size_t(pos)];
      }
      for (cache::page_id page : mine) EXPECT_TRUE(written.insert(page).second) << "page " << page << " written twice";
      if (item.sample_last) res.sampled.push_back(fake_token(item));
    }
    if (chance(0.01)) res.error = status(status_code::internal, "model step failed");
    if (chance(0.02)) {  // a dead worker; with its pages lost, everything recomputes
      step_result failed;
      failed.step = plan.step;
      failed.error = status(status_code::unavailable, "worker process gone");
      record(s.complete(plan, failed));
      if (chance(0.5)) {
        const bool was_paused = s.paused();
        s.pause(pause_mode::retract);
        s.flush_cache();
        if (!was_paused) s.resume();
        std::fill(kv.begin(), kv.end(), -1);
      }
    } else {
      record(s.complete(plan, res));
    }
    deliver(k_after_outcome);
    sync();
    const status chk = shard.check();
    EXPECT_TRUE(chk.ok()) << chk.to_string();
    if (::testing::Test::HasFailure()) return;
  }
  // Everything ends, late answers arrive: nothing is held.
  s.resume();
  s.abort_all();
  for (auto& a : answers) s.apply_reserved(a.first);
  s.flush_cache();
  sync();
  const status chk = shard.check();
  EXPECT_TRUE(chk.ok()) << chk.to_string();
  EXPECT_EQ(shard.metrics().full_pages_used, 0);
  EXPECT_EQ(shard.metrics().swa_pages_used, 0);
  t.preemptions += s.counters().preemptions;
  t.pages_ahead += s.counters().pages_ahead;
}

TEST(cache_shard_protocol, pages_reserved_ahead_keep_page_tables_right_and_leak_nothing_on_random_mixes) {
  ahead_totals all;
  for (uint32_t seed = 1; seed <= 40 && !::testing::Test::HasFailure(); ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    run_ahead_mix(seed, all);
  }
  // The mixes must exercise what they claim to: pages granted ahead and
  // applied, reservations refused (memory short), preemption.
  EXPECT_GT(all.steps, 2000);
  EXPECT_GT(all.pages_ahead, 50);
  EXPECT_GT(all.asked, all.reserved);
  EXPECT_GT(all.preemptions, 20);
  std::printf("%lld steps (%lld decode, %lld of them with the shard), %lld preemptions; %lld pages asked ahead, "
              "%lld reserved, %lld pages applied\n",
              (long long)all.steps, (long long)all.decode_steps, (long long)all.decode_steps_with_shard,
              (long long)all.preemptions, (long long)all.asked, (long long)all.reserved, (long long)all.pages_ahead);
}

}  // namespace
}  // namespace hart::sched
