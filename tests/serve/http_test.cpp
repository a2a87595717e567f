// `hart serve --http-bind` as a real process, driven by clients no one here wrote: the
// official OpenAI SDK (node; tests/serve/http/openai_sdk_test.cjs), Python's urllib with the
// Prometheus client's parser (tests/serve/http/sglang_http_test.py) and for weight updates
// (tests/serve/http/weight_update_test.py), and cpp-httplib's client for the API key; and our own
// python/hart_client with its examples (tests/serve/http/hart_client_test.py). Each script
// exits non-zero with the failing assertion on its output.
#include "runtime/transport/client.h"
#include "tests/serve/perturbed_checkpoint.h"
#include "tests/serve/server_process.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

namespace hart::testing {
namespace {

struct run_result {
  int exit_code = -1;
  std::string output;
};

// Runs a shell command, its stdout and stderr together.
run_result run(const std::string& cmd) {
  run_result r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int st = pclose(p);
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

const std::string k_model = std::string(HART_TEST_DATA) + "/tiny-a";

class http_serve : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    srv_ = new server_process(k_model, {"--http-bind", "127.0.0.1:0", "--catch-step-us", "1000"});
  }
  static void TearDownTestSuite() { delete srv_; }
  static std::string base() { return "http://" + srv_->http_endpoint(); }
  static server_process* srv_;
};
server_process* http_serve::srv_ = nullptr;

TEST_F(http_serve, openai_sdk_chat_and_completions) {
  ASSERT_FALSE(srv_->http_endpoint().empty()) << "the server did not print its HTTP endpoint";
  if (access(HART_NPM_DIR "/node_modules/openai/package.json", R_OK) != 0) {
    GTEST_SKIP() << "no OpenAI SDK in " HART_NPM_DIR " (http_npm_setup found no node)";
  }
  const run_result r =
      run("NODE_PATH=" HART_NPM_DIR "/node_modules node " HART_HTTP_TESTS "/openai_sdk_test.cjs " + base());
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST_F(http_serve, sglang_generate_control_and_metrics_from_python) {
  ASSERT_FALSE(srv_->http_endpoint().empty()) << "the server did not print its HTTP endpoint";
  if (run(HART_PYTHON " -c 'import prometheus_client'").exit_code != 0) {
    GTEST_SKIP() << HART_PYTHON
        " has no prometheus_client (Debian: python3-prometheus-client, scripts/setup.sh)";
  }
  const run_result r = run(HART_PYTHON " " HART_HTTP_TESTS "/sglang_http_test.py " + base());
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// The two front doors share one gateway: the same chat request over ZeroMQ and over HTTP,
// at the same time, gets the same tokens (one tokenizer, one template, one validation).
TEST_F(http_serve, zeromq_and_http_side_by_side_answer_alike) {
  const std::string ep = srv_->http_endpoint();
  ASSERT_FALSE(ep.empty());
  transport::client_params cp;
  cp.endpoint = srv_->endpoint();
  auto zc = transport::client::connect(cp);
  ASSERT_TRUE(zc.ok()) << zc.get_status().to_string();
  protocol::generate_request g;
  g.request_id = 5;
  g.kind = protocol::prompt_kind::messages;
  g.messages = {{"user", "side by side"}};
  g.sampling.temperature = 0;
  g.sampling.max_new_tokens = 6;
  g.sampling.ignore_eos = true;
  httplib::Client hc(ep.substr(0, ep.rfind(':')), std::stoi(ep.substr(ep.rfind(':') + 1)));
  hc.set_read_timeout(120, 0);
  int http_status = 0;
  std::string http_body;
  std::thread t([&] {
    httplib::Result hr = hc.Post(
        "/v1/chat/completions",
        R"({"messages": [{"role": "user", "content": "side by side"}], "max_tokens": 6, "temperature": 0,
                     "ignore_eos": true, "logprobs": true})",
        "application/json");
    if (hr) http_status = hr->status, http_body = hr->body;
  });
  auto zr = zc.value()->generate(g, std::chrono::seconds(120));
  t.join();
  ASSERT_TRUE(zr.ok()) << zr.get_status().to_string();
  ASSERT_EQ(http_status, 200) << http_body;
  const nlohmann::json j = nlohmann::json::parse(http_body);
  EXPECT_EQ(j["choices"][0]["message"]["content"].get<std::string>(), zr->samples[0].text);
  EXPECT_EQ(j["usage"]["completion_tokens"].get<uint32_t>(), zr->samples[0].token_ids.size());
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"].size(), 6u);
}

// slime's and Miles' update sequences with generations in flight, relabels and refused updates
// (its own server: the weights and versions change).
TEST(http_serve_weights, update_sequences_from_python) {
  const std::string perturbed = write_perturbed_checkpoint(k_model, 1.5f, "http_weights");
  server_process srv(k_model, {"--http-bind", "127.0.0.1:0", "--catch-step-us", "1000"});
  ASSERT_FALSE(srv.http_endpoint().empty()) << "the server did not print its HTTP endpoint";
  const run_result r = run(HART_PYTHON " " HART_HTTP_TESTS "/weight_update_test.py http://" + srv.http_endpoint() +
                           " " + perturbed + " " + k_model + " " + HART_TEST_DATA + "/tiny-b");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::filesystem::remove_all(perturbed);
}

// python/hart_client: every method, its errors, and python/examples run end to end (rl_loop.py
// updates the weights: its own server), through an API key as a deployment would have.
TEST(http_serve_python_client, every_method_and_the_examples) {
  server_process srv(k_model, {"--http-bind", "127.0.0.1:0", "--catch-step-us", "1000", "--api-key", "client-key"});
  ASSERT_FALSE(srv.http_endpoint().empty()) << "the server did not print its HTTP endpoint";
  const run_result r = run(HART_PYTHON " " HART_HTTP_TESTS "/hart_client_test.py http://" + srv.http_endpoint() +
                           " client-key " + k_model + " " HART_PYTHON_DIR);
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(http_serve_auth, api_key_is_required_except_for_health) {
  server_process srv(k_model, {"--http-bind", "127.0.0.1:0", "--api-key", "sekrit"});
  const std::string ep = srv.http_endpoint();
  ASSERT_FALSE(ep.empty());
  httplib::Client c(ep.substr(0, ep.rfind(':')), std::stoi(ep.substr(ep.rfind(':') + 1)));
  auto r = c.Get("/v1/models");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_NE(r->body.find("API key"), std::string::npos) << r->body;
  r = c.Get("/v1/models", {{"Authorization", "Bearer wrong!"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  r = c.Get("/v1/models", {{"Authorization", "Bearer sekrit"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  r = c.Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST(http_serve_auth, beyond_loopback_needs_an_api_key) {
  const run_result r = run(std::string(HART_BINARY) + " --log warn serve -m " + k_model +
                           " --bind tcp://127.0.0.1:* --http-bind 0.0.0.0:0");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--api-key"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace hart::testing
