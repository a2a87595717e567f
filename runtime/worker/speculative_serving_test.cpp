// Speculative decoding through the whole serving core (scheduler, in-process
// cache shard, engine_executor's verify pass and rollback) on tiny-a, tiny-b
// and tiny-c, deterministic engine: with prompt-lookup drafts (k = 1, 4, 7
// per step here; spec_rollback_test takes every k through every boundary),
// every request's tokens, log-probs (bitwise), finish reasons and token
// counts equal the same requests served without drafts — greedy and sampled
// (seed for seed), prompts of 3..600 tokens, prefix-cache hits, a stop token
// (which a verify pass may emit mid-run). The cache's
// invariants hold after every step and every page comes back. Drafts are
// both kept and rejected (counted), so a pass that were never taken back, or
// a draft kept that the target would not have sampled, would fail here.
#include "runtime/worker/serving_loop.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>

namespace hart::worker {
namespace {

struct output {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<std::vector<sched::token_logprob>> top;
  sched::finish_reason reason = sched::finish_reason::error;
  int64_t completion_tokens = -1, cached_tokens = -1;
  bool finished = false;
};
using key = std::pair<uint64_t, int32_t>;  // request id, sample
using outputs = std::map<key, output>;

struct model_case {
  const char* name;
  int64_t page_size;
};

class speculative_serving : public ::testing::TestWithParam<model_case> {
 protected:
  void SetUp() override {
    engine_params ep;
    ep.model_dir = std::string(HART_TEST_DATA) + "/" + GetParam().name;
    ep.deterministic = true;
    auto e = engine::load(ep);
    ASSERT_TRUE(e.ok()) << e.get_status().to_string();
    eng_ = std::move(e).value();
  }

  sched::serving_params params(int64_t k) const {
    sched::serving_params p;
    p.cache.page_size = GetParam().page_size;
    p.cache.n_full_pages = 48;
    p.cache.n_swa_pages = 40;
    p.sched.max_batch_tokens = 512;
    p.sched.prefill_chunk = 200;
    p.sched.max_running = 16;
    p.sched.speculative_tokens = k;
    return p;
  }

  /// A prompt of `len` tokens that repeats a span of 9 (so prompt lookup finds drafts), then the
  /// rest of the request's tokens random.
  static std::vector<int32_t> prompt(uint32_t seed, int64_t len, int32_t vocab) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> id(2, vocab - 1);
    std::vector<int32_t> span(9), p;
    for (int32_t& t : span) t = id(rng);
    for (int64_t i = 0; i < len; ++i) p.push_back(i % 50 < 40 ? span[size_t(i % 9)] : id(rng));
    return p;
  }

  /// Serves `waves` in turn (each drained before the next is submitted, so later waves hit the
  /// prefixes earlier ones left in the cache); checks the cache after every step.
  outputs serve(int64_t k, const std::vector<std::vector<sched::gen_request>>& waves,
                sched::scheduler_counters* counters = nullptr) {
    outputs out;
    auto l = serving_loop::create(*eng_, params(k), nullptr);
    EXPECT_TRUE(l.ok()) << l.get_status().to_string();
    if (!l.ok()) return out;
    for (const auto& wave : waves) {
      for (const sched::gen_request& r : wave) EXPECT_TRUE((*l)->submit(r).ok());
      for (int64_t i = 0; i < 100000 && !(*l)->idle(); ++i) {
        collect((*l)->step(), out);
        const status st = (*l)->cache().check();
        EXPECT_TRUE(st.ok()) << "k " << k << ", after step " << i << ": " << st.to_string();
        if (!st.ok()) return out;
      }
      EXPECT_TRUE((*l)->idle());
    }
    if (counters) *counters = (*l)->sched().counters();
    (*l)->flush_cache();
    const cache::cache_metrics m = (*l)->cache().metrics();
    EXPECT_EQ(m.full_pages_used, 0) << "k " << k;
    EXPECT_EQ(m.swa_pages_used, 0) << "k " << k;
    return out;
  }

  static void collect(sched::event_batch&& ev, outputs& out) {
    for (sched::token_event& t : ev.tokens) {
      output& o = out[{t.request_id, t.sample}];
      EXPECT_FALSE(o.finished) << "token after finish";
      o.tokens.push_back(t.token);
      o.logprobs.push_back(t.logprob);
      o.top.push_back(t.top_logprobs);
    }
    for (sched::finish_event& f : ev.finishes) {
      output& o = out[{f.request_id, f.sample}];
      EXPECT_FALSE(o.finished) << "finished twice";
      o.finished = true;
      o.reason = f.reason;
      o.completion_tokens = f.completion_tokens;
      o.cached_tokens = f.cached_tokens;
    }
  }

  static void expect_same(const outputs& got, const outputs& want, const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (const auto& [id, w] : want) {
      const std::string at =
          what + ", request " + std::to_string(id.first) + " sample " + std::to_string(id.second);
      const output& g = got.at(id);
      EXPECT_TRUE(g.finished) << at;
      EXPECT_EQ(g.tokens, w.tokens) << at;
      EXPECT_EQ(g.reason, w.reason) << at;
      EXPECT_EQ(g.completion_tokens, w.completion_tokens) << at;
      EXPECT_EQ(g.cached_tokens, w.cached_tokens) << at;
      ASSERT_EQ(g.logprobs.size(), w.logprobs.size()) << at;
      EXPECT_EQ(std::memcmp(g.logprobs.data(), w.logprobs.data(), g.logprobs.size() * sizeof(float)), 0)
          << at << ": log-probs differ bitwise";
      ASSERT_EQ(g.top.size(), w.top.size()) << at;
      for (size_t i = 0; i < g.top.size(); ++i) {
        ASSERT_EQ(g.top[i].size(), w.top[i].size()) << at;
        for (size_t j = 0; j < g.top[i].size(); ++j) {
          EXPECT_EQ(g.top[i][j].token, w.top[i][j].token) << at;
          EXPECT_EQ(std::memcmp(&g.top[i][j].logprob, &w.top[i][j].logprob, sizeof(float)), 0) << at;
        }
      }
    }
  }

  std::unique_ptr<engine> eng_;
};

TEST_P(speculative_serving, greedy_outputs_equal_non_speculative_ones_for_every_k) {
  const int32_t V = int32_t(eng_->config().vocab_size);
  std::vector<std::vector<sched::gen_request>> waves(2);
  const int64_t lengths[] = {3, 130, 600};
  uint64_t id = 1;
  for (int64_t len : lengths) {
    sched::gen_request r;
    r.id = id++;
    r.prompt = prompt(uint32_t(len), len, V);
    r.max_new_tokens = 32;
    r.ignore_eos = true;
    r.logprobs = true;
    r.top_logprobs = 2;
    waves[0].push_back(r);
  }
  // Second wave: the longest prompt with another last token (a cache hit of its full pages).
  sched::gen_request again = waves[0].back();
  again.id = id++;
  again.prompt.back() = again.prompt.back() == 7 ? 8 : 7;
  again.max_new_tokens = 20;
  waves[1].push_back(again);
  sched::scheduler_counters plain;
  const outputs want = serve(0, waves, &plain);
  for (size_t i = 0; i < waves[1].size(); ++i)
    EXPECT_GT(want.at({waves[1][i].id, 0}).cached_tokens, 0) << "the second wave hits the cache";
  int64_t drafted = 0, accepted = 0;
  for (int64_t k : {int64_t(1), int64_t(4), sched::scheduler_params::k_max_speculative_tokens}) {
    sched::scheduler_counters c;
    const outputs got = serve(k, waves, &c);
    expect_same(got, want, "k " + std::to_string(k));
    EXPECT_GT(c.verify_passes, 0) << "k " << k;
    std::printf("%s, k %lld: %lld steps (%lld without drafts), %lld of %lld drafts kept\n", GetParam().name,
                (long long)k, (long long)c.steps, (long long)plain.steps, (long long)c.accepted_drafts,
                (long long)c.drafted_tokens);
    drafted += c.drafted_tokens;
    accepted += c.accepted_drafts;
  }
  std::printf("%s: %lld drafts, %lld kept (%.0f%%)\n", GetParam().name, (long long)drafted,
              (long long)accepted, 100.0 * double(accepted) / double(std::max<int64_t>(drafted, 1)));
  EXPECT_GT(accepted, 0) << "some drafts are kept";
  EXPECT_LT(accepted, drafted) << "some drafts are rejected";
}

TEST_P(speculative_serving, sampled_outputs_equal_non_speculative_ones_seed_for_seed) {
  const int32_t V = int32_t(eng_->config().vocab_size);
  std::vector<std::vector<sched::gen_request>> waves(1);
  const int64_t lengths[] = {5, 140};
  uint64_t id = 1;
  for (int64_t len : lengths) {
    sched::gen_request r;
    r.id = id++;
    r.prompt = prompt(uint32_t(len + 1000), len, V);
    r.max_new_tokens = 30;
    r.ignore_eos = true;
    r.temperature = 0.7f;
    r.top_k = 20;
    r.top_p = 0.95f;
    r.seed = 99 + id;
    r.n = 2;
    r.logprobs = true;
    r.top_logprobs = 1;
    waves[0].push_back(r);
  }
  const outputs want = serve(0, waves);
  expect_same(serve(3, waves), want, "k 3");
}

TEST_P(speculative_serving, a_stop_token_ends_the_request_where_it_does_without_drafts) {
  const int32_t V = int32_t(eng_->config().vocab_size);
  sched::gen_request r;
  r.id = 1;
  r.prompt = prompt(5, 60, V);
  r.max_new_tokens = 40;
  r.ignore_eos = true;
  const outputs free_run = serve(0, {{r}});
  const std::vector<int32_t>& t = free_run.at({1, 0}).tokens;
  ASSERT_GE(t.size(), 30u);
  // Stop at the token generated 20th (it may come earlier too: both runs stop at its first).
  r.stop_token_ids = {t[19]};
  const outputs want = serve(0, {{r}});
  EXPECT_EQ(want.at({1, 0}).reason, sched::finish_reason::stop);
  for (int64_t k : {2, 5, 7}) expect_same(serve(k, {{r}}), want, "k " + std::to_string(k));
}

INSTANTIATE_TEST_SUITE_P(tiny, speculative_serving,
                         ::testing::Values(model_case{"tiny-a", 128}, model_case{"tiny-b", 256},
                                           model_case{"tiny-c", 128}),
                         [](const ::testing::TestParamInfo<model_case>& i) {
                           std::string s = i.param.name;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

}  // namespace
}  // namespace hart::worker
