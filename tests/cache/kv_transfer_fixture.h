// File: tests/cache/kv_transfer_fixture.h — what the KV hand-off tests share
// (kv_transfer_test, pd_wire_test): page stores of a tiny golden model, page
// ids that differ between the two sides, the fixture's prompt, and one decode
// step compared bit for bit between the sender and the receiver.
#pragma once

#include "runtime/model/engine.h"
#include "tests/golden/golden_fixture.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

namespace hart::testing {

constexpr int64_t k_hand_off_page = 128;
constexpr int32_t k_hand_off_pages = 8;  // per pool, per store

inline std::unique_ptr<kv_store> hand_off_pool(const engine& eng) {
  auto s = eng.make_store(k_hand_off_page);
  EXPECT_TRUE(s.ok()) << s.get_status().to_string();
  std::unique_ptr<kv_store> store = std::move(s).value();
  store->ensure_full_pages(k_hand_off_pages);
  store->ensure_swa_pages(k_hand_off_pages);
  return store;
}

// Page ids for `n` positions: the sender counts up, the receiver down.
inline std::vector<int32_t> hand_off_ids(int64_t n, bool reversed) {
  std::vector<int32_t> v;
  for (int64_t pg = 0; pg < (n + k_hand_off_page - 1) / k_hand_off_page; ++pg)
    v.push_back(reversed ? k_hand_off_pages - 1 - pg : int32_t(pg));
  return v;
}

// A tiny golden model (the test's parameter) in exact, deterministic mode.
class kv_hand_off_test : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { g_ = golden_load(GetParam(), precision::exact, /*deterministic=*/true); }

  // The fixture's prompt, repeated past its end (tiny-a's has 200 tokens).
  std::vector<int32_t> tokens(int64_t from, int64_t to) const {
    std::vector<int32_t> t;
    for (int64_t p = from; p < to; ++p) t.push_back(g_->input_ids[0][size_t(p % g_->seq)]);
    return t;
  }

  // `next` fed to the sender `a` and the receiver `b` at position `p`: the logits equal, bit for bit.
  void expect_same_step(sequence_state& a, sequence_state& b, const std::vector<int32_t>& next,
                        int64_t p) const {
    std::vector<float> want, got;
    ASSERT_TRUE(g_->eng->prefill(a, next, logits_request::last, &want).ok());
    ASSERT_TRUE(g_->eng->prefill(b, next, logits_request::last, &got).ok());
    ASSERT_EQ(want.size(), got.size());
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float))) << "position " << p;
  }

  std::unique_ptr<golden_set> g_;
};

}  // namespace hart::testing
