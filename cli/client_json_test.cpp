// `hart client`'s JSON reader, field by field: every field refuses a wrong JSON type, a
// fraction where an integer is needed, a value outside its range or its wire type's, naming
// the field and echoing the id as written; good values reach the request unchanged.
#include "cli/client_json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace hart::cli {
namespace {

using json = nlohmann::json;

parsed_request parse(const std::string& line, uint64_t tag = 5) {
  json j = json::parse(line, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << line;
  return request_from_json(j, tag);
}

// `fields` spliced into {"generate": {"id": 7, "prompt": "Hello", <fields>}}.
parsed_request generate(const std::string& fields) {
  return parse(R"({"generate": {"id": 7, "prompt": "Hello")" + (fields.empty() ? "" : ", " + fields) + "}}");
}

std::string list_of(int n, const std::string& item) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + item;
  return s + "]";
}

void expect_refused(const parsed_request& p, const std::string& field, const std::string& context) {
  EXPECT_EQ(p.error.code(), status_code::invalid_argument) << context << ": " << p.error.to_string();
  EXPECT_EQ(p.field, field) << context << ": " << p.error.to_string();
  if (!field.empty()) {
    EXPECT_EQ(p.error.message().rfind(field + ":", 0), 0u)
        << context << ": the message names the field: " << p.error.message();
  }
}

TEST(client_json, every_numeric_field_refuses_bad_values_naming_the_field_and_the_id) {
  const std::string u32_over = "4294967296";
  const struct {
    std::string field;
    std::vector<std::string> bad;
  } cases[] = {
      {"max_new_tokens", {"-3", "0", "1.5", "\"8\"", "true", "null", u32_over, "1e300", "[8]"}},
      {"min_new_tokens", {"-1", "2.5", "\"0\"", u32_over}},
      {"temperature", {"-0.1", "100.5", "1e300", "-1e300", "\"1\"", "true", "null"}},
      {"top_p", {"0", "-0.5", "1.01", "1e-50", "\"1\"", "1e300"}},
      {"top_k", {"0", "-2", "1.5", "2147483648", "\"5\"", "false"}},
      {"min_p", {"-0.01", "1.5", "\"0\"", "1e300"}},
      {"seed", {"-1", "0.5", "18446744073709551616", "1e20", "\"42\""}},
      {"n", {"0", "-1", "257", "1.5", "\"2\"", u32_over}},
      {"top_logprobs", {"-1", "21", "256", "1.5", "\"5\""}},
      {"priority", {"2147483648", "-2147483649", "0.5", "\"1\""}},
      {"logprobs", {"5", "1", "\"yes\""}},
      {"ignore_eos", {"1", "\"true\""}},
      {"return_routing", {"0"}},
      {"return_indexer_picks", {"\"no\""}},
      {"session", {"5", "\"" + std::string(300, 's') + "\""}},
  };
  for (const auto& c : cases) {
    for (const std::string& v : c.bad) {
      const parsed_request p = generate("\"" + c.field + "\": " + v);
      expect_refused(p, c.field, c.field + " = " + v);
      EXPECT_EQ(p.id, json(7)) << c.field << " = " << v;
      const json e = error_line(p)["error"];
      EXPECT_EQ(e["id"], json(7));
      EXPECT_EQ(e["tag"], json(0));
      EXPECT_EQ(e["field"], json(c.field));
      EXPECT_EQ(e["code"], json("invalid_argument"));
    }
  }
  // JSON text has no NaN or Inf (and 1e999 does not parse), but a json value built in code can.
  for (const char* field : {"temperature", "top_p", "min_p", "max_new_tokens", "n"}) {
    for (double v : {std::nan(""), HUGE_VAL, -HUGE_VAL}) {
      json j = {{"generate", {{"id", 7}, {"prompt", "Hello"}, {field, v}}}};
      expect_refused(request_from_json(j, 1), field, std::string(field) + " = " + std::to_string(v));
    }
  }
  // The case of the issue: -3 neither wraps to 4294967293 nor runs to the context limit.
  EXPECT_EQ(generate(R"("max_new_tokens": -3)").error.message(),
            "max_new_tokens: -3 is not an integer in [1, 4294967295]");
  expect_refused(generate(R"("min_new_tokens": 9, "max_new_tokens": 8)"), "min_new_tokens", "min > max");
  expect_refused(generate(R"("min_new_tokens": 257)"), "min_new_tokens", "min > the default max");
}

TEST(client_json, lists_name_the_element_at_fault) {
  expect_refused(parse(R"({"generate": {"id": 7, "tokens": [1, -2, 3]}})"), "tokens[1]", "negative token");
  expect_refused(parse(R"({"generate": {"id": 7, "tokens": [1, 4294967296]}})"), "tokens[1]",
                 "token over u32");
  expect_refused(parse(R"({"generate": {"id": 7, "tokens": [1.5]}})"), "tokens[0]", "fractional token");
  expect_refused(parse(R"({"generate": {"id": 7, "tokens": [[1]]}})"), "tokens[0]", "nested token");
  expect_refused(parse(R"({"generate": {"id": 7, "tokens": []}})"), "tokens", "empty tokens");
  expect_refused(parse(R"({"generate": {"id": 7, "tokens": "1 2"}})"), "tokens", "tokens as text");
  expect_refused(generate(R"("stop_token_ids": [2, -1])"), "stop_token_ids[1]", "negative stop id");
  expect_refused(generate(R"("stop_token_ids": [2, 1e10])"), "stop_token_ids[1]", "stop id over u32");
  expect_refused(generate(R"("stop_token_ids": 2)"), "stop_token_ids", "stop ids not a list");
  expect_refused(generate("\"stop_token_ids\": " + list_of(65, "1")), "stop_token_ids", "65 stop ids");
  expect_refused(generate("\"stop\": " + list_of(17, "\"x\"")), "stop", "17 stop strings");
  expect_refused(generate(R"("stop": ["a", ""])"), "stop[1]", "empty stop string");
  expect_refused(generate(R"("stop": ["a", 5])"), "stop[1]", "stop number");
  expect_refused(generate(R"("stop": 5)"), "stop", "stop not text");
  expect_refused(generate("\"stop\": \"" + std::string(257, 'a') + "\""), "stop", "long stop string");
  const std::string m = R"({"generate": {"id": 7, "messages": )";
  expect_refused(parse(m + "[]}}"), "messages", "no messages");
  expect_refused(parse(m + "[5]}}"), "messages[0]", "message not an object");
  expect_refused(parse(m + R"([{"role": "user", "content": "a"}, {"content": "b"}]}})"), "messages[1].role",
                 "no role");
  expect_refused(parse(m + R"([{"role": "", "content": "b"}]}})"), "messages[0].role", "empty role");
  expect_refused(parse(m + R"([{"role": "user", "content": 5}]}})"), "messages[0].content", "content number");
  expect_refused(parse(m + R"([{"role": "user", "name": "x"}]}})"), "messages[0].name",
                 "unknown message field");
}

TEST(client_json, the_id_prompt_and_line_are_checked_and_the_id_echoed_as_written) {
  parsed_request p = parse(R"({"generate": {"prompt": "Hello"}})");
  expect_refused(p, "id", "no id");
  EXPECT_TRUE(p.id.is_null());
  for (const char* id : {"0", "-1", "1.5", "\"abc\"", "18446744073709551616", "true"}) {
    p = parse(std::string(R"({"generate": {"prompt": "Hello", "id": )") + id + "}}");
    expect_refused(p, "id", id);
    EXPECT_EQ(p.id, json::parse(id)) << "the id is echoed as written";
    EXPECT_EQ(error_line(p)["error"]["id"], json::parse(id));
  }
  expect_refused(generate(R"("max_tokens": 8)"), "max_tokens", "a field this client does not know");
  expect_refused(parse(R"({"generate": {"id": 7}})"), "prompt", "no prompt");
  expect_refused(parse(R"({"generate": {"id": 7, "prompt": ""}})"), "prompt", "empty prompt");
  expect_refused(parse(R"({"generate": {"id": 7, "prompt": 5}})"), "prompt", "prompt number");
  expect_refused(parse(R"({"generate": {"id": 7, "prompt": "a", "tokens": [1]}})"), "prompt", "two prompts");
  expect_refused(parse(R"({"generate": 5})"), "", "body not an object");
  expect_refused(parse(R"([1, 2])"), "", "not an object");
  expect_refused(parse(R"({"generate": {}, "abort": {}})"), "", "two verbs");
  expect_refused(parse(R"({"frobnicate": {}})"), "", "unknown verb");
}

TEST(client_json, control_verbs_check_their_fields_and_carry_their_tag) {
  parsed_request p = parse(R"({"abort": {"id": -1}})", 9);
  expect_refused(p, "id", "negative abort id");
  EXPECT_EQ(p.tag, 9u);
  EXPECT_EQ(p.id, json(-1));
  EXPECT_EQ(error_line(p)["error"]["tag"], json(9));
  expect_refused(parse(R"({"abort": {}})"), "id", "abort of nothing");
  expect_refused(parse(R"({"abort": {"id": 0}})"), "id", "abort id 0");
  expect_refused(parse(R"({"abort": {"id": 2.5}})"), "id", "fractional abort id");
  expect_refused(parse(R"({"abort": {"id": 1, "all": true}})"), "all", "id and all");
  expect_refused(parse(R"({"abort": {"all": 1}})"), "all", "all not a bool");
  expect_refused(parse(R"({"abort": {"id": 1, "now": true}})"), "now", "unknown abort field");
  expect_refused(parse(R"({"abort": 3})"), "", "abort body not an object");
  expect_refused(parse(R"({"pause": "sideways"})"), "mode", "unknown mode");
  expect_refused(parse(R"({"pause": {"mode": 2}})"), "mode", "mode number");
  expect_refused(parse(R"({"pause": 2})"), "", "pause body");

  p = parse(R"({"abort": {"id": 18446744073709551615}})", 3);
  ASSERT_TRUE(p.error.ok()) << p.error.to_string();
  const auto& a = std::get<protocol::control_request>(p.request);
  EXPECT_EQ(a.tag, 3u);
  EXPECT_EQ(a.request_id, 18446744073709551615ull);
  p = parse(R"({"abort": {"all": true}})");
  ASSERT_TRUE(p.error.ok()) << p.error.to_string();
  EXPECT_TRUE(std::get<protocol::control_request>(p.request).all);
  p = parse(R"({"pause": {"mode": "in_place"}})");
  ASSERT_TRUE(p.error.ok()) << p.error.to_string();
  EXPECT_EQ(std::get<protocol::control_request>(p.request).mode, protocol::pause_mode::in_place);
  for (const char* v : {"resume", "flush_cache", "health", "stats", "weight_version"}) {
    p = parse(std::string("{\"") + v + "\": {}}");
    EXPECT_TRUE(p.error.ok()) << v << ": " << p.error.to_string();
  }
}

TEST(client_json, good_values_reach_the_request) {
  parsed_request p = parse(R"({"generate": {"id": 18446744073709551615, "tokens": [0, 4294967295],
      "temperature": 0.7, "top_p": 1, "top_k": -1, "min_p": 0.05, "seed": 18446744073709551615,
      "max_new_tokens": 4294967295, "min_new_tokens": 2.0, "stop": "END", "stop_token_ids": [3, 4],
      "ignore_eos": true, "n": 256, "logprobs": true, "top_logprobs": 20, "session": "s1",
      "priority": -2147483648, "return_routing": true, "return_indexer_picks": false}})");
  ASSERT_TRUE(p.error.ok()) << p.error.to_string();
  const auto& g = std::get<protocol::generate_request>(p.request);
  EXPECT_EQ(g.request_id, 18446744073709551615ull);
  EXPECT_EQ(g.kind, protocol::prompt_kind::token_ids);
  EXPECT_EQ(g.token_ids, (std::vector<uint32_t>{0, 4294967295u}));
  const protocol::sampling_options& s = g.sampling;
  EXPECT_EQ(s.temperature, 0.7f);
  EXPECT_EQ(s.top_p, 1.0f);
  EXPECT_EQ(s.top_k, -1);
  EXPECT_EQ(s.min_p, 0.05f);
  EXPECT_TRUE(s.has_seed);
  EXPECT_EQ(s.seed, 18446744073709551615ull);
  EXPECT_EQ(s.max_new_tokens, 4294967295u);
  EXPECT_EQ(s.min_new_tokens, 2u);
  EXPECT_EQ(s.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(s.stop_token_ids, (std::vector<uint32_t>{3, 4}));
  EXPECT_TRUE(s.ignore_eos);
  EXPECT_EQ(s.n, 256u);
  EXPECT_TRUE(s.logprobs);
  EXPECT_EQ(s.top_logprobs, 20);
  EXPECT_EQ(g.session_id, "s1");
  EXPECT_EQ(g.priority, -2147483648);
  EXPECT_TRUE(g.return_routing);
  EXPECT_FALSE(g.return_indexer_picks);
  EXPECT_EQ(p.tag, 0u) << "a generate's replies carry its id, not a tag";

  // Defaults: greedy, 256 new tokens, one sample, no seed.
  p = parse(
      R"({"generate": {"id": 1, "messages": [{"role": "user", "content": "hi"}], "top_k": 40, "seed": 0}})");
  ASSERT_TRUE(p.error.ok()) << p.error.to_string();
  const auto& d = std::get<protocol::generate_request>(p.request);
  EXPECT_EQ(d.kind, protocol::prompt_kind::messages);
  ASSERT_EQ(d.messages.size(), 1u);
  EXPECT_EQ(d.messages[0].role, "user");
  EXPECT_EQ(d.messages[0].content, "hi");
  EXPECT_EQ(d.sampling.temperature, 0.0f);
  EXPECT_EQ(d.sampling.max_new_tokens, 256u);
  EXPECT_EQ(d.sampling.n, 1u);
  EXPECT_EQ(d.sampling.top_k, 40);
  EXPECT_TRUE(d.sampling.has_seed);
  EXPECT_EQ(d.sampling.seed, 0u);
  p = generate("");
  ASSERT_TRUE(p.error.ok()) << p.error.to_string();
  EXPECT_FALSE(std::get<protocol::generate_request>(p.request).sampling.has_seed);
  EXPECT_EQ(std::get<protocol::generate_request>(p.request).text, "Hello");
}

}  // namespace
}  // namespace hart::cli
