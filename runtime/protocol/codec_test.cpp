// Round trips of every message kind through encode/decode (bad input: codec_bad_input_test.cpp).
#include "runtime/protocol/codec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

namespace hart::protocol {
namespace {

byte_view view(const std::array<uint8_t, 2>& h) {
  return {h.data(), h.size()};
}
byte_view view(const std::vector<uint8_t>& p) {
  return {p.data(), p.size()};
}

request round_trip(const request& in) {
  auto enc = encode_request(in);
  EXPECT_TRUE(enc.ok()) << enc.get_status().to_string();
  auto dec = decode_request(view(enc->header), view(enc->payload));
  EXPECT_TRUE(dec.ok()) << dec.get_status().to_string();
  return dec.ok() ? *dec : request{};
}

reply round_trip(const reply& in) {
  auto enc = encode_reply(in);
  EXPECT_TRUE(enc.ok()) << enc.get_status().to_string();
  auto dec = decode_reply(view(enc->header), view(enc->payload));
  EXPECT_TRUE(dec.ok()) << dec.get_status().to_string();
  return dec.ok() ? *dec : reply{};
}

generate_request full_generate() {
  generate_request g;
  g.request_id = 0xDEADBEEFCAFEull;
  g.kind = prompt_kind::token_ids;
  g.token_ids = {0, 1, 2, 4000000000u};
  g.sampling.temperature = 0.7f;
  g.sampling.top_p = 0.9f;
  g.sampling.top_k = 40;
  g.sampling.min_p = 0.05f;
  g.sampling.has_seed = true;
  g.sampling.seed = 1234567890123ull;
  g.sampling.max_new_tokens = 77;
  g.sampling.min_new_tokens = 3;
  g.sampling.stop = {"\n\n", "</s>", "é"};
  g.sampling.stop_token_ids = {1, 2};
  g.sampling.ignore_eos = true;
  g.sampling.n = 4;
  g.sampling.logprobs = true;
  g.sampling.top_logprobs = 5;
  g.session_id = "chat-42";
  g.priority = -3;
  return g;
}

void expect_same(const generate_request& a, const generate_request& b) {
  EXPECT_EQ(a.request_id, b.request_id);
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.token_ids, b.token_ids);
  ASSERT_EQ(a.messages.size(), b.messages.size());
  for (size_t i = 0; i < a.messages.size(); ++i) {
    EXPECT_EQ(a.messages[i].role, b.messages[i].role);
    EXPECT_EQ(a.messages[i].content, b.messages[i].content);
    EXPECT_EQ(a.messages[i].reasoning, b.messages[i].reasoning);
  }
  EXPECT_EQ(a.text, b.text);
  EXPECT_EQ(a.thinking, b.thinking);
  EXPECT_EQ(a.effort, b.effort);
  const auto &s = a.sampling, &t = b.sampling;
  EXPECT_EQ(s.temperature, t.temperature);
  EXPECT_EQ(s.top_p, t.top_p);
  EXPECT_EQ(s.top_k, t.top_k);
  EXPECT_EQ(s.min_p, t.min_p);
  EXPECT_EQ(s.has_seed, t.has_seed);
  EXPECT_EQ(s.seed, t.seed);
  EXPECT_EQ(s.max_new_tokens, t.max_new_tokens);
  EXPECT_EQ(s.min_new_tokens, t.min_new_tokens);
  EXPECT_EQ(s.stop, t.stop);
  EXPECT_EQ(s.stop_token_ids, t.stop_token_ids);
  EXPECT_EQ(s.ignore_eos, t.ignore_eos);
  EXPECT_EQ(s.n, t.n);
  EXPECT_EQ(s.logprobs, t.logprobs);
  EXPECT_EQ(s.top_logprobs, t.top_logprobs);
  EXPECT_EQ(a.session_id, b.session_id);
  EXPECT_EQ(a.priority, b.priority);
}

TEST(codec, header_layout) {
  auto enc = encode_request(request{control_request{}});
  ASSERT_TRUE(enc.ok());
  EXPECT_EQ(enc->header[0], protocol_version);
  EXPECT_EQ(enc->header[1], 1);
  EXPECT_EQ(enc->payload.size() % 8, 0u);
  auto rep = encode_reply(reply{health_reply{}});
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(rep->header[1], 2);
}

TEST(codec, generate_token_ids_round_trip) {
  generate_request g = full_generate();
  request out = round_trip(request{g});
  ASSERT_TRUE(std::holds_alternative<generate_request>(out));
  expect_same(g, std::get<generate_request>(out));
}

TEST(codec, generate_messages_round_trip) {
  generate_request g = full_generate();
  g.kind = prompt_kind::messages;
  g.token_ids.clear();
  g.messages = {{"system", "Be brief."}, {"user", "Héllo, 世界 🌍"}, {"assistant", "", "thought 🤔"}};
  g.thinking = true;
  g.effort = reasoning_effort::max;
  request out = round_trip(request{g});
  ASSERT_TRUE(std::holds_alternative<generate_request>(out));
  expect_same(g, std::get<generate_request>(out));
}

TEST(codec, generate_text_round_trip_and_defaults) {
  generate_request g;
  g.request_id = 1;
  g.kind = prompt_kind::text;
  g.text = "Once upon a time";
  request out = round_trip(request{g});
  ASSERT_TRUE(std::holds_alternative<generate_request>(out));
  const auto& d = std::get<generate_request>(out);
  expect_same(g, d);
  // Schema defaults equal the C++ defaults.
  EXPECT_EQ(d.sampling.temperature, 1.0f);
  EXPECT_EQ(d.sampling.top_k, -1);
  EXPECT_EQ(d.sampling.n, 1u);
  EXPECT_EQ(d.sampling.max_new_tokens, 256u);
  EXPECT_FALSE(d.sampling.has_seed);
}

TEST(codec, every_control_verb_round_trips) {
  for (int v = 0; v <= static_cast<int>(control_verb::weight_version); ++v) {
    control_request c;
    c.tag = 1000 + v;
    c.verb = static_cast<control_verb>(v);
    if (c.verb == control_verb::abort) c.request_id = 99;
    request out = round_trip(request{c});
    ASSERT_TRUE(std::holds_alternative<control_request>(out));
    const auto& d = std::get<control_request>(out);
    EXPECT_EQ(d.tag, c.tag);
    EXPECT_EQ(d.verb, c.verb);
    EXPECT_EQ(d.request_id, c.request_id);
  }
  control_request all;
  all.verb = control_verb::abort;
  all.all = true;
  auto d = std::get<control_request>(round_trip(request{all}));
  EXPECT_TRUE(d.all);
  for (auto m : {pause_mode::abort, pause_mode::retract, pause_mode::in_place}) {
    control_request p;
    p.verb = control_verb::pause;
    p.mode = m;
    EXPECT_EQ(std::get<control_request>(round_trip(request{p})).mode, m);
  }
}

TEST(codec, chunk_round_trip) {
  chunk_event c;
  c.request_id = 5;
  c.sample_index = 3;
  c.seq = 17;
  c.token_ids = {10, 20};
  c.text = "ab🌍";
  c.logprobs = {-0.5f, -1.25f};
  c.top_logprobs = {{{10, -0.5f}, {11, -2.0f}}, {{20, -1.25f}}};
  c.weight_version = 8;
  c.server_time_us = 123456789;
  reply out = round_trip(reply{c});
  ASSERT_TRUE(std::holds_alternative<chunk_event>(out));
  const auto& d = std::get<chunk_event>(out);
  EXPECT_EQ(d.request_id, 5u);
  EXPECT_EQ(d.sample_index, 3u);
  EXPECT_EQ(d.seq, 17u);
  EXPECT_EQ(d.token_ids, c.token_ids);
  EXPECT_EQ(d.text, c.text);
  EXPECT_EQ(d.logprobs, c.logprobs);
  ASSERT_EQ(d.top_logprobs.size(), 2u);
  ASSERT_EQ(d.top_logprobs[0].size(), 2u);
  EXPECT_EQ(d.top_logprobs[0][1].token_id, 11u);
  EXPECT_EQ(d.top_logprobs[0][1].logprob, -2.0f);
  EXPECT_EQ(d.top_logprobs[1][0].token_id, 20u);
  EXPECT_EQ(d.weight_version, 8u);
  EXPECT_EQ(d.server_time_us, 123456789u);
}

TEST(codec, final_round_trip) {
  for (auto r : {finish_reason::stop, finish_reason::length, finish_reason::abort, finish_reason::error}) {
    final_event f;
    f.request_id = 6;
    f.sample_index = 1;
    f.reason = r;
    f.usage = {100, 20, 64};
    f.timings = {11, 2222, 333333};
    f.weight_version = 3;
    f.error_message = r == finish_reason::error ? "worker died" : "";
    reply out = round_trip(reply{f});
    ASSERT_TRUE(std::holds_alternative<final_event>(out));
    const auto& d = std::get<final_event>(out);
    EXPECT_EQ(d.reason, r);
    EXPECT_EQ(d.usage.prompt_tokens, 100u);
    EXPECT_EQ(d.usage.completion_tokens, 20u);
    EXPECT_EQ(d.usage.cached_tokens, 64u);
    EXPECT_EQ(d.timings.queue_us, 11u);
    EXPECT_EQ(d.timings.ttft_us, 2222u);
    EXPECT_EQ(d.timings.total_us, 333333u);
    EXPECT_EQ(d.weight_version, 3u);
    EXPECT_EQ(d.error_message, f.error_message);
  }
}

TEST(codec, final_routing_round_trip_and_bad_shapes_refused) {
  final_event f;
  f.request_id = 6;
  f.routing.positions = 3;
  f.routing.experts = {{0, 2, {1, 2, 3, 4, 5, 6}}, {1, 2, {0, 7, 1, 6, 2, 5}}};
  f.routing.picks = {{1, 4, {0, 1, -1, -1, 2, 0, 1, -1, 3, 2, 1, 0}}};
  reply out = round_trip(reply{f});
  const auto& d = std::get<final_event>(out);
  EXPECT_EQ(d.routing.positions, 3u);
  ASSERT_EQ(d.routing.experts.size(), 2u);
  EXPECT_EQ(d.routing.experts[1].layer, 1u);
  EXPECT_EQ(d.routing.experts[1].ids, f.routing.experts[1].ids);
  ASSERT_EQ(d.routing.picks.size(), 1u);
  EXPECT_EQ(d.routing.picks[0].k, 4u);
  EXPECT_EQ(d.routing.picks[0].ids, f.routing.picks[0].ids);
  // No routing asked: none on the wire, none read back.
  final_event plain;
  plain.request_id = 7;
  EXPECT_EQ(std::get<final_event>(round_trip(reply{plain})).routing.positions, 0u);
  // A layer whose ids are not positions x k is refused, naming it.
  f.routing.experts[0].ids.pop_back();
  auto enc = encode_reply(reply{f});
  ASSERT_TRUE(enc.ok());
  auto dec = decode_reply(view(enc->header), view(enc->payload));
  ASSERT_FALSE(dec.ok());
  EXPECT_NE(dec.get_status().message().find("routing.experts: layer 0 holds 5 ids"), std::string::npos)
      << dec.get_status().to_string();
}

TEST(codec, generate_return_routing_round_trips) {
  generate_request g;
  g.request_id = 9;
  g.token_ids = {1, 2};
  g.return_routing = true;
  g.return_indexer_picks = true;
  EXPECT_TRUE(std::get<generate_request>(round_trip(request{g})).return_routing);
  EXPECT_TRUE(std::get<generate_request>(round_trip(request{g})).return_indexer_picks);
  g.return_indexer_picks = false;
  EXPECT_FALSE(std::get<generate_request>(round_trip(request{g})).return_indexer_picks);
  g.return_routing = false;
  EXPECT_FALSE(std::get<generate_request>(round_trip(request{g})).return_routing);
}

// Prompt log-probs: the request's start (default -1), the final's values with NaN for position 0;
// maxNewTokens 0 only when scoring.
TEST(codec, prompt_logprobs_round_trip) {
  generate_request g;
  g.request_id = 9;
  g.token_ids = {1, 2, 3};
  EXPECT_EQ(std::get<generate_request>(round_trip(request{g})).logprob_start, -1);
  g.logprob_start = 0;
  g.sampling.max_new_tokens = 0;
  EXPECT_EQ(std::get<generate_request>(round_trip(request{g})).logprob_start, 0);
  auto refused = [](const generate_request& bad) {  // encodes, but the receiver's decode refuses it
    auto enc = encode_request(request{bad});
    return enc.ok() && !decode_request(view(enc->header), view(enc->payload)).ok();
  };
  g.logprob_start = -1;
  EXPECT_TRUE(refused(g)) << "maxNewTokens 0 without scoring";
  g.logprob_start = -2;
  g.sampling.max_new_tokens = 4;
  EXPECT_TRUE(refused(g));

  final_event f;
  f.request_id = 9;
  f.input_logprobs = {std::nanf(""), -1.25f, -0.5f};
  const auto back = std::get<final_event>(round_trip(reply{f}));
  ASSERT_EQ(back.input_logprobs.size(), 3u);
  EXPECT_TRUE(std::isnan(back.input_logprobs[0]));
  EXPECT_EQ(back.input_logprobs[1], -1.25f);
  EXPECT_TRUE(std::get<final_event>(round_trip(reply{final_event{}})).input_logprobs.empty());
}

TEST(codec, error_reply_round_trip_every_code) {
  for (int c = 0; c <= static_cast<int>(status_code::unimplemented); ++c) {
    error_reply e{77, 9, static_cast<status_code>(c), "why"};
    reply out = round_trip(reply{e});
    ASSERT_TRUE(std::holds_alternative<error_reply>(out));
    const auto& d = std::get<error_reply>(out);
    EXPECT_EQ(d.tag, 77u);
    EXPECT_EQ(d.request_id, 9u);
    EXPECT_EQ(d.code, e.code);
    EXPECT_EQ(d.message, "why");
  }
  error_reply from = error_reply_from(invalid_argument("bad %d", 1), 4, 2);
  EXPECT_EQ(from.code, status_code::invalid_argument);
  EXPECT_EQ(from.message, "bad 1");
}

// Error texts may quote a client's bytes (an unknown chat role): on the wire they are valid
// UTF-8, each ill-formed subpart a U+FFFD (issue 27, finding 7: pycapnp could not read them).
TEST(codec, error_texts_are_valid_utf8_on_the_wire) {
  reply e = round_trip(reply{error_reply_from(invalid_argument("unknown role \"\xff\xfeok\xC3\""), 4, 2)});
  ASSERT_TRUE(std::holds_alternative<error_reply>(e));
  EXPECT_EQ(std::get<error_reply>(e).message, "unknown role \"\xEF\xBF\xBD\xEF\xBF\xBDok\xEF\xBF\xBD\"");
  final_event f;
  f.reason = finish_reason::error;
  f.error_message = "stop \xC3\x28";
  reply r = round_trip(reply{f});
  ASSERT_TRUE(std::holds_alternative<final_event>(r));
  EXPECT_EQ(std::get<final_event>(r).error_message, "stop \xEF\xBF\xBD(");
}

TEST(codec, control_replies_round_trip) {
  for (auto v : {control_verb::abort, control_verb::pause, control_verb::resume, control_verb::flush_cache}) {
    reply out = round_trip(reply{ack_reply{12, v, 3}});
    ASSERT_TRUE(std::holds_alternative<ack_reply>(out));
    EXPECT_EQ(std::get<ack_reply>(out).verb, v);
    EXPECT_EQ(std::get<ack_reply>(out).tag, 12u);
    EXPECT_EQ(std::get<ack_reply>(out).affected, 3u);
  }
  auto h = std::get<health_reply>(round_trip(reply{health_reply{13, true, 123456}}));
  EXPECT_EQ(h.tag, 13u);
  EXPECT_TRUE(h.ok);
  EXPECT_EQ(h.uptime_us, 123456u);
  stats_reply s;
  s.tag = 14;
  s.entries = {{"queue_depth", 3.0}, {"tokens_per_s", 1234.5}};
  s.prometheus = "# TYPE hart_queue_depth gauge\nhart_queue_depth 3\n";
  auto sd = std::get<stats_reply>(round_trip(reply{s}));
  EXPECT_EQ(sd.tag, 14u);
  EXPECT_EQ(sd.entries, s.entries);
  EXPECT_EQ(sd.prometheus, s.prometheus);
  auto w = std::get<weight_version_reply>(round_trip(reply{weight_version_reply{15, 42}}));
  EXPECT_EQ(w.tag, 15u);
  EXPECT_EQ(w.version, 42u);
}

TEST(codec, decodes_from_every_misaligned_offset) {
  auto enc = encode_request(request{full_generate()});
  ASSERT_TRUE(enc.ok());
  std::vector<uint8_t> buf(enc->payload.size() + 16);
  for (size_t off = 0; off < 8; ++off) {
    // Find a base that is 8-aligned, then shift by `off`.
    auto base = reinterpret_cast<uintptr_t>(buf.data());
    size_t pad = (8 - base % 8) % 8;
    uint8_t* p = buf.data() + pad + off;
    std::memcpy(p, enc->payload.data(), enc->payload.size());
    auto dec = decode_request(view(enc->header), {p, enc->payload.size()});
    ASSERT_TRUE(dec.ok()) << "offset " << off << ": " << dec.get_status().to_string();
    expect_same(full_generate(), std::get<generate_request>(*dec));
  }
}

}  // namespace
}  // namespace hart::protocol
