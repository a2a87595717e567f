// The GPU engine against the CPU engine (same precision) and the Hugging Face
// goldens: whole prompts, chunked prefill, token-by-token decode, mixed
// batches, multi-pass calls, indexer picks, bad input. Skips without a device.
//
// Tolerances. exact: per-position relative error vs the CPU ≤ 2e-5 (fp32 with
// other summation orders; measured ~1e-6), vs the goldens ≤ 1e-4 and top-1
// agreement ≥ 99% (the issue asks ≤ 2e-2 for bf16), up to the first near-tie
// flip of an indexer pick in goldens that have near-ties (tiny-c), within
// k_after_flip after it. fp8: the same QDQ rules as
// the CPU fp8 mode, but an fp32 rounding difference can move a value across a
// QDQ step, and the random tiny models amplify that layer by layer: the bound
// is a factor of the CPU fp8 mode's own difference under other summation
// orders, measured in the same test (see k_fp8_noise_factor).
#include "runtime/gpu/gpu_engine.h"

#include "runtime/gpu/bench_model.h"
#include "runtime/gpu/gpu_engine_impl.h"
#include "tests/golden/golden_fixture.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <string>

namespace hart::testing {
namespace {

constexpr double k_vs_cpu_exact = 2e-5;
constexpr double k_vs_golden_exact = 1e-4;
constexpr double k_min_top1 = 0.99;
// After a near-tie flip of one indexer pick, later positions attend to one
// other entry: measured 0.023 (tiny-c row 1, H200); a wrong computation is O(1).
constexpr double k_after_flip = 0.1;

#define SKIP_WITHOUT_GPU() \
  if (!gpu_device_available()) GTEST_SKIP() << "no CUDA device: GPU engine not checked on this machine"

std::unique_ptr<gpu_engine> load_gpu(const std::string& name, precision prec, int64_t max_batch_tokens = 1024,
                                     int64_t full_pages = 0, bool fp32_activations = false) {
  gpu_engine_params p;
  p.base.model_dir = std::string(HART_TEST_DATA) + "/" + name;
  p.base.prec = prec;
  p.base.fp32_activations = fp32_activations;
  p.max_batch_tokens = max_batch_tokens;
  p.max_context = 4096;
  p.full_pages = full_pages;
  p.swa_pages = full_pages;
  auto e = gpu_engine::load(p);
  EXPECT_TRUE(e.ok()) << e.get_status().to_string();
  return e.ok() ? std::move(*e) : nullptr;
}

struct diff {
  double max_rel = 0, mean_rel = 0, top1 = 1;
  int64_t worst = -1;
};

// Per-position ‖a−b‖/‖b‖ over rows of V; the `allow` worst positions set aside.
diff compare(const std::vector<float>& a, const std::vector<float>& b, int64_t V, int64_t allow = 0) {
  diff d;
  EXPECT_EQ(a.size(), b.size());
  const int64_t n = int64_t(std::min(a.size(), b.size())) / V;
  std::vector<std::pair<double, int64_t>> rel;
  int64_t agree = 0;
  for (int64_t r = 0; r < n; ++r) {
    const double e = rel_error(a.data() + r * V, b.data() + r * V, V);
    rel.push_back({std::isnan(e) ? INFINITY : e, r});
    d.mean_rel += e / double(n);
    agree += std::max_element(a.begin() + r * V, a.begin() + (r + 1) * V) - (a.begin() + r * V) ==
             std::max_element(b.begin() + r * V, b.begin() + (r + 1) * V) - (b.begin() + r * V);
  }
  std::sort(rel.rbegin(), rel.rend());
  const size_t at = std::min<size_t>(size_t(allow), rel.size());
  if (at < rel.size()) d.max_rel = rel[at].first, d.worst = rel[at].second;
  d.top1 = n ? double(agree) / double(n) : 1.0;
  return d;
}

std::vector<float> cpu_run(const golden_set& g, const std::vector<int32_t>& ids, int64_t chunk) {
  sequence_state s = g.reference_sequence();
  std::vector<float> all, part;
  for (size_t at = 0; at < ids.size(); at += size_t(chunk)) {
    std::vector<int32_t> t(ids.begin() + at, ids.begin() + std::min(ids.size(), at + size_t(chunk)));
    EXPECT_TRUE(g.eng->prefill(s, t, logits_request::all, &part).ok());
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

// The GPU engine over `ids` in chunks, ties resolved as the reference's full forward (like the CPU fixture).
std::vector<float> gpu_run(const gpu_engine& e, const std::vector<int32_t>& ids, int64_t chunk,
                           int64_t ref_len) {
  sequence_state s = e.new_sequence();
  s.tie_reference_length = ref_len;
  std::vector<float> all, part;
  for (size_t at = 0; at < ids.size(); at += size_t(chunk)) {
    std::vector<int32_t> t(ids.begin() + at, ids.begin() + std::min(ids.size(), at + size_t(chunk)));
    const status st = e.forward({{&s, t, logits_request::all}}, &part);
    EXPECT_TRUE(st.ok()) << st.to_string();
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

// Where the GPU's trace of golden row `b` (indexer picks per CSA layer,
// routed experts per layer; one whole-prompt call, which may span passes) first
// differs from the CPU's: the earliest position, and at it the earliest layer
// and what differs there (a layer's picks come before its routing).
struct divergence {
  int64_t pos = -1, layer = -1;
  std::string what;
  int64_t n_tokens = 0;  // (layer, token) pairs that differ, all positions
};

divergence first_divergence(const golden_set& g, const gpu_engine& e, int64_t b) {
  divergence d;
  const std::vector<int32_t>& ids = g.input_ids[size_t(b)];
  sequence_state cs = g.reference_sequence(), gs = e.new_sequence();
  gs.tie_reference_length = g.seq;
  forward_trace ct, gt;
  EXPECT_TRUE(g.eng->prefill(cs, ids, logits_request::none, nullptr, &ct).ok());
  const status st = e.forward({{&gs, ids, logits_request::none}}, nullptr, &gt);
  EXPECT_TRUE(st.ok()) << st.to_string();
  auto scan = [&](const std::map<int64_t, std::vector<int32_t>>& want,
                  std::map<int64_t, std::vector<int32_t>>& got, int64_t k, const char* what, int order) {
    EXPECT_EQ(want.size(), got.size()) << what;
    for (const auto& [il, w] : want) {
      const std::vector<int32_t>& v = got[il];
      EXPECT_EQ(v.size(), w.size()) << what << ", layer " << il;
      for (size_t t = 0; (t + 1) * k <= std::min(v.size(), w.size()); ++t) {
        if (std::set<int32_t>(w.begin() + t * k, w.begin() + (t + 1) * k) ==
            std::set<int32_t>(v.begin() + t * k, v.begin() + (t + 1) * k)) {
          continue;
        }
        ++d.n_tokens;
        const int64_t pos = int64_t(t), key = 2 * il + order;
        if (d.pos < 0 || pos < d.pos || (pos == d.pos && key < 2 * d.layer + (d.what == "routed experts"))) {
          d.pos = pos;
          d.layer = il;
          d.what = what;
        }
      }
    }
  };
  scan(ct.topk, gt.topk, g.eng->config().index_topk, "indexer picks", 0);
  scan(ct.experts, gt.experts, g.eng->config().n_activated_experts, "routed experts", 1);
  return d;
}

// The GPU's picks and routing equal the CPU's, except after a near-tie flip in
// a golden that has near-ties (tiny-c: indexer scores 1e-5 apart, where fp32
// summation order decides): the first difference must then be a pick flip,
// since a routing difference first would mean the layer computed other values.
// The tokens after a flip attend to other entries, so later picks and routing
// may differ too.
divergence expect_trace_equal_cpu(const golden_set& g, const gpu_engine& e, int64_t b, const char* what) {
  SCOPED_TRACE(std::string(what) + ", row " + std::to_string(b));
  const divergence d = first_divergence(g, e, b);
  if (d.pos < 0) return d;
  std::printf(
      "row %lld: first trace difference at position %lld, layer %lld (%s); %lld (layer, token) pairs "
      "differ\n",
      (long long)b, (long long)d.pos, (long long)d.layer, d.what.c_str(), (long long)d.n_tokens);
  EXPECT_GT(g.near_tie_allowance, 0)
      << "picks or routing differ from the CPU's in a golden without near-ties";
  EXPECT_EQ(d.what, "indexer picks") << "the first difference is not a pick flip, at position " << d.pos;
  return d;
}

class gpu_exact : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!gpu_device_available()) GTEST_SKIP() << "no CUDA device: GPU engine not checked on this machine";
    g_ = golden_load(GetParam());
    gpu_ = load_gpu(GetParam(), precision::exact);
    ASSERT_TRUE(gpu_);
  }
  std::unique_ptr<golden_set> g_;
  std::unique_ptr<gpu_engine> gpu_;
};

TEST_P(gpu_exact, whole_prompt_vs_cpu_and_goldens) {
  const std::vector<float> want = g_->floats("logits");
  const int64_t V = g_->vocab;
  for (int64_t b = 0; b < g_->batch; ++b) {
    const std::vector<float> got = gpu_run(*gpu_, g_->input_ids[b], g_->seq, g_->seq);
    const std::vector<float> cpu = cpu_run(*g_, g_->input_ids[b], g_->seq);
    const std::vector<float> ref(want.begin() + b * g_->seq * V, want.begin() + (b + 1) * g_->seq * V);
    // Strict up to a near-tie flip (expect_trace_equal_cpu), flip-sized after it.
    const divergence flip = expect_trace_equal_cpu(*g_, *gpu_, b, "whole prompt");
    const int64_t n = flip.pos < 0 ? g_->seq : flip.pos;
    auto head = [&](const std::vector<float>& v) { return std::vector<float>(v.begin(), v.begin() + n * V); };
    const diff c = compare(head(got), head(cpu), V, g_->near_tie_allowance);
    const diff h = compare(head(got), head(ref), V, g_->near_tie_allowance);
    const diff all = compare(got, ref, V, g_->near_tie_allowance);
    std::printf(
        "%s row %lld exact, first %lld positions: vs cpu max %.3g mean %.3g | vs golden max %.3g mean %.3g; "
        "all positions: vs golden max %.3g top1 %.4f\n",
        GetParam(), (long long)b, (long long)n, c.max_rel, c.mean_rel, h.max_rel, h.mean_rel, all.max_rel,
        all.top1);
    EXPECT_LE(c.max_rel, k_vs_cpu_exact) << "position " << c.worst;
    EXPECT_LE(h.max_rel, k_vs_golden_exact) << "position " << h.worst;
    EXPECT_GE(all.top1, k_min_top1);
    if (flip.pos >= 0) {
      EXPECT_LE(all.max_rel, k_after_flip) << "position " << all.worst;
    }
  }
}

TEST_P(gpu_exact, chunked_prefill_equals_cpu) {
  const std::vector<float> cpu = cpu_run(*g_, g_->input_ids[0], g_->seq);
  for (int64_t chunk : {1, 3, 128, 129}) {
    const diff d =
        compare(gpu_run(*gpu_, g_->input_ids[0], chunk, g_->seq), cpu, g_->vocab, g_->near_tie_allowance);
    std::printf("%s chunk %lld: vs cpu max %.3g\n", GetParam(), (long long)chunk, d.max_rel);
    EXPECT_LE(d.max_rel, k_vs_cpu_exact) << "chunk " << chunk << " position " << d.worst;
  }
}

TEST_P(gpu_exact, many_passes_equal_one) {
  // 61 tokens per device pass: every long prompt is split across passes inside one call.
  std::unique_ptr<gpu_engine> small = load_gpu(GetParam(), precision::exact, 61);
  ASSERT_TRUE(small);
  const std::vector<float> cpu = cpu_run(*g_, g_->input_ids[0], g_->seq);
  const diff d =
      compare(gpu_run(*small, g_->input_ids[0], g_->seq, g_->seq), cpu, g_->vocab, g_->near_tie_allowance);
  EXPECT_LE(d.max_rel, k_vs_cpu_exact) << "position " << d.worst;
}

// Every row prefilled to a different length in one mixed call, then decoded
// together token by token; the CPU engine gets the same calls.
TEST_P(gpu_exact, mixed_batches_and_decode_equal_cpu) {
  const int64_t n_rows = 3, n_decode = 40;
  std::vector<std::vector<int32_t>> ids(n_rows);
  for (int64_t r = 0; r < n_rows; ++r) ids[r] = g_->input_ids[r % g_->batch];
  std::vector<sequence_state> cs, gs;
  for (int64_t r = 0; r < n_rows; ++r) {
    cs.push_back(g_->eng->new_sequence());
    gs.push_back(gpu_->new_sequence());
  }
  const int64_t prefix[n_rows] = {5, 130, 67};
  auto both = [&](const std::vector<int64_t>& from, const std::vector<int64_t>& len, logits_request want) {
    std::vector<batch_item> cb, gb;
    for (int64_t r = 0; r < n_rows; ++r) {
      std::vector<int32_t> t(ids[r].begin() + from[r], ids[r].begin() + from[r] + len[r]);
      cb.push_back({&cs[r], t, want});
      gb.push_back({&gs[r], t, want});
    }
    std::vector<float> a, b;
    EXPECT_TRUE(g_->eng->forward(cb, &a).ok());
    const status st = gpu_->forward(gb, &b);
    EXPECT_TRUE(st.ok()) << st.to_string();
    return compare(b, a, g_->vocab);
  };
  diff d = both({0, 0, 0}, {prefix[0], prefix[1], prefix[2]}, logits_request::all);
  EXPECT_LE(d.max_rel, k_vs_cpu_exact) << "mixed prefill, row " << d.worst;
  double worst = 0;
  for (int64_t i = 0; i < n_decode; ++i) {
    d = both({prefix[0] + i, prefix[1] + i, prefix[2] + i}, {1, 1, 1}, logits_request::last);
    worst = std::max(worst, d.max_rel);
  }
  std::printf("%s decode x%lld: vs cpu max %.3g\n", GetParam(), (long long)n_decode, worst);
  EXPECT_LE(worst, k_vs_cpu_exact);
}

// tiny-c's 1100 tokens are two passes of the default 1024-token arena.
TEST_P(gpu_exact, indexer_picks_equal_cpu) {
  for (int64_t b = 0; b < g_->batch; ++b) expect_trace_equal_cpu(*g_, *gpu_, b, "1024-token passes");
}

TEST_P(gpu_exact, trace_over_many_passes_equals_cpu) {
  std::unique_ptr<gpu_engine> small = load_gpu(GetParam(), precision::exact, 61);
  ASSERT_TRUE(small);
  expect_trace_equal_cpu(*g_, *small, 0, "61-token passes");
}

INSTANTIATE_TEST_SUITE_P(tiny, gpu_exact, ::testing::Values("tiny-a", "tiny-b", "tiny-c"));

// fp8 vs the CPU fp8 mode, bounded by the CPU fp8 mode's own noise. The GPU
// applies the same QDQ rules, but its fp32 sums run in another order, and a
// value that lands on the other side of an e4m3 (or e2m1) rounding step moves
// by a whole step, which the random tiny nets amplify layer by layer. The CPU
// fp8 mode flips such steps against itself too under the other orders it
// already uses: batch-invariant 8-lane dots (engine_params::deterministic)
// and one-token chunks (OpenBLAS's single-row path, i.e. decode). The larger of
// the two differences from the default whole-prompt run, pooled over every
// golden row, is the noise floor; the GPU must stay within k_fp8_noise_factor
// of it (docs/precision.md has the rule and the measured numbers).
constexpr double k_fp8_noise_factor = 2;
// Top-1: allow the floor's top-1 loss times the factor, at least 1% of positions.
constexpr double k_fp8_min_top1_slack = 0.01;

struct fp8_case {
  const char* model;
  double golden_max, golden_mean, golden_top1;
};
constexpr fp8_case k_fp8[] = {{"tiny-a", 1.4, 0.65, 0.25}, {"tiny-b", 1.1, 0.40, 0.50}};
void PrintTo(const fp8_case& c, std::ostream* os) {
  *os << c.model;
}

// Every golden row through `run`, concatenated ([V, seq · batch]).
template <class Run>
std::vector<float> all_rows(const golden_set& g, Run&& run) {
  std::vector<float> out;
  for (int64_t b = 0; b < g.batch; ++b) {
    const std::vector<float> r = run(g.input_ids[b]);
    out.insert(out.end(), r.begin(), r.end());
  }
  return out;
}

// The envelope of two differences: the larger max and mean, the lower top-1.
diff envelope(const diff& a, const diff& b) {
  diff d;
  d.max_rel = std::max(a.max_rel, b.max_rel);
  d.mean_rel = std::max(a.mean_rel, b.mean_rel);
  d.top1 = std::min(a.top1, b.top1);
  return d;
}

void expect_within_noise(const diff& d, const diff& noise, const char* model, const char* what) {
  std::printf(
      "%s fp8 %s: max %.3g mean %.3g top1 %.4f | ratio to the cpu noise floor: max %.2f mean %.2f "
      "(bounds %.3g / %.3g / top1 %.4f)\n",
      model, what, d.max_rel, d.mean_rel, d.top1, d.max_rel / noise.max_rel, d.mean_rel / noise.mean_rel,
      k_fp8_noise_factor * noise.max_rel, k_fp8_noise_factor * noise.mean_rel,
      1.0 - std::max(k_fp8_noise_factor * (1.0 - noise.top1), k_fp8_min_top1_slack));
  EXPECT_LE(d.max_rel, k_fp8_noise_factor * noise.max_rel) << what << ", position " << d.worst;
  EXPECT_LE(d.mean_rel, k_fp8_noise_factor * noise.mean_rel) << what;
  EXPECT_GE(d.top1, 1.0 - std::max(k_fp8_noise_factor * (1.0 - noise.top1), k_fp8_min_top1_slack)) << what;
}

class gpu_fp8 : public ::testing::TestWithParam<fp8_case> {};

TEST_P(gpu_fp8, vs_cpu_fp8_and_goldens) {
  SKIP_WITHOUT_GPU();
  const fp8_case& c = GetParam();
  // The fp8 mode with fp32 activations on both sides (the bf16 activations are
  // checked against the official inference: gpu_engine_official_fp8_test.cpp).
  std::unique_ptr<golden_set> g = golden_load(c.model, precision::fp8, false, /*fp32_activations=*/true);
  std::unique_ptr<golden_set> g_det = golden_load(c.model, precision::fp8, /*deterministic=*/true, true);
  std::unique_ptr<gpu_engine> e = load_gpu(c.model, precision::fp8, 1024, 0, /*fp32_activations=*/true);
  ASSERT_TRUE(e);
  const std::vector<float> cpu = all_rows(*g, [&](const auto& ids) { return cpu_run(*g, ids, g->seq); });
  const std::vector<float> det =
      all_rows(*g_det, [&](const auto& ids) { return cpu_run(*g_det, ids, g->seq); });
  const std::vector<float> one = all_rows(*g, [&](const auto& ids) { return cpu_run(*g, ids, 1); });
  const diff by_det = compare(det, cpu, g->vocab), by_one = compare(one, cpu, g->vocab);
  const diff noise = envelope(by_det, by_one);
  std::printf(
      "%s fp8 cpu noise floor: deterministic vs default max %.3g mean %.3g top1 %.4f | chunks of 1 vs whole "
      "max %.3g mean %.3g top1 %.4f\n",
      c.model, by_det.max_rel, by_det.mean_rel, by_det.top1, by_one.max_rel, by_one.mean_rel, by_one.top1);
  // A floor near 0 would mean no flips on this machine's CPU: the rule would then say nothing.
  ASSERT_GT(noise.mean_rel, 1e-4) << "the CPU fp8 mode shows no summation-order flips on " << c.model;
  const std::vector<float> got =
      all_rows(*g, [&](const auto& ids) { return gpu_run(*e, ids, g->seq, g->seq); });
  expect_within_noise(compare(got, cpu, g->vocab), noise, c.model, "gpu vs cpu");
  // Chunked vs whole on the GPU: per-token quantization, but the sums depend on the GEMM shapes.
  const std::vector<float> chunked =
      all_rows(*g, [&](const auto& ids) { return gpu_run(*e, ids, 3, g->seq); });
  expect_within_noise(compare(chunked, got, g->vocab), noise, c.model, "gpu chunks of 3 vs whole");
  // The CPU fp8 mode's own golden bounds, per row.
  const std::vector<float> want = g->floats("logits");
  for (int64_t b = 0; b < g->batch; ++b) {
    const size_t n = size_t(g->seq * g->vocab);
    const std::vector<float> row(got.begin() + b * n, got.begin() + (b + 1) * n);
    const std::vector<float> ref(want.begin() + b * n, want.begin() + (b + 1) * n);
    const diff h = compare(row, ref, g->vocab);
    std::printf("%s row %lld fp8: vs golden max %.3g mean %.3g top1 %.4f\n", c.model, (long long)b, h.max_rel,
                h.mean_rel, h.top1);
    EXPECT_LE(h.max_rel, c.golden_max);
    EXPECT_LE(h.mean_rel, c.golden_mean);
    EXPECT_GE(h.top1, c.golden_top1);
  }
}

INSTANTIATE_TEST_SUITE_P(tiny, gpu_fp8, ::testing::ValuesIn(k_fp8), [](const auto& info) {
  std::string n = info.param.model;
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
});

// Host only: a call's trace is its passes' captures concatenated along T.
// The fast paths at Flash's width, where every one of them runs (the goldens'
// dims are not multiples of 128 and their head_dim is 64: they run CUDA cores,
// bitwise the CPU's fp8 sums, and fp32 KV rows): the tensor-core FP8 linears
// (dense from 2 rows, the grouped experts) and the FP8 KV entries read by A1.
// The same random weights with and without tensor cores (mma.sync alone, and
// with the 600-row prefill pass on cuBLASLt), and with fp32 KV rows and the
// gathered fp32 attention instead of FP8 entries; a 300-token prefill of two
// sequences, then 4 decode steps (graphs). The fp8 mode is chaotic (an fp32
// rounding apart moves an activation's FP8 rounding by 1/16, and that grows
// layer by layer: the CPU's own noise floor above reaches 0.09 mean), so the
// residual stream after the first layer is held tight and the logits loosely;
// a wrong tile, stride or scale is O(1) from the first layer on.
TEST(gpu_engine, fast_paths_agree_with_cuda_cores_at_flash_width) {
  SKIP_WITHOUT_GPU();
  const auto cfg =
      model_config_load_layers(std::string(HART_TEST_DATA) + "/../../configs/deepseek-v4-flash", 3, 1);
  ASSERT_TRUE(cfg.ok()) << cfg.get_status().to_string();
  struct result {
    std::vector<float> logits;
    std::vector<std::vector<float>> hidden;  // the prefill's residual streams
  };
  auto run = [&](bool tensor_cores, int64_t cublaslt_rows, bool kv_entries = true) {
    result r;
    auto w = gpu::bench_weights_make(*cfg, precision::fp8, 7);
    EXPECT_TRUE(w.ok()) << w.get_status().to_string();
    if (!w.ok()) return r;
    gpu_engine_params p;
    p.base.model_dir = "random weights";
    p.base.prec = precision::fp8;
    p.max_batch_tokens = 600;
    p.max_context = 1024;
    p.full_pages = 8;
    p.swa_pages = 8;
    p.fp8_tensor_cores = tensor_cores;
    p.fp8_cublaslt_rows = cublaslt_rows;
    p.fp8_kv_entries = kv_entries;
    auto e = gpu_engine::load(p, *cfg, std::move(*w));
    EXPECT_TRUE(e.ok()) << e.get_status().to_string();
    if (!e.ok()) return r;
    std::mt19937 rng(11);
    std::uniform_int_distribution<int32_t> tok(2, int32_t(cfg->vocab_size - 1));
    auto tokens = [&](int64_t n) {
      std::vector<int32_t> ids(static_cast<size_t>(n));
      for (int32_t& v : ids) v = tok(rng);
      return ids;
    };
    sequence_state a = (*e)->new_sequence(), b = (*e)->new_sequence();
    std::vector<float> part;
    for (int64_t step = 0; step < 5; ++step) {
      const int64_t n = step == 0 ? 300 : 1;
      std::vector<batch_item> items;
      items.push_back({&a, tokens(n), logits_request::last});
      items.push_back({&b, tokens(n), logits_request::last});
      forward_trace tr;
      tr.capture_hidden = step == 0;
      const status st = (*e)->forward(items, &part, step == 0 ? &tr : nullptr);
      EXPECT_TRUE(st.ok()) << st.to_string();
      r.logits.insert(r.logits.end(), part.begin(), part.end());
      if (step == 0) r.hidden = std::move(tr.hidden);
    }
    return r;
  };
  const result cuda_cores = run(false, 0);
  ASSERT_EQ(cuda_cores.logits.size(), size_t(10 * cfg->vocab_size));
  ASSERT_GE(cuda_cores.hidden.size(), 2u);
  auto expect_agree = [&](const result& tensor_cores, const char* what, double first_layer_tol) {
    ASSERT_EQ(tensor_cores.hidden.size(), cuda_cores.hidden.size());
    std::printf("flash width, %s vs CUDA cores, residual after each layer:", what);
    for (size_t l = 1; l < cuda_cores.hidden.size(); ++l) {
      const std::vector<float>& x = tensor_cores.hidden[l];
      const std::vector<float>& y = cuda_cores.hidden[l];
      ASSERT_EQ(x.size(), y.size());
      std::printf(" %.3g", rel_error(x.data(), y.data(), int64_t(y.size())));
    }
    const diff d = compare(tensor_cores.logits, cuda_cores.logits, cfg->vocab_size);
    std::printf("; logits max rel %.3g mean rel %.3g top1 %.2f\n", d.max_rel, d.mean_rel, d.top1);
    EXPECT_LT(rel_error(tensor_cores.hidden[1].data(), cuda_cores.hidden[1].data(),
                        int64_t(cuda_cores.hidden[1].size())),
              first_layer_tol);
    EXPECT_LT(d.mean_rel, 0.25);
    // Random-weight logits are near ties, so fp8's chaos flips some argmaxes (top-1
    // agreement 0.7-0.9 over these 10 rows, the pick ranked up to ~10th); a wrong
    // tile would pick a random token of 129280. So: the token tensor cores pick
    // ranks in the CUDA cores' top 0.1% of the vocabulary.
    const int64_t V = cfg->vocab_size;
    std::printf("rank of the %s pick among the CUDA cores' logits:", what);
    for (int64_t r = 0; r < 10; ++r) {
      const float* tc = tensor_cores.logits.data() + r * V;
      const float* cc = cuda_cores.logits.data() + r * V;
      const float picked = cc[std::max_element(tc, tc + V) - tc];
      const int64_t rank = std::count_if(cc, cc + V, [&](float v) { return v > picked; });
      std::printf(" %lld", (long long)rank);
      EXPECT_LT(rank, V / 1000) << what << ", row " << r;
    }
    std::printf("\n");
  };
  {
    SCOPED_TRACE("mma.sync at every row count");
    expect_agree(run(true, 0), "mma.sync", 2e-2);  // measured 0.0031
  }
  {
    // cuBLASLt's FP8 MMA sums keep ~2^-12 of Σ|x'w'| (mma.sync's fp32 blocks
    // ~2^-23), so more of the next QDQ's roundings flip: measured 0.029.
    SCOPED_TRACE("the 600-row prefill through cuBLASLt");
    expect_agree(run(true, 512), "cuBLASLt prefill", 5e-2);
  }
  {
    // The engine's FP8 KV differs from fp32 rows by the RoPE dims' bf16
    // rounding, A1's bf16 queries (2^-9 relative) and its summation order;
    // the next QDQs amplify that like the cuBLASLt sums above.
    SCOPED_TRACE("fp32 KV rows and the gathered attention");
    expect_agree(run(false, 0, false), "fp32 KV rows", 0.1);
  }
}

// --deterministic on the device: a token's logits are the same bits however
// it is chunked or batched (row-invariant linears: the CUDA-core FP8 dot, the
// bf16 and fp32 GEMVs at every row count). Golden row 0 whole, in chunks of 3
// and of 1, then its first half alone and batched with a longer row in one
// mixed prefill, then 8 decode steps alone and batched; every logit compared
// bitwise.
TEST(gpu_engine, deterministic_logits_do_not_depend_on_chunks_or_batch) {
  SKIP_WITHOUT_GPU();
  for (const char* model : {"tiny-a", "tiny-b"}) {
    for (const precision prec : {precision::exact, precision::fp8}) {
      SCOPED_TRACE(std::string(model) + (prec == precision::fp8 ? " fp8" : " exact"));
      gpu_engine_params p;
      p.base.model_dir = std::string(HART_TEST_DATA) + "/" + model;
      p.base.prec = prec;
      p.base.deterministic = true;
      p.max_context = 4096;
      auto e = gpu_engine::load(p);
      ASSERT_TRUE(e.ok()) << e.get_status().to_string();
      std::unique_ptr<golden_set> g = golden_load(model);
      const std::vector<int32_t>& ids = g->input_ids[0];
      std::vector<int32_t> other(ids.rbegin(),
                                 ids.rend());  // a second, longer row: the prompt reversed twice
      other.insert(other.end(), ids.begin(), ids.end());
      const int64_t V = g->vocab;
      const std::vector<float> whole = gpu_run(**e, ids, int64_t(ids.size()), 0);
      ASSERT_EQ(whole.size(), ids.size() * size_t(V));
      EXPECT_EQ(gpu_run(**e, ids, 3, 0), whole) << "chunks of 3";
      EXPECT_EQ(gpu_run(**e, ids, 1, 0), whole) << "chunks of 1";
      // Batched: row 0's first half alone vs in one pass with all of row 1.
      const size_t half = ids.size() / 2;
      const std::vector<int32_t> head(ids.begin(), ids.begin() + half);
      sequence_state alone = (*e)->new_sequence(), mixed = (*e)->new_sequence(), peer = (*e)->new_sequence();
      std::vector<float> a, m;
      ASSERT_TRUE((*e)->forward({{&alone, head, logits_request::all}}, &a).ok());
      std::vector<batch_item> items;
      items.push_back({&peer, other, logits_request::all});
      items.push_back({&mixed, head, logits_request::all});
      ASSERT_TRUE((*e)->forward(items, &m).ok());
      ASSERT_EQ(m.size(), (other.size() + half) * size_t(V));
      EXPECT_TRUE(std::equal(a.begin(), a.end(), m.begin() + other.size() * V))
          << "prefill batched with another row";
      for (size_t i = half; i < half + 8 && i < ids.size(); ++i) {
        const std::vector<int32_t> t = {ids[i]};
        ASSERT_TRUE((*e)->forward({{&alone, t, logits_request::last}}, &a).ok());
        std::vector<batch_item> step;
        step.push_back({&mixed, t, logits_request::last});
        step.push_back({&peer, {int32_t(7 + i)}, logits_request::last});
        ASSERT_TRUE((*e)->forward(step, &m).ok());
        EXPECT_TRUE(std::equal(a.begin(), a.end(), m.begin()))
            << "decode step " << i << " batched with another row";
      }
    }
  }
}

// Decode passes three ways (gpu_engine_params::decode_launch): CUDA graphs
// replayed, the same device-built metadata launched eagerly, and the host's
// metadata. Three sequences of 3, 45 and 240 prompt tokens decode 48 steps
// (past three HCA entries of tiny-a at rate 16 and its window of 32; the
// longest crosses its first 256-token page, and with it the context bucket
// 256 → 320) in batches of 3 and 2, so several graphs are captured and replayed.
// graphs == eager bitwise (the same kernels); exact: host metadata within the
// vs-CPU bound (only the HCA index lists' length differs, padded with −1).
TEST(gpu_engine, decode_graphs_replay_equal_eager_and_host_metadata) {
  SKIP_WITHOUT_GPU();
  using launch = gpu_engine_params::decode_launch;
  for (const precision prec : {precision::exact, precision::fp8}) {
    SCOPED_TRACE(prec == precision::fp8 ? "fp8" : "exact");
    std::vector<std::unique_ptr<gpu_engine>> engines;
    for (const launch l : {launch::graphs, launch::eager, launch::host_metadata}) {
      gpu_engine_params p;
      p.base.model_dir = std::string(HART_TEST_DATA) + "/tiny-a";
      p.base.prec = prec;
      p.max_context = 4096;
      p.decode = l;
      auto e = gpu_engine::load(p);
      ASSERT_TRUE(e.ok()) << e.get_status().to_string();
      engines.push_back(std::move(*e));
    }
    const int64_t V = engines[0]->config().vocab_size, n_steps = 48;
    std::vector<std::vector<sequence_state>> seqs(engines.size());
    const int64_t prompt_len[3] = {3, 45, 240};
    std::vector<std::vector<float>> out(engines.size());
    for (size_t k = 0; k < engines.size(); ++k) {
      std::vector<batch_item> items;
      for (int64_t r = 0; r < 3; ++r) seqs[k].push_back(engines[k]->new_sequence());
      for (int64_t r = 0; r < 3; ++r) {
        std::vector<int32_t> t(size_t(prompt_len[r]));
        for (size_t i = 0; i < t.size(); ++i) t[i] = int32_t((i * 31 + r * 7 + 3) % V);
        items.push_back({&seqs[k][r], t, logits_request::last});
      }
      ASSERT_TRUE(engines[k]->forward(items, &out[k]).ok());
    }
    double worst_host = 0;
    for (int64_t i = 0; i < n_steps; ++i) {
      // Steps alternate between all three rows and the first two (other graphs, other buckets).
      const int64_t rows = i % 3 == 2 ? 2 : 3;
      for (size_t k = 0; k < engines.size(); ++k) {
        std::vector<batch_item> items;
        for (int64_t r = 0; r < rows; ++r)
          items.push_back({&seqs[k][r], {int32_t((i * 13 + r) % V)}, logits_request::last});
        const status st = engines[k]->forward(items, &out[k]);
        ASSERT_TRUE(st.ok()) << st.to_string();
      }
      ASSERT_EQ(out[0].size(), size_t(rows * V));
      ASSERT_TRUE(out[0] == out[1]) << "graph replay differs from eager at step " << i;
      worst_host = std::max(worst_host, compare(out[0], out[2], V).max_rel);
    }
    std::printf("decode graphs: %zu captured, %llu replays; vs host metadata max rel %.3g\n",
                engines[0]->decode_graphs(), (unsigned long long)engines[0]->decode_graph_replays(),
                worst_host);
    EXPECT_GE(engines[0]->decode_graphs(), 3u) << "(3 rows, 256), (2 rows, 256), (3 rows, 320) at least";
    EXPECT_GT(engines[0]->decode_graph_replays(), uint64_t(n_steps / 2));
    EXPECT_EQ(engines[1]->decode_graphs(), 0u);
    EXPECT_EQ(engines[2]->decode_graphs(), 0u);
    if (prec == precision::exact) {
      EXPECT_LE(worst_host, k_vs_cpu_exact);
    }
  }
}

TEST(gpu_engine, trace_append_concatenates_passes) {
  forward_trace whole, a, b;
  whole.capture_hidden = true;
  whole.topk[2] = {9, 9};  // a previous call's capture: replaced, not extended
  gpu::trace_reset(&whole);
  a.hidden = {{1, 2}, {3, 4}};
  b.hidden = {{5}, {6}};
  a.final_hidden = {7};
  b.final_hidden = {8};
  a.topk[1] = {0, -1, 1, 0};  // k = 2, T = 2
  b.topk[1] = {2, 1};
  a.experts[0] = {3, 4};
  b.experts[0] = {5};
  gpu::trace_append(&whole, std::move(a));
  gpu::trace_append(&whole, std::move(b));
  EXPECT_EQ(whole.hidden, (std::vector<std::vector<float>>{{1, 2, 5}, {3, 4, 6}}));
  EXPECT_EQ(whole.final_hidden, (std::vector<float>{7, 8}));
  EXPECT_EQ(whole.topk.size(), 1u);
  EXPECT_EQ(whole.topk[1], (std::vector<int32_t>{0, -1, 1, 0, 2, 1}));
  EXPECT_EQ(whole.experts[0], (std::vector<int32_t>{3, 4, 5}));
}

TEST(gpu_engine, load_without_device_is_a_clear_error) {
  if (gpu_device_available()) GTEST_SKIP() << "a CUDA device exists";
  gpu_engine_params p;
  p.base.model_dir = std::string(HART_TEST_DATA) + "/tiny-a";
  auto e = gpu_engine::load(p);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.get_status().to_string().find("no CUDA device"), std::string::npos)
      << e.get_status().to_string();
}

TEST(gpu_engine, bad_input_is_an_error_that_changes_nothing) {
  SKIP_WITHOUT_GPU();
  std::unique_ptr<gpu_engine> e = load_gpu("tiny-a", precision::exact, 64, /*full_pages=*/2);
  ASSERT_TRUE(e);
  sequence_state s = e->new_sequence();
  std::vector<float> out;
  EXPECT_FALSE(e->forward({}, &out).ok());
  EXPECT_EQ(e->forward({{&s, {}, logits_request::last}}, &out).code(), status_code::invalid_argument);
  EXPECT_EQ(e->forward({{&s, {512}, logits_request::last}}, &out).code(), status_code::out_of_range);
  sequence_state foreign;
  EXPECT_EQ(e->forward({{&foreign, {1}, logits_request::last}}, &out).code(), status_code::invalid_argument);
  // 2 full pages of 256 positions: a third page is resource_exhausted, and the sequence is untouched.
  std::vector<int32_t> long_prompt(600, 7);
  EXPECT_EQ(e->forward({{&s, long_prompt, logits_request::last}}, &out).code(),
            status_code::resource_exhausted);
  EXPECT_EQ(s.n_tokens, 0);
  EXPECT_TRUE(s.pages->full.empty());
  ASSERT_TRUE(e->forward({{&s, {1, 2, 3}, logits_request::all}}, &out).ok());
  EXPECT_EQ(out.size(), size_t(3 * e->config().vocab_size));
  EXPECT_EQ(s.n_tokens, 3);
  EXPECT_TRUE(e->forward({{&s, {4}, logits_request::none}}, &out).ok());
  EXPECT_TRUE(out.empty());
}

}  // namespace
}  // namespace hart::testing
