// The engine's exact mode against the Hugging Face fp32 goldens: every position
// of every sequence, fed whole, batched, in chunks and token by token.
#include "tests/golden/golden_fixture.h"

#include <gtest/gtest.h>

#include <cstdio>

namespace hart::testing {
namespace {

constexpr double k_tol = 1e-4;  // issue bound; expect ~1e-6

class golden_logits : public ::testing::TestWithParam<const char*> {
 protected:
  static void SetUpTestSuite() {}
  void SetUp() override { g_ = golden_load(GetParam()); }
  std::unique_ptr<golden_set> g_;
};

TEST_P(golden_logits, full_sequence_every_position) {
  const std::vector<float> want = g_->floats("logits");
  for (int64_t b = 0; b < g_->batch; ++b) {
    sequence_state s = g_->reference_sequence();
    std::vector<float> got;
    ASSERT_TRUE(g_->eng->prefill(s, g_->input_ids[b], logits_request::all, &got).ok());
    int64_t worst_pos = -1;
    const double err = max_rel_error_row(*g_, got, want, b, &worst_pos);
    std::printf("%s row %lld: max relative error %.3g (position %lld)\n", GetParam(), (long long)b, err,
                (long long)worst_pos);
    EXPECT_LE(err, k_tol) << "batch row " << b << " worst position " << worst_pos;
  }
}

TEST_P(golden_logits, hidden_streams_after_every_layer) {
  if (!g_->ref.find("hidden.0")) GTEST_SKIP() << GetParam() << " has no hidden-state goldens";
  const int64_t n_layers = g_->eng->config().n_layers;
  const int64_t D = g_->eng->config().hidden_size, n = g_->eng->config().hc_mult;
  for (int64_t b = 0; b < g_->batch; ++b) {
    sequence_state s = g_->reference_sequence();
    forward_trace tr;
    tr.capture_hidden = true;
    ASSERT_TRUE(g_->eng->prefill(s, g_->input_ids[b], logits_request::none, nullptr, &tr).ok());
    for (int64_t l = 0; l < n_layers; ++l) {
      const std::vector<float> want = g_->floats("hidden." + std::to_string(l));
      const int64_t row = g_->seq * n * D;
      EXPECT_LE(rel_error(tr.hidden[l].data(), want.data() + b * row, row), k_tol) << "after layer " << l - 1;
    }
    const std::vector<float> fin = g_->floats("hidden." + std::to_string(n_layers));
    EXPECT_LE(rel_error(tr.final_hidden.data(), fin.data() + b * g_->seq * D, g_->seq * D), k_tol);
  }
}

INSTANTIATE_TEST_SUITE_P(tiny, golden_logits, ::testing::Values("tiny-a", "tiny-b", "tiny-c"));

}  // namespace
}  // namespace hart::testing
