// The split actors in one process, as `hart serve` wires them: a real
// scheduler actor, cache shard actor and worker actor (CPU engine, tiny-a,
// deterministic) with a
// scoped actor standing in for the gateway. Their outputs must equal the
// single-thread serving_loop's, token for token and logprobs bitwise; an abort
// while a step runs ends the request and frees its pages; control verbs are
// answered while generations are live; the shard's index stays consistent; a
// long decode crosses pages on pages reserved ahead, no decode step waiting
// for the shard, as the serving_loop (the same step pipeline in one thread) does.
#include "actors/scheduler_actor.h"

#include "actors/cache_shard_actor.h"
#include "actors/worker_actor.h"
#include "runtime/worker/serving_loop.h"

#include <gtest/gtest.h>

#include <map>

namespace hart::actors {
namespace {

using namespace std::chrono_literals;
using key = std::pair<uint64_t, int32_t>;  // request id, sample

struct output {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<int64_t> produced_us;
  sched::finish_event fin;
  bool finished = false;
};

class scheduler_actor_test : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    engine_params ep;
    ep.model_dir = std::string(HART_TEST_DATA) + "/tiny-a";
    ep.deterministic = true;
    auto e = engine::load(ep);
    ASSERT_TRUE(e.ok()) << e.get_status().to_string();
    eng_ = std::move(e).value().release();
  }

  static sched::serving_params params() {
    sched::serving_params p;
    p.cache.page_size = 128;
    p.cache.n_full_pages = 32;
    p.cache.n_swa_pages = 16;
    p.sched.max_batch_tokens = 256;
    p.sched.prefill_chunk = 96;
    return worker::serving_params_for(*eng_, p, nullptr);
  }

  static sched::gen_request request(uint64_t id, int64_t max_new) {
    sched::gen_request r;
    r.id = id;
    for (int k = 0; k < 30 + int(id) * 17; ++k) r.prompt.push_back(int32_t((k * 31 + id * 7) % 500 + 6));
    r.max_new_tokens = max_new;
    r.ignore_eos = true;
    r.logprobs = true;
    if (id % 2 == 0) {  // seeded sampling, two samples
      r.temperature = 0.9f;
      r.top_k = 50;
      r.seed = id;
      r.n = 2;
    }
    return r;
  }

  void SetUp() override {
    worker_actor_params wp;
    wp.eng = eng_;
    wp.cache = params().cache;
    auto w = spawn_worker_actor(sys_, wp);
    ASSERT_TRUE(w.ok()) << w.get_status().to_string();
    worker_ = *w;
    auto shard = spawn_cache_shard_actor(sys_, params().cache, 0);
    ASSERT_TRUE(shard.ok()) << shard.get_status().to_string();
    shard_ = *shard;
    scheduler_actor_params sp;
    sp.serving = params();
    sp.worker = worker_;
    sp.shards = {shard_};
    auto s = spawn_scheduler_actor(sys_, sp);
    ASSERT_TRUE(s.ok()) << s.get_status().to_string();
    sched_ = *s;
    gw_->send(sched_, caf::actor_cast<gateway_actor>(gw_));  // this scoped actor plays the gateway
  }

  void TearDown() override {
    caf::anon_send_exit(sched_, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(worker_, caf::exit_reason::user_shutdown);
  }

  void submit(const sched::gen_request& r) {
    gw_->send(sched_, submit_atom::value, std::make_shared<const submit_request>(submit_request{r}));
  }

  /// Receives until `n_finals` finals arrived; control replies go to `replies`.
  void collect(std::map<key, output>& out, size_t n_finals, std::vector<protocol::reply>* replies = nullptr) {
    size_t finals = 0;
    bool timed_out = false;
    while (finals < n_finals && !timed_out) {
      gw_->receive(
          [&](events_atom, std::shared_ptr<const sched::event_batch> ev, uint64_t) {
            for (const auto& t : ev->tokens) {
              output& o = out[{t.request_id, t.sample}];
              o.tokens.push_back(t.token);
              o.logprobs.push_back(t.logprob);
              o.produced_us.push_back(t.produced_us);
            }
            for (const auto& f : ev->finishes) {
              output& o = out[{f.request_id, f.sample}];
              o.fin = f;
              o.finished = true;
              ++finals;
            }
          },
          [&](reply_atom, std::shared_ptr<const addressed_reply> r) {
            if (replies) replies->push_back(r->reply);
          },
          caf::after(120s) >> [&] { timed_out = true; });
    }
    ASSERT_FALSE(timed_out) << finals << " of " << n_finals << " finals";
  }

  protocol::reply control(protocol::control_verb verb, std::vector<uint64_t> ids = {}) {
    protocol::control_request c;
    c.verb = verb;
    gw_->send(sched_, control_atom::value,
              std::make_shared<const control_call>(control_call{{}, c, std::move(ids)}));
    protocol::reply got = protocol::error_reply{};
    bool done = false;
    while (!done) {
      gw_->receive([&](reply_atom, std::shared_ptr<const addressed_reply> r) { got = r->reply, done = true; },
                   [&](events_atom, std::shared_ptr<const sched::event_batch>, uint64_t) {},
                   caf::after(120s) >> [&] { done = true; });
    }
    return got;
  }

  /// The shard's invariant check, asked directly.
  status shard_check() {
    status got = internal_error("no answer");
    gw_->request(shard_, caf::infinite, shard_check_atom::value)
        .receive([&](std::shared_ptr<const status> s) { got = *s; },
                 [&](caf::error& e) { got = internal_error("%s", caf::to_string(e).c_str()); });
    return got;
  }

  static double stat(const protocol::reply& r, const std::string& name) {
    for (const auto& [k, v] : std::get<protocol::stats_reply>(r).entries) {
      if (k == name) return v;
    }
    ADD_FAILURE() << "no stat " << name;
    return -1;
  }

  static engine* eng_;
  caf::actor_system_config cfg_;
  caf::actor_system sys_{cfg_};
  caf::scoped_actor gw_{sys_};
  worker_actor worker_;
  scheduler_actor sched_;
  cache_shard_actor shard_;
};

engine* scheduler_actor_test::eng_ = nullptr;

TEST_F(scheduler_actor_test, outputs_equal_the_serving_loop_token_for_token_and_logprobs_bitwise) {
  std::vector<sched::gen_request> reqs;
  for (uint64_t id = 1; id <= 6; ++id) reqs.push_back(request(id, 12));
  for (const auto& r : reqs) submit(r);
  std::map<key, output> got;
  collect(got, 9);  // 3 greedy + 3 x 2 samples

  auto loop = worker::serving_loop::create(*eng_, params(), nullptr);
  ASSERT_TRUE(loop.ok()) << loop.get_status().to_string();
  for (const auto& r : reqs) ASSERT_TRUE((*loop)->submit(r).ok());
  std::map<key, output> want;
  const sched::event_batch ev = (*loop)->run_until_idle();
  for (const auto& t : ev.tokens) {
    want[{t.request_id, t.sample}].tokens.push_back(t.token);
    want[{t.request_id, t.sample}].logprobs.push_back(t.logprob);
  }
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [k, w] : want) {
    const output& g = got[k];
    EXPECT_EQ(g.fin.reason, sched::finish_reason::length)
        << k.first << "/" << k.second << " " << g.fin.message;
    EXPECT_EQ(g.tokens, w.tokens) << k.first << "/" << k.second;
    ASSERT_EQ(g.logprobs.size(), w.logprobs.size());
    for (size_t i = 0; i < w.logprobs.size(); ++i)
      EXPECT_EQ(g.logprobs[i], w.logprobs[i]) << k.first << " token " << i;
    for (size_t i = 0; i < g.produced_us.size(); ++i) {
      EXPECT_GT(g.produced_us[i], 0);
      if (i > 0) {
        EXPECT_GT(g.produced_us[i], g.produced_us[i - 1]) << "one token per step";
      }
    }
  }
  const protocol::reply st = control(protocol::control_verb::stats);
  EXPECT_EQ(stat(st, "running"), 0.0);
  EXPECT_GT(stat(st, "decode_exec_latency_us_p50"), 0.0);
  EXPECT_GT(stat(st, "decode_gap_us_p50"), 0.0);
  // The gap's phases partition each gap: none negative, none beyond the gap.
  for (const char* phase : {"wake", "apply", "plan", "handoff"}) {
    const double p50 = stat(st, std::string("decode_gap_") + phase + "_us_p50");
    const double p99 = stat(st, std::string("decode_gap_") + phase + "_us_p99");
    EXPECT_GE(p50, 0.0) << phase;
    EXPECT_LE(p50, p99) << phase;
    EXPECT_LE(p99, stat(st, "decode_gap_us_p99")) << phase;
  }
  EXPECT_GT(stat(st, "cache_hit_rate"), 0.0) << "samples 1..n-1 hit sample 0's prompt pages";
  const status chk = shard_check();
  EXPECT_TRUE(chk.ok()) << chk.to_string();
}

TEST_F(scheduler_actor_test, abort_while_a_step_runs_ends_the_request_and_frees_its_pages) {
  submit(request(1, 2000));
  // Wait for the first token: the request is decoding, a step is in flight or about to be.
  bool first = false;
  while (!first) {
    gw_->receive([&](events_atom, std::shared_ptr<const sched::event_batch> ev,
                     uint64_t) { first = !ev->tokens.empty(); },
                 caf::after(120s) >> [&] { first = true; });
  }
  const protocol::reply h = control(protocol::control_verb::health);
  ASSERT_TRUE(std::holds_alternative<protocol::health_reply>(h))
      << "health is answered while the request decodes";
  protocol::control_request c;
  c.verb = protocol::control_verb::abort;
  gw_->send(sched_, control_atom::value, std::make_shared<const control_call>(control_call{{}, c, {1}}));
  std::map<key, output> got;
  std::vector<protocol::reply> replies;
  collect(got, 1, &replies);
  if (replies.empty()) {  // the ack follows the final
    gw_->receive([&](reply_atom, std::shared_ptr<const addressed_reply> r) { replies.push_back(r->reply); },
                 caf::after(120s) >> [] {});
  }
  ASSERT_EQ(replies.size(), 1u);
  ASSERT_TRUE(std::holds_alternative<protocol::ack_reply>(replies[0]));
  EXPECT_EQ(std::get<protocol::ack_reply>(replies[0]).affected, 1u);
  const output& o = got[key{1, 0}];
  EXPECT_EQ(o.fin.reason, sched::finish_reason::abort);
  EXPECT_LT(o.fin.completion_tokens, 2000);
  // Its pages stay with the step in flight until that step's outcome is in; a
  // later generation's final comes after that outcome.
  submit(request(3, 2));
  collect(got, 1);
  EXPECT_EQ(got[key(3, 0)].fin.reason, sched::finish_reason::length);
  control(protocol::control_verb::flush_cache);
  const protocol::reply st = control(protocol::control_verb::stats);
  EXPECT_EQ(stat(st, "running"), 0.0);
  EXPECT_EQ(stat(st, "cache_full_pages_used"), 0.0);
  EXPECT_EQ(stat(st, "cache_swa_pages_used"), 0.0);
  const status chk = shard_check();
  EXPECT_TRUE(chk.ok()) << chk.to_string();
}

TEST_F(scheduler_actor_test, a_long_decode_crosses_pages_on_pages_reserved_ahead) {
  // 47 + 300 tokens: the decode crosses into pages 2 and 3. The shard reserves
  // each ahead, so no decode step is planned with it, in the actors as in the
  // in-process loop (the same step pipeline). Outputs are the same.
  const sched::gen_request r = request(1, 300);
  submit(r);
  std::map<key, output> got;
  collect(got, 1);

  auto loop = worker::serving_loop::create(*eng_, params(), nullptr);
  ASSERT_TRUE(loop.ok()) << loop.get_status().to_string();
  ASSERT_TRUE((*loop)->submit(r).ok());
  output want;
  for (const auto& t : (*loop)->run_until_idle().tokens) {
    want.tokens.push_back(t.token);
    want.logprobs.push_back(t.logprob);
  }
  EXPECT_EQ((*loop)->stats().decode_steps_with_shard, 0);
  EXPECT_EQ((*loop)->stats().pages_granted_ahead, 2);

  const output& g = got[key{1, 0}];
  EXPECT_EQ(g.fin.reason, sched::finish_reason::length) << g.fin.message;
  ASSERT_EQ(g.tokens.size(), 300u);
  EXPECT_EQ(g.tokens, want.tokens);
  EXPECT_EQ(g.logprobs, want.logprobs);
  const protocol::reply st = control(protocol::control_verb::stats);
  EXPECT_EQ(stat(st, "decode_steps_with_shard"), 0.0);
  EXPECT_EQ(stat(st, "pages_granted_ahead"), 2.0);
  EXPECT_GT(stat(st, "decode_gap_grants_us_p50"), 0.0);
  EXPECT_EQ(stat(st, "decode_gap_shard_us_p99"), 0.0) << "no gap measured for steps that asked the shard";
  control(protocol::control_verb::flush_cache);
  const protocol::reply after = control(protocol::control_verb::stats);
  EXPECT_EQ(stat(after, "cache_full_pages_used"), 0.0);
  EXPECT_EQ(stat(after, "cache_swa_pages_used"), 0.0);
  const status chk = shard_check();
  EXPECT_TRUE(chk.ok()) << chk.to_string();
}

}  // namespace
}  // namespace hart::actors
