// A client whose connection closes mid-generation has its generations aborted
// (issue 27, finding 4: a 20,000-token request of a gone client ran to the end).
// Real `hart serve` on tiny-a, real sockets: one client starts a long
// generation of two samples and closes after the first chunk; another client
// watches the server's stats.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>

#include "runtime/transport/client.h"
#include "tests/serve/server_process.h"

namespace hart::testing {
namespace {

std::map<std::string, double> stats(transport::client& c) {
  protocol::control_request q;
  q.tag = 7;
  q.verb = protocol::control_verb::stats;
  EXPECT_TRUE(c.send(protocol::request{q}).ok());
  std::map<std::string, double> out;
  for (int i = 0; i < 10; ++i) {
    auto r = c.receive(std::chrono::milliseconds(5000));
    EXPECT_TRUE(r.ok()) << r.get_status().to_string();
    if (!r.ok()) break;
    if (const auto* s = std::get_if<protocol::stats_reply>(&*r)) {
      for (const auto& [k, v] : s->entries) out[k] = v;
      break;
    }
  }
  return out;
}

TEST(serve_disconnect, a_closed_clients_generations_are_aborted) {
  server_process srv(std::string(HART_TEST_DATA) + "/tiny-a", {}, /*deterministic=*/false);
  ASSERT_FALSE(srv.endpoint().empty());
  transport::client_params cp;
  cp.endpoint = srv.endpoint();
  auto watcher = transport::client::connect(cp);
  ASSERT_TRUE(watcher.ok()) << watcher.get_status().to_string();
  {
    auto gone = transport::client::connect(cp);
    ASSERT_TRUE(gone.ok()) << gone.get_status().to_string();
    protocol::generate_request g;
    g.request_id = 1;
    g.token_ids = {5, 6, 7, 8};
    g.sampling.max_new_tokens = 30000;  // ~20 s at full speed on one core
    g.sampling.ignore_eos = true;
    g.sampling.n = 2;
    ASSERT_TRUE((*gone)->send(protocol::request{g}).ok());
    auto first = (*gone)->receive(std::chrono::milliseconds(30000));
    ASSERT_TRUE(first.ok()) << first.get_status().to_string();
    ASSERT_TRUE(std::holds_alternative<protocol::chunk_event>(*first)) << "the generation started";
  }  // the client closes its socket
  const auto t0 = std::chrono::steady_clock::now();
  std::map<std::string, double> s = stats(**watcher);
  ASSERT_TRUE(s.count("running") && s.count("generated_tokens")) << "the server's stats";
  while (s["running"] + s["queue_depth"] > 0 &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    s = stats(**watcher);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("a closed client's generation: idle %.2f s after the close, %g tokens generated\n", seconds,
              s["generated_tokens"]);
  EXPECT_EQ(s["running"], 0) << "still generating 10 s after its client closed";
  EXPECT_EQ(s["queue_depth"], 0);
  EXPECT_LT(s["generated_tokens"], 2 * 30000 - 1000);
  // Nothing else was stopped: a new generation of the watcher runs to its end.
  protocol::generate_request g;
  g.request_id = 2;
  g.token_ids = {5, 6, 7};
  g.sampling.max_new_tokens = 4;
  auto res = (*watcher)->generate(g, std::chrono::milliseconds(30000), [](const protocol::chunk_event&) {});
  ASSERT_TRUE(res.ok()) << res.get_status().to_string();
  EXPECT_EQ(res->samples[0].final.reason, protocol::finish_reason::length);
}

}  // namespace
}  // namespace hart::testing
