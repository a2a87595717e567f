// Speculative decoding with the MTP block through the serving core, on a
// random checkpoint of tiny-a's shapes with its MTP block (deterministic
// engine): outputs equal serving without drafts (greedy and sampled, prompts
// shorter and longer than the window, in chunks, a prefix hit), and after
// the steps (one in six checked) the drafts the worker returned, and the
// block's logits at the last kept position computed on the step's pages, are
// what the block computes from scratch: a fresh sequence prefilled with the
// tokens up to that position, the block run over all of its positions at
// once, its argmax, then chained. So the MTP KV the worker writes step by
// step (for the positions each item keeps, past rejected drafts and chained
// provisional positions, and the last position of each prompt chunk) is the
// whole computation's, bit for bit.
#include "runtime/model/random_checkpoint_testing.h"
#include "runtime/worker/engine_executor.h"
#include "runtime/worker/serving_loop.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>

namespace hart::worker {
namespace {

/// What the block computes from scratch after positions [0, n_kept) of `tokens` (token n_kept
/// known): its logits at position n_kept - 1 and k drafts, chained.
struct from_scratch {
  std::vector<float> logits;  // [V]
  std::vector<int32_t> drafts;
  std::vector<float> streams;  // the main model's last streams at n_kept - 1
};

from_scratch block_from_scratch(const engine& eng, const std::vector<int32_t>& tokens, int64_t n_kept,
                                int64_t k) {
  from_scratch f;
  sequence_state s = eng.new_sequence();
  forward_trace tr;
  tr.capture_last_streams = true;
  std::vector<float> logits, out;
  const std::vector<int32_t> fed(tokens.begin(), tokens.begin() + n_kept);
  EXPECT_TRUE(eng.forward({{&s, fed, logits_request::none}}, &logits, &tr).ok());
  const std::vector<int32_t> next(tokens.begin() + 1, tokens.begin() + n_kept + 1);
  EXPECT_TRUE(eng.mtp_forward(s, 0, next, tr.last_streams, &logits, &out).ok());
  const int64_t V = eng.config().vocab_size, R = eng.config().hidden_size * eng.config().hc_mult;
  auto argmax = [V](const float* row) { return int32_t(std::max_element(row, row + V) - row); };
  f.logits.assign(logits.end() - V, logits.end());
  f.streams.assign(tr.last_streams.end() - R, tr.last_streams.end());
  f.drafts = {argmax(f.logits.data())};
  std::vector<float> streams(out.end() - R, out.end());
  for (int64_t pos = n_kept; int64_t(f.drafts.size()) < k; ++pos) {
    EXPECT_TRUE(eng.mtp_forward(s, pos, {f.drafts.back()}, streams, &logits, &out).ok());
    f.drafts.push_back(argmax(logits.data()));
    streams = out;
  }
  return f;
}

/// The CPU engine_executor over pages this test holds, checking after every step that returned
/// drafts (one in six, to keep it short): the drafts, and the block's logits at the last kept
/// position computed on the step's pages (their MTP KV as the steps wrote it), against
/// block_from_scratch on the tokens the sequence has, bit for bit.
class checking_executor final : public sched::step_executor {
 public:
  checking_executor(const engine& eng, int64_t page_size,
                    const std::map<uint64_t, std::vector<int32_t>>& prompts)
      : eng_(eng), prompts_(prompts) {
    store_ = std::move(eng.make_store(page_size)).value();
    store_->ensure_full_pages(64);
    store_->ensure_swa_pages(64);
    inner_ = engine_executor::over(forward_engine_cpu_view(eng), [this](const sched::step_item& it) {
      sequence_state s = eng_.new_sequence();
      engine::bind_pages(s, store_.get(), it.full_pages, it.swa_pages, it.n_computed);
      return s;
    });
  }
  status_or<sched::step_result> execute(const sched::step_plan& plan) override {
    HART_ASSIGN_OR_RETURN(sched::step_result r, inner_->execute(plan));
    if (!r.error.ok()) return r;
    size_t k = 0, d = 0;
    for (const sched::step_item& it : plan.items) {
      const int64_t n = sched::item_sampled_count(it, r, k);
      std::vector<int32_t>& generated = generated_[{it.request_id, it.sample}];
      for (int64_t j = 0; j < n; ++j) generated.push_back(r.sampled[k + size_t(j)].token);
      k += size_t(std::max<int64_t>(n, 0));
      if (it.mtp_drafts <= 0 || !it.sample_last) continue;
      const std::vector<int32_t>& drafts = r.drafts.at(d++).tokens;
      if (++events_ % 6 != 0) continue;
      const int64_t n_kept = it.n_computed + (it.n_drafts() > 0 ? n : int64_t(it.tokens.size()));
      std::vector<int32_t> tokens = prompts_.at(it.request_id);
      tokens.insert(tokens.end(), generated.begin(), generated.end());
      if (int64_t(tokens.size()) <= n_kept)
        return internal_error("seq %llu: tokens lost", (unsigned long long)it.seq_id);
      const from_scratch f = block_from_scratch(eng_, tokens, n_kept, int64_t(drafts.size()));
      const std::string at = "request " + std::to_string(it.request_id) + " sample " +
                             std::to_string(it.sample) + " after " + std::to_string(n_kept) + " positions";
      EXPECT_EQ(drafts, f.drafts) << at;
      // The block at n_kept - 1 on the step's pages: reads the window's MTP KV the steps wrote.
      sequence_state s = eng_.new_sequence();
      engine::bind_pages(s, store_.get(), it.full_pages, it.swa_pages, n_kept);
      std::vector<float> logits;
      EXPECT_TRUE(
          eng_.mtp_forward(s, n_kept - 1, {tokens[size_t(n_kept)]}, f.streams, &logits, nullptr).ok());
      EXPECT_EQ(logits.size(), f.logits.size()) << at;
      EXPECT_EQ(std::memcmp(logits.data(), f.logits.data(), f.logits.size() * sizeof(float)), 0)
          << at << ": the block's logits from the pages differ from the whole computation";
      ++checked_;
    }
    return r;
  }
  int64_t checked() const { return checked_; }

 private:
  const engine& eng_;
  std::map<uint64_t, std::vector<int32_t>> prompts_;
  std::unique_ptr<kv_store> store_;
  std::unique_ptr<engine_executor> inner_;
  std::map<std::pair<uint64_t, int32_t>, std::vector<int32_t>> generated_;
  int64_t events_ = 0, checked_ = 0;
};

struct output {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  sched::finish_reason reason = sched::finish_reason::error;
  int64_t cached_tokens = -1;
};
using outputs = std::map<std::pair<uint64_t, int32_t>, output>;

class mtp_drafting : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ckpt_ = new temp_random_checkpoint(std::string(HART_TEST_DATA) + "/tiny-a/config.json",
                                       checkpoint_format::bf16, 5);
    engine_params ep;
    ep.model_dir = ckpt_->dir;
    ep.deterministic = true;
    auto e = engine::load(ep);
    ASSERT_TRUE(e.ok()) << e.get_status().to_string();
    eng_ = std::move(e).value().release();
    ASSERT_EQ(eng_->n_mtp_blocks(), 1);
  }
  static void TearDownTestSuite() {
    delete eng_;
    delete ckpt_;
  }

  static sched::serving_params params(int64_t k) {
    sched::serving_params p;
    p.cache.page_size = 128;
    p.cache.n_full_pages = 32;
    p.cache.n_swa_pages = 32;
    p.sched.max_batch_tokens = 300;
    p.sched.prefill_chunk = 100;  // prompts come in several chunks, each writing its MTP KV
    p.sched.speculative_tokens = k;
    p.sched.draft_with = sched::scheduler_params::drafter::mtp;
    return p;
  }

  static outputs serve(int64_t k, const std::vector<std::vector<sched::gen_request>>& waves,
                       int64_t* checked = nullptr, sched::scheduler_counters* counters = nullptr) {
    outputs out;
    const sched::serving_params p = worker::serving_params_for(*eng_, params(k), nullptr);
    std::map<uint64_t, std::vector<int32_t>> prompts;
    for (const auto& wave : waves) {
      for (const sched::gen_request& r : wave) prompts[r.id] = r.prompt;
    }
    auto ex = std::make_unique<checking_executor>(*eng_, p.cache.page_size, prompts);
    checking_executor* checker = ex.get();
    auto l = serving_loop::create(*eng_, p, nullptr, std::move(ex));
    EXPECT_TRUE(l.ok()) << l.get_status().to_string();
    if (!l.ok()) return out;
    for (const auto& wave : waves) {
      for (const sched::gen_request& r : wave) EXPECT_TRUE((*l)->submit(r).ok());
      for (int64_t i = 0; i < 10000 && !(*l)->idle(); ++i) {
        sched::event_batch ev = (*l)->step();
        for (const sched::token_event& t : ev.tokens) {
          out[{t.request_id, t.sample}].tokens.push_back(t.token);
          out[{t.request_id, t.sample}].logprobs.push_back(t.logprob);
        }
        for (const sched::finish_event& f : ev.finishes) {
          out[{f.request_id, f.sample}].reason = f.reason;
          out[{f.request_id, f.sample}].cached_tokens = f.cached_tokens;
        }
        const status st = (*l)->cache().check();
        EXPECT_TRUE(st.ok()) << st.to_string();
        if (!st.ok()) return out;
      }
      EXPECT_TRUE((*l)->idle());
    }
    if (counters) *counters = (*l)->sched().counters();
    if (checked) *checked = checker->checked();
    (*l)->flush_cache();
    EXPECT_EQ((*l)->cache().metrics().full_pages_used, 0);
    EXPECT_EQ((*l)->cache().metrics().swa_pages_used, 0);
    return out;
  }

  static std::vector<int32_t> random_prompt(uint32_t seed, int64_t len) {
    std::mt19937 rng(seed);
    std::vector<int32_t> p;
    for (int64_t i = 0; i < len; ++i) p.push_back(std::uniform_int_distribution<int32_t>(2, 511)(rng));
    return p;
  }

  static temp_random_checkpoint* ckpt_;
  static engine* eng_;
};
temp_random_checkpoint* mtp_drafting::ckpt_ = nullptr;
engine* mtp_drafting::eng_ = nullptr;

TEST_F(mtp_drafting, outputs_equal_serving_without_drafts_and_drafts_equal_the_block_from_scratch) {
  std::vector<std::vector<sched::gen_request>> waves(2);
  uint64_t id = 1;
  for (int64_t len : {3, 20, 215}) {  // window 32: shorter, and longer (its last chunk 15 tokens)
    sched::gen_request r;
    r.id = id++;
    r.prompt = random_prompt(uint32_t(len), len);
    r.max_new_tokens = 20;
    r.ignore_eos = true;
    r.logprobs = true;
    waves[0].push_back(r);
  }
  sched::gen_request sampled = waves[0][1];
  sampled.id = id++;
  sampled.temperature = 0.8f;
  sampled.seed = 17;
  sampled.n = 2;
  waves[0].push_back(sampled);
  sched::gen_request hit = waves[0][2];  // the 215-token prompt again, another last token
  hit.id = id++;
  hit.prompt.back() = hit.prompt.back() == 9 ? 10 : 9;
  waves[1].push_back(hit);

  const outputs want = serve(0, waves);
  EXPECT_GT(want.at({hit.id, 0}).cached_tokens, 0) << "the second wave hits the cache";
  for (int64_t k : {1, 3}) {
    SCOPED_TRACE("k " + std::to_string(k));
    int64_t checked = 0;
    sched::scheduler_counters c;
    const outputs got = serve(k, waves, &checked, &c);
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [key, w] : want) {
      const output& g = got.at(key);
      EXPECT_EQ(g.tokens, w.tokens) << "request " << key.first << " sample " << key.second;
      EXPECT_EQ(g.reason, w.reason);
      ASSERT_EQ(g.logprobs.size(), w.logprobs.size());
      EXPECT_EQ(std::memcmp(g.logprobs.data(), w.logprobs.data(), g.logprobs.size() * sizeof(float)), 0);
    }
    EXPECT_GT(c.verify_passes, 0);
    EXPECT_GT(checked, 5) << "draft lists checked against the block from scratch";
  }
}

}  // namespace
}  // namespace hart::worker
