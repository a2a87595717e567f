// Connections take turns (issue 27, finding 4): one connection queues six long generations on a
// server that runs two at a time; a second connection's short request, sent after them, is
// admitted when the first slot frees and finishes while four of the six still wait. Under FCFS
// across connections it waited for four of them to finish first.
#include "runtime/transport/client.h"
#include "tests/serve/server_process.h"
#include "tests/serve/server_stats.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace hart::testing {
namespace {

using namespace std::chrono_literals;

protocol::generate_request request(uint64_t id, uint32_t max_new) {
  protocol::generate_request g;
  g.request_id = id;
  g.kind = protocol::prompt_kind::token_ids;
  for (int k = 0; k < 16; ++k) g.token_ids.push_back(uint32_t(6 + (k * 37 + int(id)) % 500));
  g.sampling.temperature = 0;
  g.sampling.max_new_tokens = max_new;
  g.sampling.ignore_eos = true;
  return g;
}

TEST(serve_fairness, another_connections_request_is_not_queued_behind_a_batch) {
  server_process srv(std::string(HART_TEST_DATA) + "/tiny-a", {"--max-running", "2"});
  ASSERT_FALSE(srv.endpoint().empty());
  auto hog = connect(srv);
  for (uint64_t id = 1; id <= 6; ++id) ASSERT_TRUE(hog->send(protocol::request{request(id, 400)}).ok());
  ASSERT_TRUE(hog->receive(60s).ok());  // the batch is in (its first chunk came)

  auto other = connect(srv);
  auto r = other->generate(request(100, 4), 120s);
  ASSERT_TRUE(r.ok()) << r.get_status().to_string();
  auto st = stats_of(*other, 7);
  std::printf("samples finished when the short request was done: %.0f (the batch's and its own)\n",
              st["finished"]);
  EXPECT_LE(st["finished"], 3.0);  // at most the two running when it arrived, and itself

  protocol::control_request a;
  a.tag = 8;
  a.verb = protocol::control_verb::abort;
  a.all = true;
  ASSERT_TRUE(hog->send(protocol::request{a}).ok());
}

}  // namespace
}  // namespace hart::testing
