// Scheduler policy with a fake worker (no engine): chunking and budget,
// priority, abort while a step is in flight, page accounting; pages reserved
// ahead of need (decode crossing pages within grants, released on every end,
// late answers skipped, memory pressure).
#include "runtime/sched/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>

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

/// Samples token 7 for everything; token 9 once a sequence has `eos_at` positions.
step_result fake_execute(const step_plan& p, int64_t eos_at = -1) {
  step_result r;
  r.step = p.step;
  for (const step_item& it : p.items) {
    const bool eos = it.n_computed + int64_t(it.tokens.size()) == eos_at;
    if (it.sample_last) r.sampled.push_back({it.seq_id, eos ? 9 : 7, -0.5f, {}});
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

// Within a priority, clients take turns (start-time fair queuing): a client that queued six
// requests keeps their order, and a second client's request, sent after all six while none
// had been admitted, ranks with the first of them (the virtual time was still at its ticket),
// not after the six (before: FCFS across clients, issue 27's starvation of short requests
// behind another client's batch).
TEST(scheduler, clients_take_turns_within_a_priority) {
  cache::cache_shard c(small_cache());
  scheduler_params sp;
  sp.max_running = 2;
  sp.vocab_size = 512;
  scheduler s(sp, small_cache(), nullptr);
  for (uint64_t id = 1; id <= 6; ++id) {
    gen_request r = make(id, 10, 3);
    r.client = 11;
    ASSERT_TRUE(s.submit(r).ok());
  }
  gen_request other = make(100, 10, 3);
  other.client = 22;
  ASSERT_TRUE(s.submit(other).ok());
  std::vector<uint64_t> admitted;
  while (!s.idle()) {
    step_plan p = s.schedule(c);
    ASSERT_FALSE(p.empty());
    for (const step_item& it : p.items) {
      if (std::find(admitted.begin(), admitted.end(), it.request_id) == admitted.end())
        admitted.push_back(it.request_id);
    }
    (void)s.complete(p, fake_execute(p));
    c.apply(s.take_cache_ops());
  }
  EXPECT_EQ(admitted, (std::vector<uint64_t>{1, 100, 2, 3, 4, 5, 6}));
}

// Under preemption too (issue 27 finding 4: a client's short requests waited 264 s behind
// another client's 48 long ones on a small cache, 3214 preemptions). One client's eight long
// generations need three times the pages there are, so they preempt one another; another
// client's short request, sent once that churn runs, takes the first pages that come free
// (admissions never preempt: it waits for the next page a running sequence gives up). Before,
// a preempted sequence went back to the queue with its first ticket, older than the
// newcomer's, so the backlog's preempted sequences took every freed page first and the short
// request waited for the backlog to drain.
TEST(scheduler, preempted_backlog_does_not_starve_another_client) {
  cache::cache_shard c(small_cache());
  scheduler_params sp;
  sp.max_running = 8;
  sp.vocab_size = 512;
  scheduler s(sp, small_cache(), nullptr);
  for (uint64_t id = 1; id <= 8; ++id) {
    gen_request r = make(id, 100, 600);
    r.client = 11;
    ASSERT_TRUE(s.submit(r).ok());
  }
  int64_t long_finishes = 0;
  bool done = false;
  auto step = [&] {
    step_plan p = s.schedule(c);
    ASSERT_FALSE(p.empty());
    for (const finish_event& f : s.complete(p, fake_execute(p)).finishes) {
      done |= f.request_id == 100;
      long_finishes += f.request_id != 100;
    }
    c.apply(s.take_cache_ops());
    ASSERT_TRUE(c.check().ok());
  };
  for (int64_t i = 0; i < 5000 && s.counters().preemptions < 4; ++i) step();
  ASSERT_GE(s.counters().preemptions, 4) << "the backlog preempts itself";
  gen_request other = make(100, 10, 3);
  other.client = 22;
  ASSERT_TRUE(s.submit(other).ok());
  const int64_t preempted_before = s.counters().preemptions;
  int64_t waited = 0;
  for (; !done && waited < 5000; ++waited) step();
  ASSERT_TRUE(done);
  EXPECT_LE(s.counters().preemptions - preempted_before + long_finishes, 1)
      << "pages given up by the backlog before the short request ended (" << waited << " steps)";
  while (!s.idle()) step();
  c.index().flush();
  EXPECT_EQ(c.metrics().full_pages_used, 0);
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

bool decode_only(const step_plan& p) {
  return std::all_of(p.items.begin(), p.items.end(),
                     [](const step_item& it) { return it.tokens.size() == 1; });
}

/// Drives a scheduler as the scheduler actor does: the shard is asked only
/// when schedule_begin says so; once a plan is out, the cache ops, then the
/// pages ahead (the shard answers in order; the caller applies the answer).
struct actor_like {
  cache::cache_shard& shard;
  scheduler& s;
  int64_t decode_steps_with_shard = 0;

  step_plan plan() {
    const std::optional<cache::slot_request> req = s.schedule_begin();
    shard.apply(s.take_cache_ops());
    step_plan p;
    if (req) {
      const cache::slot_grants g = shard.plan(*req);
      p = s.schedule_end(&g);
    } else {
      p = s.schedule_end(nullptr);
    }
    if (req && !p.empty() && decode_only(p)) ++decode_steps_with_shard;
    return p;
  }
  cache::reserve_grants ask_ahead() {
    shard.apply(s.take_cache_ops());
    return shard.reserve(s.reserve_ahead());
  }
  /// One step with the answer for pages ahead applied while it runs.
  event_batch step(bool ahead, int64_t eos_at = -1) {
    const step_plan p = plan();
    EXPECT_FALSE(p.empty());
    if (ahead) s.apply_reserved(ask_ahead());
    event_batch ev = s.complete(p, fake_execute(p, eos_at));
    shard.apply(s.take_cache_ops());
    return ev;
  }
};

using outputs = std::map<std::pair<uint64_t, int32_t>, std::vector<int32_t>>;

void collect(const event_batch& ev, outputs& out, std::map<uint64_t, finish_reason>* reasons = nullptr) {
  for (const token_event& t : ev.tokens) out[{t.request_id, t.sample}].push_back(t.token);
  if (reasons) {
    for (const finish_event& f : ev.finishes) (*reasons)[f.request_id] = f.reason;
  }
}

scheduler_params decode_params() {
  scheduler_params sp;
  sp.vocab_size = 512;
  sp.eos_token_id = 9;
  return sp;
}

/// Nothing held once what ended is released and the cache flushed.
void expect_nothing_held(cache::cache_shard& c, scheduler& s) {
  c.apply(s.take_cache_ops());
  const status chk = c.check();
  EXPECT_TRUE(chk.ok()) << chk.to_string();
  c.index().flush();
  EXPECT_EQ(c.metrics().full_pages_used, 0);
  EXPECT_EQ(c.metrics().swa_pages_used, 0);
}

TEST(scheduler, long_decode_crosses_pages_within_grants_reserved_ahead) {
  // 100 + 300 tokens: positions up to 398 are fed, crossing into pages 2, 3
  // and 4. Planned as before (the shard asked at each crossing), with pages
  // ahead, and with pages ahead and overlap scheduling (two plans in flight).
  outputs want;
  std::map<uint64_t, finish_reason> want_reasons;
  {
    cache::cache_shard c(small_cache());
    scheduler s(decode_params(), small_cache(), nullptr);
    actor_like d{c, s};
    ASSERT_TRUE(s.submit(make(1, 100, 300)).ok());
    while (!s.idle()) collect(d.step(false), want, &want_reasons);
    EXPECT_EQ(d.decode_steps_with_shard, 3) << "each page crossing asks the shard";
    EXPECT_EQ(s.counters().pages_ahead, 0);
  }
  ASSERT_EQ(want[std::make_pair(uint64_t(1), 0)].size(), 300u);
  for (bool overlap : {false, true}) {
    SCOPED_TRACE(overlap ? "overlap" : "one plan in flight");
    cache::cache_shard c(small_cache());
    scheduler s(decode_params(), small_cache(), nullptr);
    actor_like d{c, s};
    ASSERT_TRUE(s.submit(make(1, 100, 300)).ok());
    outputs got;
    std::map<uint64_t, finish_reason> reasons;
    std::deque<step_plan> flight;
    while (!s.idle()) {
      if (flight.empty()) flight.push_back(d.plan());
      ASSERT_FALSE(flight.front().empty());
      if (overlap && flight.size() == 1) {
        step_plan next = s.schedule_ahead();
        if (!next.empty()) flight.push_back(std::move(next));
      }
      s.apply_reserved(d.ask_ahead());
      const step_plan p = std::move(flight.front());
      flight.pop_front();
      collect(s.complete(p, fake_execute(p)), got, &reasons);
      c.apply(s.take_cache_ops());
    }
    EXPECT_EQ(d.decode_steps_with_shard, 0) << "no decode step waits for the shard";
    EXPECT_EQ(s.counters().pages_ahead, 3);
    if (overlap) {
      EXPECT_EQ(s.counters().steps_ahead, 298) << "every decode step after the first planned ahead";
    }
    EXPECT_EQ(got, want);
    EXPECT_EQ(reasons, want_reasons);
    expect_nothing_held(c, s);
  }
}

TEST(scheduler, pages_reserved_ahead_are_released_when_the_sequence_ends) {
  // The page after position 128 is reserved ahead from n_computed 120 on;
  // each sequence then ends before writing it: EOS, an abort while a step
  // runs, a retract (preempted into the cache) and then the end of it all.
  enum class end_by { eos, abort_in_flight, retract };
  for (end_by how : {end_by::eos, end_by::abort_in_flight, end_by::retract}) {
    SCOPED_TRACE(int(how));
    cache::cache_shard c(small_cache());
    scheduler s(decode_params(), small_cache(), nullptr);
    actor_like d{c, s};
    ASSERT_TRUE(s.submit(make(1, 100, 300)).ok());
    const int64_t eos_at = how == end_by::eos ? 125 : -1;
    event_batch ev;
    while (s.counters().pages_ahead == 0 && !s.idle()) ev.append(d.step(true, eos_at));
    ASSERT_EQ(s.counters().pages_ahead, 1);
    EXPECT_EQ(c.metrics().full_pages_used, 2) << "one page written, one reserved ahead";
    if (how == end_by::abort_in_flight) {
      const step_plan p = d.plan();
      ev.append(s.abort(1));
      EXPECT_TRUE(s.complete(p, fake_execute(p)).empty());
    } else if (how == end_by::retract) {
      EXPECT_TRUE(s.pause(pause_mode::retract).empty());
      c.apply(s.take_cache_ops());
      EXPECT_EQ(c.metrics().full_pages_used, 0) << "the partial page is not cached, the one ahead not kept";
      s.resume();
    }
    while (!s.idle()) ev.append(d.step(true, eos_at));
    ASSERT_EQ(ev.finishes.size(), 1u);
    const finish_reason want = how == end_by::eos               ? finish_reason::stop
                               : how == end_by::abort_in_flight ? finish_reason::abort
                                                                : finish_reason::length;
    EXPECT_EQ(ev.finishes[0].reason, want);
    expect_nothing_held(c, s);
  }
}

TEST(scheduler, a_late_answer_for_pages_ahead_is_not_applied_to_a_sequence_admitted_again) {
  cache::cache_shard c(small_cache());
  scheduler s(decode_params(), small_cache(), nullptr);
  actor_like d{c, s};
  ASSERT_TRUE(s.submit(make(1, 100, 300)).ok());
  event_batch ev;
  cache::reserve_grants late;
  while (late.empty()) {  // steps until a page is asked for; its answer is held back
    const step_plan p = d.plan();
    late = d.ask_ahead();
    ev.append(s.complete(p, fake_execute(p)));
  }
  ASSERT_EQ(late.size(), 1u);
  ASSERT_EQ(late[0].full.size(), 2u);
  s.pause(pause_mode::retract);  // its cache request ends, the page ahead with it
  s.resume();
  ev.append(d.step(true));  // admitted again: a new cache request
  s.apply_reserved(late);
  EXPECT_EQ(s.counters().pages_ahead, 0) << "an answer for the cache request before is dropped";
  while (!s.idle()) ev.append(d.step(true));
  EXPECT_EQ(s.counters().pages_ahead, 3);
  ASSERT_EQ(ev.finishes.size(), 1u);
  EXPECT_EQ(ev.finishes[0].reason, finish_reason::length);
  EXPECT_EQ(ev.finishes[0].completion_tokens, 300);
  expect_nothing_held(c, s);
}

TEST(scheduler, pages_ahead_fail_quietly_when_memory_is_short_and_preemption_still_works) {
  // Four pages. B (low priority, 100 + 100) gets its second page ahead; A
  // (high priority, 200 + 100) then finds none for its third, asks at the
  // crossing, and the shard preempts B, as without pages ahead.
  cache::cache_config cfg = small_cache();
  cfg.n_full_pages = 4;
  auto run = [&](bool ahead, outputs& out, scheduler_counters& counters, int64_t& shard_steps) {
    cache::cache_shard c(cfg);
    scheduler s(decode_params(), cfg, nullptr);
    actor_like d{c, s};
    ASSERT_TRUE(s.submit(make(2, 100, 100, 0)).ok());
    ASSERT_TRUE(s.submit(make(1, 200, 100, 5)).ok());
    while (!s.idle()) collect(d.step(ahead), out);
    counters = s.counters();
    shard_steps = d.decode_steps_with_shard;
    expect_nothing_held(c, s);
  };
  outputs want, got;
  scheduler_counters before, after;
  int64_t shard_before = 0, shard_after = 0;
  run(false, want, before, shard_before);
  run(true, got, after, shard_after);
  EXPECT_EQ(got, want);
  EXPECT_EQ(before.preemptions, 1);
  EXPECT_EQ(after.preemptions, 1);
  EXPECT_EQ(after.pages_ahead, 1) << "B's page; A's was refused";
  EXPECT_EQ(shard_after, shard_before - 1) << "only B's crossing was planned within grants";
}

}  // namespace
}  // namespace hart::sched

namespace hart::sched {
namespace {

/// As fake_execute, and for items that ask, the prompt log-prob of the token after each fed
/// position: -(that token) / 1000, so the scheduler's placement by position can be checked.
step_result fake_execute_scoring(const step_plan& p) {
  step_result r = fake_execute(p);
  for (const step_item& it : p.items) {
    if (!it.prompt_logprobs) continue;
    item_logprobs lp{it.seq_id, {}};
    for (size_t k = 0; k < it.tokens.size(); ++k) {
      const int32_t next = k + 1 < it.tokens.size() ? it.tokens[k + 1] : it.next_token;
      lp.next.push_back(next >= 0 ? -float(next) / 1000 : std::nanf(""));
    }
    r.prompt_logprobs.push_back(std::move(lp));
  }
  return r;
}

// Prompt log-probs (SGLang's logprob_start_len): chunks in any size, the prompt computed even
// when an earlier request left it in the cache, max_new_tokens 0 scoring it without a token.
TEST(scheduler, prompt_logprobs_come_by_position_across_chunks_and_despite_the_cache) {
  cache::cache_shard c(small_cache());
  scheduler_params sp;
  sp.max_batch_tokens = 100;
  sp.prefill_chunk = 37;  // chunk edges fall anywhere
  sp.vocab_size = 512;
  scheduler s(sp, small_cache(), nullptr);
  auto run = [&](gen_request r) {
    EXPECT_TRUE(s.submit(r).ok());
    std::vector<finish_event> ends;
    int64_t tokens = 0;
    while (!s.idle()) {
      step_plan p = s.schedule(c);
      event_batch ev = s.complete(p, fake_execute_scoring(p));
      c.apply(s.take_cache_ops());
      tokens += int64_t(ev.tokens.size());
      for (finish_event& f : ev.finishes) ends.push_back(std::move(f));
    }
    EXPECT_EQ(ends.size(), 1u);
    return std::make_pair(ends.empty() ? finish_event{} : ends[0], tokens);
  };
  gen_request warm = make(1, 300, 2);  // fills the cache with this prompt's pages
  run(warm);

  gen_request r = make(2, 300, 0);
  r.prompt = warm.prompt;
  r.logprob_start = 0;
  const auto [scored, tokens] = run(r);
  EXPECT_EQ(tokens, 0);
  EXPECT_EQ(scored.reason, finish_reason::length);
  EXPECT_EQ(scored.completion_tokens, 0);
  EXPECT_EQ(scored.cached_tokens, 0) << "prompt log-probs need every position computed";
  ASSERT_EQ(scored.input_logprobs.size(), 300u);
  EXPECT_TRUE(std::isnan(scored.input_logprobs[0]));
  for (size_t pos = 1; pos < 300; ++pos) {
    ASSERT_FLOAT_EQ(scored.input_logprobs[pos], -float(r.prompt[pos]) / 1000) << "position " << pos;
  }

  gen_request tail = make(3, 300, 2);
  tail.logprob_start = 250;
  const auto [from, generated] = run(tail);
  EXPECT_EQ(generated, 2);
  ASSERT_EQ(from.input_logprobs.size(), 50u);
  EXPECT_FLOAT_EQ(from.input_logprobs[0], -float(tail.prompt[250]) / 1000);
  EXPECT_FLOAT_EQ(from.input_logprobs[49], -float(tail.prompt[299]) / 1000);

  gen_request bad = make(4, 10, 1);
  bad.logprob_start = 10;  // past the prompt
  EXPECT_EQ(s.submit(bad).code(), status_code::invalid_argument);
  bad.logprob_start = -1;
  bad.max_new_tokens = 0;  // fine: a prompt only, nothing returned
  EXPECT_TRUE(bad.validate(512).ok());
}

}  // namespace
}  // namespace hart::sched
