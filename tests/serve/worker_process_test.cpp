// `hart serve --worker-process` as a real process: the engine runs in a spawned
// `hart worker`. Killing that worker mid-decode ends its generation with
// reason error; the server respawns a worker, serves a new generation exactly
// as the engine computes it alone, and leaks no pages.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include "runtime/model/engine.h"
#include "runtime/transport/client.h"
#include "tests/serve/server_process.h"

namespace hart::testing {
namespace {

using namespace std::chrono_literals;

protocol::generate_request greedy_request(uint64_t id, const std::vector<int32_t>& prompt, uint32_t n_new) {
  protocol::generate_request g;
  g.request_id = id;
  g.kind = protocol::prompt_kind::token_ids;
  g.token_ids.assign(prompt.begin(), prompt.end());
  g.sampling.temperature = 0;
  g.sampling.max_new_tokens = n_new;
  g.sampling.ignore_eos = true;
  return g;
}

protocol::reply control(transport::client& c, protocol::control_verb verb, uint64_t tag) {
  protocol::control_request q;
  q.tag = tag;
  q.verb = verb;
  EXPECT_TRUE(c.send(protocol::request{q}).ok());
  for (;;) {
    auto r = c.receive(30s);
    EXPECT_TRUE(r.ok()) << r.get_status().to_string();
    if (!r.ok()) return protocol::error_reply{};
    if (!std::holds_alternative<protocol::chunk_event>(*r) && !std::holds_alternative<protocol::final_event>(*r)) return *r;
  }
}

TEST(worker_process, killed_worker_fails_its_requests_and_the_server_keeps_serving) {
  const std::string model = std::string(HART_TEST_DATA) + "/tiny-a";
  server_process srv(model, {"--worker-process", "--full-pages", "64", "--swa-pages", "24"});
  ASSERT_FALSE(srv.endpoint().empty()) << "the server did not print its endpoint";
  const int64_t first_worker = srv.worker_pid();
  ASSERT_GT(first_worker, 0) << "the server did not print its worker's pid";

  transport::client_params cp;
  cp.endpoint = srv.endpoint();
  auto c = transport::client::connect(cp);
  ASSERT_TRUE(c.ok()) << c.get_status().to_string();
  std::vector<int32_t> prompt;
  for (int k = 0; k < 40; ++k) prompt.push_back(int32_t((k * 37) % 500 + 6));

  // A long greedy generation; kill the worker after a few chunks.
  ASSERT_TRUE((*c)->send(protocol::request{greedy_request(1, prompt, 400)}).ok());
  int chunks = 0;
  bool killed = false;
  protocol::final_event fin;
  for (;;) {
    auto r = (*c)->receive(120s);
    ASSERT_TRUE(r.ok()) << r.get_status().to_string();
    if (std::holds_alternative<protocol::chunk_event>(*r) && ++chunks == 3 && !killed) {
      ASSERT_EQ(kill(pid_t(first_worker), SIGKILL), 0);
      killed = true;
    }
    if (const auto* f = std::get_if<protocol::final_event>(&*r)) {
      fin = *f;
      break;
    }
  }
  ASSERT_TRUE(killed) << "the generation ended before the worker could be killed";
  EXPECT_EQ(fin.reason, protocol::finish_reason::error);
  EXPECT_NE(fin.error_message.find("worker"), std::string::npos) << fin.error_message;
  EXPECT_LT(fin.usage.completion_tokens, 400u);

  // A new generation runs on a respawned worker and equals the engine alone.
  auto res = (*c)->generate(greedy_request(2, prompt, 24), 120s);
  ASSERT_TRUE(res.ok()) << res.get_status().to_string();
  srv.line();  // the respawned worker's "worker pid" line
  EXPECT_NE(srv.worker_pid(), first_worker);
  engine_params ep;
  ep.model_dir = model;
  ep.deterministic = true;
  auto eng = engine::load(ep);
  ASSERT_TRUE(eng.ok()) << eng.get_status().to_string();
  sequence_state s = (*eng)->new_sequence();
  std::vector<float> logits;
  ASSERT_TRUE((*eng)->prefill(s, prompt, logits_request::last, &logits).ok());
  std::vector<int32_t> want;
  for (int i = 0; i < 24; ++i) {
    const int32_t t = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    want.push_back(t);
    ASSERT_TRUE((*eng)->decode({&s}, {t}, &logits).ok());
  }
  const auto& smp = res->samples[0];
  EXPECT_EQ(std::vector<int32_t>(smp.token_ids.begin(), smp.token_ids.end()), want);
  EXPECT_EQ(smp.final.reason, protocol::finish_reason::length);

  // No pages leaked: after a flush, nothing is in use; the failure is counted.
  control(**c, protocol::control_verb::flush_cache, 10);
  auto st = control(**c, protocol::control_verb::stats, 11);
  ASSERT_TRUE(std::holds_alternative<protocol::stats_reply>(st));
  bool saw_failures = false;
  for (const auto& [k, v] : std::get<protocol::stats_reply>(st).entries) {
    if (k == "cache_full_pages_used" || k == "cache_swa_pages_used" || k == "running") {
      EXPECT_EQ(v, 0.0) << k;
    }
    if (k == "worker_failures") {
      saw_failures = true;
      EXPECT_EQ(v, 1.0);
    }
  }
  EXPECT_TRUE(saw_failures);
}

}  // namespace
}  // namespace hart::testing
