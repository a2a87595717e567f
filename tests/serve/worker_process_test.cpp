// `hart serve --worker-process` as a real process: the engine runs in a spawned
// `hart worker`. Killing that worker mid-decode ends its generation with
// reason error (no retry); the server respawns a worker, serves new concurrent
// generations exactly as the engine computes them alone, and leaks no pages.
// With --worker-restarts 0 the worker is not replaced: later generations end
// with a typed error and the server still answers. A worker killed while
// idle (generations paused in place) is noticed and replaced between steps:
// the paused generations recompute on the new worker and none fails; without
// restarts later generations fail `unavailable`. A frozen worker (SIGSTOP)
// is dropped when its heartbeats stop.
#include "runtime/model/engine.h"
#include "runtime/transport/client.h"
#include "tests/serve/server_process.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>

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

std::vector<int32_t> engine_alone(const std::string& model, const std::vector<int32_t>& prompt, int n_new) {
  engine_params ep;
  ep.model_dir = model;
  ep.deterministic = true;
  auto eng = engine::load(ep);
  EXPECT_TRUE(eng.ok()) << eng.get_status().to_string();
  if (!eng.ok()) return {};
  sequence_state s = (*eng)->new_sequence();
  std::vector<float> logits;
  EXPECT_TRUE((*eng)->prefill(s, prompt, logits_request::last, &logits).ok());
  std::vector<int32_t> want;
  for (int i = 0; i < n_new; ++i) {
    const int32_t t = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    want.push_back(t);
    EXPECT_TRUE((*eng)->decode({&s}, {t}, &logits).ok());
  }
  return want;
}

std::vector<int32_t> make_prompt(int salt) {
  std::vector<int32_t> prompt;
  for (int k = 0; k < 40; ++k) prompt.push_back(int32_t((k * 37 + salt * 101) % 500 + 6));
  return prompt;
}

/// Sends a long greedy generation (id 1), sends `sig` to the worker after 3
/// chunks (SIGKILL: dead; SIGSTOP: frozen), returns the final.
protocol::final_event kill_mid_decode(transport::client& c, int64_t worker_pid, int sig = SIGKILL) {
  EXPECT_TRUE(c.send(protocol::request{greedy_request(1, make_prompt(0), 400)}).ok());
  int chunks = 0;
  bool killed = false;
  for (;;) {
    auto r = c.receive(120s);
    EXPECT_TRUE(r.ok()) << r.get_status().to_string();
    if (!r.ok()) return {};
    if (std::holds_alternative<protocol::chunk_event>(*r) && ++chunks == 3 && !killed) {
      EXPECT_EQ(kill(pid_t(worker_pid), sig), 0);
      killed = true;
    }
    if (const auto* f = std::get_if<protocol::final_event>(&*r)) {
      EXPECT_TRUE(killed) << "the generation ended before the worker could be killed";
      return *f;
    }
  }
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
    if (!std::holds_alternative<protocol::chunk_event>(*r) &&
        !std::holds_alternative<protocol::final_event>(*r))
      return *r;
  }
}

/// `hart serve --worker-process` on tiny-a with a small pool and `flags`, its
/// first worker's pid and a client connected to it; ready() says all came up.
struct worker_server {
  const std::string model = std::string(HART_TEST_DATA) + "/tiny-a";
  server_process srv;
  int64_t first_worker = 0;
  transport::client_params cp;
  std::unique_ptr<transport::client> client;

  explicit worker_server(std::vector<std::string> flags)
      : srv(model, with_pool(std::move(flags))), first_worker(srv.worker_pid()) {
    cp.endpoint = srv.endpoint();
    if (srv.endpoint().empty()) return;
    auto c = transport::client::connect(cp);
    if (c.ok()) client = std::move(c).value();
  }
  bool ready() const { return !srv.endpoint().empty() && first_worker > 0 && client != nullptr; }

 private:
  static std::vector<std::string> with_pool(std::vector<std::string> flags) {
    flags.insert(flags.begin(), {"--worker-process", "--full-pages", "64", "--swa-pages", "24"});
    return flags;
  }
};

/// After a cache flush (tags tag, tag + 1) nothing runs and no page is held;
/// the stats count `worker_failures`.
void expect_nothing_held(transport::client& c, uint64_t tag, double worker_failures) {
  control(c, protocol::control_verb::flush_cache, tag);
  auto st = control(c, protocol::control_verb::stats, tag + 1);
  ASSERT_TRUE(std::holds_alternative<protocol::stats_reply>(st));
  bool saw_failures = false;
  for (const auto& [k, v] : std::get<protocol::stats_reply>(st).entries) {
    if (k == "cache_full_pages_used" || k == "cache_swa_pages_used" || k == "running") {
      EXPECT_EQ(v, 0.0) << k;
    }
    if (k == "worker_failures") {
      saw_failures = true;
      EXPECT_EQ(v, worker_failures);
    }
  }
  EXPECT_TRUE(saw_failures);
}

TEST(worker_process, killed_worker_fails_its_requests_and_the_server_keeps_serving) {
  worker_server w({});
  ASSERT_TRUE(w.ready()) << "the server, its worker or the client did not come up";
  const std::string& model = w.model;
  server_process& srv = w.srv;
  const int64_t first_worker = w.first_worker;
  transport::client& c = *w.client;

  const protocol::final_event fin = kill_mid_decode(c, first_worker);
  EXPECT_EQ(fin.reason, protocol::finish_reason::error);
  EXPECT_NE(fin.error_message.find("worker"), std::string::npos) << fin.error_message;
  EXPECT_LT(fin.usage.completion_tokens, 400u);

  // Three concurrent generations from three clients run on a respawned worker,
  // each equal to the engine alone.
  std::vector<std::unique_ptr<transport::client>> clients;
  for (int i = 0; i < 3; ++i) {
    auto ci = transport::client::connect(w.cp);
    ASSERT_TRUE(ci.ok()) << ci.get_status().to_string();
    ASSERT_TRUE(
        (*ci)->send(protocol::request{greedy_request(uint64_t(10 + i), make_prompt(i + 1), 24)}).ok());
    clients.push_back(std::move(ci).value());
  }
  for (int i = 0; i < 3; ++i) {
    std::vector<int32_t> got;
    protocol::final_event f;
    for (;;) {
      auto r = clients[size_t(i)]->receive(120s);
      ASSERT_TRUE(r.ok()) << r.get_status().to_string();
      if (const auto* ch = std::get_if<protocol::chunk_event>(&*r)) {
        EXPECT_GT(ch->server_time_us, 0u) << "chunks carry the server's step time";
        got.insert(got.end(), ch->token_ids.begin(), ch->token_ids.end());
      }
      if (const auto* fe = std::get_if<protocol::final_event>(&*r)) {
        f = *fe;
        break;
      }
    }
    EXPECT_EQ(f.reason, protocol::finish_reason::length) << f.error_message;
    EXPECT_EQ(got, engine_alone(model, make_prompt(i + 1), 24)) << "request " << i;
  }
  srv.line();  // the respawned worker's "worker pid" line
  EXPECT_NE(srv.worker_pid(), first_worker);
  EXPECT_GT(srv.worker_pid(), 0);

  // No pages leaked: after a flush, nothing is in use; the failure is counted.
  expect_nothing_held(c, 10, 1.0);
}

// A frozen worker (SIGSTOP: its process and socket stay, so neither waitpid
// nor ZeroMQ notice) stops sending heartbeats: its generation ends with error
// within the heartbeat timeout (not the 10-minute step timeout), the server
// kills it, starts another, and the next generation is the engine's.
TEST(worker_process, frozen_worker_is_dropped_by_its_missing_heartbeats) {
  worker_server w({"--worker-heartbeat-timeout-ms", "1000"});
  ASSERT_TRUE(w.ready()) << "the server, its worker or the client did not come up";
  const std::string& model = w.model;
  server_process& srv = w.srv;
  const int64_t first_worker = w.first_worker;
  transport::client& c = *w.client;

  const auto t0 = std::chrono::steady_clock::now();
  const protocol::final_event fin = kill_mid_decode(c, first_worker, SIGSTOP);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s);
  EXPECT_EQ(fin.reason, protocol::finish_reason::error);
  EXPECT_NE(fin.error_message.find("no heartbeat"), std::string::npos) << fin.error_message;
  EXPECT_LT(fin.usage.completion_tokens, 400u);
  EXPECT_EQ(kill(pid_t(first_worker), 0), -1) << "the server killed and reaped its frozen child";

  auto res = c.generate(greedy_request(2, make_prompt(1), 12), 120s);
  ASSERT_TRUE(res.ok()) << res.get_status().to_string();
  EXPECT_EQ(res->samples[0].final.reason, protocol::finish_reason::length)
      << res->samples[0].final.error_message;
  const std::vector<int32_t> want = engine_alone(model, make_prompt(1), 12);
  EXPECT_EQ(std::vector<int32_t>(res->samples[0].token_ids.begin(), res->samples[0].token_ids.end()), want);
  srv.line();  // the respawned worker's "worker pid" line
  EXPECT_NE(srv.worker_pid(), first_worker);
}

TEST(worker_process, without_restarts_later_generations_fail_typed_and_the_server_still_answers) {
  worker_server w({"--worker-restarts", "0"});
  ASSERT_TRUE(w.ready()) << "the server, its worker or the client did not come up";
  const int64_t first_worker = w.first_worker;
  transport::client& c = *w.client;

  const protocol::final_event fin = kill_mid_decode(c, first_worker);
  EXPECT_EQ(fin.reason, protocol::finish_reason::error);

  // No replacement: the next generation ends with an error saying so.
  auto res = c.generate(greedy_request(2, make_prompt(1), 8), 120s);
  ASSERT_TRUE(res.ok()) << res.get_status().to_string();
  EXPECT_EQ(res->samples[0].final.reason, protocol::finish_reason::error);
  EXPECT_NE(res->samples[0].final.error_message.find("not replaced"), std::string::npos)
      << res->samples[0].final.error_message;
  EXPECT_TRUE(res->samples[0].token_ids.empty());

  // The server itself is fine: health answers, nothing is left running, no pages held.
  auto h = control(c, protocol::control_verb::health, 5);
  ASSERT_TRUE(std::holds_alternative<protocol::health_reply>(h));
  EXPECT_TRUE(std::get<protocol::health_reply>(h).ok);
  expect_nothing_held(c, 6, 2.0);
}

/// Receives until the control reply tagged `tag`, adding chunks' tokens to
/// `got` (by request id) and finals to `fin`.
protocol::reply control_collecting(transport::client& c, protocol::control_verb verb,
                                   protocol::pause_mode mode, uint64_t tag,
                                   std::map<uint64_t, std::vector<int32_t>>& got,
                                   std::map<uint64_t, protocol::final_event>& fin) {
  protocol::control_request q;
  q.tag = tag;
  q.verb = verb;
  q.mode = mode;
  EXPECT_TRUE(c.send(protocol::request{q}).ok());
  for (;;) {
    auto r = c.receive(30s);
    EXPECT_TRUE(r.ok()) << r.get_status().to_string();
    if (!r.ok()) return protocol::error_reply{};
    if (const auto* ch = std::get_if<protocol::chunk_event>(&*r)) {
      got[ch->request_id].insert(got[ch->request_id].end(), ch->token_ids.begin(), ch->token_ids.end());
    } else if (const auto* f = std::get_if<protocol::final_event>(&*r)) {
      fin[f->request_id] = *f;
    } else {
      return *r;
    }
  }
}

TEST(worker_process, worker_killed_while_idle_is_replaced_and_nothing_fails) {
  worker_server w({});
  ASSERT_TRUE(w.ready()) << "the server, its worker or the client did not come up";
  const std::string& model = w.model;
  server_process& srv = w.srv;
  const int64_t first_worker = w.first_worker;
  transport::client& c = *w.client;

  // A prefix-cache entry from a finished generation: it must not be matched on the new worker.
  auto warm = c.generate(greedy_request(9, make_prompt(1), 4), 120s);
  ASSERT_TRUE(warm.ok()) << warm.get_status().to_string();

  // Three generations (one sharing that prefix) run a few steps, then pause in place.
  constexpr int n_new = 40;
  std::map<uint64_t, std::vector<int32_t>> got;
  std::map<uint64_t, protocol::final_event> fin;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(c.send(protocol::request{greedy_request(uint64_t(20 + i), make_prompt(i + 1), n_new)}).ok());
  }
  while (got.size() < 3 ||
         std::any_of(got.begin(), got.end(), [](const auto& g) { return g.second.size() < 3; })) {
    auto r = c.receive(120s);
    ASSERT_TRUE(r.ok()) << r.get_status().to_string();
    if (const auto* ch = std::get_if<protocol::chunk_event>(&*r)) {
      got[ch->request_id].insert(got[ch->request_id].end(), ch->token_ids.begin(), ch->token_ids.end());
    }
    ASSERT_FALSE(std::holds_alternative<protocol::final_event>(*r)) << "a generation ended before the pause";
  }
  auto ack =
      control_collecting(c, protocol::control_verb::pause, protocol::pause_mode::in_place, 30, got, fin);
  ASSERT_TRUE(std::holds_alternative<protocol::ack_reply>(ack));
  std::this_thread::sleep_for(300ms);  // the step in flight at the pause, if any, ends

  // Killed while idle: the server notices without a step and starts another worker.
  ASSERT_EQ(kill(pid_t(first_worker), SIGKILL), 0);
  while (srv.worker_pid() == first_worker) ASSERT_FALSE(srv.line().empty()) << "the server's output ended";
  EXPECT_GT(srv.worker_pid(), 0);

  ack = control_collecting(c, protocol::control_verb::resume, protocol::pause_mode::in_place, 31, got, fin);
  ASSERT_TRUE(std::holds_alternative<protocol::ack_reply>(ack));
  while (fin.size() < 3) {
    auto r = c.receive(120s);
    ASSERT_TRUE(r.ok()) << r.get_status().to_string();
    if (const auto* ch = std::get_if<protocol::chunk_event>(&*r)) {
      got[ch->request_id].insert(got[ch->request_id].end(), ch->token_ids.begin(), ch->token_ids.end());
    } else if (const auto* f = std::get_if<protocol::final_event>(&*r)) {
      fin[f->request_id] = *f;
    }
  }
  for (int i = 0; i < 3; ++i) {
    const uint64_t id = uint64_t(20 + i);
    EXPECT_EQ(fin[id].reason, protocol::finish_reason::length) << fin[id].error_message;
    EXPECT_EQ(got[id], engine_alone(model, make_prompt(i + 1), n_new)) << "request " << id;
  }
  // A prefix cached before the loss is recomputed, not read from the empty pages.
  auto again = c.generate(greedy_request(30, make_prompt(1), 8), 120s);
  ASSERT_TRUE(again.ok()) << again.get_status().to_string();
  const std::vector<int32_t> again_ids(again->samples[0].token_ids.begin(),
                                       again->samples[0].token_ids.end());
  EXPECT_EQ(again_ids, engine_alone(model, make_prompt(1), 8));

  expect_nothing_held(c, 32, 1.0);
}

TEST(worker_process, without_restarts_an_idle_death_fails_later_generations_unavailable) {
  worker_server w({"--worker-restarts", "0"});
  ASSERT_TRUE(w.ready()) << "the server, its worker or the client did not come up";
  const int64_t first_worker = w.first_worker;
  transport::client& c = *w.client;
  auto ok = c.generate(greedy_request(1, make_prompt(1), 4), 120s);
  ASSERT_TRUE(ok.ok()) << ok.get_status().to_string();
  EXPECT_EQ(ok->samples[0].final.reason, protocol::finish_reason::length);

  ASSERT_EQ(kill(pid_t(first_worker), SIGKILL), 0);
  std::this_thread::sleep_for(1s);  // several idle checks
  for (uint64_t id = 2; id <= 3; ++id) {
    auto res = c.generate(greedy_request(id, make_prompt(int(id)), 8), 120s);
    ASSERT_TRUE(res.ok()) << res.get_status().to_string();
    EXPECT_EQ(res->samples[0].final.reason, protocol::finish_reason::error);
    EXPECT_NE(res->samples[0].final.error_message.find("unavailable"), std::string::npos)
        << res->samples[0].final.error_message;
    EXPECT_NE(res->samples[0].final.error_message.find("not replaced"), std::string::npos)
        << res->samples[0].final.error_message;
    EXPECT_TRUE(res->samples[0].token_ids.empty());
  }
  auto h = control(c, protocol::control_verb::health, 5);
  ASSERT_TRUE(std::holds_alternative<protocol::health_reply>(h));
  EXPECT_TRUE(std::get<protocol::health_reply>(h).ok);
  expect_nothing_held(c, 6, 3.0);  // the idle loss and the two failed steps
}

}  // namespace
}  // namespace hart::testing
