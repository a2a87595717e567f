// The GPU engine's fp8 mode against DeepSeek's official FP8 inference (issue
// 19), the same measurement as tests/golden/official_fp8_test.cpp: one-layer
// models of each kind and the 4-layer mix, fed whole (1200 rows through the
// mma.sync linears; cuBLASLt's inexact block sums are off by default, docs/
// precision.md), in chunks of 150 (tensor-core linears), token by
// token (2-row decode steps, CUDA graphs) and one row's token at a time (the
// 1-row CUDA-core FP8 dot). The GPU computes the official bf16 activations
// (docs/precision.md) with kernels checked against the CPU ops that reproduce
// the official code; the bounds are the issue's: one layer within 1e-3 median
// relative error and top-1 >= 0.995, and the 4-layer mix within the official
// pipeline's own floor (as the CPU test).
// The checkpoints' MXFP4 experts stay MXFP4 on the device: checked against
// the same engine with FP8 experts below. The engine streams its weights from
// the checkpoint (device_weights_load): checked against the host load's upload.
#include "runtime/gpu/gpu_engine.h"
#include "runtime/gpu/gpu_weights.h"
#include "runtime/model/config.h"
#include "runtime/model/tensor_source.h"
#include "runtime/model/weights.h"
#include "tests/golden/official_fp8_fixture.h"
#include "tests/model/without_tensor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <vector>

namespace hart::testing {
namespace {

struct official_gpu_case {
  const char* model;
  double max_median_rel, min_top1;
};
constexpr official_gpu_case k_cases[] = {
    {"swa", 1e-3, 0.995}, {"csa", 1e-3, 0.995}, {"hca", 1e-3, 0.995}, {"mixed4", 0.075, 0.85}};
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
  for (official_feed feed :
       {official_feed::whole, official_feed::chunked, official_feed::decode, official_feed::decode_alone}) {
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

// Logits of both golden rows: the first decode_start tokens as one prefill
// (every position), then 8 decode steps of the two rows together.
std::vector<float> prefill_then_decode(const gpu_engine& e, const official_golden& g) {
  std::vector<sequence_state> seqs;
  std::vector<batch_item> items;
  for (int64_t b = 0; b < g.batch; ++b) seqs.push_back(e.new_sequence());
  for (int64_t b = 0; b < g.batch; ++b) {
    const auto& ids = g.input_ids[size_t(b)];
    items.push_back({&seqs[size_t(b)], {ids.begin(), ids.begin() + g.decode_start}, logits_request::all});
  }
  std::vector<float> all, part;
  EXPECT_TRUE(e.forward(items, &all).ok());
  for (int64_t step = 0; step < 8; ++step) {
    items.clear();
    for (int64_t b = 0; b < g.batch; ++b) {
      items.push_back(
          {&seqs[size_t(b)], {g.input_ids[size_t(b)][size_t(g.decode_start + step)]}, logits_request::last});
    }
    EXPECT_TRUE(e.forward(items, &part).ok());
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

// The release checkpoints' routed experts stay MXFP4 on the device (e2m1
// pairs + per-32 scales: 0.53 bytes per parameter) and run as W4A8 on tensor
// cores (linear_grouped_fp4.cu). These checkpoints' MXFP4 values are also
// exact FP8 tiles, so without MXFP4 the same values load as FP8 codes (1 byte
// per parameter + a scale per 128×128) for the FP8 grouped kernel: the same
// engine, only the experts' kernel and the order of their sums differ, and in
// a one-layer model nothing is quantized after the MoE. The logits agree to
// fp32 noise (measured: bitwise; the blocks' sums are exact here) through the
// prefill (wide tiles) and 2-row decode steps (narrow tiles); a wrong nibble,
// scale or tile is O(1).
TEST(official_fp8_gpu_mxfp4, experts_stay_mxfp4_and_match_fp8_experts) {
  if (!gpu_device_available()) GTEST_SKIP() << "no CUDA device: GPU engine not checked on this machine";
  for (const char* model : {"swa", "csa"}) {
    SCOPED_TRACE(model);
    const official_golden* g = official_golden_load(model);
    ASSERT_NE(g, nullptr);
    auto cfg = model_config_load(g->checkpoint_dir);
    ASSERT_TRUE(cfg.ok()) << cfg.get_status().to_string();
    auto host = model_weights_load(g->checkpoint_dir, *cfg, precision::fp8);
    ASSERT_TRUE(host.ok()) << host.get_status().to_string();
    auto fp4 = gpu::device_weights_upload(*host, *cfg, precision::fp8, /*mxfp4_experts=*/true);
    auto fp8 = gpu::device_weights_upload(*host, *cfg, precision::fp8, /*mxfp4_experts=*/false);
    ASSERT_TRUE(fp4.ok() && fp8.ok());
    for (size_t il = 0; il < fp4->layers.size(); ++il) {
      EXPECT_TRUE(fp4->layers[il].experts_fp4 && !fp4->layers[il].experts_fp8) << "layer " << il;
      EXPECT_TRUE(fp8->layers[il].experts_fp8 && !fp8->layers[il].experts_fp4) << "layer " << il;
    }
    // Per expert linear [I][D]: FP8 codes + one scale per 128×128, or e2m1 pairs + one scale per 32.
    const double n_linears = double(cfg->n_layers * cfg->n_routed_experts * 3);
    const double io = double(cfg->hidden_size * cfg->moe_inter_dim);
    const double want = n_linears * ((io + io / (128 * 128)) - (io / 2 + io / 32));
    const double saved = double(fp8->bytes) - double(fp4->bytes);
    std::printf("official_fp8 %s: device weights %.2f MB with MXFP4 experts, %.2f MB with FP8 ones\n", model,
                double(fp4->bytes) / 1e6, double(fp8->bytes) / 1e6);
    EXPECT_EQ(saved, want);
    gpu_engine_params gp;
    gp.base.model_dir = g->checkpoint_dir;
    gp.base.prec = precision::fp8;
    gp.max_batch_tokens = 1280;
    gp.max_context = 1024;
    auto e4 = gpu_engine::load(gp, *cfg, std::move(*fp4));
    auto e8 = gpu_engine::load(gp, *cfg, std::move(*fp8));
    ASSERT_TRUE(e4.ok() && e8.ok());
    const std::vector<float> a = prefill_then_decode(**e4, *g), b = prefill_then_decode(**e8, *g);
    ASSERT_EQ(a.size(), b.size());
    ASSERT_FALSE(a.empty());
    double worst = 0;
    const int64_t V = g->vocab;
    for (size_t r = 0; r < a.size() / size_t(V); ++r) {
      double d2 = 0, n2 = 0;
      for (int64_t v = 0; v < V; ++v) {
        const double x = a[r * V + v], y = b[r * V + v];
        d2 += (x - y) * (x - y);
        n2 += y * y;
      }
      worst = std::max(worst, std::sqrt(d2 / std::max(n2, 1e-30)));
    }
    std::printf(
        "official_fp8 %s: MXFP4 experts vs FP8 experts, worst per-position rel %.3g over %zu positions\n",
        model, worst, a.size() / size_t(V));
    EXPECT_LT(worst, 1e-4);
  }
}

TEST(official_fp8_gpu_stream, streamed_load_is_the_host_load_uploaded) {
  if (!gpu_device_available()) GTEST_SKIP() << "no CUDA device: GPU engine not checked on this machine";
  for (const char* model : {"swa", "csa", "hca", "mixed4"}) {
    SCOPED_TRACE(model);
    const official_golden* g = official_golden_load(model);
    ASSERT_NE(g, nullptr);
    auto cfg = model_config_load(g->checkpoint_dir);
    auto src = checkpoint_source_open(g->checkpoint_dir);
    auto host = model_weights_load(g->checkpoint_dir, *cfg, precision::fp8);
    ASSERT_TRUE(cfg.ok() && src.ok() && host.ok());
    std::vector<gpu::weights_load_progress> seen;
    auto streamed = gpu::device_weights_load(**src, *cfg, precision::fp8, true,
                                             [&](const gpu::weights_load_progress& p) { seen.push_back(p); });
    auto uploaded = gpu::device_weights_upload(*host, *cfg, precision::fp8, true);
    ASSERT_TRUE(streamed.ok()) << streamed.get_status().to_string();
    ASSERT_TRUE(uploaded.ok());
    EXPECT_EQ(streamed->bytes, uploaded->bytes);
    EXPECT_EQ(streamed->max_linear_in, uploaded->max_linear_in);
    for (size_t il = 0; il < streamed->layers.size(); ++il)
      EXPECT_TRUE(streamed->layers[il].experts_fp4) << il;
    ASSERT_EQ(seen.size(), size_t(cfg->n_layers + 1));  // the globals, then each layer
    EXPECT_EQ(seen.back().layers_done, cfg->n_layers);
    EXPECT_EQ(seen.back().bytes_done, seen.back().bytes_total);
    for (size_t i = 1; i < seen.size(); ++i) EXPECT_GT(seen[i].bytes_done, seen[i - 1].bytes_done);
    gpu_engine_params gp;
    gp.base.model_dir = g->checkpoint_dir;
    gp.base.prec = precision::fp8;
    gp.max_batch_tokens = 1280;
    gp.max_context = 1024;
    auto es = gpu_engine::load(gp, *cfg, std::move(*streamed));
    auto eu = gpu_engine::load(gp, *cfg, std::move(*uploaded));
    auto el = gpu_engine::load(gp);  // streams from model_dir itself
    ASSERT_TRUE(es.ok() && eu.ok() && el.ok());
    const std::vector<float> a = prefill_then_decode(**es, *g), b = prefill_then_decode(**eu, *g),
                             c = prefill_then_decode(**el, *g);
    ASSERT_FALSE(a.empty());
    ASSERT_EQ(a.size(), b.size());
    ASSERT_EQ(c.size(), b.size());
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));  // the same logits, bit for bit
    EXPECT_EQ(0, std::memcmp(c.data(), b.data(), c.size() * sizeof(float)));
  }
}

TEST(official_fp8_gpu_stream, a_failed_load_names_the_tensor_and_frees_the_device) {
  if (!gpu_device_available()) GTEST_SKIP() << "no CUDA device: GPU engine not checked on this machine";
  const official_golden* g = official_golden_load("mixed4");
  ASSERT_NE(g, nullptr);
  auto cfg = model_config_load(g->checkpoint_dir);
  auto src = checkpoint_source_open(g->checkpoint_dir);
  ASSERT_TRUE(cfg.ok() && src.ok());
  without_tensor missing(**src, "layers.3.ffn.experts.5.w2.weight");
  const size_t live_before = gpu::device_buffer::live_bytes();
  auto w = gpu::device_weights_load(missing, *cfg, precision::fp8, true);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.get_status().code(), status_code::not_found) << w.get_status().to_string();
  EXPECT_NE(w.get_status().message().find("layer 3"), std::string::npos) << w.get_status().message();
  EXPECT_NE(w.get_status().message().find("layers.3.ffn.experts.5.w2.weight"), std::string::npos);
  EXPECT_EQ(gpu::device_buffer::live_bytes(),
            live_before);  // layers 0-2 and the globals went up, and were freed
  auto whole = gpu::device_weights_load(**src, *cfg, precision::fp8, true);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(gpu::device_buffer::live_bytes(),
            live_before + whole->bytes);  // the check sees what a load holds
}

}  // namespace
}  // namespace hart::testing
