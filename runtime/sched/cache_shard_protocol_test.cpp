// The scheduler and its cache shard on random request mixes over a small cache
// (shared prefixes, n samples, priorities, deadlines, preemption, prompts that
// never fit, aborts in flight, every pause mode, flushes, failed steps with and
// without lost pages), by two drivers: the step pipeline both runtimes run
// (the scheduler actor, the single-thread serving_loop), with arrivals and
// control calls between its messages, and the scheduler driven by hand as the
// actor does (pages reserved ahead, whose answers arrive at random points). Both are held to what any correct
// serving must do, checked by one fake worker and one log of the events:
// - every position a step reads holds its sequence's token (the worker keeps one
//   token per full-page slot: a page table naming a page the sequence does not
//   own is caught once another sequence writes it); no two items write one page;
//   the tokens fed are the sequence's own (its prompt, then what it generated);
// - the worker's token for a position is a function of the sequence and the
//   position, so every sample's tokens are the same whatever the batching,
//   preemption or recomputation: each sample ends exactly once, no token comes
//   after its end, its tokens are that function's, and its reason and counts
//   agree with them (EOS, max_new_tokens, max_context);
// - the cache is consistent after every step, and nothing is held at the end.
#include "runtime/sched/in_process_shard.h"
#include "runtime/sched/scheduler.h"
#include "runtime/sched/step_pipeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <set>

namespace hart::sched {
namespace {

int64_t uniform(std::mt19937& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}
bool bernoulli(std::mt19937& rng, double p) {
  return std::uniform_real_distribution<double>(0, 1)(rng) < p;
}

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
gen_request random_request(std::mt19937& rng, const std::vector<std::vector<int32_t>>& bases, uint64_t id,
                           int64_t now) {
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

/// The worker's token for a sample's position `pos` (the one after the last fed): a function
/// of the request, the sample and the position only.
int32_t canonical_token(uint64_t request_id, int32_t sample, int64_t pos) {
  return int32_t((request_id * 7 + uint64_t(sample) * 13 + uint64_t(pos) * 5) % 64);
}

/// Every request of a mix, the events about it, and a fake worker over a KV of one token per
/// full-page slot: what both serving paths are held to (the file's header).
class request_log {
 public:
  explicit request_log(const serving_params& p)
      : p_(p), kv_(size_t(p.cache.n_full_pages * p.cache.page_size), -1) {}

  void submitted(const gen_request& r) { reqs_[r.id] = r; }

  void observe(const event_batch& ev) {
    for (const token_event& te : ev.tokens) {
      sample_log& s = samples_[{te.request_id, te.sample}];
      EXPECT_FALSE(s.finished) << "request " << te.request_id << " sample " << te.sample
                               << ": a token after its end";
      s.tokens.push_back(te.token);
    }
    for (const finish_event& f : ev.finishes) {
      const int32_t n = f.refused ? reqs_.at(f.request_id).n : 1;
      for (int32_t i = 0; i < n; ++i) {
        sample_log& s = samples_[{f.request_id, f.refused ? i : f.sample}];
        EXPECT_FALSE(s.finished) << "request " << f.request_id << " sample " << f.sample << " ended twice";
        s.finished = true;
        s.end = f;
      }
    }
  }

  /// Runs `plan` as a worker would, checking what each item feeds and reads.
  step_result run(const step_plan& plan) {
    const int64_t P = p_.cache.page_size;
    step_result res;
    res.step = plan.step;
    std::set<cache::page_id> written;
    for (const step_item& item : plan.items) {
      SCOPED_TRACE("seq " + std::to_string(item.seq_id));
      std::vector<int32_t> seq = reqs_.at(item.request_id).prompt;
      const std::vector<int32_t>& out = samples_[{item.request_id, item.sample}].tokens;
      seq.insert(seq.end(), out.begin(), out.end());
      const int64_t end = item.n_computed + int64_t(item.tokens.size());
      EXPECT_LE(end, int64_t(seq.size()));
      EXPECT_LE(end, int64_t(item.full_pages.size()) * P);
      if (end > int64_t(seq.size()) || end > int64_t(item.full_pages.size()) * P) continue;
      EXPECT_TRUE(std::equal(item.tokens.begin(), item.tokens.end(), seq.begin() + item.n_computed));
      for (int64_t pos = 0; pos < item.n_computed; ++pos) {
        EXPECT_EQ(kv_[size_t(item.full_pages[size_t(pos / P)] * P + pos % P)], seq[size_t(pos)])
            << "reads position " << pos << " of page " << item.full_pages[size_t(pos / P)];
        if (::testing::Test::HasFailure()) return res;
      }
      std::set<cache::page_id> mine;
      for (int64_t pos = item.n_computed; pos < end; ++pos) {
        const cache::page_id page = item.full_pages[size_t(pos / P)];
        mine.insert(page);
        kv_[size_t(page * P + pos % P)] = seq[size_t(pos)];
      }
      for (cache::page_id page : mine)
        EXPECT_TRUE(written.insert(page).second) << "page " << page << " written twice";
      if (item.sample_last) {
        res.sampled.push_back(
            {item.seq_id, canonical_token(item.request_id, item.sample, end), -0.25f * float(end % 7), {}});
      }
    }
    return res;
  }

  /// A worker that lost its pages: nothing it held is readable.
  void lose_kv() { std::fill(kv_.begin(), kv_.end(), -1); }

  /// At the end of a mix: every sample of every accepted request ended once, with the
  /// worker's tokens and a reason and counts that agree with them.
  void expect_whole(const std::set<uint64_t>& accepted) const {
    for (uint64_t id : accepted) {
      const gen_request& r = reqs_.at(id);
      for (int32_t k = 0; k < r.n; ++k) {
        SCOPED_TRACE("request " + std::to_string(id) + " sample " + std::to_string(k));
        const auto it = samples_.find({id, k});
        ASSERT_TRUE(it != samples_.end() && it->second.finished) << "never ended";
        const sample_log& s = it->second;
        const int64_t L = int64_t(s.tokens.size()), prompt = int64_t(r.prompt.size());
        for (int64_t g = 0; g < L; ++g) {
          ASSERT_EQ(s.tokens[size_t(g)], canonical_token(id, k, prompt + g)) << "token " << g;
        }
        const bool eos_stops = p_.sched.eos_token_id >= 0 && !r.ignore_eos;
        for (int64_t g = 0; eos_stops && g + 1 < L; ++g) {
          ASSERT_NE(s.tokens[size_t(g)], p_.sched.eos_token_id) << "went on after EOS at " << g;
        }
        if (s.end.refused) continue;
        EXPECT_EQ(s.end.prompt_tokens, prompt);
        EXPECT_EQ(s.end.completion_tokens, L);
        EXPECT_LE(s.end.cached_tokens, prompt);
        EXPECT_LE(L, r.max_new_tokens);
        if (s.end.reason == finish_reason::stop) {
          EXPECT_TRUE(eos_stops && L > 0 && s.tokens.back() == p_.sched.eos_token_id);
        } else if (s.end.reason == finish_reason::length) {
          EXPECT_TRUE(L == r.max_new_tokens ||
                      (p_.sched.max_context > 0 && prompt + L == p_.sched.max_context))
              << L;
        }
      }
    }
  }

  /// Samples that ended, by reason (what a mix exercised).
  int64_t ended(finish_reason why) const {
    int64_t n = 0;
    for (const auto& [key, s] : samples_) n += s.finished && !s.end.refused && s.end.reason == why;
    return n;
  }

 private:
  struct sample_log {
    std::vector<int32_t> tokens;
    bool finished = false;
    finish_event end;
  };
  serving_params p_;
  std::vector<int32_t> kv_;  // by full slot
  std::map<uint64_t, gen_request> reqs_;
  std::map<std::pair<uint64_t, int32_t>, sample_log> samples_;
};

struct mix_totals {
  int64_t steps = 0, preemptions = 0, cached_tokens = 0;
  int64_t stopped = 0, at_length = 0, aborted = 0;
};

/// The step pipeline's port for one mix: the shard answers in process; plans,
/// slot answers and events wait for the mix's loop.
class mix_port : public pipeline_port {
 public:
  mix_port(const serving_params& p, request_log& log) : shard(p.cache), log_(log) {}
  void send_step(std::shared_ptr<const step_plan> plan, int64_t) override {
    steps.push_back(std::move(plan));
  }
  void send_swap() override { ADD_FAILURE() << "no swaps in a mix"; }
  void send_cache_ops(cache::cache_op_batch ops) override { shard.apply(ops); }
  void ask_slots(cache::slot_request req) override { shard.ask_slots(req); }
  void ask_reserve(cache::reserve_request req) override { shard.ask_reserve(req); }
  void publish(event_batch ev) override { log_.observe(ev); }
  void retry_after(std::chrono::milliseconds) override {}

  in_process_shard shard;
  std::deque<std::shared_ptr<const step_plan>> steps;

 private:
  request_log& log_;
};

/// One random mix through the step pipeline both runtimes run (the scheduler
/// actor; the single-thread serving_loop), arrivals and control calls between
/// its messages, a fake worker answering each plan.
void run_core_mix(uint32_t seed, mix_totals& t) {
  std::mt19937 rng(seed);
  auto uni = [&](int64_t lo, int64_t hi) { return uniform(rng, lo, hi); };
  auto chance = [&](double p) { return bernoulli(rng, p); };

  const serving_params p = random_params(rng);
  int64_t now = 1000;
  auto sched = scheduler::create(p, nullptr, [&now] { return now; });
  ASSERT_TRUE(sched.ok()) << sched.get_status().to_string();
  request_log log(p);
  mix_port port(p, log);
  step_pipeline pipe(std::move(*sched), {});
  pipe.attach(&port);
  scheduler& c = pipe.sched();
  // The worker: runs the oldest plan out (or fails it), and the pipeline takes the outcome.
  auto run_oldest = [&](bool may_fail) {
    const std::shared_ptr<const step_plan> plan = port.steps.front();
    port.steps.pop_front();
    ++t.steps;
    now += uni(1, 100);
    step_outcome o;
    o.exec_start_us = now - 1;
    o.exec_end_us = now;
    step_result res = log.run(*plan);
    if (may_fail && chance(0.01)) res.error = status(status_code::internal, "model step failed");
    if (may_fail && chance(0.02)) {  // a dead worker, maybe with its pages
      o.result = status(status_code::unavailable, "worker process gone");
      o.pages_lost = chance(0.5);
      if (o.pages_lost) log.lose_kv();
    } else {
      o.result = std::move(res);
    }
    pipe.on_step_done(o, now);
    port.shard.answer(pipe);
  };

  const std::vector<std::vector<int32_t>> bases = random_bases(rng);
  uint64_t next_id = 1;
  std::vector<uint64_t> ids;
  const int64_t iterations = 300;
  for (int64_t it = 0; it < iterations; ++it) {
    SCOPED_TRACE("iteration " + std::to_string(it));
    now += uni(1, 50);
    // Arrivals and control calls between the pipeline's messages.
    for (int64_t k = uni(0, it < iterations - 60 ? 2 : 0); k > 0; --k) {
      const gen_request r = random_request(rng, bases, next_id++, now);
      log.submitted(r);
      if (c.submit(r).ok()) ids.push_back(r.id);
    }
    if (!ids.empty() && chance(0.05)) log.observe(c.abort(ids[size_t(uni(0, int64_t(ids.size()) - 1))]));
    if (chance(0.02)) log.observe(c.pause(pause_mode(uni(0, 2))));
    if (c.paused() && chance(0.3)) c.resume();
    if (chance(0.03)) c.flush_cache();
    if (!port.steps.empty() && chance(0.05)) {  // an abort while the step runs
      const step_plan& out = *port.steps.front();
      log.observe(c.abort(out.items[size_t(uni(0, int64_t(out.items.size()) - 1))].request_id));
    }
    pipe.advance();
    port.shard.answer(pipe);
    if (!port.steps.empty()) run_oldest(true);
    if (::testing::Test::HasFailure()) return;
    pipe.sync_shard();
    const status chk = port.shard.check();
    EXPECT_TRUE(chk.ok()) << chk.to_string();
    if (::testing::Test::HasFailure()) return;
  }
  // Drain: everything ends, the plans out come back, then nothing is held.
  c.resume();
  log.observe(c.abort_all());
  while (!port.steps.empty()) run_oldest(false);
  c.flush_cache();
  pipe.sync_shard();
  const cache::cache_metrics m = port.shard.metrics();
  EXPECT_EQ(m.full_pages_used, 0);
  EXPECT_EQ(m.swa_pages_used, 0);
  log.expect_whole({ids.begin(), ids.end()});
  t.preemptions += c.counters().preemptions;
  t.cached_tokens += m.cached_tokens;
  t.stopped += log.ended(finish_reason::stop);
  t.at_length += log.ended(finish_reason::length);
  t.aborted += log.ended(finish_reason::abort);
}

TEST(cache_shard_protocol, the_step_pipeline_keeps_every_request_whole_on_random_mixes) {
  mix_totals all;
  for (uint32_t seed = 1; seed <= 40 && !::testing::Test::HasFailure(); ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    run_core_mix(seed, all);
  }
  // The mixes must exercise what they claim to.
  EXPECT_GT(all.steps, 2000);
  EXPECT_GT(all.preemptions, 20);
  EXPECT_GT(all.cached_tokens, 0);
  EXPECT_GT(all.stopped, 0);
  EXPECT_GT(all.at_length, 0);
  EXPECT_GT(all.aborted, 0);
  std::printf(
      "%lld steps, %lld preemptions, %lld cached prompt tokens; samples ended: %lld at EOS, %lld at length, "
      "%lld aborted\n",
      (long long)all.steps, (long long)all.preemptions, (long long)all.cached_tokens, (long long)all.stopped,
      (long long)all.at_length, (long long)all.aborted);
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
/// its sequences may have been preempted, readmitted or ended). Each plan's
/// page tables are also the shard's, but for pages reserved ahead whose
/// answer is not applied yet.
void run_ahead_mix(uint32_t seed, ahead_totals& t) {
  std::mt19937 rng(seed);
  auto uni = [&](int64_t lo, int64_t hi) { return uniform(rng, lo, hi); };
  auto chance = [&](double p) { return bernoulli(rng, p); };

  const serving_params p = random_params(rng);
  int64_t now = 1000;
  scheduler s(p.sched, p.cache, nullptr, [&now] { return now; });
  cache::cache_shard shard(p.cache);
  auto sync = [&] { shard.apply(s.take_cache_ops()); };
  request_log log(p);
  const std::vector<std::vector<int32_t>> bases = random_bases(rng);
  std::map<uint64_t, cache::request_id> cache_of;  // by seq, as last admitted
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
      log.submitted(r);
      if (s.submit(r).ok()) ids.push_back(r.id);
    }
    if (!ids.empty() && chance(0.05)) log.observe(s.abort(ids[size_t(uni(0, int64_t(ids.size()) - 1))]));
    if (chance(0.02)) log.observe(s.pause(pause_mode(uni(0, 2))));
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
    log.observe(s.take_events());
    ++n_plans;
    // Each item's page tables are the shard's for its cache request, but for
    // pages reserved ahead whose answer is not applied yet.
    for (const step_item& item : plan.items) {
      const cache::request_pages& pg = shard.index().pages(cache_of.at(item.seq_id));
      ASSERT_LE(item.full_pages.size(), pg.full.size()) << "seq " << item.seq_id;
      EXPECT_TRUE(std::equal(item.full_pages.begin(), item.full_pages.end(), pg.full.begin()))
          << "seq " << item.seq_id;
      EXPECT_TRUE(std::equal(item.swa_pages.begin(), item.swa_pages.end(), pg.swa.begin()))
          << "seq " << item.seq_id;
    }
    deliver(n_plans);
    if (plan.empty()) continue;
    ++t.steps;
    if (std::all_of(plan.items.begin(), plan.items.end(),
                    [](const step_item& i) { return i.tokens.size() == 1; })) {
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
    if (chance(0.05))
      log.observe(s.abort(plan.items[size_t(uni(0, int64_t(plan.items.size()) - 1))].request_id));

    // The worker.
    now += uni(1, 100);
    step_result res = log.run(plan);
    if (::testing::Test::HasFailure()) return;
    if (chance(0.01)) res.error = status(status_code::internal, "model step failed");
    if (chance(0.02)) {  // a dead worker; with its pages lost, everything recomputes
      step_result failed;
      failed.step = plan.step;
      failed.error = status(status_code::unavailable, "worker process gone");
      log.observe(s.complete(plan, failed));
      if (chance(0.5)) {
        const bool was_paused = s.paused();
        log.observe(s.pause(pause_mode::retract));
        s.flush_cache();
        if (!was_paused) s.resume();
        log.lose_kv();
      }
    } else {
      log.observe(s.complete(plan, res));
    }
    deliver(k_after_outcome);
    sync();
    const status chk = shard.check();
    EXPECT_TRUE(chk.ok()) << chk.to_string();
    if (::testing::Test::HasFailure()) return;
  }
  // Everything ends, late answers arrive: nothing is held.
  s.resume();
  log.observe(s.abort_all());
  for (auto& a : answers) s.apply_reserved(a.first);
  s.flush_cache();
  sync();
  const status chk = shard.check();
  EXPECT_TRUE(chk.ok()) << chk.to_string();
  EXPECT_EQ(shard.metrics().full_pages_used, 0);
  EXPECT_EQ(shard.metrics().swa_pages_used, 0);
  log.expect_whole({ids.begin(), ids.end()});
  t.preemptions += s.counters().preemptions;
  t.pages_ahead += s.counters().pages_ahead;
}

TEST(cache_shard_protocol,
     the_actor_path_with_pages_reserved_ahead_keeps_every_request_whole_on_random_mixes) {
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
  std::printf(
      "%lld steps (%lld decode, %lld of them with the shard), %lld preemptions; %lld pages asked ahead, "
      "%lld reserved, %lld pages applied\n",
      (long long)all.steps, (long long)all.decode_steps, (long long)all.decode_steps_with_shard,
      (long long)all.preemptions, (long long)all.asked, (long long)all.reserved, (long long)all.pages_ahead);
}

}  // namespace
}  // namespace hart::sched
