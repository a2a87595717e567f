// `hart serve --http-bind` as a real process, driven by clients no one here wrote: the
// official OpenAI SDK (node; tests/serve/http/openai_sdk_test.cjs), Python's urllib with the
// Prometheus client's parser (tests/serve/http/sglang_http_test.py) and for weight updates
// (tests/serve/http/weight_update_test.py), and cpp-httplib's client for the API key and routed
// experts (beside the ZeroMQ client's routing); and our own python/hart_client with its examples
// (tests/serve/http/hart_client_test.py). Each script exits non-zero with the failing assertion
// on its output.
#include "runtime/transport/client.h"
#include "tests/serve/perturbed_checkpoint.h"
#include "tests/serve/server_process.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

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
  const std::string& ep = srv_->http_endpoint();
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

// Standard base64 (SGLang's routed_experts) back to bytes.
std::string base64_decode(const std::string& in) {
  static const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t bits = 0;
  int n_bits = 0;
  for (char c : in) {
    if (c == '=') break;
    const size_t v = alphabet.find(c);
    EXPECT_NE(v, std::string::npos) << "not base64: " << c;
    bits = bits << 6 | uint32_t(v);
    n_bits += 6;
    if (n_bits >= 8) {
      n_bits -= 8;
      out += char(bits >> n_bits & 0xff);
    }
  }
  return out;
}

std::vector<int32_t> little_endian_int32s(const std::string& bytes) {
  EXPECT_EQ(bytes.size() % 4, 0u);
  std::vector<int32_t> out;
  for (size_t i = 0; i + 4 <= bytes.size(); i += 4) {
    uint32_t v = 0;
    for (int b = 0; b < 4; ++b) v |= uint32_t(uint8_t(bytes[i + b])) << (8 * b);
    out.push_back(int32_t(v));
  }
  return out;
}

// SGLang's return_routed_experts (R3 replay) against the binary protocol's returnRouting for the
// same greedy request: every position's experts, [positions - start, layers, k] little-endian
// int32, whole and streamed (with the final). --routing-ids-per-message 40 sends the routing in
// RoutingPart replies (tiny-a: 6 MoE layers x 2 experts = 12 ids a position), which the HTTP
// side joins as the ZeroMQ client does.
TEST(http_serve_routing, routed_experts_are_the_binary_protocols_routing) {
  server_process srv(k_model, {"--http-bind", "127.0.0.1:0", "--routing-ids-per-message", "40"});
  const std::string& ep = srv.http_endpoint();
  ASSERT_FALSE(ep.empty()) << "the server did not print its HTTP endpoint";
  std::ifstream config_file(k_model + "/config.json");
  const nlohmann::json config = nlohmann::json::parse(config_file);
  const int32_t n_experts = config["n_routed_experts"], top_k = config["num_experts_per_tok"];

  transport::client_params cp;
  cp.endpoint = srv.endpoint();
  auto zc = transport::client::connect(cp);
  ASSERT_TRUE(zc.ok()) << zc.get_status().to_string();
  protocol::generate_request g;
  g.request_id = 1;
  g.token_ids = {5, 6, 7, 8, 9};
  g.sampling.temperature = 0;
  g.sampling.max_new_tokens = 6;
  g.sampling.ignore_eos = true;
  g.return_routing = true;
  auto zr = zc.value()->generate(g, std::chrono::seconds(120));
  ASSERT_TRUE(zr.ok()) << zr.get_status().to_string();
  const protocol::routing_info& want = zr->samples[0].final.routing;
  ASSERT_EQ(want.positions, 5u + 6u - 1u);  // the prompt and every generated token but the last
  ASSERT_EQ(want.experts.size(), config["mlp_layer_types"].size()) << "every layer is MoE in tiny-a";
  // Rows of positions [start, positions), layers in order: SGLang's [positions - start, layers, k].
  auto rows_from = [&](uint32_t start) {
    std::vector<const protocol::layer_routing*> layers;
    for (const protocol::layer_routing& l : want.experts) layers.push_back(&l);
    std::sort(layers.begin(), layers.end(), [](const auto* a, const auto* b) { return a->layer < b->layer; });
    std::vector<int32_t> rows;
    for (uint32_t p = start; p < want.positions; ++p) {
      for (const protocol::layer_routing* l : layers) {
        EXPECT_EQ(int32_t(l->k), top_k);
        rows.insert(rows.end(), l->ids.begin() + p * l->k, l->ids.begin() + (p + 1) * l->k);
      }
    }
    return rows;
  };

  httplib::Client hc(ep.substr(0, ep.rfind(':')), std::stoi(ep.substr(ep.rfind(':') + 1)));
  hc.set_read_timeout(120, 0);
  for (const bool stream : {false, true}) {
    for (const uint32_t start : {0u, 3u}) {
      SCOPED_TRACE(std::string(stream ? "streamed" : "whole") + ", routed_experts_start_len " +
                   std::to_string(start));
      const nlohmann::json body = {
          {"input_ids", g.token_ids},
          {"sampling_params", {{"max_new_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}}},
          {"return_routed_experts", true},
          {"routed_experts_start_len", start},
          {"stream", stream}};
      httplib::Result hr = hc.Post("/generate", body.dump(), "application/json");
      ASSERT_TRUE(hr);
      ASSERT_EQ(hr->status, 200) << hr->body;
      nlohmann::json answer;
      if (stream) {  // the last event is the final; only it carries the routing, as SGLang's
        std::vector<nlohmann::json> events;
        for (size_t at = 0; (at = hr->body.find("data: ", at)) != std::string::npos; at += 6) {
          const std::string data = hr->body.substr(at + 6, hr->body.find("\n\n", at) - at - 6);
          if (data != "[DONE]") events.push_back(nlohmann::json::parse(data));
        }
        ASSERT_GE(events.size(), 2u);
        for (size_t i = 0; i + 1 < events.size(); ++i)
          EXPECT_FALSE(events[i]["meta_info"].contains("routed_experts"));
        answer = events.back();
      } else {
        answer = nlohmann::json::parse(hr->body);
      }
      EXPECT_EQ(answer["output_ids"].get<std::vector<uint32_t>>(), zr->samples[0].token_ids);
      const nlohmann::json& meta = answer["meta_info"];
      EXPECT_EQ(meta["routed_experts_start_len"], start);
      const std::vector<int32_t> got =
          little_endian_int32s(base64_decode(meta["routed_experts"].get<std::string>()));
      ASSERT_EQ(got.size(), size_t(want.positions - start) * want.experts.size() * size_t(top_k));
      for (int32_t e : got) ASSERT_TRUE(e >= 0 && e < n_experts) << e;
      EXPECT_EQ(got, rows_from(start));
    }
  }
  // SGLang: the start must lie within the prompt.
  httplib::Result bad = hc.Post(
      "/generate", R"({"input_ids": [5, 6], "return_routed_experts": true, "routed_experts_start_len": 3})",
      "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400) << bad->body;
}

// slime's and Miles' update sequences with generations in flight, relabels and refused updates
// (its own server: the weights and versions change).
TEST(http_serve_weights, update_sequences_from_python) {
  const std::string perturbed = write_perturbed_checkpoint(k_model, 1.5f, "http_weights");
  server_process srv(k_model, {"--http-bind", "127.0.0.1:0", "--catch-step-us", "1000"});
  ASSERT_FALSE(srv.http_endpoint().empty()) << "the server did not print its HTTP endpoint";
  const run_result r =
      run(HART_PYTHON " " HART_HTTP_TESTS "/weight_update_test.py http://" + srv.http_endpoint() + " " +
          perturbed + " " + k_model + " " + HART_TEST_DATA + "/tiny-b");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::filesystem::remove_all(perturbed);
}

// python/hart_client: every method, its errors, and python/examples run end to end (rl_loop.py
// updates the weights: its own server), through an API key as a deployment would have.
TEST(http_serve_python_client, every_method_and_the_examples) {
  server_process srv(k_model,
                     {"--http-bind", "127.0.0.1:0", "--catch-step-us", "1000", "--api-key", "client-key"});
  ASSERT_FALSE(srv.http_endpoint().empty()) << "the server did not print its HTTP endpoint";
  const run_result r = run(HART_PYTHON " " HART_HTTP_TESTS "/hart_client_test.py http://" +
                           srv.http_endpoint() + " client-key " + k_model + " " HART_PYTHON_DIR);
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(http_serve_auth, api_key_is_required_except_for_health) {
  server_process srv(k_model, {"--http-bind", "127.0.0.1:0", "--api-key", "sekrit"});
  const std::string& ep = srv.http_endpoint();
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
