// indexer_score_cpu against a double-precision
//   score[s] = Σ_h w[h]·ReLU(q_h · k_s)·softmax_scale          (v4-model.md §4.5)
// and topk_cpu against a stable sort written here: the k largest values, best
// first, equal values in ascending index order, NaN never selected, and the
// positions past the number of selectable values filled with −1.
#include "kernels/indexer/indexer.h"

#include "kernels/testing/cuda_test_util.h"
#include "kernels/testing/op_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace hart {
namespace {

// -- test helpers --------------------------------------------------------------

using testing::guarded_buffer;
using testing::guards_intact;
using testing::k_inf;
using testing::k_nan;
using testing::normal_vec;
using testing::seed_trace;
using testing::test_seed;
using testing::unguarded;

// -- indexer_score -------------------------------------------------------------

std::vector<float> run_score(const std::vector<float>& q, const std::vector<float>& w, const std::vector<float>& keys,
                             int64_t n_heads, int64_t head_dim, int64_t n_keys, float scale) {
  std::vector<float> score = guarded_buffer(n_keys, 1, k_nan, 4321.0f);  // one guard each side
  indexer_score_params p;
  p.q = q.data();
  p.w = w.data();
  p.keys = keys.data();
  p.score = score.data() + 1;
  p.n_heads = n_heads;
  p.head_dim = head_dim;
  p.n_keys = n_keys;
  p.softmax_scale = scale;
  const status st = indexer_score_cpu(p);
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_TRUE(guards_intact(score, 1, 4321.0f));
  return unguarded(score, 1);
}

TEST(indexer, score_matches_reference) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (int64_t n_heads : {1, 3, 64}) {
    for (int64_t head_dim : {1, 3, 19, 128}) {
      for (int64_t n_keys : {1, 19, 111}) {
        SCOPED_TRACE("n_heads=" + std::to_string(n_heads) + " head_dim=" + std::to_string(head_dim) +
                     " n_keys=" + std::to_string(n_keys));
        const auto q = normal_vec(rng, n_heads * head_dim, 1.0f);
        const auto w = normal_vec(rng, n_heads, 1.0f);  // signed, as weights_proj outputs are
        const auto keys = normal_vec(rng, n_keys * head_dim, 1.0f);
        const float scale = 1.0f / std::sqrt(float(head_dim));
        const auto got = run_score(q, w, keys, n_heads, head_dim, n_keys, scale);
        int64_t n_bad = 0;
        for (int64_t s = 0; s < n_keys; ++s) {
          double want = 0, mag = 0;
          for (int64_t h = 0; h < n_heads; ++h) {
            double dot = 0, dot_mag = 0;
            for (int64_t d = 0; d < head_dim; ++d) {
              dot += double(q[h * head_dim + d]) * keys[s * head_dim + d];
              dot_mag += std::fabs(double(q[h * head_dim + d]) * keys[s * head_dim + d]);
            }
            want += double(w[h]) * std::max(dot, 0.0) * scale;
            mag += std::fabs(double(w[h])) * dot_mag * scale;
          }
          // fp32 dot products and sum: a few ulps of the absolute-value sum
          if (std::fabs(got[s] - want) > 1e-5 * mag && n_bad++ < 8) {
            ADD_FAILURE() << "key " << s << " got " << std::setprecision(9) << got[s] << " want " << want;
          }
        }
      }
    }
  }
}

// ReLU per head before the weighted sum: q_0 = k, q_1 = −k with weights 1, 1
// gives |k|²·scale (not 0, as it would without the ReLU or with it after the
// sum); a negative head weight can make the score negative.
TEST(indexer, score_relu_per_head) {
  const std::vector<float> k = {1, 2, 2};  // |k|² = 9
  const std::vector<float> q = {1, 2, 2, -1, -2, -2};
  const auto s1 = run_score(q, {1.0f, 1.0f}, k, 2, 3, 1, 0.5f);
  EXPECT_FLOAT_EQ(s1[0], 4.5f);
  const auto s2 = run_score(q, {-2.0f, 1.0f}, k, 2, 3, 1, 0.5f);
  EXPECT_FLOAT_EQ(s2[0], -9.0f);
  const auto s3 = run_score(q, {1.0f, -3.0f}, k, 2, 3, 1, 0.5f);  // only head 0 is live
  EXPECT_FLOAT_EQ(s3[0], 4.5f);
}

TEST(indexer, score_no_keys) {
  const std::vector<float> q = {1, 2}, w = {1}, keys = {0};
  const auto got = run_score(q, w, keys, 1, 2, 0, 1.0f);
  EXPECT_TRUE(got.empty());
}

// -- topk ------------------------------------------------------------------------

// Stable reference: non-NaN indices sorted by value descending, ties by index.
std::vector<int32_t> ref_topk(const std::vector<float>& v, int64_t k) {
  std::vector<int32_t> idx;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isnan(v[i])) idx.push_back(int32_t(i));
  }
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return v[a] > v[b]; });
  std::vector<int32_t> out(k, -1);
  for (int64_t i = 0; i < k && i < int64_t(idx.size()); ++i) out[i] = idx[i];
  return out;
}

constexpr int32_t k_guard_idx = -777;

std::vector<int32_t> run_topk(const std::vector<float>& v, int64_t k) {
  std::vector<int32_t> out(k + 2, 123456);
  out.front() = out.back() = k_guard_idx;
  topk_params p;
  p.values = v.data();
  p.indices = out.data() + 1;
  p.n = int64_t(v.size());
  p.k = k;
  const status st = topk_cpu(p);
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(out.front(), k_guard_idx);
  EXPECT_EQ(out.back(), k_guard_idx);
  return std::vector<int32_t>(out.begin() + 1, out.end() - 1);
}

std::string show(const std::vector<int32_t>& v) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size() && i < 40; ++i) os << (i ? " " : "") << v[i];
  if (v.size() > 40) os << " …";
  os << "]";
  return os.str();
}

#define EXPECT_TOPK(values, k, want)                                                          \
  do {                                                                                        \
    const auto got_ = run_topk(values, k);                                                    \
    EXPECT_EQ(got_, want) << "got " << show(got_) << " want " << show(want) << " (k=" << k << ")"; \
  } while (0)

TEST(indexer, topk_matches_reference) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (int64_t n : {1, 3, 19, 111, 1000, 5000}) {
    for (int ties : {0, 1}) {
      // ties = 1: values from a set of 5 so most values repeat
      std::vector<float> v = normal_vec(rng, n, 1.0f);
      if (ties) {
        std::uniform_int_distribution<int> small(-2, 2);
        for (auto& e : v) e = float(small(rng));
      }
      for (int64_t k : {int64_t(0), int64_t(1), int64_t(3), n / 2, n - 1, n, n + 5, int64_t(512)}) {
        SCOPED_TRACE("n=" + std::to_string(n) + " k=" + std::to_string(k) + " ties=" + std::to_string(ties));
        EXPECT_TOPK(v, k, ref_topk(v, k));
      }
    }
  }
}

// Equal values come out in ascending index order; +0 and −0 are equal.
TEST(indexer, topk_ties_lowest_index_first) {
  const std::vector<float> v = {1, 3, 2, 3, 1, 3};
  EXPECT_TOPK(v, 4, (std::vector<int32_t>{1, 3, 5, 2}));
  EXPECT_TOPK(v, 6, (std::vector<int32_t>{1, 3, 5, 2, 0, 4}));
  const std::vector<float> zeros = {-0.0f, 0.0f, -0.0f, 0.0f};
  EXPECT_TOPK(zeros, 3, (std::vector<int32_t>{0, 1, 2}));
  const std::vector<float> all_equal(19, 0.25f);
  EXPECT_TOPK(all_equal, 5, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_TOPK(all_equal, 19, ref_topk(all_equal, 19));
}

// k > n: the first n positions hold every index (best first), the rest −1.
TEST(indexer, topk_k_greater_than_n_pads) {
  const std::vector<float> v = {0.5f, -2.0f, 7.0f};
  EXPECT_TOPK(v, 5, (std::vector<int32_t>{2, 0, 1, -1, -1}));
  const std::vector<float> none;
  EXPECT_TOPK(none, 3, (std::vector<int32_t>{-1, -1, -1}));
}

// NaN is never selected, even when that leaves positions to pad with −1.
TEST(indexer, topk_nan_never_selected) {
  const std::vector<float> v = {k_nan, 1.0f, k_nan, -5.0f, k_nan, 2.0f};
  EXPECT_TOPK(v, 2, (std::vector<int32_t>{5, 1}));
  EXPECT_TOPK(v, 4, (std::vector<int32_t>{5, 1, 3, -1}));
  EXPECT_TOPK(v, 6, (std::vector<int32_t>{5, 1, 3, -1, -1, -1}));
  const std::vector<float> all_nan(7, k_nan);
  EXPECT_TOPK(all_nan, 3, (std::vector<int32_t>{-1, -1, -1}));

  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  std::bernoulli_distribution is_nan(0.3);
  for (int64_t n : {19, 111, 1000}) {
    auto w = normal_vec(rng, n, 1.0f);
    for (auto& e : w) {
      if (is_nan(rng)) e = k_nan;
    }
    for (int64_t k : {int64_t(1), int64_t(7), n / 2, n}) EXPECT_TOPK(w, k, ref_topk(w, k));
  }
}

// +inf ranks first and −inf last; −inf is an ordinary (lowest) value, not NaN,
// so it is picked once the finite values run out.
TEST(indexer, topk_infinities) {
  const std::vector<float> v = {1.0f, -k_inf, k_inf, -1e30f, k_inf, 0.0f, -k_inf};
  EXPECT_TOPK(v, 1, (std::vector<int32_t>{2}));
  EXPECT_TOPK(v, 3, (std::vector<int32_t>{2, 4, 0}));
  EXPECT_TOPK(v, 5, (std::vector<int32_t>{2, 4, 0, 5, 3}));
  EXPECT_TOPK(v, 8, (std::vector<int32_t>{2, 4, 0, 5, 3, 1, 6, -1}));
}

// k = 0 writes nothing.
TEST(indexer, topk_k_zero) {
  const std::vector<float> v = {1, 2, 3};
  EXPECT_TOPK(v, 0, std::vector<int32_t>{});
}

TEST(indexer, topk_rejects_negative_sizes) {
  const std::vector<float> v = {1, 2, 3};
  int32_t out[4];
  topk_params p;
  p.values = v.data();
  p.indices = out;
  p.n = 3;
  p.k = -1;
  EXPECT_FALSE(topk_cpu(p).ok());
}

#undef EXPECT_TOPK

// -- CUDA parity -------------------------------------------------------------------

#ifdef HART_CUDA

using testing::cuda_synced;
using testing::device_vec;

// One token's scores through the paged kernel, its keys one dense page.
status score_cuda(const float* q, const float* w, const float* keys, float* score, int64_t n_heads, int64_t head_dim,
                  int64_t n_keys, float scale) {
  const int32_t zero = 0, length = int32_t(n_keys);
  device_vec<int32_t> d_len(std::vector<int32_t>{length}), d_base(std::vector<int32_t>{zero}),
      d_pages(std::vector<int32_t>{zero});
  indexer_score_paged_params p;
  p.q = q;
  p.w = w;
  p.keys = keys;
  p.lengths = d_len.get();
  p.page_base = d_base.get();
  p.pages = d_pages.get();
  p.score = score;
  p.n_tokens = 1;
  p.n_heads = n_heads;
  p.head_dim = head_dim;
  p.max_keys = n_keys;
  p.score_stride = n_keys;
  p.rate = 4;
  p.page_size = 4 * std::max<int64_t>(n_keys, 1);
  p.page_floats = std::max<int64_t>(n_keys * head_dim, 1);
  p.softmax_scale = scale;
  const status st = indexer_score_paged_cuda(p, nullptr);
  if (st.ok() && !cuda_synced(nullptr)) return internal_error("indexer_score_paged_cuda: device error");
  return st;
}

std::vector<float> run_score_cuda(const std::vector<float>& q, const std::vector<float>& w,
                                  const std::vector<float>& keys, int64_t n_heads, int64_t head_dim, int64_t n_keys,
                                  float scale) {
  device_vec<float> d_q(q), d_w(w), d_keys(keys), d_score(guarded_buffer(n_keys, 1, k_nan, 4321.0f));
  const status st =
      score_cuda(d_q.get(), d_w.get(), d_keys.get(), d_score.get() + 1, n_heads, head_dim, n_keys, scale);
  EXPECT_TRUE(st.ok()) << st.to_string();
  const auto score = d_score.to_host();
  EXPECT_TRUE(guards_intact(score, 1, 4321.0f));
  return unguarded(score, 1);
}

// The device scores (one token, dense keys) vs indexer_score_cpu: the same fp32 operations in the
// same order (each dot in channel order without FMA, the heads' terms in head
// order), so bitwise equal, NaN keys (fmax(NaN, 0) = 0) included.
TEST(indexer, cuda_score_matches_cpu) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (int64_t n_heads : {1, 3, 64, 70}) {
    for (int64_t head_dim : {1, 3, 19, 33, 128, 512}) {
      for (int64_t n_keys : {1, 7, 9, 1000, 8193}) {
        SCOPED_TRACE("n_heads=" + std::to_string(n_heads) + " head_dim=" + std::to_string(head_dim) +
                     " n_keys=" + std::to_string(n_keys));
        const auto q = normal_vec(rng, n_heads * head_dim, 1.0f);
        const auto w = normal_vec(rng, n_heads, 1.0f);
        auto keys = normal_vec(rng, n_keys * head_dim, 1.0f);
        keys[(n_keys - 1) * head_dim] = k_nan;  // NaN dots: fmax(NaN, 0) = 0 on both sides
        const float scale = 1.0f / std::sqrt(float(head_dim));
        const auto want = run_score(q, w, keys, n_heads, head_dim, n_keys, scale);
        const auto got = run_score_cuda(q, w, keys, n_heads, head_dim, n_keys, scale);
        int64_t n_bad = 0;
        for (int64_t s = 0; s < n_keys; ++s) {
          if (std::memcmp(&got[s], &want[s], sizeof(float)) != 0 && n_bad++ < 8) {
            ADD_FAILURE() << "key " << s << " got " << std::setprecision(9) << got[s] << " want " << want[s];
          }
        }
      }
    }
  }
}

// Keys whose every head dot is negative score exactly +0 on the device too:
// these ReLU zeros are the exact ties the top-k's tie rule decides.
TEST(indexer, cuda_relu_zeros_are_exact) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const int64_t n_heads = 64, head_dim = 128, n_keys = 777;
  auto q = normal_vec(rng, n_heads * head_dim, 1.0f);
  auto keys = normal_vec(rng, n_keys * head_dim, 1.0f);
  for (auto& v : q) v = -std::fabs(v);
  for (auto& v : keys) v = std::fabs(v);
  const auto w = normal_vec(rng, n_heads, 1.0f);
  const auto got = run_score_cuda(q, w, keys, n_heads, head_dim, n_keys, 0.088f);
  for (int64_t s = 0; s < n_keys; ++s) {
    EXPECT_EQ(got[s], 0.0f) << "key " << s;
    EXPECT_FALSE(std::signbit(got[s])) << "key " << s;  // +0 + (±0) is +0, as on the CPU
  }
}

// The paged form over a pass: tokens of different lengths reading keys
// scattered over pages (rate 4, 16 positions per page, pages out of order)
// score bitwise what indexer_score_cpu gives on each token's gathered keys;
// scores past a token's length stay untouched.
TEST(indexer, cuda_paged_scores_match_cpu_per_token) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const int64_t rate = 4, page_size = 16, per_page = page_size / rate;
  for (int64_t n_heads : {16, 64, 70}) {
    for (int64_t head_dim : {32, 33, 128}) {
      SCOPED_TRACE("n_heads=" + std::to_string(n_heads) + " head_dim=" + std::to_string(head_dim));
      const int64_t key_off = 8, page_floats = key_off + per_page * head_dim + 4, n_pages = 40;
      const auto store = normal_vec(rng, n_pages * page_floats, 1.0f);
      const std::vector<int32_t> lengths = {0, 1, 5, 37, 9, 40};
      const int64_t T = int64_t(lengths.size()), max_keys = 40, stride = max_keys + 3;
      std::vector<int32_t> pages, page_base;
      std::vector<int32_t> order(n_pages);
      for (int32_t i = 0; i < n_pages; ++i) order[i] = i;
      for (int64_t t = 0; t < T; ++t) {
        std::shuffle(order.begin(), order.end(), rng);
        page_base.push_back(int32_t(pages.size()));
        pages.insert(pages.end(), order.begin(), order.begin() + (lengths[t] + per_page - 1) / per_page);
      }
      const auto q = normal_vec(rng, T * n_heads * head_dim, 1.0f);
      const auto w = normal_vec(rng, T * n_heads, 1.0f);
      const float scale = 1.0f / std::sqrt(float(head_dim));
      device_vec<float> d_q(q), d_w(w), d_store(store), d_score(std::vector<float>(T * stride, 4321.0f));
      device_vec<int32_t> d_len(lengths), d_base(page_base), d_pages(pages);
      indexer_score_paged_params p;
      p.q = d_q.get();
      p.w = d_w.get();
      p.keys = d_store.get();
      p.lengths = d_len.get();
      p.page_base = d_base.get();
      p.pages = d_pages.get();
      p.score = d_score.get();
      p.n_tokens = T;
      p.n_heads = n_heads;
      p.head_dim = head_dim;
      p.max_keys = max_keys;
      p.score_stride = stride;
      p.rate = rate;
      p.page_size = page_size;
      p.page_floats = page_floats;
      p.key_off = key_off;
      p.softmax_scale = scale;
      const status st = indexer_score_paged_cuda(p, nullptr);
      ASSERT_TRUE(st.ok()) << st.to_string();
      ASSERT_TRUE(cuda_synced(nullptr));
      const auto got = d_score.to_host();
      for (int64_t t = 0; t < T; ++t) {
        std::vector<float> keys;
        for (int64_t i = 0; i < lengths[t]; ++i) {
          const int64_t pos = i * rate;
          const float* k = store.data() + pages[page_base[t] + pos / page_size] * page_floats + key_off +
                           pos % page_size / rate * head_dim;
          keys.insert(keys.end(), k, k + head_dim);
        }
        const std::vector<float> qt(q.begin() + t * n_heads * head_dim, q.begin() + (t + 1) * n_heads * head_dim);
        const std::vector<float> wt(w.begin() + t * n_heads, w.begin() + (t + 1) * n_heads);
        const auto want = lengths[t] ? run_score(qt, wt, keys, n_heads, head_dim, lengths[t], scale) : std::vector<float>();
        for (int64_t i = 0; i < stride; ++i) {
          const float g = got[t * stride + i];
          if (i < lengths[t]) {
            EXPECT_EQ(std::memcmp(&g, &want[i], sizeof g), 0) << "token " << t << " key " << i << " got " << g << " want " << want[i];
          } else {
            EXPECT_EQ(g, 4321.0f) << "token " << t << " key " << i << " past its length was written";
          }
        }
      }
    }
  }
}

TEST(indexer, cuda_score_no_keys_and_bad_arguments) {
  HART_SKIP_WITHOUT_CUDA();
  EXPECT_TRUE(run_score_cuda({1, 2}, {1}, {0}, 1, 2, 0, 1.0f).empty());
  device_vec<float> d(std::vector<float>(8, 1.0f));
  EXPECT_EQ(score_cuda(d.get(), d.get(), d.get(), d.get(), 0, 2, 1, 1.0f).code(), status_code::invalid_argument);
  EXPECT_EQ(score_cuda(d.get(), d.get(), nullptr, d.get(), 1, 2, 1, 1.0f).code(), status_code::invalid_argument);
}

#endif  // HART_CUDA

}  // namespace
}  // namespace hart
