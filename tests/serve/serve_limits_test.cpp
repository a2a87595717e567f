// Admission limits (issue 27, finding 3: 10,000 queued requests and 100 queued 4 MiB prompts were
// accepted at once). `hart serve` on tiny-a with --max-requests 3, --max-requests-per-client 2
// and --max-prompt-tokens 200: a generate past each limit gets one resource_exhausted error
// naming the limit, the generations already running go on untouched, a slot freed by an abort
// is taken again, and the stats count live generations, their prompt tokens and refusals.
// A client that goes away (finding 4: a 20,000-token request ran to its end after its client
// disconnected) has its generations aborted and their pages freed, and nobody else's. And the
// memory many connections took goes back once they close (finding 3: RSS 181 -> 855 MB, kept).
#include "runtime/transport/client.h"
#include "tests/serve/server_process.h"
#include "tests/serve/server_stats.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace hart::testing {
namespace {

using namespace std::chrono_literals;

protocol::generate_request long_generate(uint64_t id, int n_prompt) {
  protocol::generate_request g;
  g.request_id = id;
  g.kind = protocol::prompt_kind::token_ids;
  for (int k = 0; k < n_prompt; ++k) g.token_ids.push_back(uint32_t(6 + (k * 37) % 500));
  g.sampling.temperature = 0;
  g.sampling.max_new_tokens = 100000;
  g.sampling.ignore_eos = true;
  return g;
}

// Replies until the first about request `id` (chunks of other requests skipped).
protocol::reply first_about(transport::client& c, uint64_t id) {
  for (;;) {
    auto r = c.receive(60s);
    if (!r.ok()) {
      ADD_FAILURE() << "request " << id << ": " << r.get_status().to_string();
      return protocol::reply{};
    }
    if (auto* ch = std::get_if<protocol::chunk_event>(&*r); ch && ch->request_id == id) return *r;
    if (auto* e = std::get_if<protocol::error_reply>(&*r); e && e->request_id == id) return *r;
    if (auto* f = std::get_if<protocol::final_event>(&*r); f && f->request_id == id) return *r;
  }
}

void expect_running(transport::client& c, const protocol::generate_request& g) {
  ASSERT_TRUE(c.send(protocol::request{g}).ok());
  const protocol::reply r = first_about(c, g.request_id);
  EXPECT_TRUE(std::holds_alternative<protocol::chunk_event>(r))
      << "request " << g.request_id << " did not start";
}

void expect_refused(transport::client& c, const protocol::generate_request& g, const std::string& limit) {
  ASSERT_TRUE(c.send(protocol::request{g}).ok());
  const protocol::reply r = first_about(c, g.request_id);
  const auto* e = std::get_if<protocol::error_reply>(&r);
  ASSERT_NE(e, nullptr) << "request " << g.request_id << " was not refused";
  EXPECT_EQ(e->code, status_code::resource_exhausted);
  EXPECT_NE(e->message.find(limit), std::string::npos) << e->message;
}

// Aborts `id` and waits for its final.
void abort_and_wait(transport::client& c, uint64_t id) {
  protocol::control_request a;
  a.tag = 900 + id;
  a.verb = protocol::control_verb::abort;
  a.request_id = id;
  ASSERT_TRUE(c.send(protocol::request{a}).ok());
  for (;;) {
    auto r = c.receive(60s);
    ASSERT_TRUE(r.ok()) << r.get_status().to_string();
    if (auto* f = std::get_if<protocol::final_event>(&*r); f && f->request_id == id) return;
  }
}

TEST(serve_limits, past_each_limit_a_generate_is_refused_and_nothing_else_changes) {
  server_process srv(std::string(HART_TEST_DATA) + "/tiny-a",
                     {"--max-requests", "3", "--max-requests-per-client", "2", "--max-prompt-tokens", "200",
                      "--slow-reader-ms", "600000"});  // clients here read only between steps
  ASSERT_FALSE(srv.endpoint().empty());
  auto a = connect(srv), b = connect(srv), c = connect(srv);
  expect_running(*a, long_generate(1, 20));
  expect_running(*a, long_generate(2, 20));
  expect_refused(*a, long_generate(3, 20), "--max-requests-per-client 2");
  expect_running(*b, long_generate(1, 20));
  expect_refused(*b, long_generate(2, 20), "--max-requests 3");
  auto st = stats_of(*c, 1);
  EXPECT_EQ(st["live_requests"], 3);
  EXPECT_EQ(st["live_prompt_tokens"], 60);
  EXPECT_EQ(st["requests_refused_limits"], 2);
  EXPECT_EQ(st["running"] + st["queue_depth"], 3) << "the refusals touched a running generation";

  abort_and_wait(*a, 1);  // a slot and 20 prompt tokens come back
  expect_refused(*c, long_generate(1, 170), "--max-prompt-tokens 200");
  expect_running(*c, long_generate(2, 160));
  st = stats_of(*c, 2);
  EXPECT_EQ(st["live_requests"], 3);
  EXPECT_EQ(st["live_prompt_tokens"], 200);
  EXPECT_EQ(st["requests_refused_limits"], 3);

  abort_and_wait(*a, 2);
  abort_and_wait(*b, 1);
  abort_and_wait(*c, 2);
  st = stats_of(*c, 3);
  EXPECT_EQ(st["live_requests"], 0);
  EXPECT_EQ(st["live_prompt_tokens"], 0);
  expect_running(*a, long_generate(4, 20));  // the per-client count came back too
  abort_and_wait(*a, 4);
}

TEST(serve_disconnect, a_client_that_goes_away_has_its_generations_aborted_and_its_pages_freed) {
  server_process srv(std::string(HART_TEST_DATA) + "/tiny-a", {}, false);
  ASSERT_FALSE(srv.endpoint().empty());
  auto watcher = connect(srv);
  auto stays = connect(srv);
  auto leaves = connect(srv);
  expect_running(*stays, long_generate(1, 20));
  expect_running(*leaves, long_generate(2, 30));
  expect_running(*leaves, long_generate(3, 40));
  EXPECT_EQ(stats_of(*watcher, 10)["live_requests"], 3);
  leaves.reset();  // its socket closes mid-stream
  std::map<std::string, double> st;
  for (int i = 0; i < 200; ++i) {
    st = stats_of(*watcher, 20 + 2 * uint64_t(i));
    if (st["live_requests"] == 1) break;
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(st["live_requests"], 1) << "the gone client's 100,000-token generations still run";
  EXPECT_EQ(st["client_disconnects"], 1);
  // The client that stayed still streams, and once it is aborted nothing is held.
  EXPECT_TRUE(std::holds_alternative<protocol::chunk_event>(first_about(*stays, 1)));
  abort_and_wait(*stays, 1);
  st = stats_after_flush(*watcher, 600);
  EXPECT_EQ(st["live_requests"], 0);
  EXPECT_EQ(st["cache_full_pages_used"], 0);
  EXPECT_EQ(st["cache_swa_pages_used"], 0);
}

int64_t rss_kb(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  int64_t kb = -1;
  while (f >> key) {
    if (key == "VmRSS:") {
      f >> kb;
      break;
    }
  }
  return kb;
}

TEST(serve_memory, what_many_connections_took_goes_back_once_they_close) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "under ASan the allocator is ASan's: glibc's malloc_trim gives nothing back";
#endif
  constexpr int k_clients = 500, k_rounds = 3;
  rlimit fds{};
  getrlimit(RLIMIT_NOFILE, &fds);
  if (fds.rlim_max < 8192) GTEST_SKIP() << "needs 8192 file descriptors for " << k_clients << " clients";
  fds.rlim_cur = std::max<rlim_t>(fds.rlim_cur, 8192);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &fds), 0);  // the server inherits it
  server_process srv(std::string(HART_TEST_DATA) + "/tiny-a", {}, false);
  ASSERT_FALSE(srv.endpoint().empty());
  const int64_t before = rss_kb(srv.pid());
  int64_t open_kb = 0, after = 0;
  for (int round = 0; round < k_rounds; ++round) {
    std::vector<std::unique_ptr<transport::client>> clients;
    for (int i = 0; i < k_clients; ++i) {
      clients.push_back(connect(srv));
      protocol::control_request h;
      h.tag = uint64_t(i);
      h.verb = protocol::control_verb::health;
      ASSERT_TRUE(clients.back()->send(protocol::request{h}).ok());
    }
    for (auto& c : clients) ASSERT_TRUE(c->receive(30s).ok());
    open_kb = rss_kb(srv.pid());
    clients.clear();
    // Given back within the trim interval (2 s) once the closes are seen.
    for (int w = 0; w < 100; ++w) {
      after = rss_kb(srv.pid());
      if (after - before < 8 * 1024) break;
      std::this_thread::sleep_for(100ms);
    }
  }
  EXPECT_GT(open_kb - before, 8 * 1024) << "the connections took too little memory for the test to see";
  EXPECT_LT(after - before, 8 * 1024) << "resident KB before " << before << ", with " << k_clients
                                      << " connections " << open_kb << ", after they closed " << after;
}

}  // namespace
}  // namespace hart::testing
