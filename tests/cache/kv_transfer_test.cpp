// A prefilled sequence's KV moved to another page store (prefill/decode
// disaggregation, issue 25): decoding on the receiving store's pages, whose
// ids differ, gives the logits the sending side gets when it goes on itself,
// bit for bit (deterministic mode), for prompts that end before, at and after
// compression and page boundaries and past the window; refused transfers
// (another model's layout, a truncated transfer, missing or foreign pages)
// write nothing.
#include "runtime/model/kv_transfer.h"

#include "runtime/core/status_testing.h"
#include "tests/golden/golden_fixture.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

namespace hart::testing {
namespace {

constexpr int64_t k_page = 128;
constexpr int64_t k_decode = 6;  // positions decoded after the hand-over
constexpr int32_t k_pages = 8;   // per pool, per store

std::unique_ptr<kv_store> pool(const engine& eng) {
  auto s = eng.make_store(k_page);
  EXPECT_TRUE(s.ok()) << s.get_status().to_string();
  std::unique_ptr<kv_store> store = std::move(s).value();
  store->ensure_full_pages(k_pages);
  store->ensure_swa_pages(k_pages);
  return store;
}

// Page ids for `n` positions: the sender counts up, the receiver down.
std::vector<int32_t> ids(int64_t n, bool reversed) {
  std::vector<int32_t> v;
  for (int64_t pg = 0; pg < (n + k_page - 1) / k_page; ++pg)
    v.push_back(reversed ? k_pages - 1 - pg : int32_t(pg));
  return v;
}

class kv_transfer : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { g_ = golden_load(GetParam(), precision::exact, /*deterministic=*/true); }

  // The fixture's prompt, repeated past its end (tiny-a's has 200 tokens).
  std::vector<int32_t> tokens(int64_t from, int64_t to) const {
    std::vector<int32_t> t;
    for (int64_t p = from; p < to; ++p) t.push_back(g_->input_ids[0][size_t(p % g_->seq)]);
    return t;
  }

  // Positions [from, to) fed one at a time to the sender `a` and the receiver
  // `b`: every step's logits equal, bit for bit.
  void expect_same_decode(sequence_state& a, sequence_state& b, int64_t from, int64_t to) const {
    for (int64_t p = from; p < to; ++p) {
      std::vector<float> want, got;
      ASSERT_TRUE(g_->eng->prefill(a, tokens(p, p + 1), logits_request::last, &want).ok());
      ASSERT_TRUE(g_->eng->prefill(b, tokens(p, p + 1), logits_request::last, &got).ok());
      ASSERT_EQ(want.size(), got.size());
      EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float))) << "position " << p;
    }
  }

  std::unique_ptr<golden_set> g_;
};

TEST_P(kv_transfer, decode_on_the_receiving_pages_equals_the_sender_going_on) {
  const engine& eng = *g_->eng;
  for (int64_t n : {1, 3, 4, 33, 127, 128, 130, 300, 520}) {
    SCOPED_TRACE("prompt of " + std::to_string(n) + " tokens");
    const int64_t total = n + k_decode;
    std::unique_ptr<kv_store> sender = pool(eng), receiver = pool(eng);
    sequence_state a = eng.new_sequence();
    engine::bind_pages(a, sender.get(), ids(total, false), ids(total, false), 0);
    for (int64_t at = 0; at < n; at += 100) {  // chunked prefill, as a prefill server runs it
      std::vector<float> unused;
      const status st = eng.prefill(a, tokens(at, std::min(at + 100, n)), logits_request::none, &unused);
      ASSERT_TRUE(st.ok()) << st.to_string();
    }
    auto kv = kv_pages_export(*sender, eng.config(), *a.pages, n);
    ASSERT_TRUE(kv.ok()) << kv.get_status().to_string();
    EXPECT_EQ(kv->n_pages(), (n + k_page - 1) / k_page);

    // The receiver's page ids differ; the SWA pages before the carried ones stay unbound.
    std::vector<int32_t> full = ids(total, true), swa = ids(total, true);
    for (int64_t pg = 0; pg < kv->first_swa; ++pg) swa[size_t(pg)] = -1;
    ASSERT_TRUE(kv_pages_import(*kv, *receiver, full, swa).ok());
    sequence_state b = eng.new_sequence();
    engine::bind_pages(b, receiver.get(), full, swa, n);
    expect_same_decode(a, b, n, total);
  }
}

// A prefix-cache hit on the receiving side: it holds the first full pages
// (computed them itself), and only the rest moves.
TEST_P(kv_transfer, a_receiver_holding_the_prefix_takes_only_the_rest) {
  const engine& eng = *g_->eng;
  for (int64_t n : {300, 520}) {
    SCOPED_TRACE("prompt of " + std::to_string(n) + " tokens");
    const int64_t total = n + k_decode, skip = (n - 1) / k_page;
    std::unique_ptr<kv_store> sender = pool(eng), receiver = pool(eng);
    sequence_state a = eng.new_sequence();
    engine::bind_pages(a, sender.get(), ids(total, false), ids(total, false), 0);
    std::vector<float> unused;
    ASSERT_TRUE(eng.prefill(a, tokens(0, n), logits_request::none, &unused).ok());

    const std::vector<int32_t> full = ids(total, true), swa = ids(total, true);
    sequence_state prefix = eng.new_sequence();
    engine::bind_pages(prefix, receiver.get(), full, swa, 0);
    ASSERT_TRUE(eng.prefill(prefix, tokens(0, skip * k_page), logits_request::none, &unused).ok());

    auto kv = kv_pages_export(*sender, eng.config(), *a.pages, n, skip);
    ASSERT_TRUE(kv.ok()) << kv.get_status().to_string();
    EXPECT_EQ(int64_t(kv->full.size()), (kv->n_pages() - skip) * sender->full_page_floats());
    ASSERT_TRUE(kv_pages_import(*kv, *receiver, full, swa).ok());
    sequence_state b = eng.new_sequence();
    engine::bind_pages(b, receiver.get(), full, swa, n);
    expect_same_decode(a, b, n, total);
    EXPECT_STATUS(kv_pages_export(*sender, eng.config(), *a.pages, n, kv->n_pages()),
                  status_code::invalid_argument, "leaves none");
  }
}

TEST_P(kv_transfer, refused_transfers_write_nothing) {
  const engine& eng = *g_->eng;
  const int64_t n = 200;
  std::unique_ptr<kv_store> sender = pool(eng), receiver = pool(eng);
  sequence_state a = eng.new_sequence();
  engine::bind_pages(a, sender.get(), ids(n, false), ids(n, false), 0);
  std::vector<float> unused;
  ASSERT_TRUE(eng.prefill(a, tokens(0, n), logits_request::none, &unused).ok());

  EXPECT_STATUS(kv_pages_export(*sender, eng.config(), *a.pages, 0), status_code::invalid_argument,
                "positions");
  EXPECT_STATUS(kv_pages_export(*sender, eng.config(), *a.pages, n + k_page), status_code::invalid_argument,
                "pages");
  auto kv = kv_pages_export(*sender, eng.config(), *a.pages, n);
  ASSERT_TRUE(kv.ok()) << kv.get_status().to_string();

  // Every receiving page holds a sentinel, checked after each refusal.
  for (int32_t pg = 0; pg < k_pages; ++pg) {
    std::fill_n(receiver->full_page(pg), receiver->full_page_floats(), -7.0f);
    std::fill_n(receiver->swa_page(pg), receiver->swa_page_floats(), -7.0f);
  }
  auto untouched = [&] {
    for (int32_t pg = 0; pg < k_pages; ++pg) {
      const float* f = receiver->full_page(pg);
      const float* s = receiver->swa_page(pg);
      if (std::any_of(f, f + receiver->full_page_floats(), [](float v) { return v != -7.0f; })) return false;
      if (std::any_of(s, s + receiver->swa_page_floats(), [](float v) { return v != -7.0f; })) return false;
    }
    return true;
  };
  const std::vector<int32_t> full = ids(n, true), swa = ids(n, true);

  kv_pages truncated = *kv;
  truncated.full.pop_back();
  EXPECT_STATUS(kv_pages_import(truncated, *receiver, full, swa), status_code::invalid_argument, "layout");
  EXPECT_TRUE(untouched());

  std::vector<int32_t> missing = full;
  missing.back() = -1;
  EXPECT_STATUS(kv_pages_import(*kv, *receiver, missing, swa), status_code::invalid_argument, "no page");
  std::vector<int32_t> foreign = full;
  foreign.front() = k_pages + 3;
  EXPECT_STATUS(kv_pages_import(*kv, *receiver, foreign, swa), status_code::invalid_argument, "no page");
  EXPECT_STATUS(kv_pages_import(*kv, *receiver, {full.front()}, swa), status_code::invalid_argument, "pages");
  EXPECT_TRUE(untouched());

  // Another model's store: tiny-b's layout differs from tiny-a's (and the reverse).
  auto other = golden_load(std::string(GetParam()) == "tiny-b" ? "tiny-a" : "tiny-b");
  std::unique_ptr<kv_store> foreign_store = pool(*other->eng);
  EXPECT_NE(foreign_store->layout_id(), receiver->layout_id());
  EXPECT_STATUS(kv_pages_import(*kv, *foreign_store, full, swa), status_code::invalid_argument,
                "another model");

  ASSERT_TRUE(kv_pages_import(*kv, *receiver, full, swa).ok());
  EXPECT_FALSE(untouched());
}

INSTANTIATE_TEST_SUITE_P(tiny, kv_transfer, ::testing::Values("tiny-a", "tiny-b", "tiny-c"),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           std::string s = i.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

}  // namespace
}  // namespace hart::testing
