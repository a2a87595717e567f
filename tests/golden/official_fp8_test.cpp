// The CPU engine's fp8 mode against DeepSeek's official FP8 inference (issue
// 19; docs/precision.md "fp8"): on one-layer models of each attention kind and
// a 4-layer mix, fed whole, in chunks and token by token. Run as a group with
// `ctest -R official_fp8`.
#include "runtime/model/engine.h"
#include "tests/golden/official_fp8_fixture.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <ostream>

namespace hart::testing {
namespace {

// One layer: issue 19's bounds, 1e-3 median relative error and top-1 >= 0.995
// (measured 2026-12-02: median 1.7e-7, top-1 >= 0.9975, every indexer top-k set
// equal). Four layers: the official pipeline's own floor on this checkpoint,
// the reference run on the CPU against itself on the GPU (median 0.066 whole,
// 0.075 decode, top-1 0.874; hart measured 0.061 / 0.070, 0.894): one rounding
// flip at an early position reaches every later one through the windows and
// compressed entries (docs/precision.md). Top-1 over the 16 decode positions
// moves in 1/16 steps.
struct official_case {
  const char* model;
  double max_median_rel, min_top1;
  double min_topk_sets_equal;  // whole feed, models with CSA layers
};
constexpr official_case k_cases[] = {{"swa", 1e-3, 0.995, 1},
                                     {"csa", 1e-3, 0.995, 0.99},
                                     {"hca", 1e-3, 0.995, 1},
                                     {"mixed4", 0.075, 0.85, 0.5}};
void PrintTo(const official_case& c, std::ostream* os) {
  *os << c.model;
}

class official_fp8_cpu : public ::testing::TestWithParam<official_case> {};

TEST_P(official_fp8_cpu, logits_match_the_official_inference) {
  const official_case& c = GetParam();
  const official_golden* g = official_golden_load(c.model);
  ASSERT_NE(g, nullptr);
  engine_params p;
  p.model_dir = g->checkpoint_dir;
  p.prec = precision::fp8;
  auto eng = engine::load(p);
  ASSERT_TRUE(eng.ok()) << eng.get_status().to_string();
  std::unique_ptr<forward_engine> e = forward_engine_cpu(std::move(*eng));
  for (official_feed feed : {official_feed::whole, official_feed::chunked, official_feed::decode}) {
    const official_diff d = official_measure(*e, *g, feed);
    std::printf("official_fp8 cpu %s %s: median rel %.3g, max rel %.3g, top-1 %.4f over %lld positions",
                c.model, official_feed_name(feed), d.median_rel, d.max_rel, d.top1, (long long)d.positions);
    if (d.topk_sets_equal >= 0) std::printf(", indexer top-k sets equal %.4f", d.topk_sets_equal);
    std::printf("\n");
    EXPECT_LE(d.median_rel, c.max_median_rel) << official_feed_name(feed);
    EXPECT_GE(d.top1, c.min_top1) << official_feed_name(feed);
    if (d.topk_sets_equal >= 0) {
      EXPECT_GE(d.topk_sets_equal, c.min_topk_sets_equal);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(models, official_fp8_cpu, ::testing::ValuesIn(k_cases),
                         [](const auto& info) { return std::string(info.param.model); });

}  // namespace
}  // namespace hart::testing
