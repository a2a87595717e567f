// Every PD-link message through encode/decode, and frames that must be refused:
// malformed, truncated, trailing bytes, oversized, fields out of their limits,
// chunks whose sizes do not hold together, unknown kinds. Every refusal is a
// status naming the message, never a crash.
#include "runtime/pd_link/pd_codec.h"

#include "runtime/core/status_testing.h"
#include "runtime/pd_link/pd.capnp.h"

#include <capnp/any.h>
#include <capnp/message.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>

namespace hart::pd_link {
namespace {

namespace w = ::hart::wire::pd;

// A chunk of a 10-position sequence in pages of 4 (3 pages): full pages from 1,
// SWA pages from 2, this chunk pages [1, 3) with 3 floats per full page and 2
// per SWA page.
kv_pages sample_chunk() {
  kv_pages kv;
  kv.n_tokens = 10;
  kv.layout = 0x1234abcd5678ef90ull;
  kv.page_size = 4;
  kv.first_full = 1;
  kv.first_swa = 2;
  kv.first_page = 1;
  kv.end_page = 3;
  kv.full = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e-30f};
  kv.swa = {7.0f, std::nanf("")};
  return kv;
}

prefill_request sample_prefill() {
  prefill_request p;
  p.tokens = {0, 5, 129279, 42};
  p.sampling.temperature = 0.6f;
  p.sampling.top_k = 20;
  p.sampling.top_p = 0.95f;
  p.sampling.has_seed = true;
  p.sampling.seed = 0xfeedull;
  p.sampling.max_new_tokens = 64;
  p.sampling.stop = {"\n\n"};
  p.sampling.stop_token_ids = {7};
  p.sampling.logprobs = true;
  p.sampling.top_logprobs = 3;
  p.skip_full = 2;
  p.layout = 0x5eedc0de12345678ull;
  p.page_size = 256;
  return p;
}

pd_message round_trip(const pd_message& in) {
  auto f = encode(in);
  EXPECT_TRUE(f.ok()) << f.get_status().to_string();
  if (!f.ok()) return {};
  auto m = decode(f->data(), f->size());
  EXPECT_TRUE(m.ok()) << m.get_status().to_string();
  if (!m.ok()) return {};
  EXPECT_EQ(m->request_id, in.request_id);
  EXPECT_EQ(m->transfer_id, in.transfer_id);
  EXPECT_EQ(m->body.index(), in.body.index());
  return std::move(m).value();
}

// A PdMessage built field by field (what encode would not write), as one frame.
std::vector<uint8_t> raw(const std::function<void(w::PdMessage::Builder)>& fill) {
  capnp::MallocMessageBuilder mb;
  auto root = mb.initRoot<w::PdMessage>();
  root.setVersion(link_version);
  root.setRequestId(1);
  root.setTransferId(2);
  fill(root);
  const kj::Array<capnp::word> words = capnp::messageToFlatArray(mb);
  const auto bytes = words.asBytes();
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

std::vector<uint8_t> frame_of(const pd_message& m) {
  auto f = encode(m);
  EXPECT_TRUE(f.ok()) << f.get_status().to_string();
  return f.ok() ? *f : std::vector<uint8_t>{};
}

status_or<pd_message> decode_frame(const std::vector<uint8_t>& f) {
  return decode(f.data(), f.size());
}

TEST(pd_codec, every_message_round_trips) {
  const pd_message pre = round_trip({7, 9, sample_prefill()});
  const auto& p = std::get<prefill_request>(pre.body);
  EXPECT_EQ(p.tokens, sample_prefill().tokens);
  EXPECT_EQ(p.skip_full, 2);
  EXPECT_EQ(p.layout, 0x5eedc0de12345678ull);
  EXPECT_EQ(p.page_size, 256);
  EXPECT_EQ(p.sampling.temperature, 0.6f);
  EXPECT_EQ(p.sampling.top_k, 20);
  EXPECT_EQ(p.sampling.top_p, 0.95f);
  EXPECT_TRUE(p.sampling.has_seed);
  EXPECT_EQ(p.sampling.seed, 0xfeedull);
  EXPECT_EQ(p.sampling.max_new_tokens, 64u);
  EXPECT_EQ(p.sampling.stop, std::vector<std::string>{"\n\n"});
  EXPECT_EQ(p.sampling.stop_token_ids, std::vector<uint32_t>{7});
  EXPECT_TRUE(p.sampling.logprobs);
  EXPECT_EQ(p.sampling.top_logprobs, 3);

  const kv_pages want = sample_chunk();
  const pd_message chunk = round_trip({7, 9, kv_chunk{want}});
  const kv_pages& kv = std::get<kv_chunk>(chunk.body).kv;
  EXPECT_EQ(kv.n_tokens, want.n_tokens);
  EXPECT_EQ(kv.layout, want.layout);
  EXPECT_EQ(kv.page_size, want.page_size);
  EXPECT_EQ(kv.first_full, want.first_full);
  EXPECT_EQ(kv.first_swa, want.first_swa);
  EXPECT_EQ(kv.first_page, want.first_page);
  EXPECT_EQ(kv.end_page, want.end_page);
  ASSERT_EQ(kv.full.size(), want.full.size());
  ASSERT_EQ(kv.swa.size(), want.swa.size());
  EXPECT_EQ(0, std::memcmp(kv.full.data(), want.full.data(), want.full.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(kv.swa.data(), want.swa.data(), want.swa.size() * sizeof(float)))
      << "NaN bits too";

  const pd_message done =
      round_trip({7, 9, kv_done{31, -0.25f, 12, 5, {{31, -0.25f}, {4, -1.5f}, {9, -3.0f}}}});
  const auto& d = std::get<kv_done>(done.body);
  EXPECT_EQ(d.first_token, 31);
  EXPECT_EQ(d.first_logprob, -0.25f);
  EXPECT_EQ(d.weight_version, 12u);
  EXPECT_EQ(d.n_chunks, 5u);
  ASSERT_EQ(d.first_top_logprobs.size(), 3u);
  EXPECT_EQ(d.first_top_logprobs[1].token_id, 4u);
  EXPECT_EQ(d.first_top_logprobs[1].logprob, -1.5f);

  round_trip({7, 9, kv_ack{}});

  for (refuse_reason r : {refuse_reason::layout_mismatch, refuse_reason::bad_chunk,
                          refuse_reason::unknown_transfer, refuse_reason::aborted}) {
    const pd_message m = round_trip({7, 9, kv_refuse{r, std::string("why: ") + refuse_reason_name(r)}});
    EXPECT_EQ(std::get<kv_refuse>(m.body).reason, r);
    EXPECT_EQ(std::get<kv_refuse>(m.body).message, std::string("why: ") + refuse_reason_name(r));
  }
}

// A chunk before the transfer's first full page (the receiver holds those)
// carries SWA pages only.
TEST(pd_codec, chunks_carrying_one_kind_of_page_round_trip) {
  kv_pages kv = sample_chunk();
  kv.first_page = 0;
  kv.end_page = 1;
  kv.first_swa = 0;
  kv.full.clear();
  kv.swa = {1.0f, 2.0f};
  const pd_message m = round_trip({1, 2, kv_chunk{kv}});
  EXPECT_TRUE(std::get<kv_chunk>(m.body).kv.full.empty());
  EXPECT_EQ(std::get<kv_chunk>(m.body).kv.swa, kv.swa);
}

TEST(pd_codec, a_misaligned_frame_is_read_from_a_copy) {
  const std::vector<uint8_t> f = frame_of({7, 9, kv_chunk{sample_chunk()}});
  std::vector<uint8_t> buf(f.size() + 3);
  std::memcpy(buf.data() + 3, f.data(), f.size());
  auto m = decode(buf.data() + 3, f.size());
  ASSERT_TRUE(m.ok()) << m.get_status().to_string();
  EXPECT_EQ(std::get<kv_chunk>(m->body).kv.full, sample_chunk().full);
}

// The largest chunk kv_pages_plan may cut (max_chunk_kv_bytes) fits one frame
// with its header, and reads back under the traversal limit; 128 KiB more of
// KV does not fit, and the frame is refused before it is parsed.
TEST(pd_codec, the_largest_chunk_fits_one_frame_and_a_larger_one_does_not) {
  const size_t floats = max_chunk_kv_bytes / sizeof(float);
  kv_pages kv;  // 2 positions in pages of 1: two full pages, the last one's SWA page
  kv.n_tokens = 2;
  kv.layout = 1;
  kv.page_size = 1;
  kv.first_swa = 1;
  kv.end_page = 2;
  kv.full.assign(floats / 2, 0.5f);
  kv.swa.assign(floats - floats / 2, -0.5f);
  ASSERT_EQ((kv.full.size() + kv.swa.size()) * sizeof(float), max_chunk_kv_bytes);
  std::vector<uint8_t> f = frame_of({7, 9, kv_chunk{kv}});
  EXPECT_LE(f.size(), max_frame_bytes);
  auto m = decode_frame(f);
  ASSERT_TRUE(m.ok()) << m.get_status().to_string();
  EXPECT_EQ(std::get<kv_chunk>(m->body).kv.swa.back(), -0.5f);

  kv.full.resize(kv.full.size() + 2 * 16384, 0.5f);  // 64 KiB more per full page
  f = frame_of({7, 9, kv_chunk{kv}});
  EXPECT_GT(f.size(), max_frame_bytes);
  EXPECT_STATUS(decode_frame(f), status_code::invalid_argument, "limit");
}

// -- frames ---------------------------------------------------------------------------------

TEST(pd_codec, malformed_truncated_trailing_and_oversized_frames_are_refused) {
  const std::vector<uint8_t> f = frame_of({7, 9, kv_chunk{sample_chunk()}});
  EXPECT_STATUS(decode(nullptr, 0), status_code::invalid_argument, "pd frame: empty");
  EXPECT_STATUS(decode(f.data(), f.size() - 3), status_code::invalid_argument, "multiple of 8");
  for (size_t n = 8; n < f.size(); n += 8)
    EXPECT_STATUS(decode(f.data(), n), status_code::invalid_argument, "pd frame") << n << " bytes";
  std::vector<uint8_t> trailing = f;
  trailing.resize(f.size() + 16);
  EXPECT_STATUS(decode_frame(trailing), status_code::invalid_argument, "16 trailing bytes");
  std::vector<uint8_t> big(max_frame_bytes + 8);
  EXPECT_STATUS(decode_frame(big), status_code::invalid_argument, "limit");
  std::vector<uint8_t> junk(64, 0xff);
  EXPECT_STATUS(decode_frame(junk), status_code::invalid_argument, "malformed Cap'n Proto message");

  // Random bytes and single-byte flips: a status either way, never a crash.
  std::mt19937 rng(25);
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> b(8 * (1 + rng() % 32));
    for (auto& x : b) x = uint8_t(rng());
    auto m = decode_frame(b);
    if (!m.ok()) {
      EXPECT_EQ(m.get_status().code(), status_code::invalid_argument);
    }
  }
  for (size_t i = 0; i < f.size(); ++i) {
    std::vector<uint8_t> b = f;
    b[i] ^= 0xff;
    auto m = decode_frame(b);
    if (!m.ok()) {
      EXPECT_EQ(m.get_status().code(), status_code::invalid_argument);
    }
  }
}

TEST(pd_codec, another_version_zero_ids_and_unknown_kinds_are_refused) {
  EXPECT_STATUS(decode_frame(raw([](w::PdMessage::Builder r) {
                  r.setVersion(link_version + 1);
                  r.setKvAck();
                })),
                status_code::invalid_argument,
                "link version " + std::to_string(link_version + 1) + ", this peer speaks " +
                    std::to_string(link_version));
  EXPECT_STATUS(decode_frame(raw([](w::PdMessage::Builder r) {
                  r.setTransferId(0);
                  r.setKvAck();
                })),
                status_code::invalid_argument, "transfer id 0");
  EXPECT_STATUS(decode_frame(frame_of({0, 9, kv_ack{}})), status_code::invalid_argument, "request id 0");

  // The union's discriminant (the one 16-bit data field equal to KV_ACK) set past the last kind.
  capnp::MallocMessageBuilder mb;
  auto root = mb.initRoot<w::PdMessage>();
  root.setVersion(link_version);
  root.setRequestId(1);
  root.setTransferId(2);
  root.setKvAck();
  auto data = capnp::toAny(root).getDataSection();
  bool patched = false;
  for (size_t i = 0; i + 1 < data.size() && !patched; i += 2) {
    uint16_t v;
    std::memcpy(&v, data.begin() + i, 2);
    if (v == uint16_t(w::PdMessage::KV_ACK)) {
      const uint16_t unknown = 40;
      std::memcpy(data.begin() + i, &unknown, 2);
      patched = true;
    }
  }
  ASSERT_TRUE(patched);
  const kj::Array<capnp::word> words = capnp::messageToFlatArray(mb);
  const auto bytes = words.asBytes();
  EXPECT_STATUS(decode_frame(std::vector<uint8_t>(bytes.begin(), bytes.end())), status_code::invalid_argument,
                "unknown message kind 40");
}

// -- fields ---------------------------------------------------------------------------------

TEST(pd_codec, prefill_fields_out_of_their_limits_are_refused) {
  auto with = [](const std::function<void(prefill_request&)>& edit) {
    prefill_request p = sample_prefill();
    edit(p);
    return decode_frame(frame_of({7, 9, p}));
  };
  EXPECT_STATUS(with([](prefill_request& p) { p.tokens.clear(); }), status_code::invalid_argument,
                "prefill: 0 tokens");
  EXPECT_STATUS(with([](prefill_request& p) { p.tokens[2] = -4; }), status_code::invalid_argument,
                "prefill: token -4 at position 2");
  EXPECT_STATUS(with([](prefill_request& p) { p.skip_full = 4; }), status_code::invalid_argument,
                "leaves none to send");
  EXPECT_STATUS(with([](prefill_request& p) { p.page_size = 0; }), status_code::invalid_argument,
                "prefill: pageSize 0");
  EXPECT_STATUS(with([](prefill_request& p) { p.sampling.temperature = -1.0f; }),
                status_code::invalid_argument, "temperature");
  EXPECT_STATUS(with([](prefill_request& p) { p.sampling.stop.assign(protocol::max_stop_strings + 1, "x"); }),
                status_code::invalid_argument, "sampling.stop");
  // An oversized prompt, refused before a token is copied.
  EXPECT_STATUS(decode_frame(raw([](w::PdMessage::Builder r) {
                  r.initPrefill().initTokens(unsigned(protocol::max_prompt_tokens + 1));
                })),
                status_code::invalid_argument, "prefill: 1048577 tokens");
  prefill_request negative = sample_prefill();
  negative.skip_full = -1;
  EXPECT_STATUS(encode({7, 9, negative}), status_code::invalid_argument, "prefill.skipFull: -1");
  prefill_request huge_pages = sample_prefill();
  huge_pages.page_size = int64_t{1} << 33;
  EXPECT_STATUS(encode({7, 9, huge_pages}), status_code::invalid_argument, "prefill.pageSize");
}

TEST(pd_codec, chunks_whose_sizes_do_not_hold_together_are_refused) {
  auto with = [](const std::function<void(kv_pages&)>& edit) {
    kv_pages kv = sample_chunk();
    edit(kv);
    return decode_frame(frame_of({7, 9, kv_chunk{kv}}));
  };
  EXPECT_STATUS(with([](kv_pages& kv) { kv.end_page = 4; }), status_code::invalid_argument,
                "kv_chunk: pages [1, 4)");
  EXPECT_STATUS(with([](kv_pages& kv) { kv.end_page = kv.first_page; }), status_code::invalid_argument,
                "kv_chunk: pages [1, 1)");
  EXPECT_STATUS(with([](kv_pages& kv) { kv.first_full = 3; }), status_code::invalid_argument, "full from 3");
  EXPECT_STATUS(with([](kv_pages& kv) { kv.page_size = 0; }), status_code::invalid_argument, "kv_chunk");
  EXPECT_STATUS(with([](kv_pages& kv) { kv.n_tokens = 0; }), status_code::invalid_argument, "kv_chunk");
  // Two full pages in 7 floats, one SWA page in 3 floats, none in some.
  EXPECT_STATUS(with([](kv_pages& kv) { kv.full.pop_back(); }), status_code::invalid_argument,
                "fullPages of 20 bytes is not 2 whole pages");
  EXPECT_STATUS(with([](kv_pages& kv) { kv.swa.clear(); }), status_code::invalid_argument,
                "swaPages of 0 bytes is not 1 whole pages");
  EXPECT_STATUS(with([](kv_pages& kv) { kv.first_swa = 3; }), status_code::invalid_argument,
                "swaPages of 8 bytes is not 0 whole pages");
  EXPECT_STATUS(decode_frame(raw([](w::PdMessage::Builder r) {
                  auto c = r.initKvChunk();
                  c.setPageSize(4);
                  c.setNTokens(10);
                  c.setFirstSwa(2);
                  c.setNPages(3);
                  c.initFullPages(3 * 4 * 2 + 2);  // not whole floats
                  c.initSwaPages(8);
                })),
                status_code::invalid_argument, "fullPages of 26 bytes");
  kv_pages negative = sample_chunk();
  negative.first_page = -1;
  EXPECT_STATUS(encode({7, 9, kv_chunk{negative}}), status_code::invalid_argument, "kv_chunk.firstPage: -1");
}

TEST(pd_codec, done_and_refuse_fields_out_of_their_limits_are_refused) {
  EXPECT_STATUS(decode_frame(frame_of({7, 9, kv_done{-1, -0.5f, 1, 1, {}}})), status_code::invalid_argument,
                "kv_done: first token -1");
  EXPECT_STATUS(decode_frame(frame_of({7, 9, kv_done{3, std::nanf(""), 1, 1, {}}})),
                status_code::invalid_argument, "kv_done: firstLogprob");
  EXPECT_STATUS(decode_frame(frame_of({7, 9, kv_done{3, 0.5f, 1, 1, {}}})), status_code::invalid_argument,
                "kv_done: firstLogprob");
  EXPECT_STATUS(decode_frame(frame_of({7, 9, kv_done{3, -0.5f, 1, 0, {}}})), status_code::invalid_argument,
                "kv_done: after no chunks");
  EXPECT_STATUS(decode_frame(frame_of({7, 9, kv_done{3, -0.5f, 1, 1, {{3, -0.5f}, {8, 0.25f}}}})),
                status_code::invalid_argument, "top log-prob 0.25 of token 8");
  EXPECT_STATUS(encode({7, 9, kv_done{3, -0.5f, 1, 1, std::vector<protocol::token_logprob>(21, {3, -1.0f})}}),
                status_code::invalid_argument, "kv_done.firstTopLogprobs: 21 entries");
  EXPECT_STATUS(decode_frame(raw([](w::PdMessage::Builder r) {
                  auto d = r.initKvDone();
                  d.setFirstToken(3);
                  d.setFirstLogprob(-0.5f);
                  d.setNChunks(1);
                  d.initFirstTopLogprobs(21);
                })),
                status_code::invalid_argument, "kv_done: 21 firstTopLogprobs");
  EXPECT_STATUS(
      decode_frame(frame_of(
          {7, 9, kv_refuse{refuse_reason::aborted, std::string(max_refuse_message_bytes + 1, 'x')}})),
      status_code::invalid_argument, "kv_refuse: message of 4097 bytes");
  EXPECT_STATUS(decode_frame(raw([](w::PdMessage::Builder r) {
                  r.initKvRefuse().setReason(static_cast<w::RefuseReason>(9));
                })),
                status_code::invalid_argument, "kv_refuse: unknown reason 9");
}

}  // namespace
}  // namespace hart::pd_link
