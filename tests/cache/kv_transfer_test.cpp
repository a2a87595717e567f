// A prefilled sequence's KV moved to another page store (prefill/decode
// disaggregation, issue 25): decoding on the receiving store's pages, whose
// ids differ, gives the logits the sending side gets when it goes on itself,
// bit for bit (deterministic mode), for prompts that end before, at and after
// compression and page boundaries and past the window; refused transfers
// (another model's layout, a truncated transfer, missing or foreign pages)
// write nothing. In page-range chunks under a byte limit, the transfer writes
// what it writes whole, and a refused chunk writes nothing.
#include "runtime/model/kv_transfer.h"

#include "runtime/core/status_testing.h"
#include "tests/cache/kv_transfer_fixture.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

namespace hart::testing {
namespace {

constexpr int64_t k_page = k_hand_off_page;
constexpr int32_t k_pages = k_hand_off_pages;
constexpr int64_t k_decode = 6;  // positions decoded after the hand-over

class kv_transfer : public kv_hand_off_test {
 protected:
  // Positions [from, to) fed one at a time to the sender `a` and the receiver
  // `b`: every step's logits equal, bit for bit.
  void expect_same_decode(sequence_state& a, sequence_state& b, int64_t from, int64_t to) const {
    for (int64_t p = from; p < to; ++p) expect_same_step(a, b, tokens(p, p + 1), p);
  }
};

TEST_P(kv_transfer, decode_on_the_receiving_pages_equals_the_sender_going_on) {
  const engine& eng = *g_->eng;
  for (int64_t n : {1, 3, 4, 33, 127, 128, 130, 300, 520}) {
    SCOPED_TRACE("prompt of " + std::to_string(n) + " tokens");
    const int64_t total = n + k_decode;
    std::unique_ptr<kv_store> sender = hand_off_pool(eng), receiver = hand_off_pool(eng);
    sequence_state a = eng.new_sequence();
    engine::bind_pages(a, sender.get(), hand_off_ids(total, false), hand_off_ids(total, false), 0);
    for (int64_t at = 0; at < n; at += 100) {  // chunked prefill, as a prefill server runs it
      std::vector<float> unused;
      const status st = eng.prefill(a, tokens(at, std::min(at + 100, n)), logits_request::none, &unused);
      ASSERT_TRUE(st.ok()) << st.to_string();
    }
    auto kv = kv_pages_export(*sender, eng.config(), *a.pages, n);
    ASSERT_TRUE(kv.ok()) << kv.get_status().to_string();
    EXPECT_EQ(kv->n_pages(), (n + k_page - 1) / k_page);

    // The receiver's page ids differ; the SWA pages before the carried ones stay unbound.
    std::vector<int32_t> full = hand_off_ids(total, true), swa = hand_off_ids(total, true);
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
    std::unique_ptr<kv_store> sender = hand_off_pool(eng), receiver = hand_off_pool(eng);
    sequence_state a = eng.new_sequence();
    engine::bind_pages(a, sender.get(), hand_off_ids(total, false), hand_off_ids(total, false), 0);
    std::vector<float> unused;
    ASSERT_TRUE(eng.prefill(a, tokens(0, n), logits_request::none, &unused).ok());

    const std::vector<int32_t> full = hand_off_ids(total, true), swa = hand_off_ids(total, true);
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
  std::unique_ptr<kv_store> sender = hand_off_pool(eng), receiver = hand_off_pool(eng);
  sequence_state a = eng.new_sequence();
  engine::bind_pages(a, sender.get(), hand_off_ids(n, false), hand_off_ids(n, false), 0);
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
  const std::vector<int32_t> full = hand_off_ids(n, true), swa = hand_off_ids(n, true);

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
  std::unique_ptr<kv_store> foreign_store = hand_off_pool(*other->eng);
  EXPECT_NE(foreign_store->layout_id(), receiver->layout_id());
  EXPECT_STATUS(kv_pages_import(*kv, *foreign_store, full, swa), status_code::invalid_argument,
                "another model");

  ASSERT_TRUE(kv_pages_import(*kv, *receiver, full, swa).ok());
  EXPECT_FALSE(untouched());
}

// A transfer in page-range chunks under a byte limit (a frame holds 64 MiB):
// the chunks cover the carried pages in order, each within the limit, and
// write into the receiver exactly what the whole transfer writes.
TEST_P(kv_transfer, chunks_import_what_the_whole_transfer_imports) {
  const engine& eng = *g_->eng;
  for (int64_t n : {300, 520}) {
    for (int64_t skip : {int64_t{0}, (n - 1) / k_page}) {
      SCOPED_TRACE("prompt of " + std::to_string(n) + " tokens, " + std::to_string(skip) +
                   " full pages held");
      std::unique_ptr<kv_store> sender = hand_off_pool(eng), whole = hand_off_pool(eng),
                                chunked = hand_off_pool(eng);
      sequence_state a = eng.new_sequence();
      engine::bind_pages(a, sender.get(), hand_off_ids(n, false), hand_off_ids(n, false), 0);
      std::vector<float> unused;
      ASSERT_TRUE(eng.prefill(a, tokens(0, n), logits_request::none, &unused).ok());

      auto all = kv_pages_export(*sender, eng.config(), *a.pages, n, skip);
      ASSERT_TRUE(all.ok()) << all.get_status().to_string();
      const std::vector<int32_t> full = hand_off_ids(n, true), swa = hand_off_ids(n, true);
      ASSERT_TRUE(kv_pages_import(*all, *whole, full, swa).ok());

      // Room for one page of both kinds: several chunks when the receiver holds no prefix.
      const size_t page_bytes =
          size_t(sender->full_page_floats() + sender->swa_page_floats()) * sizeof(float);
      auto plan = kv_pages_plan(*sender, eng.config(), n, skip, page_bytes);
      ASSERT_TRUE(plan.ok()) << plan.get_status().to_string();
      if (skip == 0) {
        ASSERT_GE(plan->size(), 2u);
      }
      EXPECT_EQ(plan->front().first_page, std::min(all->first_full, all->first_swa));
      EXPECT_EQ(plan->back().end_page, all->n_pages());
      std::vector<float> full_floats, swa_floats;
      for (size_t i = 0; i < plan->size(); ++i) {
        const kv_page_range r = (*plan)[i];
        const int64_t expected_first = i == 0 ? plan->front().first_page : (*plan)[i - 1].end_page;
        EXPECT_EQ(r.first_page, expected_first) << "chunk " << i;
        auto kv = kv_pages_export(*sender, eng.config(), *a.pages, n, skip, r);
        ASSERT_TRUE(kv.ok()) << kv.get_status().to_string();
        EXPECT_LE((kv->full.size() + kv->swa.size()) * sizeof(float), page_bytes) << "chunk " << i;
        full_floats.insert(full_floats.end(), kv->full.begin(), kv->full.end());
        swa_floats.insert(swa_floats.end(), kv->swa.begin(), kv->swa.end());
        ASSERT_TRUE(kv_pages_import(*kv, *chunked, full, swa).ok()) << "chunk " << i;
      }
      // Bytes, not floats: the unwritten rows of a last page may hold any bits, NaN too.
      ASSERT_EQ(full_floats.size(), all->full.size());
      ASSERT_EQ(swa_floats.size(), all->swa.size());
      EXPECT_EQ(0, std::memcmp(full_floats.data(), all->full.data(), full_floats.size() * sizeof(float)));
      EXPECT_EQ(0, std::memcmp(swa_floats.data(), all->swa.data(), swa_floats.size() * sizeof(float)));
      for (int64_t pg = all->first_full; pg < all->n_pages(); ++pg) {
        EXPECT_EQ(0, std::memcmp(whole->full_page(full[pg]), chunked->full_page(full[pg]),
                                 size_t(whole->full_page_floats()) * sizeof(float)))
            << "full page " << pg;
      }
      for (int64_t pg = all->first_swa; pg < all->n_pages(); ++pg) {
        EXPECT_EQ(0, std::memcmp(whole->swa_page(swa[pg]), chunked->swa_page(swa[pg]),
                                 size_t(whole->swa_page_floats()) * sizeof(float)))
            << "SWA page " << pg;
      }
    }
  }
}

// One chunk refused mid-transfer (another layout, a page count its floats do
// not fill, a range past the sequence) writes nothing; the chunks before it stay.
TEST_P(kv_transfer, a_refused_chunk_writes_nothing) {
  const engine& eng = *g_->eng;
  const int64_t n = 520;
  std::unique_ptr<kv_store> sender = hand_off_pool(eng), receiver = hand_off_pool(eng);
  sequence_state a = eng.new_sequence();
  engine::bind_pages(a, sender.get(), hand_off_ids(n, false), hand_off_ids(n, false), 0);
  std::vector<float> unused;
  ASSERT_TRUE(eng.prefill(a, tokens(0, n), logits_request::none, &unused).ok());
  const size_t page_bytes = size_t(sender->full_page_floats() + sender->swa_page_floats()) * sizeof(float);
  auto plan = kv_pages_plan(*sender, eng.config(), n, 0, 2 * page_bytes);
  ASSERT_TRUE(plan.ok()) << plan.get_status().to_string();
  ASSERT_GE(plan->size(), 2u);
  const std::vector<int32_t> full = hand_off_ids(n, true), swa = hand_off_ids(n, true);
  for (int32_t pg = 0; pg < k_pages; ++pg) {
    std::fill_n(receiver->full_page(pg), receiver->full_page_floats(), -7.0f);
    std::fill_n(receiver->swa_page(pg), receiver->swa_page_floats(), -7.0f);
  }
  auto first = kv_pages_export(*sender, eng.config(), *a.pages, n, 0, plan->front());
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(kv_pages_import(*first, *receiver, full, swa).ok());
  auto sentinel = [](const float* p, int64_t floats) {
    return std::all_of(p, p + floats, [](float v) { return v == -7.0f; });
  };
  // Whether the receiver's pages from `from_page` on hold the sentinel still.
  auto untouched_from = [&](int64_t from_page) {
    for (int64_t pg = from_page; pg < (n + k_page - 1) / k_page; ++pg) {
      if (!sentinel(receiver->full_page(full[pg]), receiver->full_page_floats())) return false;
      if (!sentinel(receiver->swa_page(swa[pg]), receiver->swa_page_floats())) return false;
    }
    return true;
  };
  ASSERT_TRUE(untouched_from(plan->front().end_page));

  auto second = kv_pages_export(*sender, eng.config(), *a.pages, n, 0, (*plan)[1]);
  ASSERT_TRUE(second.ok());
  kv_pages other_layout = *second;
  other_layout.layout ^= 1;
  EXPECT_STATUS(kv_pages_import(other_layout, *receiver, full, swa), status_code::invalid_argument,
                "another model");
  kv_pages one_page_more = *second;
  ++one_page_more.end_page;
  EXPECT_STATUS(kv_pages_import(one_page_more, *receiver, full, swa), status_code::invalid_argument,
                "layout");
  kv_pages past_the_end = *second;
  past_the_end.first_page = past_the_end.n_pages();
  past_the_end.end_page = past_the_end.n_pages() + 1;
  EXPECT_STATUS(kv_pages_import(past_the_end, *receiver, full, swa), status_code::invalid_argument, "layout");
  std::vector<int32_t> missing = full;
  missing[size_t((*plan)[1].end_page - 1)] = -1;
  EXPECT_STATUS(kv_pages_import(*second, *receiver, missing, swa), status_code::invalid_argument, "no page");
  EXPECT_TRUE(untouched_from(plan->front().end_page));

  ASSERT_TRUE(kv_pages_import(*second, *receiver, full, swa).ok());
  EXPECT_FALSE(untouched_from(plan->front().end_page));

  // A limit under one page cannot be planned; neither can nothing to send.
  EXPECT_STATUS(kv_pages_plan(*sender, eng.config(), n, 0, page_bytes - 1), status_code::invalid_argument,
                "chunk limit");
  EXPECT_STATUS(kv_pages_plan(*sender, eng.config(), n, (n + k_page - 1) / k_page, page_bytes),
                status_code::invalid_argument, "leaves none");
  EXPECT_STATUS(kv_pages_export(*sender, eng.config(), *a.pages, n, 0, {2, 2}), status_code::invalid_argument,
                "pages [2, 2)");
}

INSTANTIATE_TEST_SUITE_P(tiny, kv_transfer, ::testing::Values("tiny-a", "tiny-b", "tiny-c"),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           std::string s = i.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

}  // namespace
}  // namespace hart::testing
