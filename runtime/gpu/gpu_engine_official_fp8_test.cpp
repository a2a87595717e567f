// The GPU engine's fp8 mode against DeepSeek's official FP8 inference (issue
// 19), the same measurement as tests/golden/official_fp8_test.cpp: one-layer
// models of each kind and the 4-layer mix, fed whole (the prefill linears'
// cuBLASLt path: 1200 rows), in chunks of 150 (tensor-core linears) and token
// by token (2-row decode steps, CUDA graphs). The GPU keeps fp32 activations
// between the official rounding points (docs/precision.md), so its bounds are
// regression guards around what it measured on 2026-12-02 (one layer: median
// 0.050-0.080, top-1 >= 0.81 over the 16 decode positions; four layers: median
// 0.123-0.133, top-1 >= 0.76), not yet issue 19's 1e-3 (which the CPU meets).
#include <gtest/gtest.h>

#include <cstdio>
#include <ostream>

#include "runtime/gpu/gpu_engine.h"
#include "tests/golden/official_fp8_fixture.h"

namespace hart::testing {
namespace {

struct official_gpu_case {
  const char* model;
  double max_median_rel, min_top1;
};
constexpr official_gpu_case k_cases[] = {
    {"swa", 0.1, 0.75}, {"csa", 0.1, 0.75}, {"hca", 0.1, 0.75}, {"mixed4", 0.18, 0.65}};
void PrintTo(const official_gpu_case& c, std::ostream* os) {
  *os << c.model;
}

class official_fp8_gpu : public ::testing::TestWithParam<official_gpu_case> {};

TEST_P(official_fp8_gpu, logits_match_the_official_inference) {
  if (!gpu_device_available()) GTEST_SKIP() << "no CUDA device: GPU engine not checked on this machine";
  const official_gpu_case& c = GetParam();
  const official_golden* g = official_golden_load(c.model);
  ASSERT_NE(g, nullptr);
  gpu_engine_params gp;
  gp.base.model_dir = g->checkpoint_dir;
  gp.base.prec = precision::fp8;
  gp.max_batch_tokens = 1280;
  gp.max_context = 1024;
  auto e = gpu_engine::load(gp);
  ASSERT_TRUE(e.ok()) << e.get_status().to_string();
  for (official_feed feed : {official_feed::whole, official_feed::chunked, official_feed::decode}) {
    const official_diff d = official_measure(**e, *g, feed);
    std::printf("official_fp8 gpu %s %s: median rel %.3g, max rel %.3g, top-1 %.4f over %lld positions",
                c.model, official_feed_name(feed), d.median_rel, d.max_rel, d.top1, (long long)d.positions);
    if (d.topk_sets_equal >= 0) std::printf(", indexer top-k sets equal %.4f", d.topk_sets_equal);
    std::printf("\n");
    EXPECT_LE(d.median_rel, c.max_median_rel) << official_feed_name(feed);
    EXPECT_GE(d.top1, c.min_top1) << official_feed_name(feed);
  }
}

INSTANTIATE_TEST_SUITE_P(models, official_fp8_gpu, ::testing::ValuesIn(k_cases),
                         [](const auto& info) { return std::string(info.param.model); });

}  // namespace
}  // namespace hart::testing
