// The GPU engine against the CPU engine (same precision) and the Hugging Face
// goldens: whole prompts, chunked prefill, token-by-token decode, mixed
// batches, multi-pass calls, indexer picks, bad input. Skips without a device.
//
// Tolerances. exact: per-position relative error vs the CPU ≤ 2e-5 (fp32 with
// other summation orders; measured ~1e-6), vs the goldens ≤ 1e-4 and top-1
// agreement ≥ 99% (the issue asks ≤ 2e-2 for bf16). fp8: the same QDQ rules as
// the CPU fp8 mode, but an fp32 rounding difference can move a value across a
// QDQ step, and the random tiny models amplify that layer by layer: bounds
// below are per model, measured values are printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "runtime/gpu/gpu_engine.h"
#include "tests/golden/golden_fixture.h"

namespace hart::testing {
namespace {

constexpr double k_vs_cpu_exact = 2e-5;
constexpr double k_vs_golden_exact = 1e-4;
constexpr double k_min_top1 = 0.99;

#define SKIP_WITHOUT_GPU() \
  if (!gpu_device_available()) GTEST_SKIP() << "no CUDA device: GPU engine not checked on this machine"

std::unique_ptr<gpu_engine> load_gpu(const std::string& name, precision prec, int64_t max_batch_tokens = 1024,
                                     int64_t full_pages = 0) {
  gpu_engine_params p;
  p.base.model_dir = std::string(HART_TEST_DATA) + "/" + name;
  p.base.prec = prec;
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
std::vector<float> gpu_run(const gpu_engine& e, const std::vector<int32_t>& ids, int64_t chunk, int64_t ref_len) {
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
  for (int64_t b = 0; b < g_->batch; ++b) {
    const std::vector<float> got = gpu_run(*gpu_, g_->input_ids[b], g_->seq, g_->seq);
    const std::vector<float> cpu = cpu_run(*g_, g_->input_ids[b], g_->seq);
    const diff c = compare(got, cpu, g_->vocab, g_->near_tie_allowance);
    const std::vector<float> ref(want.begin() + b * g_->seq * g_->vocab, want.begin() + (b + 1) * g_->seq * g_->vocab);
    const diff h = compare(got, ref, g_->vocab, g_->near_tie_allowance);
    std::printf("%s row %lld exact: vs cpu max %.3g mean %.3g | vs golden max %.3g mean %.3g top1 %.4f\n", GetParam(),
                (long long)b, c.max_rel, c.mean_rel, h.max_rel, h.mean_rel, h.top1);
    EXPECT_LE(c.max_rel, k_vs_cpu_exact) << "position " << c.worst;
    EXPECT_LE(h.max_rel, k_vs_golden_exact) << "position " << h.worst;
    EXPECT_GE(h.top1, k_min_top1);
  }
}

TEST_P(gpu_exact, chunked_prefill_equals_cpu) {
  const std::vector<float> cpu = cpu_run(*g_, g_->input_ids[0], g_->seq);
  for (int64_t chunk : {1, 3, 128, 129}) {
    const diff d = compare(gpu_run(*gpu_, g_->input_ids[0], chunk, g_->seq), cpu, g_->vocab, g_->near_tie_allowance);
    std::printf("%s chunk %lld: vs cpu max %.3g\n", GetParam(), (long long)chunk, d.max_rel);
    EXPECT_LE(d.max_rel, k_vs_cpu_exact) << "chunk " << chunk << " position " << d.worst;
  }
}

TEST_P(gpu_exact, many_passes_equal_one) {
  // 61 tokens per device pass: every long prompt is split across passes inside one call.
  std::unique_ptr<gpu_engine> small = load_gpu(GetParam(), precision::exact, 61);
  ASSERT_TRUE(small);
  const std::vector<float> cpu = cpu_run(*g_, g_->input_ids[0], g_->seq);
  const diff d = compare(gpu_run(*small, g_->input_ids[0], g_->seq, g_->seq), cpu, g_->vocab, g_->near_tie_allowance);
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

TEST_P(gpu_exact, indexer_picks_equal_cpu) {
  const std::vector<int32_t>& ids = g_->input_ids[0];
  sequence_state cs = g_->reference_sequence(), gs = gpu_->new_sequence();
  gs.tie_reference_length = g_->seq;
  forward_trace ct, gt;
  ASSERT_TRUE(g_->eng->prefill(cs, ids, logits_request::none, nullptr, &ct).ok());
  ASSERT_TRUE(gpu_->forward({{&gs, ids, logits_request::none}}, nullptr, &gt).ok());
  const int64_t k = g_->eng->config().index_topk;
  ASSERT_EQ(ct.topk.size(), gt.topk.size());
  for (const auto& [il, want] : ct.topk) {
    const std::vector<int32_t>& got = gt.topk[il];
    ASSERT_EQ(got.size(), want.size());
    int64_t differ = 0;
    for (size_t t = 0; t * k < want.size(); ++t) {
      const std::set<int32_t> a(want.begin() + t * k, want.begin() + (t + 1) * k);
      const std::set<int32_t> b(got.begin() + t * k, got.begin() + (t + 1) * k);
      differ += a != b;
    }
    // Near-ties (tiny-c: a 1e-5 relative score gap) may flip with fp32 order.
    EXPECT_LE(differ, g_->near_tie_allowance) << "layer " << il;
  }
  for (const auto& [il, want] : ct.experts) EXPECT_EQ(gt.experts[il], want) << "routed experts, layer " << il;
}

INSTANTIATE_TEST_SUITE_P(tiny, gpu_exact, ::testing::Values("tiny-a", "tiny-b", "tiny-c"));

// fp8: vs the CPU fp8 mode (bounds per model, measured values printed) and vs
// the goldens with the CPU fp8 mode's own bounds (docs/precision.md).
struct fp8_case {
  const char* model;
  double vs_cpu_max, vs_cpu_mean, vs_cpu_top1;
  double golden_max, golden_mean, golden_top1;
};
constexpr fp8_case k_fp8[] = {{"tiny-a", 5e-2, 1e-3, 0.99, 1.4, 0.65, 0.25},
                              {"tiny-b", 5e-2, 1e-3, 0.99, 1.1, 0.40, 0.50}};
void PrintTo(const fp8_case& c, std::ostream* os) { *os << c.model; }

class gpu_fp8 : public ::testing::TestWithParam<fp8_case> {};

TEST_P(gpu_fp8, vs_cpu_fp8_and_goldens) {
  SKIP_WITHOUT_GPU();
  const fp8_case& c = GetParam();
  std::unique_ptr<golden_set> g = golden_load(c.model, precision::fp8);
  std::unique_ptr<gpu_engine> e = load_gpu(c.model, precision::fp8);
  ASSERT_TRUE(e);
  const std::vector<float> want = g->floats("logits");
  for (int64_t b = 0; b < g->batch; ++b) {
    const std::vector<float> got = gpu_run(*e, g->input_ids[b], g->seq, g->seq);
    const diff d = compare(got, cpu_run(*g, g->input_ids[b], g->seq), g->vocab);
    const std::vector<float> ref(want.begin() + b * g->seq * g->vocab, want.begin() + (b + 1) * g->seq * g->vocab);
    const diff h = compare(got, ref, g->vocab);
    std::printf("%s row %lld fp8: vs cpu fp8 max %.3g mean %.3g top1 %.4f | vs golden max %.3g mean %.3g top1 %.4f\n",
                c.model, (long long)b, d.max_rel, d.mean_rel, d.top1, h.max_rel, h.mean_rel, h.top1);
    EXPECT_LE(d.max_rel, c.vs_cpu_max);
    EXPECT_LE(d.mean_rel, c.vs_cpu_mean);
    EXPECT_GE(d.top1, c.vs_cpu_top1);
    EXPECT_LE(h.max_rel, c.golden_max);
    EXPECT_LE(h.mean_rel, c.golden_mean);
    EXPECT_GE(h.top1, c.golden_top1);
  }
  // Chunked vs whole: per-token quantization, but cuBLAS sums (unquantized linears) depend on the row count.
  const diff ch = compare(gpu_run(*e, g->input_ids[0], 3, g->seq), gpu_run(*e, g->input_ids[0], g->seq, g->seq), g->vocab);
  EXPECT_LE(ch.max_rel, c.vs_cpu_max) << "chunked vs whole";
}

INSTANTIATE_TEST_SUITE_P(tiny, gpu_fp8, ::testing::ValuesIn(k_fp8), [](const auto& info) {
  std::string n = info.param.model;
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
});

TEST(gpu_engine, load_without_device_is_a_clear_error) {
  if (gpu_device_available()) GTEST_SKIP() << "a CUDA device exists";
  gpu_engine_params p;
  p.base.model_dir = std::string(HART_TEST_DATA) + "/tiny-a";
  auto e = gpu_engine::load(p);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.get_status().to_string().find("no CUDA device"), std::string::npos) << e.get_status().to_string();
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
  EXPECT_EQ(e->forward({{&s, long_prompt, logits_request::last}}, &out).code(), status_code::resource_exhausted);
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
