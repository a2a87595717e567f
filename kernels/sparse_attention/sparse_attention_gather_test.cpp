// The gathered (index-list) form of sparse attention: sparse_attention_gather_cpu
// against per-query sparse_attention_cpu on the compacted row lists and its
// argument checks; under HART_CUDA, sparse_attention_cuda against
// sparse_attention_gather_cpu on random index sets with -1 holes, all-empty
// rows, repeated rows and out-of-pool strides, outputs poisoned with NaN and
// guarded by sentinels. The bf16 mode (the official numerics): the CPU form is
// the pointer form over every slot (-1 a null row), and the CUDA path against it.
//
// CUDA tolerance: |gpu - cpu| <= 2·tol with tol = (1e-5 + 2·l_err)·Σ_j p_j|kv_j[d]|
// + 1e-35, the bound sparse_attention_test.cpp holds the CPU op to against a
// double reference (l_err: fp32 dot-product error of the logits, which moves
// each softmax weight relatively by up to twice that); both sides are within
// tol of the exact value, so within 2·tol of each other.
#include "kernels/sparse_attention/sparse_attention.h"
#include "kernels/testing/op_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#ifdef HART_CUDA
#include "kernels/testing/cuda_test_util.h"
#endif

namespace hart {
namespace {

using testing::all_close;
using testing::k_nan;
using testing::k_sentinel;
using testing::normal_vec;
using testing::seed_trace;
using testing::test_seed;

struct problem {
  int64_t n_queries = 0, n_heads = 0, head_dim = 0, n_idx = 0, n_entries = 0, kv_stride = 0;
  std::vector<float> q, kv, sink;  // kv: n_entries rows of kv_stride (gaps hold k_sentinel)
  std::vector<int32_t> idx;
  float scale = 1.0f;
};

// Random index lists: ~25% holes (-1), every third query all empty when `empty_rows`, repeats allowed.
problem random_problem(std::mt19937& rng, int64_t n_queries, int64_t n_heads, int64_t head_dim, int64_t n_idx,
                       bool empty_rows, float q_sigma) {
  problem pr;
  pr.n_queries = n_queries;
  pr.n_heads = n_heads;
  pr.head_dim = head_dim;
  pr.n_idx = n_idx;
  pr.n_entries = std::max<int64_t>(1, n_idx + 5);
  pr.kv_stride = head_dim + 3;
  pr.q = normal_vec(rng, n_queries * n_heads * head_dim, q_sigma);
  pr.sink = normal_vec(rng, n_heads, 1.0f);
  pr.kv.assign(pr.n_entries * pr.kv_stride, k_sentinel);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t e = 0; e < pr.n_entries; ++e) {
    for (int64_t d = 0; d < head_dim; ++d) pr.kv[e * pr.kv_stride + d] = nd(rng);
  }
  std::uniform_int_distribution<int32_t> pick(0, int32_t(pr.n_entries - 1));
  std::bernoulli_distribution hole(0.25);
  pr.idx.resize(n_queries * n_idx);
  for (int64_t t = 0; t < n_queries; ++t) {
    for (int64_t j = 0; j < n_idx; ++j)
      pr.idx[t * n_idx + j] = (empty_rows && t % 3 == 1) || hole(rng) ? -1 : pick(rng);
  }
  pr.scale = 1.0f / std::sqrt(float(head_dim));
  return pr;
}

sparse_attention_gather_params params_of(const problem& pr, const float* q, const float* kv,
                                         const int32_t* idx, const float* sink, float* out) {
  return {q,          kv,          idx,      sink,         out,          pr.n_queries,
          pr.n_heads, pr.head_dim, pr.n_idx, pr.n_entries, pr.kv_stride, pr.scale};
}

std::vector<float> run_cpu(const problem& pr) {
  std::vector<float> out(pr.n_queries * pr.n_heads * pr.head_dim, k_nan);
  const status st = sparse_attention_gather_cpu(
      params_of(pr, pr.q.data(), pr.kv.data(), pr.idx.data(), pr.sink.data(), out.data()));
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

// -- CPU: the gathered form is the pointer form on the compacted lists -------------

TEST(sparse_attention_gather, cpu_equals_pointer_form_and_skips_holes) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const problem pr = random_problem(rng, 7, 3, 19, 23, true, 1.5f);
  const auto got = run_cpu(pr);
  for (int64_t t = 0; t < pr.n_queries; ++t) {
    std::vector<const float*> rows;
    for (int64_t j = 0; j < pr.n_idx; ++j) {
      if (pr.idx[t * pr.n_idx + j] >= 0)
        rows.push_back(pr.kv.data() + pr.idx[t * pr.n_idx + j] * pr.kv_stride);
    }
    std::vector<float> want(pr.n_heads * pr.head_dim);
    const int64_t qo = t * pr.n_heads * pr.head_dim;
    ASSERT_TRUE(sparse_attention_cpu({pr.q.data() + qo, rows.data(), pr.sink.data(), want.data(), pr.n_heads,
                                      pr.head_dim, int64_t(rows.size()), pr.scale})
                    .ok());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[qo + i], want[i]) << "t=" << t << " i=" << i;
    if (t % 3 == 1) {  // all empty: only the sink, whose value is 0
      for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[qo + i], 0.0f);
    }
  }
}

// bf16: every slot keeps its place (a -1 is a null row of the official layout).
TEST(sparse_attention_gather, cpu_bf16_keeps_masked_slots) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const problem pr = random_problem(rng, 7, 3, 19, 150, true, 1.5f);
  auto p = params_of(pr, pr.q.data(), pr.kv.data(), pr.idx.data(), pr.sink.data(), nullptr);
  std::vector<float> got(pr.n_queries * pr.n_heads * pr.head_dim, k_nan);
  p.out = got.data();
  p.bf16 = true;
  ASSERT_TRUE(sparse_attention_gather_cpu(p).ok());
  for (int64_t t = 0; t < pr.n_queries; ++t) {
    std::vector<const float*> slots;
    for (int64_t j = 0; j < pr.n_idx; ++j) {
      const int32_t e = pr.idx[t * pr.n_idx + j];
      slots.push_back(e >= 0 ? pr.kv.data() + e * pr.kv_stride : nullptr);
    }
    std::vector<float> want(pr.n_heads * pr.head_dim);
    const int64_t qo = t * pr.n_heads * pr.head_dim;
    ASSERT_TRUE(sparse_attention_cpu({pr.q.data() + qo, slots.data(), pr.sink.data(), want.data(), pr.n_heads,
                                      pr.head_dim, int64_t(slots.size()), pr.scale, true})
                    .ok());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[qo + i], want[i]) << "t=" << t << " i=" << i;
  }
}

TEST(sparse_attention_gather, cpu_rejects_bad_arguments) {
  std::mt19937 rng(1);
  problem pr = random_problem(rng, 2, 2, 4, 3, false, 1.0f);
  std::vector<float> out(2 * 2 * 4);
  auto p = params_of(pr, pr.q.data(), pr.kv.data(), pr.idx.data(), pr.sink.data(), out.data());
  EXPECT_TRUE(sparse_attention_gather_cpu(p).ok());
  auto bad_idx = pr.idx;
  bad_idx[4] = int32_t(pr.n_entries);
  p.idx = bad_idx.data();
  EXPECT_EQ(sparse_attention_gather_cpu(p).code(), status_code::out_of_range);
  bad_idx[4] = -2;
  EXPECT_EQ(sparse_attention_gather_cpu(p).code(), status_code::out_of_range);
  p.idx = pr.idx.data();
  p.kv_stride = 2;
  EXPECT_EQ(sparse_attention_gather_cpu(p).code(), status_code::invalid_argument);
  p.kv_stride = 0;
  p.head_dim = 0;
  EXPECT_EQ(sparse_attention_gather_cpu(p).code(), status_code::invalid_argument);
}

// -- CUDA parity ---------------------------------------------------------------------

#ifdef HART_CUDA

using testing::cuda_synced;
using testing::device_vec;

// Per output element: Σ_j p_j|kv_j[d]| under the exact softmax, and in l_err_of
// the fp32 error bound of its (query, head)'s logits.
std::vector<double> weighted_magnitude(const problem& pr, std::vector<double>& l_err_of) {
  const int64_t D = pr.head_dim;
  std::vector<double> tol(pr.n_queries * pr.n_heads * D, 0.0);
  l_err_of.assign(tol.size(), 0.0);
  for (int64_t t = 0; t < pr.n_queries; ++t) {
    for (int64_t h = 0; h < pr.n_heads; ++h) {
      const float* q = pr.q.data() + (t * pr.n_heads + h) * D;
      std::vector<const float*> rows;
      for (int64_t j = 0; j < pr.n_idx; ++j) {
        if (pr.idx[t * pr.n_idx + j] >= 0)
          rows.push_back(pr.kv.data() + pr.idx[t * pr.n_idx + j] * pr.kv_stride);
      }
      std::vector<double> l(rows.size());
      double mx = pr.sink[h], l_err = 0;
      for (size_t j = 0; j < rows.size(); ++j) {
        double dot = 0, mag = 0;
        for (int64_t d = 0; d < D; ++d) {
          dot += double(q[d]) * rows[j][d];
          mag += std::fabs(double(q[d]) * rows[j][d]);
        }
        l[j] = dot * pr.scale;
        l_err = std::max(l_err, double(D + 2) * std::ldexp(1.0, -24) * mag * pr.scale);
        mx = std::max(mx, l[j]);
      }
      double z = std::exp(double(pr.sink[h]) - mx);
      for (double v : l) z += std::exp(v - mx);
      double* o = tol.data() + (t * pr.n_heads + h) * D;
      for (size_t j = 0; j < rows.size(); ++j) {
        const double p = std::exp(l[j] - mx) / z;
        for (int64_t d = 0; d < D; ++d) o[d] += p * std::fabs(rows[j][d]);
      }
      std::fill_n(l_err_of.data() + (t * pr.n_heads + h) * D, D, l_err);
    }
  }
  return tol;
}

// Per output element: 2 · the CPU test's bound (see the file comment).
std::vector<double> tolerance(const problem& pr) {
  std::vector<double> l_err;
  std::vector<double> tol = weighted_magnitude(pr, l_err);
  for (size_t i = 0; i < tol.size(); ++i) tol[i] = 2 * (tol[i] * (1e-5 + 2 * l_err[i]) + 1e-35);
  return tol;
}

constexpr int64_t k_guard = 8;

// Workspace bytes for a run: none (one slice per query), the full bound (as
// many slices as the kernel wants), or too few for that (fewer slices).
enum class slicing { none, full, short_workspace };

void check_cuda(const problem& pr, slicing sl) {
  const int64_t n_out = pr.n_queries * pr.n_heads * pr.head_dim;
  device_vec<float> d_q(pr.q), d_kv(pr.kv), d_sink(pr.sink);
  device_vec<int32_t> d_idx(pr.idx.empty() ? std::vector<int32_t>{0} : pr.idx);
  std::vector<float> poison(n_out + 2 * k_guard, k_sentinel);
  std::fill(poison.begin() + k_guard, poison.end() - k_guard, k_nan);
  device_vec<float> d_out(poison);
  auto p = params_of(pr, d_q.get(), d_kv.get(), d_idx.get(), d_sink.get(), d_out.get() + k_guard);
  size_t ws_bytes = sl == slicing::none ? 0 : sparse_attention_cuda_workspace_bytes(pr.n_heads, pr.head_dim);
  if (sl == slicing::short_workspace) ws_bytes = size_t(3 * n_out) * sizeof(float);  // ~2 slices
  device_vec<float> ws(std::vector<float>(std::max<size_t>(ws_bytes / sizeof(float), 1), k_nan));
  if (sl != slicing::none) {
    p.workspace = ws.get();
    p.workspace_bytes = ws_bytes;
  }
  const status st = sparse_attention_cuda(p, nullptr);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_TRUE(cuda_synced(nullptr));
  const auto all = d_out.to_host();
  EXPECT_TRUE(testing::guards_intact(all, k_guard));
  const auto got = testing::unguarded(all, k_guard);
  const auto cpu = run_cpu(pr);
  EXPECT_TRUE(all_close(got.data(), got.size(), std::vector<double>(cpu.begin(), cpu.end()), tolerance(pr),
                        1.0, 0.0));
}

void check_cuda(const problem& pr) {
  for (slicing sl : {slicing::none, slicing::full, slicing::short_workspace}) {
    SCOPED_TRACE("slicing " + std::to_string(int(sl)));
    check_cuda(pr, sl);
  }
}

TEST(sparse_attention_cuda, matches_cpu_on_random_index_sets) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (int64_t n_queries : {1, 5}) {
    for (int64_t n_heads : {1, 3, 16, 12}) {            // head groups of 1, 1, 8 and 4
      for (int64_t head_dim : {1, 19, 64, 512, 600}) {  // 600: a second 512-channel pass
        for (int64_t n_idx : {0, 1, 7, 128, 640}) {     // 640: 20 slices of one tile at one query
          SCOPED_TRACE("n_queries=" + std::to_string(n_queries) + " n_heads=" + std::to_string(n_heads) +
                       " head_dim=" + std::to_string(head_dim) + " n_idx=" + std::to_string(n_idx));
          check_cuda(random_problem(rng, n_queries, n_heads, head_dim, n_idx, true, 1.5f));
        }
      }
    }
  }
}

// V4 decode shape (64 heads x 512, window 128 + top-512) and a long HCA-style list
// (1M-token context: window + 8192 entries).
TEST(sparse_attention_cuda, v4_shapes_and_long_lists) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  check_cuda(random_problem(rng, 3, 64, 512, 640, false, 1.0f));
  check_cuda(random_problem(rng, 2, 4, 512, 8320, true, 1.0f));
  check_cuda(random_problem(rng, 1, 64, 1024, 300, false, 1.0f));  // the widest head a block holds
}

// Logits of several hundred (max shift), sinks at ±300 and -inf.
TEST(sparse_attention_cuda, large_logits_and_extreme_sinks) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  problem pr = random_problem(rng, 4, 4, 64, 111, true, 100.0f);
  pr.sink = {300.0f, -300.0f, 0.0f, -INFINITY};
  check_cuda(pr);
}

// bf16 (the official numerics) against the CPU form, with and without a workspace
// (one slice either way). The paths differ only in fp32 orders (the logits' sums,
// the weighted sum's fma against the CPU's multiply-add, the sums; CUDA's expf
// against the host's in the last bit): a P's bf16 rounding flips only when P lies
// that close to a rounding boundary, and an output's only when its fp32 value
// does. Allowed: at most 1% of all outputs not bitwise equal (measured on the
// H200 over 13 seeds: 0.12–0.33%), each within a bf16 ulp (2^-7 |out|) plus 2^-7 Σ_j p_j |kv_j[d]|
// (every P a bf16 ulp off) plus the fp32 bound above.
TEST(sparse_attention_cuda, bf16_matches_cpu) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  int64_t n_differ = 0, n_total = 0;
  struct shape {
    int64_t n_queries, n_heads, head_dim, n_idx;
  };
  for (const shape& s : {shape{1, 1, 19, 7}, shape{5, 3, 64, 65}, shape{2, 16, 512, 64},
                         shape{3, 12, 600, 130}, shape{1, 64, 512, 640}, shape{4, 64, 512, 640},
                         shape{2, 4, 512, 2000}, shape{1, 8, 1024, 63}, shape{3, 16, 512, 0}}) {
    SCOPED_TRACE("n_queries=" + std::to_string(s.n_queries) + " n_heads=" + std::to_string(s.n_heads) +
                 " head_dim=" + std::to_string(s.head_dim) + " n_idx=" + std::to_string(s.n_idx));
    const problem pr = random_problem(rng, s.n_queries, s.n_heads, s.head_dim, s.n_idx, true, 1.5f);
    auto hp = params_of(pr, pr.q.data(), pr.kv.data(), pr.idx.data(), pr.sink.data(), nullptr);
    std::vector<float> want(pr.n_queries * pr.n_heads * pr.head_dim);
    hp.out = want.data();
    hp.bf16 = true;
    ASSERT_TRUE(sparse_attention_gather_cpu(hp).ok());
    std::vector<double> l_err;
    std::vector<double> tol = weighted_magnitude(pr, l_err);
    const std::vector<double> fp32_tol = tolerance(pr);
    for (size_t i = 0; i < tol.size(); ++i) tol[i] = 0x1p-7 * (std::fabs(want[i]) + tol[i]) + fp32_tol[i];
    device_vec<float> d_q(pr.q), d_kv(pr.kv), d_sink(pr.sink), d_out(std::vector<float>(want.size(), k_nan));
    device_vec<int32_t> d_idx(pr.idx.empty() ? std::vector<int32_t>{0} : pr.idx);
    const size_t ws_bytes = sparse_attention_cuda_workspace_bytes(pr.n_heads, pr.head_dim);
    device_vec<float> ws(std::vector<float>(ws_bytes / sizeof(float), k_nan));
    std::vector<float> first;
    for (bool with_workspace : {false, true}) {
      auto p = params_of(pr, d_q.get(), d_kv.get(), d_idx.get(), d_sink.get(), d_out.get());
      p.bf16 = true;
      if (with_workspace) {
        p.workspace = ws.get();
        p.workspace_bytes = ws_bytes;
      }
      const status st = sparse_attention_cuda(p, nullptr);
      ASSERT_TRUE(st.ok()) << st.to_string();
      ASSERT_TRUE(cuda_synced(nullptr));
      const std::vector<float> got = d_out.to_host();
      if (with_workspace) {
        EXPECT_EQ(got, first);  // the workspace changes nothing: one slice
        continue;
      }
      first = got;
      for (size_t i = 0; i < got.size(); ++i) n_differ += std::memcmp(&got[i], &want[i], 4) != 0;
      n_total += int64_t(got.size());
      EXPECT_TRUE(
          all_close(got.data(), got.size(), std::vector<double>(want.begin(), want.end()), tol, 1.0, 0.0));
    }
  }
  RecordProperty("differ", std::to_string(double(n_differ) / double(n_total)));
  EXPECT_LE(n_differ, n_total / 100) << n_differ << " of " << n_total << " outputs not bitwise equal";
}

TEST(sparse_attention_cuda, bad_arguments_and_limits) {
  HART_SKIP_WITHOUT_CUDA();
  std::mt19937 rng(2);
  const problem pr = random_problem(rng, 1, 1, 8, 4, false, 1.0f);
  device_vec<float> d(std::vector<float>(64, 0.0f));
  device_vec<int32_t> di(std::vector<int32_t>(4, 0));
  auto p = params_of(pr, d.get(), d.get(), di.get(), d.get(), d.get());
  EXPECT_TRUE(sparse_attention_cuda(p, nullptr).ok());
  auto q = p;
  q.idx = nullptr;
  EXPECT_EQ(sparse_attention_cuda(q, nullptr).code(), status_code::invalid_argument);
  q = p;
  q.kv_stride = 4;
  EXPECT_EQ(sparse_attention_cuda(q, nullptr).code(), status_code::invalid_argument);
  q = p;
  q.head_dim = sparse_attention_cuda_max_head_dim + 1;
  q.kv_stride = q.head_dim;
  EXPECT_EQ(sparse_attention_cuda(q, nullptr).code(), status_code::invalid_argument);
  ASSERT_TRUE(cuda_synced(nullptr));
}

#endif  // HART_CUDA

}  // namespace
}  // namespace hart
