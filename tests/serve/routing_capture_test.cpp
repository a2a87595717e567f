// Routing capture for replay (GenerateRequest.returnRouting) through a real
// `hart serve` process on 127.0.0.1, in process and with `--worker-process`
// (the routing then crosses the worker link): every sample's routed experts
// per MoE layer and indexer picks per CSA layer, at every position the model
// computed, equal what the engine computes alone for the same tokens (the
// server is --deterministic, so batching does not change a decision); the
// prompt is computed even when the prefix cache holds it; requests that do
// not ask get none; sequences preempted and recomputed report the same; the
// rollout client hands it out; a routing over --routing-ids-per-message comes
// in parts that both clients join.
#include "rollout/rollout_client.h"
#include "runtime/model/engine.h"
#include "runtime/transport/client.h"
#include "tests/serve/server_process.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <variant>
#include <vector>

namespace hart::testing {
namespace {

using namespace std::chrono_literals;

const std::string k_model = std::string(HART_TEST_DATA) + "/tiny-a";

std::vector<int32_t> prompt_of(int64_t n, int salt) {
  std::vector<int32_t> p;
  for (int64_t k = 0; k < n; ++k) p.push_back(int32_t((k * 37 + salt * 11 + k * k) % 500 + 5));
  return p;
}

// The engine alone over `fed` (the prompt, then one token per decode step, as
// the server feeds them), its trace rows concatenated per layer.
struct alone_routing {
  std::map<int64_t, std::vector<int32_t>> experts, picks;
};

alone_routing run_alone(const engine& eng, const std::vector<int32_t>& prompt,
                        const std::vector<int32_t>& generated) {
  alone_routing out;
  sequence_state s = eng.new_sequence();
  auto add = [&](const forward_trace& t) {
    for (const auto& [l, ids] : t.experts)
      out.experts[l].insert(out.experts[l].end(), ids.begin(), ids.end());
    for (const auto& [l, ids] : t.topk) out.picks[l].insert(out.picks[l].end(), ids.begin(), ids.end());
  };
  forward_trace t;
  std::vector<float> logits;
  EXPECT_TRUE(eng.prefill(s, prompt, logits_request::last, &logits, &t).ok());
  add(t);
  for (size_t i = 0; i + 1 < generated.size(); ++i) {  // the last token is never fed
    forward_trace d;
    EXPECT_TRUE(eng.forward({{&s, {generated[i]}, logits_request::last}}, &logits, &d).ok());
    add(d);
  }
  return out;
}

// `with_picks`: the request asked for the indexer picks too (else it gets none).
void expect_routing_equal(const protocol::routing_info& got, const alone_routing& want, int64_t positions,
                          const std::string& what, bool with_picks = true) {
  SCOPED_TRACE(what);
  EXPECT_EQ(int64_t(got.positions), positions);
  ASSERT_EQ(got.experts.size(), want.experts.size()) << "MoE layers";
  if (!with_picks) {
    EXPECT_TRUE(got.picks.empty()) << "indexer picks returned unasked";
  } else {
    ASSERT_EQ(got.picks.size(), want.picks.size()) << "CSA layers";
    ASSERT_FALSE(got.picks.empty()) << "tiny-a has CSA layers";
  }
  for (const protocol::layer_routing& l : got.experts) {
    ASSERT_TRUE(want.experts.count(l.layer)) << "layer " << l.layer;
    EXPECT_EQ(int64_t(l.ids.size()), positions * int64_t(l.k)) << "layer " << l.layer;
    EXPECT_EQ(l.ids, want.experts.at(l.layer)) << "routed experts, layer " << l.layer;
  }
  for (const protocol::layer_routing& l : got.picks) {
    ASSERT_TRUE(want.picks.count(l.layer)) << "layer " << l.layer;
    EXPECT_EQ(l.ids, want.picks.at(l.layer)) << "indexer picks, layer " << l.layer;
  }
}

// The engine alone, loaded once (deterministic, as the server runs).
const engine& alone() {
  static const std::unique_ptr<engine> eng = [] {
    engine_params p;
    p.model_dir = k_model;
    p.deterministic = true;
    auto e = engine::load(p);
    EXPECT_TRUE(e.ok()) << e.get_status().to_string();
    return e.ok() ? std::move(e).value() : nullptr;
  }();
  return *eng;
}

class routing_capture : public ::testing::TestWithParam<bool> {};

protocol::generate_request request(uint64_t id, const std::vector<int32_t>& prompt, bool capture,
                                   uint32_t n) {
  protocol::generate_request g;
  g.request_id = id;
  g.kind = protocol::prompt_kind::token_ids;
  g.token_ids.assign(prompt.begin(), prompt.end());
  g.sampling.temperature = n > 1 ? 1.0f : 0.0f;
  g.sampling.has_seed = true;
  g.sampling.seed = 11;
  g.sampling.n = n;
  g.sampling.max_new_tokens = 6;
  g.sampling.ignore_eos = true;
  g.return_routing = capture;
  g.return_indexer_picks = capture;
  return g;
}

TEST_P(routing_capture, every_computed_position_equals_the_engine_alone) {
  const bool worker_process = GetParam();
  std::vector<std::string> extra = {"--page-size", "128"};
  if (worker_process) extra.push_back("--worker-process");
  server_process srv(k_model, extra);
  ASSERT_FALSE(srv.endpoint().empty()) << "the server did not start";
  transport::client_params cp;
  cp.endpoint = srv.endpoint();
  auto c = transport::client::connect(cp);
  ASSERT_TRUE(c.ok()) << c.get_status().to_string();

  // A 200-token prompt cached first: the capturing request computes it anyway.
  const std::vector<int32_t> prompt = prompt_of(200, 1);
  auto warm = (*c)->generate(request(1, prompt, false, 1), 120s);
  ASSERT_TRUE(warm.ok()) << warm.get_status().to_string();
  EXPECT_EQ(warm->samples[0].final.routing.positions, 0u) << "routing returned unasked";
  auto again = (*c)->generate(request(2, prompt, false, 1), 120s);
  ASSERT_TRUE(again.ok());
  EXPECT_GE(again->samples[0].final.usage.cached_tokens, 128u) << "the prompt is in the prefix cache";

  auto r = (*c)->generate(request(3, prompt, true, 2), 120s);
  ASSERT_TRUE(r.ok()) << r.get_status().to_string();
  ASSERT_EQ(r->samples.size(), 2u);
  for (size_t i = 0; i < r->samples.size(); ++i) {
    const transport::sample_output& s = r->samples[i];
    EXPECT_EQ(s.final.usage.cached_tokens, 0u)
        << "sample " << i << ": a capturing request computes its prompt";
    EXPECT_EQ(s.final.error_message, "");
    const std::vector<int32_t> gen(s.token_ids.begin(), s.token_ids.end());
    ASSERT_EQ(gen.size(), 6u);
    expect_routing_equal(s.final.routing, run_alone(alone(), prompt, gen),
                         int64_t(prompt.size() + gen.size() - 1), "sample " + std::to_string(i));
  }
}

TEST_P(routing_capture, rollout_client_hands_it_out) {
  std::vector<std::string> extra;
  if (GetParam()) extra.push_back("--worker-process");
  server_process srv(k_model, extra);
  ASSERT_FALSE(srv.endpoint().empty());
  rollout_client_params rp;
  rp.endpoint = srv.endpoint();
  auto rc = rollout_client::connect(rp);
  ASSERT_TRUE(rc.ok()) << rc.get_status().to_string();
  std::vector<rollout_prompt> batch(2);
  for (int i = 0; i < 2; ++i) {
    const std::vector<int32_t> p = prompt_of(30 + 17 * i, 2 + i);
    batch[i].token_ids.assign(p.begin(), p.end());
    batch[i].sampling.temperature = 0;
    batch[i].sampling.max_new_tokens = 4;
    batch[i].sampling.ignore_eos = true;
    batch[i].return_routing = i == 0;  // experts only: no indexer picks asked
  }
  auto res = (*rc)->generate(batch);
  ASSERT_TRUE(res.ok()) << res.get_status().to_string();
  const rollout_sample& s = res->groups[0].samples[0];
  const std::vector<int32_t> p0(batch[0].token_ids.begin(), batch[0].token_ids.end());
  const std::vector<int32_t> gen(s.token_ids.begin(), s.token_ids.end());
  expect_routing_equal(s.routing, run_alone(alone(), p0, gen), int64_t(p0.size() + gen.size() - 1), "rollout",
                       /*with_picks=*/false);
  EXPECT_EQ(res->groups[1].samples[0].routing.positions, 0u) << "the second prompt did not ask";
}

// --routing-ids-per-message 100 (tiny-a: 6 x 2 expert ids + 2 x 8 picks a
// position, so 3 positions a part): the routing arrives in RoutingPart replies
// before each final; the transport client and the rollout client join them
// into exactly the routing the engine computes alone.
TEST(routing_capture_split, routing_over_the_message_limit_arrives_in_parts_and_is_joined) {
  server_process srv(k_model, {"--routing-ids-per-message", "100"});
  ASSERT_FALSE(srv.endpoint().empty()) << "the server did not start";
  transport::client_params cp;
  cp.endpoint = srv.endpoint();
  auto c = transport::client::connect(cp);
  ASSERT_TRUE(c.ok()) << c.get_status().to_string();
  const std::vector<int32_t> prompt = prompt_of(45, 4);
  ASSERT_TRUE((*c)->send(protocol::request{request(7, prompt, true, 1)}).ok());
  uint32_t parts = 0, first = 0;  // the raw replies: parts in position order, then the final counting them
  protocol::final_event fin;
  for (;;) {
    auto r = (*c)->receive(60s);
    ASSERT_TRUE(r.ok()) << r.get_status().to_string();
    if (auto* p = std::get_if<protocol::routing_part>(&*r)) {
      EXPECT_EQ(p->first_position, first);
      first += p->routing.positions;
      ++parts;
    } else if (auto* f = std::get_if<protocol::final_event>(&*r)) {
      fin = *f;
      break;
    }
  }
  EXPECT_GT(parts, 10u);
  EXPECT_EQ(fin.routing_parts, parts);
  EXPECT_EQ(fin.routing.positions, 0u) << "nothing inline";
  EXPECT_EQ(first, prompt.size() + fin.usage.completion_tokens - 1);

  auto r = (*c)->generate(request(8, prompt, true, 2), 120s);
  ASSERT_TRUE(r.ok()) << r.get_status().to_string();
  for (size_t i = 0; i < r->samples.size(); ++i) {
    const transport::sample_output& s = r->samples[i];
    const std::vector<int32_t> gen(s.token_ids.begin(), s.token_ids.end());
    expect_routing_equal(s.final.routing, run_alone(alone(), prompt, gen),
                         int64_t(prompt.size() + gen.size() - 1), "sample " + std::to_string(i));
  }

  rollout_client_params rp;
  rp.endpoint = srv.endpoint();
  auto rc = rollout_client::connect(rp);
  ASSERT_TRUE(rc.ok()) << rc.get_status().to_string();
  std::vector<rollout_prompt> batch(1);
  batch[0].token_ids.assign(prompt.begin(), prompt.end());
  batch[0].sampling.temperature = 0;
  batch[0].sampling.max_new_tokens = 4;
  batch[0].sampling.ignore_eos = true;
  batch[0].return_routing = true;
  batch[0].return_indexer_picks = true;
  auto res = (*rc)->generate(batch);
  ASSERT_TRUE(res.ok()) << res.get_status().to_string();
  const rollout_sample& s = res->groups[0].samples[0];
  const std::vector<int32_t> gen(s.token_ids.begin(), s.token_ids.end());
  expect_routing_equal(s.routing, run_alone(alone(), prompt, gen), int64_t(prompt.size() + gen.size() - 1),
                       "rollout");
}

// A pool too small for every sequence's second page: sequences are preempted
// mid-decode and recomputed from position 0 (a capturing request never takes
// the prefix cache), and their routing is rewritten where it was.
TEST(routing_capture_preemption, preempted_and_recomputed_sequences_report_the_same_routing) {
  server_process srv(k_model, {"--page-size", "128", "--full-pages", "14", "--swa-pages", "28"});
  ASSERT_FALSE(srv.endpoint().empty());
  constexpr int k_clients = 12;
  std::vector<std::vector<int32_t>> prompts(k_clients);
  std::vector<transport::sample_output> got(k_clients);
  std::vector<std::string> errors(k_clients);
  std::vector<std::thread> threads;
  for (int i = 0; i < k_clients; ++i) {
    prompts[i] = prompt_of(118 + i % 5, 10 + i);
    threads.emplace_back([&, i] {
      transport::client_params cp;
      cp.endpoint = srv.endpoint();
      auto c = transport::client::connect(cp);
      if (!c.ok()) return void(errors[i] = c.get_status().to_string());
      protocol::generate_request g = request(100 + i, prompts[i], true, 1);
      g.sampling.max_new_tokens = 16;  // every sequence crosses into a second page
      auto r = (*c)->generate(g, 120s);
      if (!r.ok()) return void(errors[i] = r.get_status().to_string());
      got[i] = r->samples[0];
    });
  }
  for (auto& t : threads) t.join();
  transport::client_params cp;
  cp.endpoint = srv.endpoint();
  auto c = transport::client::connect(cp);
  ASSERT_TRUE(c.ok());
  protocol::control_request q;
  q.tag = 5;
  q.verb = protocol::control_verb::stats;
  ASSERT_TRUE((*c)->send(protocol::request{q}).ok());
  auto st = (*c)->receive(20s);
  ASSERT_TRUE(st.ok());
  double preemptions = -1;
  if (const auto* sr = std::get_if<protocol::stats_reply>(&*st)) {
    for (const auto& [k, v] : sr->entries) {
      if (k == "preemptions") preemptions = v;
    }
  }
  EXPECT_GT(preemptions, 0) << "the pool was meant to force preemptions";
  for (int i = 0; i < k_clients; ++i) {
    ASSERT_EQ(errors[i], "") << "client " << i;
    const std::vector<int32_t> gen(got[i].token_ids.begin(), got[i].token_ids.end());
    ASSERT_EQ(gen.size(), 16u) << "client " << i;
    expect_routing_equal(got[i].final.routing, run_alone(alone(), prompts[i], gen),
                         int64_t(prompts[i].size() + gen.size() - 1), "client " + std::to_string(i));
  }
}

INSTANTIATE_TEST_SUITE_P(serve, routing_capture, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "worker_process" : "in_process";
                         });

}  // namespace
}  // namespace hart::testing
