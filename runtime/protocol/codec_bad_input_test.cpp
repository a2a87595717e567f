// Hostile and malformed input: every case must come back as a clean invalid_argument status.
#include "runtime/core/status_testing.h"
#include "runtime/protocol/codec.h"
#include "runtime/protocol/codec_test.capnp.h"
#include "runtime/protocol/hart.capnp.h"
#include "runtime/protocol/validate.h"

#include <capnp/any.h>
#include <capnp/message.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace hart::protocol {
namespace {

const std::array<uint8_t, 2> req_hdr = frame_header(frame_kind::request);
const std::array<uint8_t, 2> rep_hdr = frame_header(frame_kind::reply);

byte_view view(const std::array<uint8_t, 2>& h) {
  return {h.data(), h.size()};
}
byte_view view(const std::vector<uint8_t>& p) {
  return {p.data(), p.size()};
}

std::vector<uint8_t> flat(capnp::MessageBuilder& mb) {
  auto words = capnp::messageToFlatArray(mb);
  auto bytes = words.asBytes();
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

template <typename Fill>
std::vector<uint8_t> build_request(Fill&& fill) {
  capnp::MallocMessageBuilder mb;
  fill(mb.initRoot<wire::Request>());
  return flat(mb);
}

template <typename Fill>
std::vector<uint8_t> build_reply(Fill&& fill) {
  capnp::MallocMessageBuilder mb;
  fill(mb.initRoot<wire::Reply>());
  return flat(mb);
}

void expect_invalid(const status_or<request>& r, const char* needle = "") {
  ASSERT_STATUS(r, status_code::invalid_argument, needle);
}

void expect_invalid_reply(const status_or<reply>& r, const char* needle = "") {
  ASSERT_STATUS(r, status_code::invalid_argument, needle);
}

generate_request valid_generate() {
  generate_request g;
  g.request_id = 3;
  g.token_ids = {1, 2, 3};
  g.sampling.stop = {"end"};
  return g;
}

std::vector<uint8_t> valid_payload() {
  return encode_request(request{valid_generate()})->payload;
}

status_or<request> decode_generate(const generate_request& g) {
  auto enc = encode_request(request{g});
  EXPECT_TRUE(enc.ok());
  return decode_request(view(enc->header), view(enc->payload));
}

// -- framing ---------------------------------------------------------------------------------

TEST(codec_bad_input, random_bytes_2000_buffers) {
  std::mt19937_64 rng(20261129);
  for (int i = 0; i < 2000; ++i) {
    size_t n = rng() % 600;
    if (i % 2 == 0) n &= ~size_t{7};  // half of them pass the size check and reach capnp
    std::vector<uint8_t> buf(n);
    for (auto& b : buf) b = static_cast<uint8_t>(rng());
    if (i % 4 == 0 && n >= 8) {  // a plausible segment table: 1 segment, (n/8 - 1) words
      uint32_t seg_words = static_cast<uint32_t>(n / 8 - 1);
      std::memset(buf.data(), 0, 4);
      std::memcpy(buf.data() + 4, &seg_words, 4);
    }
    auto r = decode_request(view(req_hdr), view(buf));
    EXPECT_FALSE(r.ok()) << "buffer " << i;
    auto p = decode_reply(view(rep_hdr), view(buf));  // may decode (all-default chunk); must not crash
    if (!p.ok()) {
      EXPECT_EQ(p.get_status().code(), status_code::invalid_argument);
    }
  }
}

TEST(codec_bad_input, truncated_at_every_length) {
  auto full = valid_payload();
  ASSERT_TRUE(decode_request(view(req_hdr), view(full)).ok());
  for (size_t len = 0; len < full.size(); ++len) {
    std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<long>(len));
    expect_invalid(decode_request(view(req_hdr), {cut.data(), cut.size()}));
  }
}

TEST(codec_bad_input, trailing_bytes_rejected) {
  auto p = valid_payload();
  p.resize(p.size() + 8, 0);
  expect_invalid(decode_request(view(req_hdr), view(p)), "trailing");
}

TEST(codec_bad_input, oversized_frame_rejected_before_parsing) {
  std::vector<uint8_t> big(max_frame_bytes + 8, 0);
  expect_invalid(decode_request(view(req_hdr), view(big)), "limit");
}

TEST(codec_bad_input, over_long_list_hits_traversal_limit) {
  // 3 Mi tokens = 1.5 Mi words: under max_frame_bytes, over traversal_limit_words.
  auto p = build_request([](wire::Request::Builder r) {
    auto g = r.initGenerate();
    g.setRequestId(1);
    g.getPrompt().initTokenIds(3u << 20);
  });
  ASSERT_LE(p.size(), max_frame_bytes);
  expect_invalid(decode_request(view(req_hdr), view(p)), "traversal limit");
}

TEST(codec_bad_input, prompt_over_token_limit) {
  auto p = build_request([](wire::Request::Builder r) {
    auto g = r.initGenerate();
    g.setRequestId(1);
    g.getPrompt().initTokenIds(static_cast<unsigned>(max_prompt_tokens + 1));
  });
  expect_invalid(decode_request(view(req_hdr), view(p)), "tokenIds");
}

TEST(codec_bad_input, misaligned_bad_input_at_offsets_1_to_7) {
  auto full = valid_payload();
  std::vector<uint8_t> buf(full.size() + 16);
  for (size_t off = 1; off < 8; ++off) {
    std::memcpy(buf.data() + off, full.data(), full.size());
    buf[off + full.size() / 2] ^= 0xFF;                                           // corrupt the middle
    auto r = decode_request(view(req_hdr), {buf.data() + off, full.size() - 8});  // and truncate
    EXPECT_FALSE(r.ok()) << "offset " << off;
  }
}

TEST(codec_bad_input, wrong_header) {
  auto p = valid_payload();
  std::array<uint8_t, 2> v2{2, 1}, v0{0, 1}, kind_reply{protocol_version, 2}, kind_bad{1, 9};
  expect_invalid(decode_request(view(v2), view(p)), "protocol version 2");
  expect_invalid(decode_request(view(v0), view(p)), "protocol version 0");
  expect_invalid(decode_request(view(kind_reply), view(p)), "kind");
  expect_invalid(decode_request(view(kind_bad), view(p)), "kind");
  uint8_t three[3] = {1, 1, 0};
  expect_invalid(decode_request({three, 3}, view(p)), "header");
  expect_invalid(decode_request({three, 1}, view(p)), "header");
  expect_invalid(decode_request({nullptr, 0}, view(p)), "header");
  expect_invalid(decode_request(view(req_hdr), {nullptr, 0}), "empty");
  expect_invalid(decode_request(view(req_hdr), {p.data(), p.size() - 3}), "multiple of 8");
  expect_invalid_reply(decode_reply(view(req_hdr), view(p)), "kind");
}

// -- unknown enum values and union members ---------------------------------------------------

TEST(codec_bad_input, unknown_enum_values) {
  auto pause =
      build_request([](wire::Request::Builder r) { r.initPause().setMode(static_cast<wire::PauseMode>(9)); });
  expect_invalid(decode_request(view(req_hdr), view(pause)), "pause.mode");

  auto fin = build_reply(
      [](wire::Reply::Builder r) { r.initFinal().setFinishReason(static_cast<wire::FinishReason>(50)); });
  expect_invalid_reply(decode_reply(view(rep_hdr), view(fin)), "finishReason");
  auto err =
      build_reply([](wire::Reply::Builder r) { r.initError().setCode(static_cast<wire::ErrorCode>(11)); });
  expect_invalid_reply(decode_reply(view(rep_hdr), view(err)), "error.code");
  auto ack = build_reply([](wire::Reply::Builder r) { r.initAck().setVerb(static_cast<wire::Verb>(77)); });
  expect_invalid_reply(decode_reply(view(rep_hdr), view(ack)), "ack.verb");
}

// Overwrites the first 16-bit data field equal to `from` (a union discriminant) with `to`.
void patch_u16(capnp::AnyStruct::Builder s, uint16_t from, uint16_t to) {
  auto data = s.getDataSection();
  for (size_t i = 0; i + 1 < data.size(); i += 2) {
    uint16_t v;
    std::memcpy(&v, data.begin() + i, 2);
    if (v == from) {
      std::memcpy(data.begin() + i, &to, 2);
      return;
    }
  }
  FAIL() << "discriminant " << from << " not found";
}

TEST(codec_bad_input, unknown_union_members) {
  {
    capnp::MallocMessageBuilder mb;
    auto r = mb.initRoot<wire::Request>();
    r.setStats();  // which = 7, tag = 0
    patch_u16(capnp::toAny(r), wire::Request::STATS, 200);
    auto p = flat(mb);
    expect_invalid(decode_request(view(req_hdr), view(p)), "unknown kind 200");
  }
  {
    capnp::MallocMessageBuilder mb;
    auto g = mb.initRoot<wire::Request>().initGenerate();
    g.getPrompt().setText("hi");  // which = 2, request id 0
    patch_u16(capnp::toAny(g), wire::GenerateRequest::Prompt::TEXT, 31);
    auto p = flat(mb);
    expect_invalid(decode_request(view(req_hdr), view(p)), "prompt: unknown union member 31");
  }
  {
    capnp::MallocMessageBuilder mb;
    auto r = mb.initRoot<wire::Reply>();
    r.initHealth();
    patch_u16(capnp::toAny(r), wire::Reply::HEALTH, 99);
    auto p = flat(mb);
    expect_invalid_reply(decode_reply(view(rep_hdr), view(p)), "unknown kind 99");
  }
}

// -- depth bombs and pointer cycles ----------------------------------------------------------

std::vector<uint8_t> nest_chain(int depth) {
  capnp::MallocMessageBuilder mb;
  auto n = mb.initRoot<wire_test::Nest>();
  for (int i = 0; i < depth; ++i) n = n.initChild();
  return flat(mb);
}

TEST(codec_bad_input, nesting_depth_bomb) {
  // A 10000-deep chain read as a Request: the schema follows at most a few pointers, each of
  // them has the wrong shape, and the reader stops cleanly.
  auto bomb = nest_chain(10000);
  expect_invalid(decode_request(view(req_hdr), view(bomb)));
  expect_invalid_reply(decode_reply(view(rep_hdr), view(bomb)));
  // The same chain under the codec's ReaderOptions trips the nesting limit at depth 16.
  capnp::ReaderOptions o;
  o.traversalLimitInWords = traversal_limit_words;
  o.nestingLimit = nesting_limit;
  kj::ArrayPtr<const capnp::word> w(reinterpret_cast<const capnp::word*>(bomb.data()), bomb.size() / 8);
  bool threw = false;
  try {
    capnp::FlatArrayMessageReader rd(w, o);
    auto n = rd.getRoot<wire_test::Nest>();
    for (int i = 0; i < 100; ++i) {
      n = n.getChild();
      if (!n.hasChild()) {
        ADD_FAILURE() << "chain ended at " << i;
        break;
      }
    }
  } catch (const kj::Exception& e) {
    threw = std::string(e.getDescription().cStr()).find("too deeply-nested") != std::string::npos;
    if (!threw) ADD_FAILURE() << e.getDescription().cStr();
  }
  EXPECT_TRUE(threw);
}

TEST(codec_bad_input, pointer_cycle) {
  // Point Request.generate back at the root struct itself.
  auto p = build_request([](wire::Request::Builder r) { r.initGenerate().setRequestId(5); });
  auto* seg = reinterpret_cast<uint64_t*>(p.data() + 8);  // after the 1-segment table
  uint64_t root_ptr = seg[0];
  int32_t off = static_cast<int32_t>(static_cast<uint32_t>(root_ptr)) >> 2;
  uint32_t hi = static_cast<uint32_t>(root_ptr >> 32);
  size_t root_at = 1 + static_cast<size_t>(off);
  size_t gen_ptr_at = root_at + (hi & 0xFFFF);  // first pointer after the data section
  int32_t back = static_cast<int32_t>(root_at) - static_cast<int32_t>(gen_ptr_at + 1);
  seg[gen_ptr_at] =
      (uint64_t{hi} << 32) | (static_cast<uint32_t>(back) << 2);  // two's complement, as the wire
  expect_invalid(decode_request(view(req_hdr), view(p)));
}

// -- semantic validation ---------------------------------------------------------------------

TEST(codec_bad_input, sampling_and_prompt_validation) {
  auto check = [](auto mutate, const char* needle) {
    generate_request g = valid_generate();
    mutate(g);
    expect_invalid(decode_generate(g), needle);
  };
  check([](auto& g) { g.request_id = 0; }, "requestId");
  check([](auto& g) { g.sampling.n = 0; }, "sampling.n");
  check([](auto& g) { g.sampling.n = max_samples + 1; }, "sampling.n");
  check([](auto& g) { g.sampling.temperature = -0.1f; }, "temperature");
  check([](auto& g) { g.sampling.temperature = std::nanf(""); }, "temperature");
  check([](auto& g) { g.sampling.top_p = 0.0f; }, "topP");
  check([](auto& g) { g.sampling.top_p = 1.01f; }, "topP");
  check([](auto& g) { g.sampling.top_k = 0; }, "topK");
  check([](auto& g) { g.sampling.min_p = 2.0f; }, "minP");
  check([](auto& g) { g.sampling.max_new_tokens = 0; }, "maxNewTokens");
  check([](auto& g) { g.sampling.min_new_tokens = 1000; }, "minNewTokens");
  check([](auto& g) { g.sampling.top_logprobs = 21; }, "topLogprobs");
  check([](auto& g) { g.sampling.stop.assign(max_stop_strings + 1, "x"); }, "sampling.stop");
  check([](auto& g) { g.sampling.stop = {""}; }, "sampling.stop[0]");
  check([](auto& g) { g.sampling.stop = {std::string(max_stop_string_bytes + 1, 'a')}; }, "sampling.stop[0]");
  check([](auto& g) { g.sampling.stop_token_ids.assign(max_stop_token_ids + 1, 1); }, "stopTokenIds");
  check([](auto& g) { g.token_ids.clear(); }, "empty prompt");
  check([](auto& g) { g.kind = prompt_kind::text; }, "empty prompt");
  check([](auto& g) { g.kind = prompt_kind::messages; }, "empty prompt");
  check(
      [](auto& g) {
        g.kind = prompt_kind::text;
        g.text.assign(max_prompt_text_bytes + 1, 'a');
      },
      "prompt.text");
  check(
      [](auto& g) {
        g.kind = prompt_kind::text;
        g.text = "bad \xC3\x28 utf8";
      },
      "not UTF-8");
  check(
      [](auto& g) {
        g.kind = prompt_kind::messages;
        g.messages = {{"", "hi"}};
      },
      "role");
  check(
      [](auto& g) {
        g.kind = prompt_kind::messages;
        g.messages.assign(max_chat_messages + 1, {"user", "x"});
      },
      "prompt.messages");
  check([](auto& g) { g.session_id.assign(max_session_id_bytes + 1, 's'); }, "sessionId");

  control_request a;
  a.verb = control_verb::abort;  // neither a request id nor all
  auto enc = encode_request(request{a});
  expect_invalid(decode_request(view(enc->header), view(enc->payload)), "abort");
}

// A request that fails past its root still says whom the error answers (issue 18): a
// generate by its request id, a control verb by its tag; an unreadable frame by nothing.
TEST(codec_bad_input, a_failed_request_names_its_id_or_tag) {
  auto decode_ref = [](const request& r, request_ref* ref) {
    auto enc = encode_request(r);
    EXPECT_TRUE(enc.ok());
    *ref = {99, 99};
    return decode_request(view(enc->header), view(enc->payload), ref);
  };
  request_ref ref;
  generate_request g = valid_generate();
  g.request_id = 41;
  g.sampling.temperature = std::nanf("");
  expect_invalid(decode_ref(request{g}, &ref), "temperature");
  EXPECT_EQ(ref.request_id, 41u);
  EXPECT_EQ(ref.tag, 0u);
  g = valid_generate();
  g.request_id = 42;
  g.sampling.stop_token_ids.assign(max_stop_token_ids + 1, 1);  // refused while reading
  expect_invalid(decode_ref(request{g}, &ref), "stopTokenIds");
  EXPECT_EQ(ref.request_id, 42u);

  control_request c;
  c.tag = 7;
  c.verb = control_verb::pause;
  c.mode = static_cast<pause_mode>(5);
  expect_invalid(decode_ref(request{c}, &ref), "pause.mode");
  EXPECT_EQ(ref.tag, 7u);
  EXPECT_EQ(ref.request_id, 0u);

  ASSERT_TRUE(decode_ref(request{valid_generate()}, &ref).ok());
  EXPECT_EQ(ref.request_id, 0u) << "a decoded request leaves no ref";
  EXPECT_EQ(ref.tag, 0u);
  std::vector<uint8_t> junk(64, 0xAB);
  ref = {99, 99};
  expect_invalid(decode_request(view(req_hdr), view(junk), &ref));
  EXPECT_EQ(ref.request_id, 0u);
  EXPECT_EQ(ref.tag, 0u);
}

TEST(codec_bad_input, reply_structure_validation) {
  chunk_event c;
  c.token_ids = {1, 2};
  c.logprobs = {-1.0f};
  auto enc = encode_reply(reply{c});
  expect_invalid_reply(decode_reply(view(enc->header), view(enc->payload)), "logprobs");
}

TEST(codec_bad_input, utf8_checker) {
  EXPECT_TRUE(utf8_valid("plain"));
  EXPECT_TRUE(utf8_valid("h\xC3\xA9 \xE4\xB8\x96 \xF0\x9F\x8C\x8D"));
  EXPECT_FALSE(utf8_valid("\xC0\xAF"));          // overlong
  EXPECT_FALSE(utf8_valid("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(utf8_valid("\xF4\x90\x80\x80"));  // > U+10FFFF
  EXPECT_FALSE(utf8_valid("\xE4\xB8"));          // truncated
}

}  // namespace
}  // namespace hart::protocol
