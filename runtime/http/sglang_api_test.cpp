#include "runtime/http/sglang_api.h"

#include "runtime/http/exchange.h"
#include "runtime/protocol/routing_parts.h"

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

TEST(sglang_api, stream_interval_sends_the_first_token_every_interval_th_and_the_final) {
  auto r = parse(
      R"({"input_ids": [1], "stream": true, "sampling_params": {"max_new_tokens": 7, "stream_interval": 3}})");
  ASSERT_TRUE(r.ok()) << r.get_status().to_string();
  EXPECT_EQ(r->stream_interval, 3u);
  generation gen(r->g.sampling, /*eos=*/9);
  const sglang_context ctx{"c", nullptr};
  std::vector<size_t> shown;  // output_ids of each event
  for (uint32_t t = 0; t < 7; ++t) {
    const protocol::reply rep{chunk(0, 20 + t, "x", 0)};
    const std::string e = sglang_stream_event(*r, gen, gen.apply(rep), rep, ctx);
    if (!e.empty()) shown.push_back(json::parse(e.substr(6))["output_ids"].size());
  }
  const protocol::reply last{final(0, protocol::finish_reason::length, 7)};
  const std::string e = sglang_stream_event(*r, gen, gen.apply(last), last, ctx);
  ASSERT_FALSE(e.empty()) << "the final always comes";
  shown.push_back(json::parse(e.substr(6))["output_ids"].size());
  EXPECT_EQ(shown, (std::vector<size_t>{1, 4, 7, 7}));  // SGLang's scheduler: tokens 1, 1 + 3, 1 + 6
  EXPECT_FALSE(parse(R"({"text": "a", "sampling_params": {"stream_interval": 0}})").ok());
}

TEST(sglang_api, aborts_have_sglangs_finish_reason_shape) {
  auto r = parse(R"({"input_ids": [1]})");
  ASSERT_TRUE(r.ok());
  generation gen(r->g.sampling, 9);
  protocol::final_event f = final(0, protocol::finish_reason::abort, 0);
  f.error_message = "aborted by pause_generation";
  gen.apply(f);
  const sglang_context ctx{"d", nullptr};
  EXPECT_EQ(sglang_response(*r, gen, ctx)["meta_info"]["finish_reason"],
            json::parse(R"({"type": "abort", "message": "aborted by pause_generation", "status_code": null,
                            "err_type": null})"));
  generation failed(r->g.sampling, 9);
  f.reason = protocol::finish_reason::error;
  f.error_message = "unavailable: the worker died";
  failed.apply(f);
  EXPECT_EQ(sglang_response(*r, failed, ctx)["meta_info"]["finish_reason"]["status_code"], 503);
}

// Layers 2 and 1 (out of order), k = 2, 3 positions: rows of [layer 1, layer 2].
protocol::routing_info routing_of_3_positions() {
  protocol::routing_info ri;
  ri.positions = 3;
  ri.experts = {{2, 2, {1, 2, 3, 4, 5, 6}}, {1, 2, {7, 0, 6, 5, 4, 3}}};
  return ri;
}

TEST(sglang_api, routed_experts_are_base64_of_little_endian_int32_rows) {
  const protocol::routing_info ri = routing_of_3_positions();
  // Python: base64.b64encode(struct.pack("<12i", 7, 0, 1, 2, 6, 5, 3, 4, 4, 3, 5, 6)).
  EXPECT_EQ(routed_experts_base64(ri, 0), "BwAAAAAAAAABAAAAAgAAAAYAAAAFAAAAAwAAAAQAAAAEAAAAAwAAAAUAAAAGAAAA");
  EXPECT_EQ(routed_experts_base64(ri, 1), "BgAAAAUAAAADAAAABAAAAAQAAAADAAAABQAAAAYAAAA=");
  EXPECT_EQ(routed_experts_base64(ri, 3), "");
  protocol::routing_info wide;
  wide.positions = 1;
  wide.experts = {{0, 2, {258, 3 << 16}}};
  EXPECT_EQ(routed_experts_base64(wide, 0), "AgEAAAAAAwA=");
}

TEST(sglang_api, routed_experts_come_with_the_final_joined_from_its_parts) {
  auto r = parse(R"({"input_ids": [1, 2], "return_routed_experts": true, "routed_experts_start_len": 1,
                     "sampling_params": {"max_new_tokens": 2}})");
  ASSERT_TRUE(r.ok()) << r.get_status().to_string();
  EXPECT_TRUE(r->g.return_routing);
  generation gen(r->g.sampling, 9);
  const sglang_context ctx{"e", nullptr};
  gen.apply(chunk(0, 4, "a", 0));
  EXPECT_FALSE(sglang_response(*r, gen, ctx)["meta_info"].contains("routed_experts"))
      << "only with the final";
  gen.apply(chunk(0, 5, "b", 0));
  std::vector<protocol::routing_part> parts =
      protocol::split_routing(routing_of_3_positions(), k_exchange_request_id, 0, /*max_ids=*/5);
  ASSERT_EQ(parts.size(), 3u);
  for (protocol::routing_part& p : parts) EXPECT_EQ(gen.apply(protocol::reply{std::move(p)}), -1);
  protocol::final_event f = final(0, protocol::finish_reason::length, 2);
  f.request_id = k_exchange_request_id;
  f.routing_parts = 3;
  gen.apply(f);
  ASSERT_TRUE(gen.error().ok()) << gen.error().to_string();
  const json meta = sglang_response(*r, gen, ctx)["meta_info"];
  EXPECT_EQ(meta["routed_experts"], routed_experts_base64(routing_of_3_positions(), 1));
  EXPECT_EQ(meta["routed_experts_start_len"], 1);

  // SGLang: the start must be within the prompt.
  EXPECT_EQ(parse(R"({"input_ids": [1, 2], "return_routed_experts": true, "routed_experts_start_len": 3})")
                .get_status()
                .message(),
            "routed_experts_start_len: 3 is past the prompt's 2 tokens");
  // A routing whose layers disagree on k cannot be one tensor: the generation fails.
  generation odd(r->g.sampling, 9);
  protocol::final_event g = final(0, protocol::finish_reason::length, 2);
  g.routing.positions = 1;
  g.routing.experts = {{0, 2, {1, 2}}, {1, 3, {1, 2, 3}}};
  odd.apply(g);
  EXPECT_EQ(odd.error().code(), status_code::internal);
}

}  // namespace
}  // namespace hart::http
