// The serving core end to end on tiny-a (deterministic engine, 128-token
// pages): every output of a busy, batched, chunked, prefix-cached, preempted
// or paused run equals the same request run alone on the engine without a
// cache — tokens equal, logprobs bitwise equal — and the cache stays
// consistent after every step and returns every page at the end.
#include "runtime/worker/serving_loop.h"

#include "runtime/sched/stop_rules.h"
#include "runtime/worker/sampling_logprobs.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>

namespace hart::worker {
namespace {

struct output {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::string text;
  sched::finish_reason reason = sched::finish_reason::error;
  bool finished = false;
  sched::finish_event fin;
};
using key = std::pair<uint64_t, int32_t>;  // request id, sample

class serving_test : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    engine_params ep;
    ep.model_dir = std::string(HART_TEST_DATA) + "/tiny-a";
    ep.deterministic = true;
    auto e = engine::load(ep);
    ASSERT_TRUE(e.ok()) << e.get_status().to_string();
    eng_ = std::move(e).value().release();
    auto t = tokenizer::load(ep.model_dir + "/tokenizer.json");
    ASSERT_TRUE(t.ok()) << t.get_status().to_string();
    tok_ = new tokenizer(std::move(t).value());
    std::mt19937 rng(1234);
    for (int i = 0; i < 400; ++i) base_.push_back(std::uniform_int_distribution<int32_t>(2, 511)(rng));
  }

  static sched::serving_params params(int64_t full_pages, int64_t swa_pages) {
    sched::serving_params p;
    p.cache.page_size = 128;
    p.cache.n_full_pages = full_pages;
    p.cache.n_swa_pages = swa_pages;
    p.sched.max_batch_tokens = 384;
    p.sched.prefill_chunk = 160;
    p.sched.max_running = 16;
    return p;
  }

  /// Request `id`: a shared prefix of base_ plus its own suffix (the same id is
  /// the same request in every test).
  static sched::gen_request make_request(uint64_t id, int64_t max_new_cap = 16) {
    std::mt19937 rng(uint32_t(id * 7919 + 17));
    const int64_t shared[] = {0, 64, 128, 200, 256, 300};
    sched::gen_request r;
    r.id = id;
    const int64_t L = shared[std::uniform_int_distribution<int>(0, 5)(rng)];
    r.prompt.assign(base_.begin(), base_.begin() + L);
    const int64_t extra = std::uniform_int_distribution<int64_t>(1, 40)(rng);
    for (int64_t i = 0; i < extra; ++i)
      r.prompt.push_back(std::uniform_int_distribution<int32_t>(2, 511)(rng));
    r.max_new_tokens = std::uniform_int_distribution<int64_t>(1, max_new_cap)(rng);
    r.logprobs = true;
    r.top_logprobs = 2;
    return r;
  }

  /// r's sample `i` run alone on the engine, no cache, the same stop rules.
  static output run_alone(const sched::gen_request& r, int32_t i) {
    output o;
    sequence_state s = eng_->new_sequence();
    std::vector<float> logits;
    EXPECT_TRUE(eng_->prefill(s, r.prompt, logits_request::last, &logits).ok());
    sched::stop_rules stop(r, tok_, *tok_->config().eos_id);
    const int64_t V = eng_->config().vocab_size;
    for (;;) {
      sampling_params sp = r.sampling(i);
      sp.seed = sched::step_seed(sp.seed, int64_t(o.tokens.size()));
      sampler smp(sp);
      const int32_t t = smp.sample(logits.data(), V);
      float lp = 0;
      sampling_logprobs(logits.data(), V, sp, t, 0, &lp, nullptr);
      o.tokens.push_back(t);
      o.logprobs.push_back(lp);
      sched::stop_outcome so = stop.push(t);
      o.text += so.text;
      if (so.done) {
        o.reason = so.reason;
        o.finished = true;
        return o;
      }
      EXPECT_TRUE(eng_->decode({&s}, {t}, &logits).ok());
    }
  }
  static const output& expected(const sched::gen_request& r, int32_t i = 0) {
    static std::map<key, output> memo;
    auto it = memo.find({r.id, i});
    if (it == memo.end()) it = memo.emplace(key{r.id, i}, run_alone(r, i)).first;
    return it->second;
  }

  static void collect(sched::event_batch&& ev, std::map<key, output>& out) {
    for (sched::token_event& t : ev.tokens) {
      output& o = out[{t.request_id, t.sample}];
      EXPECT_FALSE(o.finished) << "token after finish";
      o.tokens.push_back(t.token);
      o.logprobs.push_back(t.logprob);
      o.text += t.text;
    }
    for (sched::finish_event& f : ev.finishes) {
      output& o = out[{f.request_id, f.sample}];
      EXPECT_FALSE(o.finished) << "finished twice";
      o.finished = true;
      o.reason = f.reason;
      o.text += f.text;
      EXPECT_EQ(f.completion_tokens, int64_t(o.tokens.size()));
      o.fin = f;
    }
  }

  /// Steps until idle, checking the cache after every step.
  static void drain(serving_loop& l, std::map<key, output>& out, int64_t max_steps = 100000) {
    for (int64_t i = 0; i < max_steps && !l.idle(); ++i) {
      collect(l.step(), out);
      status st = l.cache().check();
      ASSERT_TRUE(st.ok()) << "after step " << i << ": " << st.to_string();
    }
    ASSERT_TRUE(l.idle());
  }

  static void expect_same(const output& got, const output& want, const std::string& what) {
    EXPECT_TRUE(got.finished) << what;
    EXPECT_EQ(got.tokens, want.tokens) << what;
    EXPECT_EQ(got.reason, want.reason) << what;
    EXPECT_EQ(got.text, want.text) << what;
    ASSERT_EQ(got.logprobs.size(), want.logprobs.size()) << what;
    EXPECT_EQ(std::memcmp(got.logprobs.data(), want.logprobs.data(), got.logprobs.size() * sizeof(float)), 0)
        << what << ": logprobs differ bitwise";
  }

  static void expect_pages_back(serving_loop& l) {
    l.flush_cache();
    ASSERT_TRUE(l.cache().check().ok());
    const cache::cache_metrics m = l.cache().metrics();
    EXPECT_EQ(m.full_pages_used, 0);
    EXPECT_EQ(m.swa_pages_used, 0);
  }

  static engine* eng_;
  static tokenizer* tok_;
  static std::vector<int32_t> base_;
};
engine* serving_test::eng_ = nullptr;
tokenizer* serving_test::tok_ = nullptr;
std::vector<int32_t> serving_test::base_;

TEST_F(serving_test, concurrent_greedy_requests_equal_runs_alone) {
  for (const bool overlap : {false, true}) {
    SCOPED_TRACE(overlap ? "overlap scheduling" : "one step at a time");
    auto l = serving_loop::create(*eng_, params(64, 48), tok_);
    ASSERT_TRUE(l.ok()) << l.get_status().to_string();
    (*l)->set_overlap(overlap);
    std::vector<sched::gen_request> reqs;
    for (uint64_t id = 1; id <= 32; ++id) reqs.push_back(make_request(id));
    for (const sched::gen_request& r : reqs) ASSERT_TRUE((*l)->submit(r).ok());
    std::map<key, output> out;
    drain(**l, out);
    for (const sched::gen_request& r : reqs)
      expect_same(out[{r.id, 0}], expected(r), "request " + std::to_string(r.id));
    const sched::serving_stats s = (*l)->stats();
    EXPECT_GT(s.cache_hit_rate, 0.0) << "shared prefixes hit the cache";
    EXPECT_GT(s.tokens_per_s, 0.0);
    std::printf(
        "32 requests%s: %lld steps (%lld planned ahead), %lld generated, hit rate %.2f, step p50 %.0f us\n",
        overlap ? " (overlap)" : "", (long long)s.steps, (long long)(*l)->sched().counters().steps_ahead,
        (long long)s.generated_tokens, s.cache_hit_rate, s.step_us_p50);
    EXPECT_EQ((*l)->sched().counters().steps_ahead > 0, overlap) << "steps planned ahead";
    expect_pages_back(**l);
  }
}

TEST_F(serving_test, tiny_cache_preempts_and_still_gives_the_same_outputs) {
  for (const bool overlap : {false, true}) {
    SCOPED_TRACE(overlap ? "overlap scheduling" : "one step at a time");
    // 6 full pages: at most a few 300-token sequences at once, so decode runs out.
    auto l = serving_loop::create(*eng_, params(6, 6), tok_);
    ASSERT_TRUE(l.ok()) << l.get_status().to_string();
    (*l)->set_overlap(overlap);
    std::vector<sched::gen_request> reqs;
    for (uint64_t id = 1; id <= 12; ++id) reqs.push_back(make_request(id));
    for (const sched::gen_request& r : reqs) ASSERT_TRUE((*l)->submit(r).ok());
    std::map<key, output> out;
    drain(**l, out);
    for (const sched::gen_request& r : reqs)
      expect_same(out[{r.id, 0}], expected(r), "request " + std::to_string(r.id));
    EXPECT_GT((*l)->stats().preemptions, 0) << "the test should exercise preemption";
    EXPECT_EQ((*l)->sched().counters().steps_ahead > 0, overlap) << "steps planned ahead";
    expect_pages_back(**l);
  }
}

TEST_F(serving_test, seeded_samples_are_reproducible_and_use_seed_plus_i) {
  sched::gen_request r = make_request(101);
  r.prompt.assign(base_.begin(), base_.begin() + 250);  // one full page to share
  r.n = 4;
  r.temperature = 0.9f;
  r.top_p = 0.95f;
  r.top_k = 40;
  r.seed = 11;
  r.max_new_tokens = 10;
  r.ignore_eos = true;
  std::map<key, output> runs[2];
  for (auto& out : runs) {
    auto l = serving_loop::create(*eng_, params(32, 24), tok_);
    ASSERT_TRUE(l.ok());
    (*l)->set_overlap(&out == &runs[1]);  // the second run schedules ahead
    ASSERT_TRUE((*l)->submit(r).ok());
    drain(**l, out);
    expect_pages_back(**l);
  }
  for (int32_t i = 0; i < 4; ++i) {
    expect_same(runs[0][{r.id, i}], runs[1][{r.id, i}], "sample " + std::to_string(i) + " across runs");
    expect_same(runs[0][{r.id, i}], expected(r, i),
                "sample " + std::to_string(i) + " against the engine alone");
  }
  const key s0{r.id, 0}, s1{r.id, 1};
  EXPECT_NE(runs[0][s0].tokens, runs[0][s1].tokens) << "samples differ";
  EXPECT_EQ(runs[0][s1].fin.cached_tokens, 128) << "sample 1 reuses sample 0's prompt pages";
}

TEST_F(serving_test, abort_mid_generation_returns_partial_output) {
  for (const bool overlap : {false, true}) {
    SCOPED_TRACE(overlap ? "overlap scheduling" : "one step at a time");
    auto l = serving_loop::create(*eng_, params(32, 24), tok_);
    ASSERT_TRUE(l.ok());
    (*l)->set_overlap(overlap);
    sched::gen_request a = make_request(201), b = make_request(202);
    a.max_new_tokens = b.max_new_tokens = 30;
    a.ignore_eos = b.ignore_eos = true;
    ASSERT_TRUE((*l)->submit(a).ok());
    ASSERT_TRUE((*l)->submit(b).ok());
    std::map<key, output> out;
    while (out[{a.id, 0}].tokens.size() < 4) collect((*l)->step(), out);
    collect((*l)->abort(a.id), out);
    const output& got = out[{a.id, 0}];
    ASSERT_TRUE(got.finished);
    EXPECT_EQ(got.reason, sched::finish_reason::abort);
    const output& want = expected(a);
    ASSERT_LT(got.tokens.size(), want.tokens.size());
    EXPECT_TRUE(std::equal(got.tokens.begin(), got.tokens.end(), want.tokens.begin()))
        << "partial output is a prefix";
    drain(**l, out);
    expect_same(out[{b.id, 0}], expected(b), "the other request");
    EXPECT_TRUE((*l)->abort(a.id).empty()) << "aborting a finished request is a no-op";
    EXPECT_EQ((*l)->sched().counters().steps_ahead > 0, overlap) << "steps planned ahead";
    expect_pages_back(**l);
  }
}

TEST_F(serving_test, pause_modes_then_resume) {
  auto l = serving_loop::create(*eng_, params(64, 48), tok_);
  ASSERT_TRUE(l.ok());
  std::vector<sched::gen_request> reqs;
  for (uint64_t id = 1; id <= 8; ++id) reqs.push_back(make_request(id));
  for (const sched::gen_request& r : reqs) ASSERT_TRUE((*l)->submit(r).ok());
  std::map<key, output> out;
  for (int i = 0; i < 3; ++i) collect((*l)->step(), out);
  // retract: everything back to the queue; nothing runs while paused.
  collect((*l)->pause(sched::pause_mode::retract), out);
  EXPECT_EQ((*l)->sched().n_running(), 0);
  EXPECT_TRUE((*l)->step().empty());
  ASSERT_TRUE((*l)->cache().check().ok());
  (*l)->resume();
  for (int i = 0; i < 2; ++i) collect((*l)->step(), out);
  // in place: state kept, no steps.
  const int64_t running = (*l)->sched().n_running();
  collect((*l)->pause(sched::pause_mode::in_place), out);
  EXPECT_TRUE((*l)->step().empty());
  EXPECT_EQ((*l)->sched().n_running(), running);
  (*l)->resume();
  drain(**l, out);
  for (const sched::gen_request& r : reqs)
    expect_same(out[{r.id, 0}], expected(r), "request " + std::to_string(r.id));
  // abort: everything live ends with reason abort.
  sched::gen_request x = make_request(301);
  x.max_new_tokens = 40;
  x.ignore_eos = true;
  ASSERT_TRUE((*l)->submit(x).ok());
  collect((*l)->step(), out);
  collect((*l)->pause(sched::pause_mode::abort), out);
  const key kx{x.id, 0};
  EXPECT_EQ(out[kx].reason, sched::finish_reason::abort);
  EXPECT_TRUE((*l)->idle());
  (*l)->resume();
  expect_pages_back(**l);
}

}  // namespace
}  // namespace hart::worker
