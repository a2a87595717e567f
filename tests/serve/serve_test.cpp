// `hart serve` as a real process on 127.0.0.1, driven through real ZeroMQ
// sockets: concurrent streaming clients get what the engine computes alone,
// seeded samples replay, abort and pause work mid-stream, and bad input gets
// a typed error while the server keeps serving without leaking pages.
#include "runtime/model/engine.h"
#include "runtime/transport/client.h"
#include "tests/command_run.h"
#include "tests/serve/server_process.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <thread>

namespace hart::testing {
namespace {

using namespace std::chrono_literals;

class serve : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = std::string(HART_TEST_DATA) + "/tiny-a";
    // --catch-step-us: the scheduler's spin for a step's outcome is on (its default is off on few
    // cores), its window wide enough to be met on a loaded box.
    srv_ = new server_process(model_, {"--full-pages", "64", "--swa-pages", "24", "--catch-step-us", "1000"});
    engine_params p;
    p.model_dir = model_;
    p.deterministic = true;
    auto e = engine::load(p);
    ASSERT_TRUE(e.ok()) << e.get_status().to_string();
    eng_ = std::move(e).value().release();
  }
  static void TearDownTestSuite() {
    delete srv_;
    delete eng_;
  }

  std::unique_ptr<transport::client> connect() {
    EXPECT_FALSE(srv_->endpoint().empty()) << "the server did not print its endpoint";
    transport::client_params p;
    p.endpoint = srv_->endpoint();
    auto c = transport::client::connect(p);
    EXPECT_TRUE(c.ok()) << c.get_status().to_string();
    return std::move(c).value();
  }

  // Greedy continuation of `prompt` computed by the engine alone: tokens and their log-softmax.
  static std::vector<int32_t> greedy_alone(const std::vector<int32_t>& prompt, int n,
                                           std::vector<float>* logprobs) {
    sequence_state s = eng_->new_sequence();
    std::vector<float> logits;
    EXPECT_TRUE(eng_->prefill(s, prompt, logits_request::last, &logits).ok());
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) {
      const int64_t V = eng_->config().vocab_size;
      const int32_t t = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
      double mx = logits[t], z = 0;
      for (int64_t v = 0; v < V; ++v) z += std::exp(double(logits[v]) - mx);
      if (logprobs) logprobs->push_back(float(-std::log(z)));
      out.push_back(t);
      EXPECT_TRUE(eng_->decode({&s}, {t}, &logits).ok());
    }
    return out;
  }

  static protocol::generate_request greedy_request(uint64_t id, const std::vector<int32_t>& prompt,
                                                   uint32_t n_new) {
    protocol::generate_request g;
    g.request_id = id;
    g.kind = protocol::prompt_kind::token_ids;
    g.token_ids.assign(prompt.begin(), prompt.end());
    g.sampling.temperature = 0;
    g.sampling.max_new_tokens = n_new;
    g.sampling.ignore_eos = true;
    g.sampling.logprobs = true;
    return g;
  }

  // One client per prompt at once on `srv`, greedy, n_new tokens each (request ids from id0):
  // each gets the engine-alone tokens and log-probs, finishing by length.
  static void expect_concurrent_clients_get_the_engine_alone(const server_process& srv,
                                                             const std::vector<std::vector<int32_t>>& prompts,
                                                             int n_new, uint64_t id0) {
    const size_t n = prompts.size();
    std::vector<std::vector<int32_t>> want(n);
    std::vector<std::vector<float>> want_lp(n);
    for (size_t i = 0; i < n; ++i) want[i] = greedy_alone(prompts[i], n_new, &want_lp[i]);
    std::vector<std::string> failures(n);
    std::vector<std::thread> threads;
    for (size_t i = 0; i < n; ++i) {
      threads.emplace_back([&, i] {
        transport::client_params cp;
        cp.endpoint = srv.endpoint();
        auto c = transport::client::connect(cp);
        if (!c.ok()) return void(failures[i] = c.get_status().to_string());
        auto res = (*c)->generate(greedy_request(id0 + i, prompts[i], uint32_t(n_new)), 120s);
        if (!res.ok()) return void(failures[i] = res.get_status().to_string());
        const auto& s = res->samples[0];
        if (std::vector<int32_t>(s.token_ids.begin(), s.token_ids.end()) != want[i])
          failures[i] = "tokens differ";
        else if (s.logprobs != want_lp[i])
          failures[i] = "logprobs differ";
        else if (s.final.reason != protocol::finish_reason::length)
          failures[i] = "finish reason";
      });
    }
    for (auto& t : threads) t.join();
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(failures[i], "") << "client " << i;
  }

  // Sends a control verb and returns its answer; chunks and finals that arrive
  // meanwhile go to `streamed` (when given).
  static protocol::reply control(transport::client& c, protocol::control_verb verb, uint64_t tag,
                                 protocol::pause_mode mode = protocol::pause_mode::abort,
                                 std::vector<protocol::reply>* streamed = nullptr) {
    protocol::control_request q;
    q.tag = tag;
    q.verb = verb;
    q.mode = mode;
    EXPECT_TRUE(c.send(protocol::request{q}).ok());
    for (;;) {
      auto r = c.receive(20s);
      EXPECT_TRUE(r.ok()) << r.get_status().to_string();
      if (!r.ok()) return protocol::error_reply{};
      if (!std::holds_alternative<protocol::chunk_event>(*r) &&
          !std::holds_alternative<protocol::final_event>(*r))
        return *r;
      if (streamed) streamed->push_back(*r);
    }
  }

  void SetUp() override {
    // A test that failed while the server was paused must not stall the next one.
    auto c = connect();
    control(*c, protocol::control_verb::resume, 999);
  }

  static std::string model_;
  static server_process* srv_;
  static engine* eng_;
};

std::string serve::model_;
server_process* serve::srv_ = nullptr;
engine* serve::eng_ = nullptr;

std::vector<int32_t> prompt_of(int i) {
  std::vector<int32_t> p;
  for (int k = 0; k < 20 + (i * 7) % 60; ++k)
    p.push_back(int32_t((k * 31 + (k < 15 ? 0 : i) * 17) % 500 + 6));
  return p;
}

TEST_F(serve, concurrent_streaming_clients_get_what_the_engine_computes_alone) {
  // The engine runs one call at a time (its sequences share one page store), so
  // the expected answers are computed first, before the clients start.
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 32; ++i) prompts.push_back(prompt_of(i));
  expect_concurrent_clients_get_the_engine_alone(*srv_, prompts, 8, 100);

  // A request alone decodes back-to-back steps, some of whose outcomes the scheduler's spin
  // (--catch-step-us) takes: its tokens are still the engine's. How many it catches depends on
  // the machine's load (none when the timer fires late), so the stat is only required to exist;
  // what the spin buys is measured by bench-serve (perf-notes S1).
  auto c = connect();
  auto alone = c->generate(greedy_request(200, prompt_of(0), 32), 120s);
  ASSERT_TRUE(alone.ok()) << alone.get_status().to_string();
  std::vector<float> lp;
  const std::vector<int32_t> want_alone = greedy_alone(prompt_of(0), 32, &lp);
  EXPECT_EQ(std::vector<int32_t>(alone->samples[0].token_ids.begin(), alone->samples[0].token_ids.end()),
            want_alone);
  auto st = control(*c, protocol::control_verb::stats, 12);
  ASSERT_TRUE(std::holds_alternative<protocol::stats_reply>(st));
  double caught = -1;
  for (const auto& [k, v] : std::get<protocol::stats_reply>(st).entries) {
    if (k == "decode_outcomes_caught") caught = v;
  }
  EXPECT_GE(caught, 0) << "stats has no decode_outcomes_caught";
}

// A chat sent as text each turn, with a session id (issue 27, finding 8: turn 2 hit the cache for
// 0 of 385 prompt tokens): the second turn continues from the first one's token ids, so its
// prompt and all 600 generated tokens are cache hits (full pages of 256), whatever the answer's
// text would re-encode to.
TEST_F(serve, a_chat_session_reuses_the_previous_turn) {
  auto c = connect();
  auto turn = [&](uint64_t id, const std::vector<protocol::chat_message>& m, uint32_t n_new,
                  const std::string& session) {
    protocol::generate_request g;
    g.request_id = id;
    g.kind = protocol::prompt_kind::messages;
    g.messages = m;
    g.sampling.temperature = 0;
    g.sampling.max_new_tokens = n_new;
    g.sampling.ignore_eos = true;
    g.session_id = session;
    return c->generate(g, 120s);
  };
  std::vector<protocol::chat_message> m = {{"user", "tell me a long story"}};
  auto first = turn(60, m, 600, "story");
  ASSERT_TRUE(first.ok()) << first.get_status().to_string();
  const auto& a = first->samples[0];
  m.push_back({"assistant", a.text});
  m.push_back({"user", "go on"});
  auto second = turn(61, m, 4, "story");
  ASSERT_TRUE(second.ok()) << second.get_status().to_string();
  const protocol::usage_info& u = second->samples[0].final.usage;
  const uint32_t computed = a.final.usage.prompt_tokens + 599;  // the last answer token was never fed
  std::printf("chat session: turn 2 prompt %u tokens, %u cached (turn 1: %u prompt + 600 generated)\n",
              u.prompt_tokens, u.cached_tokens, a.final.usage.prompt_tokens);
  EXPECT_GT(u.prompt_tokens, computed + 1);
  EXPECT_GE(u.cached_tokens, computed / 256 * 256) << "the previous turn was not reused";
}

// client::generate with `cancelled` (what hart chat's Ctrl-C uses): once it says true the
// request is aborted on the server and the call returns its partial output with reason abort;
// the abort's ack does not linger for a later receive().
TEST_F(serve, a_cancelled_generate_returns_its_partial_output) {
  auto c = connect();
  int chunks = 0;
  auto res = c->generate(
      greedy_request(70, prompt_of(2), 100000), 60s, [&](const protocol::chunk_event&) { ++chunks; },
      [&] { return chunks >= 3; });
  ASSERT_TRUE(res.ok()) << res.get_status().to_string();
  const auto& s = res->samples[0];
  EXPECT_EQ(s.final.reason, protocol::finish_reason::abort);
  EXPECT_GE(s.token_ids.size(), 3u);
  EXPECT_LT(s.token_ids.size(), 100000u);
  auto h = control(*c, protocol::control_verb::health, 71);
  EXPECT_TRUE(std::holds_alternative<protocol::health_reply>(h))
      << "the next reply was not the health answer";
}

TEST_F(serve, seeded_samples_replay) {
  auto c = connect();
  protocol::generate_request g = greedy_request(7, prompt_of(3), 12);
  g.sampling.temperature = 1.0f;
  g.sampling.has_seed = true;
  g.sampling.seed = 42;
  g.sampling.n = 3;
  auto a = c->generate(g, 60s);
  ASSERT_TRUE(a.ok()) << a.get_status().to_string();
  g.request_id = 8;
  auto b = c->generate(g, 60s);
  ASSERT_TRUE(b.ok()) << b.get_status().to_string();
  ASSERT_EQ(a->samples.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(a->samples[i].token_ids, b->samples[i].token_ids) << "sample " << i;
    EXPECT_EQ(a->samples[i].logprobs, b->samples[i].logprobs) << "sample " << i;
  }
  EXPECT_NE(a->samples[0].token_ids, a->samples[1].token_ids);
}

TEST_F(serve, abort_mid_stream_returns_the_partial_output) {
  auto c = connect();
  ASSERT_TRUE(c->send(protocol::request{greedy_request(9, prompt_of(5), 400)}).ok());
  int chunks = 0;
  bool aborted = false;
  for (;;) {
    auto r = c->receive(60s);
    ASSERT_TRUE(r.ok()) << r.get_status().to_string();
    if (std::holds_alternative<protocol::chunk_event>(*r) && ++chunks == 3) {
      protocol::control_request q;
      q.tag = 1;
      q.verb = protocol::control_verb::abort;
      q.request_id = 9;
      ASSERT_TRUE(c->send(protocol::request{q}).ok());
    }
    if (const auto* f = std::get_if<protocol::final_event>(&*r)) {
      aborted = f->reason == protocol::finish_reason::abort;
      EXPECT_LT(f->usage.completion_tokens, 400u);
      EXPECT_GE(f->usage.completion_tokens, 3u);
      break;
    }
  }
  EXPECT_TRUE(aborted);
}

TEST_F(serve, pause_modes_then_resume) {
  auto c = connect();
  const std::vector<int32_t> prompt = prompt_of(11);
  const std::vector<int32_t> want = greedy_alone(prompt, 30, nullptr);
  for (auto mode : {protocol::pause_mode::retract, protocol::pause_mode::in_place}) {
    ASSERT_TRUE(c->send(protocol::request{greedy_request(20 + int(mode), prompt, 30)}).ok());
    std::vector<int32_t> got;
    std::vector<protocol::reply> backlog;
    bool paused = false, done = false;
    while (!done) {
      protocol::reply r;
      if (!backlog.empty()) {
        r = backlog.front();
        backlog.erase(backlog.begin());
      } else {
        auto in = c->receive(60s);
        ASSERT_TRUE(in.ok()) << in.get_status().to_string();
        r = *in;
      }
      if (const auto* ch = std::get_if<protocol::chunk_event>(&r)) {
        got.insert(got.end(), ch->token_ids.begin(), ch->token_ids.end());
        if (!paused && got.size() >= 2) {
          paused = true;
          auto ack = control(*c, protocol::control_verb::pause, 2, mode, &backlog);
          EXPECT_TRUE(std::holds_alternative<protocol::ack_reply>(ack));
          std::this_thread::sleep_for(100ms);
          auto ack2 = control(*c, protocol::control_verb::resume, 3, mode, &backlog);
          EXPECT_TRUE(std::holds_alternative<protocol::ack_reply>(ack2));
        }
      }
      if (const auto* f = std::get_if<protocol::final_event>(&r)) {
        EXPECT_EQ(f->reason, protocol::finish_reason::length);
        done = true;
      }
    }
    EXPECT_EQ(got, want) << "pause mode " << int(mode);
  }
  // pause(abort) ends what runs.
  ASSERT_TRUE(c->send(protocol::request{greedy_request(30, prompt, 300)}).ok());
  auto first = c->receive(60s);
  ASSERT_TRUE(first.ok());
  std::vector<protocol::reply> backlog;
  auto ack = control(*c, protocol::control_verb::pause, 4, protocol::pause_mode::abort, &backlog);
  ASSERT_TRUE(std::holds_alternative<protocol::ack_reply>(ack));
  EXPECT_EQ(std::get<protocol::ack_reply>(ack).affected, 1u) << "one generation aborted";
  for (const protocol::reply& r : backlog) {
    EXPECT_FALSE(std::holds_alternative<protocol::final_event>(r)) << "the final came before the ack";
  }
  for (;;) {
    auto r = c->receive(60s);
    ASSERT_TRUE(r.ok());
    if (const auto* f = std::get_if<protocol::final_event>(&*r)) {
      EXPECT_EQ(f->reason, protocol::finish_reason::abort);
      break;
    }
  }
  // Paused, a generate waits in the queue (docs/protocol.md §4.2): nothing for it until resume.
  ASSERT_TRUE(c->send(protocol::request{greedy_request(31, prompt, 4)}).ok());
  EXPECT_FALSE(c->receive(300ms).ok()) << "a generate ran while paused";
  control(*c, protocol::control_verb::resume, 5);
  int64_t tokens = 0;
  for (;;) {
    auto r = c->receive(60s);
    ASSERT_TRUE(r.ok()) << r.get_status().to_string();
    if (const auto* ch = std::get_if<protocol::chunk_event>(&*r)) tokens += int64_t(ch->token_ids.size());
    if (const auto* f = std::get_if<protocol::final_event>(&*r)) {
      EXPECT_EQ(f->request_id, 31u);
      EXPECT_EQ(f->reason, protocol::finish_reason::length);
      break;
    }
  }
  EXPECT_EQ(tokens, 4);
}

TEST_F(serve, bad_input_gets_typed_errors_and_the_server_keeps_serving) {
  auto c = connect();
  std::mt19937 rng(7);
  for (int i = 0; i < 50; ++i) {
    std::string junk(std::uniform_int_distribution<int>(0, 300)(rng), '\0');
    for (char& ch : junk) ch = char(rng());
    ASSERT_TRUE(c->send_frames({std::string("\x01\x01", 2), junk}).ok());
    auto r = c->receive(20s);
    ASSERT_TRUE(r.ok()) << r.get_status().to_string();
    EXPECT_TRUE(std::holds_alternative<protocol::error_reply>(*r)) << "junk frame " << i;
  }
  ASSERT_TRUE(c->send_frames({"x"}).ok());  // wrong frame count
  EXPECT_TRUE(std::holds_alternative<protocol::error_reply>(*c->receive(20s)));

  // A token id outside the vocabulary, and a prompt longer than the model allows.
  auto bad = greedy_request(40, {3, 4, 100000}, 4);
  ASSERT_TRUE(c->send(protocol::request{bad}).ok());
  auto r = c->receive(20s);
  ASSERT_TRUE(r.ok());
  const auto* e = std::get_if<protocol::error_reply>(&*r);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->code, status_code::out_of_range);
  EXPECT_EQ(e->request_id, 40u);

  auto h = control(*c, protocol::control_verb::health, 9);
  ASSERT_TRUE(std::holds_alternative<protocol::health_reply>(h));
  EXPECT_TRUE(std::get<protocol::health_reply>(h).ok);
  auto ok = c->generate(greedy_request(41, prompt_of(1), 4), 60s);
  EXPECT_TRUE(ok.ok()) << ok.get_status().to_string();

  // No pages leaked: after a flush, nothing is in use.
  control(*c, protocol::control_verb::flush_cache, 10);
  auto st = control(*c, protocol::control_verb::stats, 11);
  ASSERT_TRUE(std::holds_alternative<protocol::stats_reply>(st));
  for (const auto& [k, v] : std::get<protocol::stats_reply>(st).entries) {
    if (k == "cache_full_pages_used" || k == "cache_swa_pages_used" || k == "running") {
      EXPECT_EQ(v, 0.0) << k;
    }
  }
}

// --overlap-schedule: each decode step's successor is planned before it runs
// and the worker fills in the tokens it sampled (in process, and before a plan
// crosses to a worker process). Outputs must not change: 24 concurrent
// clients in a pool small enough to preempt, some aborted mid-stream, equal
// the engine alone token for token and log-prob for log-prob.
class serve_overlap : public serve, public ::testing::WithParamInterface<bool> {};

TEST_P(serve_overlap, concurrent_clients_equal_the_engine_alone) {
  std::vector<std::string> extra = {"--overlap-schedule", "--full-pages", "24", "--swa-pages", "24"};
  if (GetParam()) extra.push_back("--worker-process");
  server_process srv(model_, extra);
  ASSERT_FALSE(srv.endpoint().empty());
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 24; ++i) prompts.push_back(prompt_of(i));
  expect_concurrent_clients_get_the_engine_alone(srv, prompts, 12, 500);

  // The steps were planned ahead, and an abort mid-stream keeps a prefix.
  transport::client_params cp;
  cp.endpoint = srv.endpoint();
  auto c = transport::client::connect(cp);
  ASSERT_TRUE(c.ok());
  const std::vector<int32_t> prompt = prompt_of(3);
  const std::vector<int32_t> full = greedy_alone(prompt, 40, nullptr);
  ASSERT_TRUE((*c)->send(protocol::request{greedy_request(900, prompt, 40)}).ok());
  std::vector<int32_t> got;
  for (bool done = false; !done;) {
    auto r = (*c)->receive(20s);
    ASSERT_TRUE(r.ok()) << r.get_status().to_string();
    if (const auto* ch = std::get_if<protocol::chunk_event>(&*r)) {
      got.insert(got.end(), ch->token_ids.begin(), ch->token_ids.end());
      if (got.size() >= 5 && got.size() < 6) {
        protocol::control_request a;
        a.tag = 7;
        a.verb = protocol::control_verb::abort;
        a.request_id = 900;
        ASSERT_TRUE((*c)->send(protocol::request{a}).ok());
      }
    } else if (const auto* f = std::get_if<protocol::final_event>(&*r)) {
      EXPECT_EQ(f->reason, protocol::finish_reason::abort);
      done = true;
    }
  }
  ASSERT_LT(got.size(), full.size());
  EXPECT_TRUE(std::equal(got.begin(), got.end(), full.begin())) << "the partial output is a prefix";
  protocol::reply st = control(**c, protocol::control_verb::stats, 8);
  while (!std::holds_alternative<protocol::stats_reply>(st)) {  // the abort's ack may come first
    auto r = (*c)->receive(20s);
    ASSERT_TRUE(r.ok()) << r.get_status().to_string();
    st = *r;
  }
  const auto* sr = std::get_if<protocol::stats_reply>(&st);
  double ahead = 0;
  for (const auto& [k, v] : sr->entries) {
    if (k == "steps_planned_ahead") ahead = v;
  }
  EXPECT_GT(ahead, 0) << "no step was planned ahead";
}

// --speculative-tokens: decode steps feed prompt-lookup drafts and keep what the
// model would have sampled. 8 concurrent clients with prompts that repeat
// themselves (so drafts are made) get the engine-alone tokens and log-probs,
// in process and through a worker process (the drafts and their seeds cross
// the worker link); the stats count the verify passes and drafts.
class serve_speculative : public serve, public ::testing::WithParamInterface<bool> {};

TEST_P(serve_speculative, outputs_equal_the_engine_alone) {
  std::vector<std::string> extra = {"--speculative-tokens", "4", "--speculative-method", "ngram",
                                    "--deterministic"};
  if (GetParam()) extra.push_back("--worker-process");
  server_process srv(model_, extra);
  ASSERT_FALSE(srv.endpoint().empty());
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 8; ++i) {
    std::vector<int32_t> p;
    for (int k = 0; k < 30 + 23 * i; ++k) p.push_back(int32_t((k % (5 + i)) * 37 + i) % 500 + 6);
    prompts.push_back(p);
  }
  expect_concurrent_clients_get_the_engine_alone(srv, prompts, 24, 700);

  transport::client_params cp;
  cp.endpoint = srv.endpoint();
  auto c = transport::client::connect(cp);
  ASSERT_TRUE(c.ok());
  protocol::reply st = control(**c, protocol::control_verb::stats, 8);
  ASSERT_TRUE(std::holds_alternative<protocol::stats_reply>(st));
  std::map<std::string, double> stats;
  for (const auto& [k, v] : std::get<protocol::stats_reply>(st).entries) stats[k] = v;
  EXPECT_GT(stats["spec_verify_passes"], 0);
  EXPECT_GT(stats["spec_draft_tokens"], stats["spec_accepted_tokens"]);
  std::printf("%s: %.0f verify passes, %.0f of %.0f drafts kept\n",
              GetParam() ? "worker process" : "in process", stats["spec_verify_passes"],
              stats["spec_accepted_tokens"], stats["spec_draft_tokens"]);
}

INSTANTIATE_TEST_SUITE_P(serve, serve_speculative, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "worker_process" : "in_process";
                         });

TEST(serve_flags, speculative_tokens_past_the_pass_limit_or_mtp_without_its_block_are_refused) {
  const std::string serve = std::string(HART_BINARY) + " serve --model " + HART_TEST_DATA + "/tiny-a";
  for (const char* k : {"8", "-1"}) {
    const command_result r = command_run(serve + " --speculative-tokens " + k);
    EXPECT_NE(r.exit_code, 0) << k;
    EXPECT_NE(r.out.find("--speculative-tokens"), std::string::npos) << r.out;
  }
  // tiny-a has no MTP block (its Hugging Face reference drops mtp.*): mtp drafting is refused.
  const command_result mtp = command_run(serve + " --speculative-tokens 2");
  EXPECT_NE(mtp.exit_code, 0);
  EXPECT_NE(mtp.out.find("has no MTP block"), std::string::npos) << mtp.out;
}

INSTANTIATE_TEST_SUITE_P(serve, serve_overlap, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "worker_process" : "in_process";
                         });

}  // namespace
}  // namespace hart::testing
