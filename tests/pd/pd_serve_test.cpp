// Prefill/decode disaggregation end to end (docs/pd.md): `hart serve --role
// prefill` and `hart serve --role decode --prefill-endpoint EP` as two
// processes on 127.0.0.1, the decode one driven by the message-API client,
// against a colocated `hart serve` (--role both), all --deterministic:
// - every output equals the colocated one token for token, log-probs
//   bitwise (greedy and seeded sampling, top log-probs), on tiny-a/b/c,
//   prompts of 3..600 tokens across the compression, window and page edges;
// - a second request sharing a prefix hits the decode side's cache and
//   transfers fewer full pages;
// - a prefill server that is not running, or is killed, fails the request
//   with `unavailable` and a message naming the prefill server, and the
//   decode server holds no page afterwards (a cache flush frees them all);
// - a prefill server that sends pages of another layout, or a chunk whose
//   floats do not fit the layout, gets kvRefuse with the reason, and the
//   request fails with a typed error, no page held (the misbehaving prefill
//   server is this test: a real ROUTER speaking the real wire).
#include "runtime/pd/link_socket.h"
#include "runtime/pd_link/pd_codec.h"
#include "runtime/transport/client.h"
#include "tests/command_run.h"
#include "tests/serve/server_process.h"
#include "tests/serve/server_stats.h"

#include <gtest/gtest.h>
#include <zmq.hpp>

#include <csignal>
#include <random>
#include <string>
#include <thread>

namespace hart::testing {
namespace {

using namespace std::chrono_literals;

std::string model_path(const std::string& name) {
  return std::string(HART_TEST_DATA) + "/" + name;
}

std::vector<int32_t> random_prompt(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p(n);
  for (int32_t& t : p) t = int32_t(2 + rng() % 500);  // tiny models: vocab 512; 0/1 are BOS/EOS
  return p;
}

protocol::generate_request request(uint64_t id, const std::vector<int32_t>& prompt, uint32_t n_new) {
  protocol::generate_request g;
  g.request_id = id;
  g.kind = protocol::prompt_kind::token_ids;
  g.token_ids.assign(prompt.begin(), prompt.end());
  g.sampling.temperature = 0.0f;
  g.sampling.max_new_tokens = n_new;
  g.sampling.ignore_eos = true;
  g.sampling.logprobs = true;
  return g;
}

transport::sample_output generate_one(transport::client& c, const protocol::generate_request& g) {
  auto r = c.generate(g, 60s);
  EXPECT_TRUE(r.ok()) << "request " << g.request_id << ": " << r.get_status().to_string();
  if (!r.ok() || r->samples.size() != 1) return {};
  return r->samples[0];
}

protocol::control_request abort_request(uint64_t tag, uint64_t id) {
  protocol::control_request q;
  q.tag = tag;
  q.verb = protocol::control_verb::abort;
  q.request_id = id;
  return q;
}

void expect_same(const transport::sample_output& pd, const transport::sample_output& colocated) {
  EXPECT_EQ(pd.token_ids, colocated.token_ids);
  ASSERT_EQ(pd.logprobs.size(), colocated.logprobs.size());
  for (size_t i = 0; i < pd.logprobs.size(); ++i)
    EXPECT_EQ(pd.logprobs[i], colocated.logprobs[i]) << "token " << i;
  EXPECT_EQ(pd.final.reason, colocated.final.reason);
}

// A prefill server, a decode server using it and a colocated server, of one model.
struct pd_servers {
  explicit pd_servers(const std::string& model, const std::vector<std::string>& extra = {})
      : prefill(model, with(extra, {"--role", "prefill"})),
        decode(model, with(extra, {"--role", "decode", "--prefill-endpoint", prefill.endpoint()})),
        colocated(model, extra) {}
  static std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }
  server_process prefill, decode, colocated;
};

class pd_serve : public ::testing::TestWithParam<const char*> {};

TEST_P(pd_serve, outputs_equal_the_colocated_server) {
  pd_servers s(model_path(GetParam()));
  ASSERT_FALSE(s.prefill.endpoint().empty());
  ASSERT_FALSE(s.decode.endpoint().empty());
  std::unique_ptr<transport::client> d = connect(s.decode), c = connect(s.colocated);
  uint64_t id = 1;
  // Around the CSA (4) and HCA (16) blocks, the window (32) and the page (128).
  for (size_t n : {3, 15, 16, 17, 31, 32, 33, 127, 128, 129, 255, 256, 300, 511, 600}) {
    SCOPED_TRACE("prompt of " + std::to_string(n) + " tokens");
    const protocol::generate_request g = request(id++, random_prompt(n, uint32_t(n)), 6);
    expect_same(generate_one(*d, g), generate_one(*c, g));
  }
  {
    SCOPED_TRACE("seeded sampling, top log-probs");
    protocol::generate_request g = request(id++, random_prompt(200, 7), 8);
    g.sampling.temperature = 0.9f;
    g.sampling.has_seed = true;
    g.sampling.seed = 1234;
    g.sampling.top_logprobs = 3;
    expect_same(generate_one(*d, g), generate_one(*c, g));
  }
  std::map<std::string, double> st = stats_after_flush(*d, 100);
  EXPECT_EQ(st["cache_full_pages_used"], 0);
  EXPECT_EQ(st["cache_swa_pages_used"], 0);
  EXPECT_EQ(st["pd_completed"], double(id - 1));
  EXPECT_EQ(st["pd_failed"], 0);
  EXPECT_EQ(st["pd_transfers_in_flight"], 0);
}

INSTANTIATE_TEST_SUITE_P(tiny, pd_serve, ::testing::Values("tiny-a", "tiny-b", "tiny-c"),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           std::string n = i.param;
                           n.erase(n.find('-'), 1);
                           return n;
                         });

TEST(pd_serve_prefix, a_prefix_hit_on_the_decode_side_transfers_fewer_pages) {
  pd_servers s(model_path("tiny-a"));
  std::unique_ptr<transport::client> d = connect(s.decode), c = connect(s.colocated);
  const std::vector<int32_t> a = random_prompt(600, 11);
  // 4 whole pages of 128 shared; the window (32) of its last position reaches back into
  // them, into the SWA pages of the decode side's own prefix (not imported: they are its own).
  std::vector<int32_t> b(a.begin(), a.begin() + 520);
  b.push_back(7);
  b.push_back(8);

  expect_same(generate_one(*d, request(1, a, 6)), generate_one(*c, request(1, a, 6)));
  std::map<std::string, double> first = stats_of(*d, 10);
  expect_same(generate_one(*d, request(2, b, 6)), generate_one(*c, request(2, b, 6)));
  std::map<std::string, double> second = stats_of(*d, 20);

  const double a_pages = first["pd_full_pages_imported"];
  const double b_pages = second["pd_full_pages_imported"] - a_pages;
  EXPECT_EQ(a_pages, 5) << "600 positions: 5 pages";
  EXPECT_EQ(second["pd_full_pages_cached"] - first["pd_full_pages_cached"], 4) << "the shared 512 positions";
  EXPECT_EQ(b_pages, 1) << "only the page past the prefix";
  std::map<std::string, double> st = stats_after_flush(*d, 30);
  EXPECT_EQ(st["cache_full_pages_used"], 0);
  EXPECT_EQ(st["cache_swa_pages_used"], 0);
}

// The request fails with unavailable naming the prefill server, within the timeout and
// not much later, and the decode server holds no page once its cache is flushed.
void expect_prefill_unavailable(server_process& decode, const std::string& prefill_ep, uint64_t id) {
  std::unique_ptr<transport::client> d = connect(decode);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = d->generate(request(id, random_prompt(300, 3), 4), 60s);
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.get_status().code(), status_code::unavailable) << r.get_status().to_string();
  EXPECT_NE(r.get_status().message().find("prefill server " + prefill_ep), std::string::npos)
      << r.get_status().message();
  EXPECT_NE(r.get_status().message().find("no answer within 1000 ms"), std::string::npos)
      << r.get_status().message();
  EXPECT_LT(took, 20s);
  std::map<std::string, double> st = stats_after_flush(*d, 40);
  EXPECT_EQ(st["cache_full_pages_used"], 0);
  EXPECT_EQ(st["cache_swa_pages_used"], 0);
  EXPECT_EQ(st["pd_timed_out"], 1);
  EXPECT_EQ(st["pd_transfers_in_flight"], 0);
  EXPECT_EQ(st["running"], 0);
}

TEST(pd_serve_failure, a_prefill_server_that_is_not_running) {
  std::string ep;
  {
    server_process gone(model_path("tiny-a"), {"--role", "prefill"});
    ep = gone.endpoint();
  }
  ASSERT_FALSE(ep.empty());
  server_process decode(model_path("tiny-a"),
                        {"--role", "decode", "--prefill-endpoint", ep, "--prefill-timeout-ms", "1000"});
  expect_prefill_unavailable(decode, ep, 1);
}

TEST(pd_serve_failure, a_prefill_server_killed) {
  server_process prefill(model_path("tiny-a"), {"--role", "prefill"});
  server_process decode(model_path("tiny-a"), {"--role", "decode", "--prefill-endpoint", prefill.endpoint(),
                                               "--prefill-timeout-ms", "1000"});
  {
    std::unique_ptr<transport::client> d = connect(decode);
    EXPECT_EQ(generate_one(*d, request(1, random_prompt(150, 2), 4)).token_ids.size(), 4u);
  }
  ASSERT_EQ(kill(prefill.pid(), SIGKILL), 0);
  expect_prefill_unavailable(decode, prefill.endpoint(), 2);
}

// This test is the prefill server: it answers the decode server's prefill with `chunk`
// (built from the prefill message) and returns what the decode server answers.
struct bad_prefill_server {
  zmq::context_t ctx;
  zmq::socket_t router = pd::link_socket(ctx, zmq::socket_type::router);
  std::string endpoint;

  bad_prefill_server() {
    router.set(zmq::sockopt::rcvtimeo, 30000);
    router.bind("tcp://127.0.0.1:*");
    endpoint = router.get(zmq::sockopt::last_endpoint);
  }

  pd_link::pd_message answer(const std::function<kv_pages(const pd_link::prefill_request&)>& chunk) {
    zmq::message_t peer, frame;
    if (!router.recv(peer) || !router.recv(frame)) return {};
    auto m = pd_link::decode(frame.data(), frame.size());
    EXPECT_TRUE(m.ok()) << m.get_status().to_string();
    const auto* p = std::get_if<pd_link::prefill_request>(&m->body);
    EXPECT_NE(p, nullptr);
    if (!p) return {};
    EXPECT_TRUE(
        pd::link_send(router, &peer, {m->request_id, m->transfer_id, pd_link::kv_chunk{chunk(*p)}}).ok());
    pd_link::kv_done done;
    done.first_token = 5;
    done.n_chunks = 1;
    EXPECT_TRUE(pd::link_send(router, &peer, {m->request_id, m->transfer_id, done}).ok());
    if (!router.recv(peer) || !router.recv(frame)) return {};
    auto reply = pd_link::decode(frame.data(), frame.size());
    EXPECT_TRUE(reply.ok());
    return reply.ok() ? *reply : pd_link::pd_message{};
  }
};

kv_pages one_page_chunk(const pd_link::prefill_request& p, size_t full_floats) {
  kv_pages kv;
  kv.n_tokens = int64_t(p.tokens.size());
  kv.layout = p.layout;
  kv.page_size = p.page_size;
  kv.first_full = 0;
  kv.first_swa = 0;
  kv.first_page = 0;
  kv.end_page = 1;
  kv.full.assign(full_floats, 0.5f);
  kv.swa.assign(full_floats, 0.5f);
  return kv;
}

TEST(pd_serve_failure, a_bad_chunk_is_refused_and_fails_the_request) {
  bad_prefill_server bad;
  server_process decode(model_path("tiny-a"), {"--role", "decode", "--prefill-endpoint", bad.endpoint});
  struct spoilt {
    const char* what;
    std::function<kv_pages(const pd_link::prefill_request&)> chunk;
    pd_link::refuse_reason reason;
    status_code code;
  };
  const std::vector<spoilt> cases = {
      {"another layout",
       [](const pd_link::prefill_request& p) {
         kv_pages kv = one_page_chunk(p, 8);
         kv.layout ^= 1;
         return kv;
       },
       pd_link::refuse_reason::layout_mismatch, status_code::failed_precondition},
      {"floats that do not fill a page of this layout",
       [](const pd_link::prefill_request& p) { return one_page_chunk(p, 8); },
       pd_link::refuse_reason::bad_chunk, status_code::internal},
  };
  uint64_t id = 1;
  for (const spoilt& sp : cases) {
    SCOPED_TRACE(sp.what);
    std::unique_ptr<transport::client> d = connect(decode);
    status_or<transport::generation_result> r = status(status_code::internal, "unset");
    std::thread client([&] { r = d->generate(request(id, random_prompt(100, 4), 4), 60s); });
    const pd_link::pd_message reply = bad.answer(sp.chunk);
    client.join();
    ASSERT_TRUE(std::holds_alternative<pd_link::kv_refuse>(reply.body)) << "the decode server's answer";
    EXPECT_EQ(std::get<pd_link::kv_refuse>(reply.body).reason, sp.reason)
        << std::get<pd_link::kv_refuse>(reply.body).message;
    EXPECT_NE(reply.request_id, 0u);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.get_status().code(), sp.code) << r.get_status().to_string();
    EXPECT_NE(r.get_status().message().find("prefill server " + bad.endpoint), std::string::npos);
    std::map<std::string, double> st = stats_after_flush(*d, 10 * id);
    EXPECT_EQ(st["cache_full_pages_used"], 0);
    EXPECT_EQ(st["cache_swa_pages_used"], 0);
    EXPECT_EQ(st["pd_failed"], double(id));
    ++id;
  }
}

// What a role does not take is refused before the model loads: exit 1 with why.
TEST(pd_serve_startup, options_a_role_does_not_take) {
  const std::string serve = std::string(HART_BINARY) + " serve -m " + model_path("tiny-a") + " ";
  const struct {
    std::string args, says;
  } cases[] = {
      {"--role decode", "--role decode needs --prefill-endpoint"},
      {"--prefill-endpoint tcp://127.0.0.1:1", "--prefill-endpoint is for --role decode"},
      {"--role prefill --http-bind 127.0.0.1:0", "--role prefill answers decode servers only"},
      {"--role decode --prefill-endpoint tcp://127.0.0.1:1 --worker-process", "unimplemented"},
      {"--role prefill --device cuda", "unimplemented"},
      {"--role middle", "--role"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.args);
    const command_result r = command_run(serve + c.args);
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << r.out;
  }
}

// A client's abort while the prompt is with the prefill server: the generation ends with
// reason abort, the prefill server is told (kvRefuse aborted), no page stays held.
TEST(pd_serve_failure, an_abort_during_the_hand_off) {
  bad_prefill_server slow;  // takes the prefill and never answers it
  server_process decode(model_path("tiny-a"), {"--role", "decode", "--prefill-endpoint", slow.endpoint});
  std::unique_ptr<transport::client> d = connect(decode);
  ASSERT_TRUE(d->send(protocol::request{request(9, random_prompt(100, 5), 4)}).ok());
  zmq::message_t peer, frame;
  ASSERT_TRUE(slow.router.recv(peer) && slow.router.recv(frame)) << "the prefill message";
  ASSERT_TRUE(d->send(protocol::request{abort_request(1, 9)}).ok());
  bool ended = false;
  while (!ended) {
    auto r = d->receive(30s);
    ASSERT_TRUE(r.ok()) << r.get_status().to_string();
    if (auto* f = std::get_if<protocol::final_event>(&*r)) {
      EXPECT_EQ(f->request_id, 9u);
      EXPECT_EQ(f->reason, protocol::finish_reason::abort);
      ended = true;
    }
  }
  ASSERT_TRUE(slow.router.recv(peer) && slow.router.recv(frame)) << "the decode server's refusal";
  auto m = pd_link::decode(frame.data(), frame.size());
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(std::holds_alternative<pd_link::kv_refuse>(m->body));
  EXPECT_EQ(std::get<pd_link::kv_refuse>(m->body).reason, pd_link::refuse_reason::aborted);
  std::map<std::string, double> st = stats_after_flush(*d, 10);
  EXPECT_EQ(st["cache_full_pages_used"], 0);
  EXPECT_EQ(st["cache_swa_pages_used"], 0);
  EXPECT_EQ(st["pd_transfers_in_flight"], 0);
}

}  // namespace
}  // namespace hart::testing
