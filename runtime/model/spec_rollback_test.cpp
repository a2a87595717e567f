// Speculative verification on the CPU engine: prefill n tokens, verify a pass
// of k+1 tokens (the first a of them true, the rest arbitrary drafts), roll
// back to n+a, go on with the true tokens: every logit equals, bit for bit
// (deterministic mode), the run that never drafted. Over k = 1, 2, 4, 7 (the
// longest pass), a = 0, 1, k/2, k, k+1 (none kept, the first, half, every
// draft, and the bonus position too: each prefill is recomputed per case,
// so the grid is cut to what CI's 2 cores afford) and prompts whose passes
// cross multiples of 4 (CSA), of the HCA
// rate, a page boundary, and the point where a verify pass would release the
// SWA pages its start still reads. Also: rolling back n_tokens alone (no ring
// restore) gives other logits, cache-bound pages stay as the cache gave them,
// and bad calls are refused with nothing changed.
#include "runtime/model/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

namespace hart {
namespace {

constexpr int64_t k_max_drafts = 7;
constexpr int64_t k_continue = 3;  // true tokens fed past the pass's last position

struct model_case {
  const char* name;
  int64_t page_size;
  std::vector<int64_t> prompts;  // n: the pass covers positions n..n+k
};

// gtest prints a failing case's parameter with this.
void PrintTo(const model_case& c, std::ostream* os) {
  *os << c.name << " with pages of " << c.page_size;
}

std::unique_ptr<engine> load(const model_case& c) {
  engine_params p;
  p.model_dir = std::string(HART_TEST_DATA) + "/" + c.name;
  p.deterministic = true;
  p.page_size = c.page_size;
  auto e = engine::load(p);
  EXPECT_TRUE(e.ok()) << e.get_status().to_string();
  return std::move(e).value();
}

bool same(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, size_t(n) * sizeof(float)) == 0;
}

class spec_rollback : public ::testing::TestWithParam<model_case> {
 protected:
  void SetUp() override {
    eng_ = load(GetParam());
    V_ = eng_->config().vocab_size;
    int64_t len = 0;
    for (int64_t n : GetParam().prompts) len = std::max(len, n + k_max_drafts + 1 + k_continue);
    std::mt19937 rng(7);
    for (int64_t i = 0; i < len; ++i) truth_.push_back(int32_t(rng() % uint32_t(V_)));
    sequence_state s = eng_->new_sequence();
    ASSERT_TRUE(eng_->prefill(s, truth_, logits_request::all, &oracle_).ok());
  }

  std::vector<int32_t> truth(int64_t from, int64_t to) const {
    return {truth_.begin() + from, truth_.begin() + to};
  }
  // A draft that is never the true token at `pos`.
  int32_t wrong(int64_t pos) const { return int32_t((truth_[pos] + 1 + pos % 5) % V_); }

  // Logit rows [V, count] equal the oracle's from position `pos` on.
  void expect_oracle(const std::vector<float>& got, int64_t row0, int64_t pos, int64_t count,
                     const std::string& what) const {
    for (int64_t j = 0; j < count; ++j) {
      EXPECT_TRUE(same(got.data() + (row0 + j) * V_, oracle_.data() + (pos + j) * V_, V_))
          << what << ": position " << pos + j;
    }
  }

  // Prefill n, verify k+1 tokens of which the first a are true, roll back to
  // n+a, then feed the true tokens up to n+k+1+k_continue. Returns the logits
  // of that continuation, [V, positions from n+a].
  std::vector<float> draft_and_continue(sequence_state& seq, int64_t n, int64_t k, int64_t a) const {
    const int64_t P = GetParam().page_size;
    std::vector<float> logits;
    EXPECT_TRUE(eng_->prefill(seq, truth(0, n), logits_request::none, &logits).ok());
    std::vector<int32_t> pass = truth(n, n + a);
    for (int64_t pos = n + a; pos <= n + k; ++pos) pass.push_back(wrong(pos));
    ring_snapshot snap;
    const status st = eng_->verify({{&seq, pass, logits_request::all}}, {&snap}, &logits);
    EXPECT_TRUE(st.ok()) << st.to_string();
    expect_oracle(logits, 0, n, a, "accepted positions of the pass");
    const status rb = eng_->rollback(seq, n + a, snap);
    EXPECT_TRUE(rb.ok()) << rb.to_string();
    EXPECT_EQ(seq.n_tokens, n + a);
    // Pages for rejected positions went back.
    EXPECT_EQ(int64_t(seq.pages->full.size()), (n + a + P - 1) / P);
    EXPECT_TRUE(eng_->prefill(seq, truth(n + a, n + k + 1 + k_continue), logits_request::all, &logits).ok());
    return logits;
  }

  std::unique_ptr<engine> eng_;
  int64_t V_ = 0;
  std::vector<int32_t> truth_;
  std::vector<float> oracle_;  // [V, truth_.size()]
};

TEST_P(spec_rollback, rejected_drafts_leave_no_trace) {
  for (int64_t n : GetParam().prompts) {
    for (int64_t k : {int64_t(1), int64_t(2), int64_t(4), k_max_drafts}) {
      std::vector<int64_t> kept = {0, 1, k / 2, k, k + 1};
      std::sort(kept.begin(), kept.end());
      kept.erase(std::unique(kept.begin(), kept.end()), kept.end());
      for (int64_t a : kept) {
        SCOPED_TRACE("n " + std::to_string(n) + ", k " + std::to_string(k) + ", accepted " +
                     std::to_string(a));
        sequence_state seq = eng_->new_sequence();
        const std::vector<float> logits = draft_and_continue(seq, n, k, a);
        expect_oracle(logits, 0, n + a, n + k + 1 + k_continue - n - a, "after the rollback");
        if (HasFailure()) return;  // one combination's report is enough
      }
    }
  }
}

TEST_P(spec_rollback, rollback_returns_the_pages_of_rejected_positions) {
  const int64_t P = GetParam().page_size;
  const int64_t n = P - 3, k = 5;  // the drafts open the next page
  sequence_state seq = eng_->new_sequence();
  std::vector<float> logits;
  ASSERT_TRUE(eng_->prefill(seq, truth(0, n), logits_request::none, &logits).ok());
  std::vector<int32_t> pass;
  for (int64_t pos = n; pos <= n + k; ++pos) pass.push_back(wrong(pos));
  ring_snapshot snap;
  ASSERT_TRUE(eng_->verify({{&seq, pass, logits_request::none}}, {&snap}, &logits).ok());
  EXPECT_EQ(seq.pages->full.size(), 2u);
  ASSERT_TRUE(eng_->rollback(seq, n + 2, snap).ok());
  EXPECT_EQ(seq.pages->full.size(), 1u);
  EXPECT_EQ(seq.pages->swa.size(), 1u);
  EXPECT_GE(seq.pages->swa[0], 0);
}

// tiny-a, HCA rate 16: a pass at 29..36 crosses 32 and overwrites the HCA rows
// of positions 16..20, which block 1 (16..31) still needs after a rollback to 30.
TEST(spec_rollback_restore, n_tokens_alone_is_not_a_rollback) {
  const model_case c{"tiny-a", 128, {29}};
  std::unique_ptr<engine> eng = load(c);
  std::mt19937 rng(7);
  std::vector<int32_t> truth;
  for (int i = 0; i < 48; ++i) truth.push_back(int32_t(rng() % 512));
  std::vector<float> oracle, got;
  {
    sequence_state s = eng->new_sequence();
    ASSERT_TRUE(eng->prefill(s, truth, logits_request::all, &oracle).ok());
  }
  const int64_t V = eng->config().vocab_size, n = 29, k = 7, keep = 30;
  for (bool restore : {true, false}) {
    SCOPED_TRACE(restore ? "with the ring restore" : "n_tokens alone");
    sequence_state seq = eng->new_sequence();
    ASSERT_TRUE(eng->prefill(seq, {truth.begin(), truth.begin() + n}, logits_request::none, &got).ok());
    std::vector<int32_t> pass{truth[n]};
    for (int64_t pos = n + 1; pos <= n + k; ++pos) pass.push_back(int32_t((truth[pos] + 3) % V));
    ring_snapshot snap;
    ASSERT_TRUE(eng->verify({{&seq, pass, logits_request::none}}, {&snap}, &got).ok());
    if (restore) {
      ASSERT_TRUE(eng->rollback(seq, keep, snap).ok());
    } else {
      seq.n_tokens = keep;
    }
    ASSERT_TRUE(eng->prefill(seq, {truth.begin() + keep, truth.end()}, logits_request::all, &got).ok());
    int64_t n_equal = 0;
    for (int64_t p = keep; p < int64_t(truth.size()); ++p)
      n_equal += same(got.data() + (p - keep) * V, oracle.data() + p * V, V);
    if (restore) {
      EXPECT_EQ(n_equal, int64_t(truth.size()) - keep);
    } else {
      // Positions before the block's close (30) are untouched; from 31 on the HCA entry is wrong.
      EXPECT_EQ(n_equal, 1);
    }
  }
}

// Pages a cache reserved: the pass writes into them, rollback leaves the table as it was.
TEST(spec_rollback_bound, cache_pages_stay_reserved_and_logits_match) {
  const model_case c{"tiny-b", 256, {}};
  std::unique_ptr<engine> eng = load(c);
  auto made = eng->make_store(128);
  ASSERT_TRUE(made.ok());
  std::unique_ptr<kv_store> store = std::move(made).value();
  store->ensure_full_pages(4);
  store->ensure_swa_pages(4);
  std::mt19937 rng(11);
  std::vector<int32_t> truth;
  for (int i = 0; i < 140; ++i) truth.push_back(int32_t(rng() % 512));
  std::vector<float> oracle, got;
  {
    sequence_state s = eng->new_sequence();
    ASSERT_TRUE(eng->prefill(s, truth, logits_request::all, &oracle).ok());
  }
  const int64_t V = eng->config().vocab_size, n = 124, k = 7;
  const std::vector<int32_t> full{3, 1}, swa{2, 0};
  for (int64_t a : {0, 3, 4, 8}) {
    SCOPED_TRACE("accepted " + std::to_string(a));
    sequence_state seq = eng->new_sequence();
    engine::bind_pages(seq, store.get(), full, swa, 0);
    ASSERT_TRUE(eng->prefill(seq, {truth.begin(), truth.begin() + n}, logits_request::none, &got).ok());
    std::vector<int32_t> pass(truth.begin() + n, truth.begin() + n + a);
    for (int64_t pos = n + a; pos <= n + k; ++pos) pass.push_back(int32_t((truth[pos] + 1) % V));
    ring_snapshot snap;
    ASSERT_TRUE(eng->verify({{&seq, pass, logits_request::none}}, {&snap}, &got).ok());
    ASSERT_TRUE(eng->rollback(seq, n + a, snap).ok());
    EXPECT_EQ(seq.pages->full, full);
    EXPECT_EQ(seq.pages->swa, swa);
    ASSERT_TRUE(eng->prefill(seq, {truth.begin() + n + a, truth.end()}, logits_request::all, &got).ok());
    for (int64_t p = n + a; p < int64_t(truth.size()); ++p) {
      EXPECT_TRUE(same(got.data() + (p - n - a) * V, oracle.data() + p * V, V)) << "position " << p;
    }
  }
}

TEST(spec_rollback_errors, bad_calls_change_nothing) {
  const model_case c{"tiny-a", 128, {}};
  std::unique_ptr<engine> eng = load(c);
  sequence_state seq = eng->new_sequence(), other = eng->new_sequence();
  std::vector<float> logits;
  ASSERT_TRUE(eng->prefill(seq, {5, 6, 7}, logits_request::none, &logits).ok());
  ASSERT_TRUE(eng->prefill(other, {5, 6, 7}, logits_request::none, &logits).ok());
  ring_snapshot snap;
  const status too_long =
      eng->verify({{&seq, std::vector<int32_t>(9, 4), logits_request::none}}, {&snap}, &logits);
  EXPECT_EQ(too_long.code(), status_code::invalid_argument) << too_long.to_string();
  EXPECT_NE(too_long.message().find("rings keep at most 8"), std::string::npos) << too_long.to_string();
  EXPECT_EQ(seq.n_tokens, 3);
  const status miscounted = eng->verify({{&seq, {4}, logits_request::none}}, {&snap, &snap}, &logits);
  EXPECT_EQ(miscounted.code(), status_code::invalid_argument) << miscounted.to_string();

  ASSERT_TRUE(eng->verify({{&seq, {4, 4, 4}, logits_request::none}}, {&snap}, &logits).ok());
  EXPECT_EQ(eng->rollback(seq, 2, snap).code(), status_code::out_of_range);
  EXPECT_EQ(eng->rollback(seq, 7, snap).code(), status_code::out_of_range);
  EXPECT_EQ(eng->rollback(other, 4, snap).code(), status_code::failed_precondition);
  EXPECT_EQ(seq.n_tokens, 6);
  ASSERT_TRUE(eng->rollback(seq, 4, snap).ok());
  EXPECT_EQ(seq.n_tokens, 4);
  // The snapshot is spent: the sequence is no longer where the pass left it.
  EXPECT_EQ(eng->rollback(seq, 4, snap).code(), status_code::failed_precondition);
}

INSTANTIATE_TEST_SUITE_P(tiny, spec_rollback,
                         ::testing::Values(
                             // HCA 16, window 32: 4, 32 (HCA and window), the page at 128, and 155..163,
                             // which would free page 0 (128 + window) that a rollback below 160 reads.
                             model_case{"tiny-a", 128, {3, 29, 122, 155}},
                             // HCA 128 inside a page (122..130), the page and HCA boundary at 256.
                             model_case{"tiny-b", 256, {3, 122, 250}},
                             // Window 128, page 128: the boundary at 128, and 250..258 would free page 0.
                             model_case{"tiny-c", 128, {5, 122, 250}}),
                         [](const ::testing::TestParamInfo<model_case>& i) {
                           return std::string(i.param.name).substr(5) + "_page" +
                                  std::to_string(i.param.page_size);
                         });

}  // namespace
}  // namespace hart
