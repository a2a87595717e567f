#include "runtime/worker_link/step_codec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

namespace hart::worker_link {
namespace {

sched::step_plan sample_plan() {
  sched::step_plan p;
  p.step = 42;
  sched::step_item a;
  a.seq_id = 7;
  a.request_id = 3;
  a.sample = 1;
  a.tokens = {1, 2, 3};
  a.full_pages = {0, 5};
  a.swa_pages = {9};
  a.n_computed = 128;
  a.sample_last = true;
  a.sampling.temperature = 0.7f;
  a.sampling.top_k = 20;
  a.sampling.top_p = 0.9f;
  a.sampling.min_p = 0.05f;
  a.sampling.seed = 0xdeadbeefcafeull;
  a.logprobs = true;
  a.top_logprobs = 3;
  a.capture_routing = true;
  a.prompt_logprobs = true;
  a.next_token = 31;
  p.items.push_back(a);
  sched::step_item b;
  b.seq_id = 8;
  b.tokens = {4, 9, 9};
  b.draft_seeds = {11, 0xffffffffffffffffull};  // a verify pass: two drafts
  b.mtp_kv = true;
  b.mtp_drafts = 3;
  p.items.push_back(b);
  return p;
}

TEST(step_codec, plan_round_trip) {
  const sched::step_plan p = sample_plan();
  auto f = encode(worker_message{p});
  ASSERT_TRUE(f.ok()) << f.get_status().to_string();
  auto m = decode(f->data(), f->size());
  ASSERT_TRUE(m.ok()) << m.get_status().to_string();
  auto* q = std::get_if<sched::step_plan>(&m.value());
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->step, 42u);
  ASSERT_EQ(q->items.size(), 2u);
  const sched::step_item& a = q->items[0];
  EXPECT_EQ(a.seq_id, 7u);
  EXPECT_EQ(a.request_id, 3u);
  EXPECT_EQ(a.sample, 1);
  EXPECT_EQ(a.tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(a.full_pages, (std::vector<int32_t>{0, 5}));
  EXPECT_EQ(a.swa_pages, (std::vector<int32_t>{9}));
  EXPECT_EQ(a.n_computed, 128);
  EXPECT_TRUE(a.sample_last);
  EXPECT_EQ(a.sampling.temperature, 0.7f);
  EXPECT_EQ(a.sampling.top_k, 20);
  EXPECT_EQ(a.sampling.top_p, 0.9f);
  EXPECT_EQ(a.sampling.min_p, 0.05f);
  EXPECT_EQ(a.sampling.seed, 0xdeadbeefcafeull);
  EXPECT_TRUE(a.logprobs);
  EXPECT_EQ(a.top_logprobs, 3);
  EXPECT_TRUE(a.capture_routing);
  EXPECT_FALSE(q->items[1].capture_routing);
  EXPECT_TRUE(a.prompt_logprobs);
  EXPECT_EQ(a.next_token, 31);
  EXPECT_FALSE(q->items[1].prompt_logprobs);
  EXPECT_EQ(q->items[1].next_token, -1);
  EXPECT_FALSE(q->items[1].sample_last);
  EXPECT_EQ(q->items[1].tokens, (std::vector<int32_t>{4, 9, 9}));
  EXPECT_TRUE(a.draft_seeds.empty());
  EXPECT_EQ(q->items[1].draft_seeds, (std::vector<uint64_t>{11, 0xffffffffffffffffull}));
  EXPECT_FALSE(a.mtp_kv);
  EXPECT_EQ(a.mtp_drafts, 0);
  EXPECT_TRUE(q->items[1].mtp_kv);
  EXPECT_EQ(q->items[1].mtp_drafts, 3);
}

TEST(step_codec, result_round_trip) {
  sched::step_result r;
  r.step = 9;
  r.sampled.push_back({7, 11, -0.5f, {{11, -0.5f}, {12, -1.5f}}});
  auto f = encode(worker_message{r});
  ASSERT_TRUE(f.ok());
  auto m = decode(f->data(), f->size());
  ASSERT_TRUE(m.ok()) << m.get_status().to_string();
  auto* q = std::get_if<sched::step_result>(&m.value());
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->step, 9u);
  EXPECT_TRUE(q->error.ok());
  ASSERT_EQ(q->sampled.size(), 1u);
  EXPECT_EQ(q->sampled[0].seq_id, 7u);
  EXPECT_EQ(q->sampled[0].token, 11);
  EXPECT_EQ(q->sampled[0].logprob, -0.5f);
  ASSERT_EQ(q->sampled[0].top_logprobs.size(), 2u);
  EXPECT_EQ(q->sampled[0].top_logprobs[1].token, 12);
  EXPECT_TRUE(q->drafts.empty());

  // The MTP block's drafts for the next step cross the link.
  r.drafts = {{7, {5, 6, 7}}, {9, {}}};
  f = encode(worker_message{r});
  m = decode(f->data(), f->size());
  ASSERT_TRUE(m.ok()) << m.get_status().to_string();
  q = std::get_if<sched::step_result>(&m.value());
  ASSERT_EQ(q->drafts.size(), 2u);
  EXPECT_EQ(q->drafts[0].seq_id, 7u);
  EXPECT_EQ(q->drafts[0].tokens, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(q->drafts[1].seq_id, 9u);
  EXPECT_TRUE(q->drafts[1].tokens.empty());
  r.drafts.clear();

  // Routing of a capturing item crosses the link; a layer of the wrong size does not.
  sched::item_routing ir;
  ir.seq_id = 7;
  ir.trace.positions = 2;
  ir.trace.experts = {{0, 2, {3, 1, 0, 2}}};
  ir.trace.picks = {{1, 3, {0, -1, -1, 1, 0, -1}}};
  r.routing = {ir};
  f = encode(worker_message{r});
  m = decode(f->data(), f->size());
  ASSERT_TRUE(m.ok()) << m.get_status().to_string();
  q = std::get_if<sched::step_result>(&m.value());
  ASSERT_EQ(q->routing.size(), 1u);
  EXPECT_EQ(q->routing[0].seq_id, 7u);
  EXPECT_EQ(q->routing[0].trace.positions, 2);
  EXPECT_EQ(q->routing[0].trace.experts[0].ids, ir.trace.experts[0].ids);
  EXPECT_EQ(q->routing[0].trace.picks[0].layer, 1);
  EXPECT_EQ(q->routing[0].trace.picks[0].ids, ir.trace.picks[0].ids);
  // Prompt log-probs cross too, NaN (no next token) included.
  r.prompt_logprobs = {{7, {-0.25f, -3.5f, std::nanf("")}}};
  f = encode(worker_message{r});
  m = decode(f->data(), f->size());
  ASSERT_TRUE(m.ok()) << m.get_status().to_string();
  q = std::get_if<sched::step_result>(&m.value());
  ASSERT_EQ(q->prompt_logprobs.size(), 1u);
  EXPECT_EQ(q->prompt_logprobs[0].seq_id, 7u);
  ASSERT_EQ(q->prompt_logprobs[0].next.size(), 3u);
  EXPECT_EQ(q->prompt_logprobs[0].next[1], -3.5f);
  EXPECT_TRUE(std::isnan(q->prompt_logprobs[0].next[2]));
  r.prompt_logprobs.clear();
  r.routing[0].trace.picks[0].ids.push_back(4);
  f = encode(worker_message{r});
  EXPECT_FALSE(decode(f->data(), f->size()).ok()) << "a routing layer of 7 ids for 2 positions x 3";
  r.routing.clear();

  r.error = out_of_range("token 99 out of range");
  r.sampled.clear();
  f = encode(worker_message{r});
  m = decode(f->data(), f->size());
  ASSERT_TRUE(m.ok());
  q = std::get_if<sched::step_result>(&m.value());
  EXPECT_EQ(q->error.code(), status_code::out_of_range);
  EXPECT_EQ(q->error.message(), "token 99 out of range");
}

TEST(step_codec, hello_configure_heartbeat_bye) {
  worker_hello h;
  h.pid = 1234;
  h.model = {1000, 64, 4, 128, "exact", true};
  h.page_size = 128;
  auto f = encode(worker_message{h});
  auto m = decode(f->data(), f->size());
  ASSERT_TRUE(m.ok());
  auto* q = std::get_if<worker_hello>(&m.value());
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->version, link_version);
  EXPECT_EQ(q->pid, 1234);
  EXPECT_EQ(q->model, h.model);
  EXPECT_EQ(q->page_size, 128);

  f = encode(worker_message{worker_configure{128, 256, 64, 2500}});
  m = decode(f->data(), f->size());
  ASSERT_TRUE(m.ok());
  auto* c = std::get_if<worker_configure>(&m.value());
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->page_size, 128);
  EXPECT_EQ(c->n_full_pages, 256);
  EXPECT_EQ(c->n_swa_pages, 64);
  EXPECT_EQ(c->heartbeat_ms, 2500);

  f = encode(worker_message{worker_heartbeat{987654321012ull}});
  m = decode(f->data(), f->size());
  ASSERT_TRUE(m.ok());
  auto* hb = std::get_if<worker_heartbeat>(&m.value());
  ASSERT_NE(hb, nullptr);
  EXPECT_EQ(hb->step, 987654321012ull);

  f = encode(worker_message{worker_bye{}});
  m = decode(f->data(), f->size());
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(std::holds_alternative<worker_bye>(m.value()));
}

TEST(step_codec, misaligned_frame_is_copied) {
  auto f = encode(worker_message{sample_plan()});
  ASSERT_TRUE(f.ok());
  std::vector<uint8_t> buf(f->size() + 1);
  std::memcpy(buf.data() + 1, f->data(), f->size());
  auto m = decode(buf.data() + 1, f->size());
  ASSERT_TRUE(m.ok()) << m.get_status().to_string();
  EXPECT_EQ(std::get<sched::step_plan>(m.value()).items.size(), 2u);
}

TEST(step_codec, garbage_is_refused) {
  EXPECT_FALSE(decode(nullptr, 0).ok());
  uint8_t seven[7] = {};
  EXPECT_FALSE(decode(seven, 7).ok());
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> b(8 * (1 + rng() % 32));
    for (auto& x : b) x = uint8_t(rng());
    auto m = decode(b.data(), b.size());  // must not throw or crash; ok or not
    (void)m;
  }
  // Truncations and single-byte flips of a real frame.
  auto f = encode(worker_message{sample_plan()});
  ASSERT_TRUE(f.ok());
  for (size_t n = 8; n < f->size(); n += 8) EXPECT_FALSE(decode(f->data(), n).ok()) << n;
  for (size_t i = 0; i < f->size(); ++i) {
    std::vector<uint8_t> b = *f;
    b[i] ^= 0xff;
    (void)decode(b.data(), b.size());
  }
  // Trailing bytes, oversize.
  std::vector<uint8_t> t = *f;
  t.resize(t.size() + 8);
  EXPECT_FALSE(decode(t.data(), t.size()).ok());
  std::vector<uint8_t> big(max_frame_bytes + 8);
  EXPECT_FALSE(decode(big.data(), big.size()).ok());
}

TEST(step_codec, invalid_values_are_refused) {
  sched::step_plan p = sample_plan();
  p.items[0].n_computed = -1;
  auto f = encode(worker_message{p});
  EXPECT_FALSE(decode(f->data(), f->size()).ok());
  p = sample_plan();
  p.items[1].tokens.clear();
  f = encode(worker_message{p});
  EXPECT_FALSE(decode(f->data(), f->size()).ok());
  f = encode(worker_message{worker_configure{0, 1, 1}});
  EXPECT_FALSE(decode(f->data(), f->size()).ok());
  f = encode(worker_message{worker_configure{128, 1, 1, -5}});
  EXPECT_FALSE(decode(f->data(), f->size()).ok()) << "a negative heartbeat period";
}

}  // namespace

// 64 bytes a fuzzer found (fuzz/corpus/worker_frames/amplification-64-bytes): a result whose
// lists declare millions of zero-size elements. Under a fixed traversal budget it decoded for
// about a second and hundreds of MB; the budget now grows with the frame, so it is refused.
TEST(step_codec, a_tiny_frame_cannot_declare_millions_of_elements) {
  alignas(8) const uint8_t frame[64] = {
      0x00, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01, 0x00,
      0x03, 0x00, 0x00, 0x00, 0x00, 0x3b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x75, 0x00, 0x00, 0x75, 0x00, 0x00, 0x00, 0x00,
      0x09, 0x00, 0x00, 0x00, 0x40, 0x40, 0x80, 0x00, 0x00, 0x00, 0xff, 0x00, 0xff, 0x00, 0x00, 0x00};
  auto m = decode(frame, sizeof frame);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.get_status().code(), status_code::invalid_argument);
}

}  // namespace hart::worker_link
