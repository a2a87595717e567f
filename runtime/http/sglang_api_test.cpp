#include "runtime/http/sglang_api.h"

#include <gtest/gtest.h>

namespace hart::http {
namespace {

status_or<sglang_request> parse(const char* body) {
  return parse_generate_request(json::parse(body));
}

protocol::chunk_event chunk(uint32_t sample, uint32_t token, const std::string& text, float lp) {
  protocol::chunk_event c;
  c.sample_index = sample;
  c.token_ids = {token};
  c.text = text;
  c.logprobs = {lp};
  c.weight_version = 2;
  return c;
}

protocol::final_event final(uint32_t sample, protocol::finish_reason r, uint32_t completion) {
  protocol::final_event f;
  f.sample_index = sample;
  f.reason = r;
  f.usage = {3, completion, 1};
  f.weight_version = 2;
  return f;
}

TEST(sglang_api, generate_fields_as_slime_sends_them) {
  auto r = parse(R"({"input_ids": [1, 2, 3], "rid": "r-1", "return_logprob": true, "stream": false,
      "sampling_params": {"temperature": 0.7, "top_p": 1.0, "top_k": -1, "max_new_tokens": 9, "stop": ["x"],
        "stop_token_ids": [7], "skip_special_tokens": false, "no_stop_trim": true,
        "spaces_between_special_tokens": false, "sampling_seed": 5, "custom_params": {"return_top_p_token_ids": true}},
      "return_routed_experts": false})");
  ASSERT_TRUE(r.ok()) << r.get_status().to_string();
  EXPECT_EQ(r->g.kind, protocol::prompt_kind::token_ids);
  EXPECT_EQ(r->g.token_ids.size(), 3u);
  EXPECT_EQ(r->rid, "r-1");
  EXPECT_TRUE(r->g.sampling.logprobs);
  EXPECT_EQ(r->g.sampling.max_new_tokens, 9u);
  EXPECT_EQ(r->g.sampling.top_k, -1);
  EXPECT_TRUE(r->no_stop_trim);
  EXPECT_TRUE(r->g.sampling.has_seed);
  EXPECT_EQ(r->g.sampling.seed, 5u);
  EXPECT_EQ(parse(R"({"text": "hi"})")->g.sampling.max_new_tokens, 128u);  // SGLang's default
}

TEST(sglang_api, refusals_name_the_field) {
  EXPECT_EQ(parse(R"({"text": "a", "bogus": 1})").get_status().message(), "bogus: unknown field");
  EXPECT_EQ(parse(R"({"text": "a", "sampling_params": {"temprature": 1}})").get_status().message(),
            "sampling_params.temprature: unknown field");
  EXPECT_EQ(parse(R"({"text": "a", "sampling_params": {"max_new_tokens": "9"}})").get_status().message(),
            "sampling_params.max_new_tokens: expected an integer in [0, 4294967295], got string");
  EXPECT_EQ(parse(R"({"text": "a", "input_ids": [1]})").get_status().message(),
            "text, input_ids: exactly one is required");
  EXPECT_NE(parse(R"({"input_ids": [[1], [2]]})").get_status().message().find("batched"), std::string::npos);
  EXPECT_NE(
      parse(R"({"text": "a", "return_indexer_topk": true})").get_status().message().find("binary protocol"),
      std::string::npos);
  EXPECT_NE(parse(R"({"input_ids": [1, -1]})").get_status().message().find("input_ids[1]"),
            std::string::npos);
}

TEST(sglang_api, response_has_logprob_triples_finish_reason_and_trims_the_stop_token) {
  auto r = parse(R"({"input_ids": [1, 2, 3], "return_logprob": true, "rid": "a"})");
  ASSERT_TRUE(r.ok());
  generation gen(r->g.sampling, /*eos=*/9);
  gen.apply(chunk(0, 4, "ab", -0.5f));
  gen.apply(chunk(0, 9, "", -0.125f));
  gen.apply(final(0, protocol::finish_reason::stop, 2));
  const sglang_context ctx{"a", nullptr};
  json j = sglang_response(*r, gen, ctx);
  EXPECT_EQ(j["text"], "ab");
  EXPECT_EQ(j["output_ids"], json::array({4}));
  EXPECT_EQ(j["meta_info"]["output_token_logprobs"], json::parse("[[-0.5, 4, null]]"));
  EXPECT_EQ(j["meta_info"]["finish_reason"], json::parse(R"({"type": "stop", "matched": 9})"));
  EXPECT_EQ(j["meta_info"]["weight_version"], "2");
  EXPECT_EQ(j["meta_info"]["completion_tokens"], 2);
  EXPECT_EQ(j["meta_info"]["cached_tokens"], 1);
  EXPECT_EQ(j["meta_info"]["id"], "a");
  // no_stop_trim keeps the stop token (what slime trains on).
  r->no_stop_trim = true;
  j = sglang_response(*r, gen, ctx);
  EXPECT_EQ(j["output_ids"], json::array({4, 9}));
  EXPECT_EQ(j["meta_info"]["output_token_logprobs"].size(), 2u);
}

TEST(sglang_api, n_samples_answer_a_list_and_streams_are_cumulative) {
  auto r = parse(R"({"input_ids": [1], "sampling_params": {"n": 2, "max_new_tokens": 2}, "stream": true})");
  ASSERT_TRUE(r.ok());
  generation gen(r->g.sampling, 9);
  const sglang_context ctx{"b", nullptr};
  std::vector<json> events;
  for (const protocol::reply& rep :
       {protocol::reply{chunk(0, 4, "a", 0)}, protocol::reply{chunk(1, 5, "c", 0)},
        protocol::reply{chunk(0, 6, "b", 0)},
        protocol::reply{final(0, protocol::finish_reason::length, 2)}}) {
    std::string e = sglang_stream_event(*r, gen, gen.apply(rep), rep, ctx);
    ASSERT_EQ(e.rfind("data: ", 0), 0u);
    events.push_back(json::parse(e.substr(6)));
  }
  EXPECT_EQ(events[2]["text"], "ab");  // cumulative, as SGLang's
  EXPECT_EQ(events[2]["output_ids"], json::array({4, 6}));
  EXPECT_EQ(events[1]["index"], 1);
  EXPECT_TRUE(events[2]["meta_info"]["finish_reason"].is_null());
  EXPECT_EQ(events[3]["meta_info"]["finish_reason"], json::parse(R"({"type": "length", "length": 2})"));
  gen.apply(final(1, protocol::finish_reason::abort, 1));
  json all = sglang_response(*r, gen, ctx);
  ASSERT_TRUE(all.is_array());
  EXPECT_EQ(all[1]["meta_info"]["finish_reason"]["type"], "abort");
}

}  // namespace
}  // namespace hart::http
