#include "runtime/http/openai_api.h"

#include <gtest/gtest.h>

namespace hart::http {
namespace {

status_or<openai_request> parse(const char* body, bool chat = true) {
  return parse_openai_request(json::parse(body), chat, "tiny");
}

protocol::chunk_event chunk(uint32_t sample, uint32_t token, const std::string& text, float lp) {
  protocol::chunk_event c;
  c.sample_index = sample;
  c.token_ids = {token};
  c.text = text;
  c.logprobs = {lp};
  c.top_logprobs = {{{token, lp}, {token + 1, lp - 1}}};
  c.weight_version = 3;
  return c;
}

protocol::final_event final(uint32_t sample, protocol::finish_reason r, uint32_t completion) {
  protocol::final_event f;
  f.sample_index = sample;
  f.reason = r;
  f.usage = {10, completion, 4};
  f.weight_version = 3;
  return f;
}

TEST(openai_api, chat_fields_map_onto_the_protocol_request) {
  auto r = parse(R"({"model": "tiny", "messages": [{"role": "developer", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]}],
      "max_completion_tokens": 7, "n": 3, "stop": "END", "temperature": 0.5, "top_p": 0.9, "seed": 11, "top_k": 0,
      "min_p": 0.1, "ignore_eos": true, "stop_token_ids": [5, 6], "logprobs": true, "top_logprobs": 2,
      "stream": true, "stream_options": {"include_usage": true}, "user": "ignored"})");
  ASSERT_TRUE(r.ok()) << r.get_status().to_string();
  const protocol::generate_request& g = r->g;
  ASSERT_EQ(g.kind, protocol::prompt_kind::messages);
  ASSERT_EQ(g.messages.size(), 2u);
  EXPECT_EQ(g.messages[0].role, "system");
  EXPECT_EQ(g.messages[1].content, "hi there");
  EXPECT_EQ(g.sampling.max_new_tokens, 7u);
  EXPECT_EQ(g.sampling.n, 3u);
  EXPECT_EQ(g.sampling.stop, std::vector<std::string>{"END"});
  EXPECT_FLOAT_EQ(g.sampling.temperature, 0.5f);
  EXPECT_TRUE(g.sampling.has_seed);
  EXPECT_EQ(g.sampling.seed, 11u);
  EXPECT_EQ(g.sampling.top_k, -1);
  EXPECT_TRUE(g.sampling.ignore_eos);
  EXPECT_EQ(g.sampling.stop_token_ids, (std::vector<uint32_t>{5, 6}));
  EXPECT_TRUE(g.sampling.logprobs);
  EXPECT_EQ(g.sampling.top_logprobs, 2);
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
}

TEST(openai_api, bad_requests_are_typed_errors_naming_the_field) {
  EXPECT_EQ(
      parse(R"({"model": "other", "messages": [{"role": "user", "content": "x"}]})").get_status().code(),
      status_code::not_found);
  EXPECT_EQ(parse(R"({"messages": "hi"})").get_status().message(), "messages: expected a list, got string");
  EXPECT_EQ(parse(R"({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"})")
                .get_status()
                .message(),
            "temperature: expected a number, got string");
  EXPECT_EQ(
      parse(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})").get_status().message(),
      "top_logprobs: needs logprobs: true");
  EXPECT_NE(parse(R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})")
                .get_status()
                .message()
                .find("tool calling is not supported"),
            std::string::npos);
  EXPECT_NE(parse(R"({"messages": [{"role": "user", "content": "x"}], "n": 0})")
                .get_status()
                .message()
                .find("n: 0"),
            std::string::npos);
  // The protocol's own validation runs too (validate.h): a temperature out of range.
  EXPECT_EQ(
      parse(R"({"messages": [{"role": "user", "content": "x"}], "temperature": 1000})").get_status().code(),
      status_code::invalid_argument);
  EXPECT_EQ(parse(R"({})").get_status().message(), "messages: required");
}

// DeepSeek-V4 thinking as SGLang, vLLM and DeepSeek's API ask for it; chat mode by default.
TEST(openai_api, thinking_options_and_reasoning_content) {
  const std::string msgs = R"("messages": [{"role": "user", "content": "q"},
      {"role": "assistant", "content": "a", "reasoning_content": "r"}, {"role": "user", "content": "q2"}])";
  auto r = parse(("{" + msgs + "}").c_str());
  ASSERT_TRUE(r.ok()) << r.get_status().to_string();
  EXPECT_FALSE(r->g.thinking);
  EXPECT_EQ(r->g.messages[1].reasoning, "r");
  r = parse(
      ("{" + msgs + R"(, "chat_template_kwargs": {"thinking": true, "reasoning_effort": "max"}})").c_str());
  ASSERT_TRUE(r.ok()) << r.get_status().to_string();
  EXPECT_TRUE(r->g.thinking);
  EXPECT_EQ(r->g.effort, protocol::reasoning_effort::max);
  r = parse(
      ("{" + msgs + R"(, "chat_template_kwargs": {"enable_thinking": true}, "reasoning_effort": "high"})")
          .c_str());
  EXPECT_TRUE(r->g.thinking);
  EXPECT_EQ(r->g.effort, protocol::reasoning_effort::high);
  r = parse(("{" + msgs + R"(, "thinking": {"type": "enabled"}})").c_str());
  EXPECT_TRUE(r->g.thinking);
  r = parse(("{" + msgs + R"(, "thinking": {"type": "enabled"}, "reasoning_effort": "none"})").c_str());
  EXPECT_FALSE(r->g.thinking);
  r = parse(R"({"messages": [{"role": "assistant", "content": "a", "reasoning": "vllm's name"}]})");
  EXPECT_EQ(r->g.messages[0].reasoning, "vllm's name");
  EXPECT_EQ(parse(("{" + msgs + R"(, "chat_template_kwargs": {"drop_thinking": false}})").c_str())
                .get_status()
                .message(),
            "chat_template_kwargs.drop_thinking: unknown field");
  EXPECT_NE(parse(("{" + msgs + R"(, "reasoning_effort": "extreme"})").c_str())
                .get_status()
                .message()
                .find("reasoning_effort: 'extreme'"),
            std::string::npos);
  EXPECT_NE(parse(("{" + msgs + R"(, "thinking": {"type": "on"}})").c_str())
                .get_status()
                .message()
                .find("thinking.type"),
            std::string::npos);
}

// Thinking mode splits each sample at "</think>": a special token (not in the text), or the
// text itself, also when it comes in pieces; a sample that never closes it is all reasoning.
TEST(openai_api, reasoning_splits_at_the_end_of_thinking) {
  protocol::sampling_options so;
  so.n = 3;
  generation gen(so, -1);
  gen.split_reasoning(5);
  gen.apply(chunk(0, 10, "think", 0));
  gen.apply(chunk(0, 5, "", 0));
  gen.apply(chunk(0, 11, "answer", 0));
  EXPECT_EQ(gen.sample(0).reasoning, "think");
  EXPECT_EQ(gen.sample(0).text, "answer");
  EXPECT_EQ(gen.sample(0).text_delta, "answer");
  gen.apply(chunk(1, 20, "a</th", 0));
  EXPECT_EQ(gen.sample(1).reasoning_delta, "a");  // "</th" held: it may be the marker
  gen.apply(chunk(1, 21, "ink>b", 0));
  EXPECT_EQ(gen.sample(1).reasoning, "a");
  EXPECT_EQ(gen.sample(1).text, "b");
  gen.apply(chunk(2, 30, "x</t", 0));
  gen.apply(final(2, protocol::finish_reason::length, 1));
  EXPECT_EQ(gen.sample(2).reasoning, "x</t");
  EXPECT_EQ(gen.sample(2).reasoning_delta, "</t");
  EXPECT_EQ(gen.sample(2).text, "");

  openai_request req =
      parse(R"({"messages": [{"role": "user", "content": "q"}], "thinking": {"type": "enabled"}})").value();
  gen.apply(final(0, protocol::finish_reason::stop, 3));
  gen.apply(final(1, protocol::finish_reason::stop, 2));
  const json answer = openai_response(req, gen, openai_context{"chatcmpl-1", 0, "tiny", nullptr});
  EXPECT_EQ(answer["choices"][0]["message"]["reasoning_content"], "think");
  EXPECT_EQ(answer["choices"][0]["message"]["content"], "answer");
}

TEST(openai_api, completions_take_text_or_token_ids_and_legacy_logprobs) {
  auto r = parse(R"({"prompt": "Once", "logprobs": 2})", false);
  ASSERT_TRUE(r.ok()) << r.get_status().to_string();
  EXPECT_EQ(r->g.kind, protocol::prompt_kind::text);
  EXPECT_EQ(r->g.sampling.max_new_tokens, 16u);  // OpenAI's default
  EXPECT_EQ(r->g.sampling.top_logprobs, 2);
  r = parse(R"({"prompt": [[1, 2, 3]]})", false);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->g.token_ids, (std::vector<uint32_t>{1, 2, 3}));
  EXPECT_FALSE(parse(R"({"prompt": ["a", "b"]})", false).ok());
}

TEST(openai_api, response_counts_usage_and_drops_the_stop_token) {
  auto r = parse(
      R"({"messages": [{"role": "user", "content": "x"}], "n": 2, "logprobs": true, "top_logprobs": 1})");
  ASSERT_TRUE(r.ok());
  const int32_t eos = 9;
  generation gen(r->g.sampling, eos);
  gen.apply(chunk(0, 4, "he", -0.5f));
  gen.apply(chunk(1, 5, "yo", -0.25f));
  gen.apply(chunk(0, eos, "", -0.1f));
  gen.apply(final(0, protocol::finish_reason::stop, 2));
  gen.apply(final(1, protocol::finish_reason::length, 1));
  ASSERT_TRUE(gen.done());
  json j = openai_response(*r, gen, {"chatcmpl-1", 100, "tiny", nullptr});
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "he");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["choices"][1]["finish_reason"], "length");
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"].size(), 1u);  // EOS left out, as its text
  EXPECT_FLOAT_EQ(j["choices"][0]["logprobs"]["content"][0]["logprob"].get<float>(), -0.5f);
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 10);
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
  EXPECT_EQ(j["usage"]["total_tokens"], 13);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
}

TEST(openai_api, stream_sends_role_deltas_finish_usage_and_done) {
  auto r = parse(
      R"({"messages": [{"role": "user", "content": "x"}], "stream": true, "stream_options": {"include_usage": true}})");
  ASSERT_TRUE(r.ok());
  generation gen(r->g.sampling, 9);
  openai_context ctx{"chatcmpl-2", 100, "tiny", nullptr};
  openai_stream st(*r, ctx);
  std::string out;
  for (const protocol::reply& rep :
       {protocol::reply{chunk(0, 4, "hel", -1)}, protocol::reply{chunk(0, 5, "", -1)},
        protocol::reply{chunk(0, 9, "", -1)}, protocol::reply{final(0, protocol::finish_reason::stop, 3)}}) {
    out += st.on_reply(gen, gen.apply(rep), rep);
  }
  out += st.end(gen);
  std::vector<json> events;
  size_t at = 0;
  while ((at = out.find("data: ", at)) != std::string::npos) {
    const size_t end = out.find("\n\n", at);
    const std::string data = out.substr(at + 6, end - at - 6);
    if (data != "[DONE]") events.push_back(json::parse(data));
    at = end;
  }
  ASSERT_EQ(events.size(), 4u) << out;  // role, "hel", finish, usage (empty deltas are not sent)
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(events[1]["choices"][0]["delta"]["content"], "hel");
  EXPECT_TRUE(events[1]["usage"].is_null());
  EXPECT_EQ(events[2]["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(events[3]["choices"].empty());
  EXPECT_EQ(events[3]["usage"]["completion_tokens"], 3);
  for (const json& e : events) EXPECT_EQ(e["system_fingerprint"], "hart-w3") << e;  // as OpenAI streams
  EXPECT_EQ(out.substr(out.size() - 14), "data: [DONE]\n\n");
}

}  // namespace
}  // namespace hart::http
