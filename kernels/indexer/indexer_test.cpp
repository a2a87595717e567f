// indexer_score_cpu against a double-precision
//   score[s] = Σ_h w[h]·ReLU(q_h · k_s)·softmax_scale          (v4-model.md §4.5)
// and topk_cpu against a stable sort written here: the k largest values, best
// first, equal values in ascending index order, NaN never selected, and the
// positions past the number of selectable values filled with −1; the bf16
// scores' rounding points on hand-made cases; the CUDA scores bitwise the CPU's.
#include "kernels/indexer/indexer.h"

#include "kernels/quant/quant.h"
#include "kernels/testing/cuda_test_util.h"
#include "kernels/testing/op_test_util.h"
#include "runtime/core/codecs.h"

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

std::vector<float> run_score(const std::vector<float>& q, const std::vector<float>& w,
                             const std::vector<float>& keys, int64_t n_heads, int64_t head_dim,
                             int64_t n_keys, float scale, bool bf16 = false) {
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
  p.bf16 = bf16;
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

// bf16's rounding points, each on a case where it alone decides the score
// (bf16 keeps 8 significant bits: 1 + 2^-8 is the midpoint between 1 and
// 1 + 2^-7 and rounds to even, 1).
struct bf16_case {
  const char* what;
  std::vector<float> q, w, k;  // q [head_dim, n_heads], k [head_dim] one key
  int64_t head_dim;
  float want_bf16, want_fp32;
};

const std::vector<bf16_case>& bf16_cases() {
  const float e = 0x1p-8f;
  static const std::vector<bf16_case> cases = {
      // q·k = 1 + 2^-8 rounds to 1 before the weight: 3, not 3·(1 + 2^-8) rounded (3 + 2^-6).
      {"dot rounded", {1, 1}, {3}, {1, e}, 2, 3.0f, 3.0f + 3 * e},
      // each term (1 + 2^-8)·1 rounds to 1: 3, not 3 + 3·2^-8 rounded (3 + 2^-6).
      {"terms rounded", {1, 1, 1}, {1 + e, 1 + e, 1 + e}, {1}, 1, 3.0f, 3.0f + 3 * e},
      // the heads' fp32 sum 1 + 2^-8 rounds once at the end, to 1.
      {"sum rounded", {1, e}, {1, 1}, {1}, 1, 1.0f, 1.0f + e},
      // the sum is fp32, not bf16 after each head (that would give 1 + 2^-8 -> 1, twice).
      {"sum in fp32", {1, e, e}, {1, 1, 1}, {1}, 1, 1.0f + 2 * e, 1.0f + 2 * e},
  };
  return cases;
}

TEST(indexer, score_bf16_rounding_points) {
  for (const bf16_case& c : bf16_cases()) {
    SCOPED_TRACE(c.what);
    const int64_t n_heads = int64_t(c.w.size());
    EXPECT_EQ(run_score(c.q, c.w, c.k, n_heads, c.head_dim, 1, 1.0f, true)[0], c.want_bf16);
    EXPECT_EQ(run_score(c.q, c.w, c.k, n_heads, c.head_dim, 1, 1.0f, false)[0], c.want_fp32);
  }
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

#define EXPECT_TOPK(values, k, want)                                                               \
  do {                                                                                             \
    const auto got_ = run_topk(values, k);                                                         \
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
status score_cuda(const float* q, const float* w, const float* keys, float* score, int64_t n_heads,
                  int64_t head_dim, int64_t n_keys, float scale, bool bf16 = false) {
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
  p.bf16 = bf16;
  const status st = indexer_score_paged_cuda(p, nullptr);
  if (st.ok() && !cuda_synced(nullptr)) return internal_error("indexer_score_paged_cuda: device error");
  return st;
}

std::vector<float> run_score_cuda(const std::vector<float>& q, const std::vector<float>& w,
                                  const std::vector<float>& keys, int64_t n_heads, int64_t head_dim,
                                  int64_t n_keys, float scale, bool bf16 = false) {
  device_vec<float> d_q(q), d_w(w), d_keys(keys), d_score(guarded_buffer(n_keys, 1, k_nan, 4321.0f));
  const status st = score_cuda(d_q.get(), d_w.get(), d_keys.get(), d_score.get() + 1, n_heads, head_dim,
                               n_keys, scale, bf16);
  EXPECT_TRUE(st.ok()) << st.to_string();
  const auto score = d_score.to_host();
  EXPECT_TRUE(guards_intact(score, 1, 4321.0f));
  return unguarded(score, 1);
}

// Bitwise equality, up to 8 failures reported.
void expect_bitwise(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t n_bad = 0;
  for (size_t s = 0; s < got.size(); ++s) {
    if (std::memcmp(&got[s], &want[s], sizeof(float)) != 0 && n_bad++ < 8) {
      ADD_FAILURE() << what << " key " << s << " got " << std::setprecision(9) << got[s] << " want "
                    << want[s];
    }
  }
}

// The device scores (one token, dense keys) vs indexer_score_cpu, fp32 and
// bf16: the same fp32 operations in the same order (each dot in channel order
// without FMA, the heads' terms in head order) and, with bf16, the same
// roundings (codecs.cpp's bit trick), so bitwise equal, NaN keys
// (fmax(NaN, 0) = 0) included. The shapes reach all three kernels: tiled
// (n_heads <= 64, head_dim % 4 == 0), warp per key with float4 loads (70
// heads), and scalar loads (head_dim % 4 != 0).
TEST(indexer, cuda_score_matches_cpu) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (bool bf16 : {false, true}) {
    for (int64_t n_heads : {1, 3, 64, 70}) {
      for (int64_t head_dim : {1, 3, 19, 33, 128, 512}) {
        for (int64_t n_keys : {1, 7, 9, 1000, 8193}) {
          const std::string what = "bf16=" + std::to_string(bf16) + " n_heads=" + std::to_string(n_heads) +
                                   " head_dim=" + std::to_string(head_dim) +
                                   " n_keys=" + std::to_string(n_keys);
          const auto q = normal_vec(rng, n_heads * head_dim, 1.0f);
          const auto w = normal_vec(rng, n_heads, 1.0f);
          auto keys = normal_vec(rng, n_keys * head_dim, 1.0f);
          keys[(n_keys - 1) * head_dim] = k_nan;  // NaN dots: fmax(NaN, 0) = 0 on both sides
          const float scale = 1.0f / std::sqrt(float(head_dim));
          expect_bitwise(run_score_cuda(q, w, keys, n_heads, head_dim, n_keys, scale, bf16),
                         run_score(q, w, keys, n_heads, head_dim, n_keys, scale, bf16), what);
        }
      }
    }
  }
}

// The hand-made bf16 cases (score_bf16_rounding_points) on the device: each
// rounding point where the CPU has it, midpoints rounded to even.
TEST(indexer, cuda_score_bf16_rounding_points) {
  HART_SKIP_WITHOUT_CUDA();
  for (const bf16_case& c : bf16_cases()) {
    SCOPED_TRACE(c.what);
    const int64_t n_heads = int64_t(c.w.size());
    EXPECT_EQ(run_score_cuda(c.q, c.w, c.k, n_heads, c.head_dim, 1, 1.0f, true)[0], c.want_bf16);
    EXPECT_EQ(run_score_cuda(c.q, c.w, c.k, n_heads, c.head_dim, 1, 1.0f, false)[0], c.want_fp32);
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
  for (bool bf16 : {false, true}) {
    const auto got = run_score_cuda(q, w, keys, n_heads, head_dim, n_keys, 0.088f, bf16);
    for (int64_t s = 0; s < n_keys; ++s) {
      EXPECT_EQ(got[s], 0.0f) << "key " << s;
      EXPECT_FALSE(std::signbit(got[s])) << "key " << s;  // +0 + (±0) is +0, as on the CPU
    }
  }
}

// A pass over a paged key store: token t's first lengths[t] keys through its
// own shuffled page list, `rate` positions per key and `page_size` per page,
// the keys at key_off in pages of page_floats floats.
struct paged_pass {
  int64_t n_heads = 0, head_dim = 0, rate = 0, page_size = 0, key_off = 0, page_floats = 0;
  int64_t max_keys = 0, stride = 0;
  std::vector<int32_t> lengths, pages, page_base;
  std::vector<float> store;  // [page_floats, n_pages]
  std::vector<float> q, w;   // [head_dim, n_heads, n_tokens], [n_heads, n_tokens]

  int64_t n_tokens() const { return int64_t(lengths.size()); }
  const float* key(int64_t t, int64_t i) const {
    const int64_t pos = i * rate;
    return store.data() + pages[page_base[t] + pos / page_size] * page_floats + key_off +
           pos % page_size / rate * head_dim;
  }
};

// Normal inputs; the grid one key block past the longest token, the score rows
// three floats wider (the engine sizes both for its longest context).
paged_pass make_paged_pass(std::mt19937& rng, int64_t n_heads, int64_t head_dim, std::vector<int32_t> lengths,
                           int64_t rate, int64_t page_size, int64_t key_off, int64_t page_pad) {
  paged_pass ps;
  ps.n_heads = n_heads;
  ps.head_dim = head_dim;
  ps.rate = rate;
  ps.page_size = page_size;
  ps.key_off = key_off;
  const int64_t per_page = page_size / rate;
  ps.page_floats = key_off + per_page * head_dim + page_pad;
  ps.lengths = std::move(lengths);
  const int64_t longest = *std::max_element(ps.lengths.begin(), ps.lengths.end());
  ps.max_keys = longest + 3;
  ps.stride = ps.max_keys + 3;
  const int64_t n_pages = (longest + per_page - 1) / per_page + 3;  // spare pages, so the shuffles vary
  std::vector<int32_t> order(n_pages);
  for (int32_t i = 0; i < n_pages; ++i) order[i] = i;
  for (int32_t len : ps.lengths) {
    std::shuffle(order.begin(), order.end(), rng);
    ps.page_base.push_back(int32_t(ps.pages.size()));
    ps.pages.insert(ps.pages.end(), order.begin(), order.begin() + (len + per_page - 1) / per_page);
  }
  ps.store = normal_vec(rng, n_pages * ps.page_floats, 1.0f);
  ps.q = normal_vec(rng, ps.n_tokens() * n_heads * head_dim, 1.0f);
  ps.w = normal_vec(rng, ps.n_tokens() * n_heads, 1.0f);
  return ps;
}

// indexer_score_paged_cuda over the pass; [stride, n_tokens], 4321 where unwritten.
std::vector<float> run_paged_cuda(const paged_pass& ps, float scale, bool bf16) {
  device_vec<float> d_q(ps.q), d_w(ps.w), d_store(ps.store),
      d_score(std::vector<float>(ps.n_tokens() * ps.stride, 4321.0f));
  device_vec<int32_t> d_len(ps.lengths), d_base(ps.page_base), d_pages(ps.pages);
  indexer_score_paged_params p;
  p.q = d_q.get();
  p.w = d_w.get();
  p.keys = d_store.get();
  p.lengths = d_len.get();
  p.page_base = d_base.get();
  p.pages = d_pages.get();
  p.score = d_score.get();
  p.n_tokens = ps.n_tokens();
  p.n_heads = ps.n_heads;
  p.head_dim = ps.head_dim;
  p.max_keys = ps.max_keys;
  p.score_stride = ps.stride;
  p.rate = ps.rate;
  p.page_size = ps.page_size;
  p.page_floats = ps.page_floats;
  p.key_off = ps.key_off;
  p.softmax_scale = scale;
  p.bf16 = bf16;
  const status st = indexer_score_paged_cuda(p, nullptr);
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_TRUE(cuda_synced(nullptr));
  return d_score.to_host();
}

// indexer_score_cpu on each token's gathered keys, bitwise; scores past a
// token's length untouched. Returns the keys whose CPU score equals another
// key's of the same token (the exact ties the top-k's tie rule decides).
int64_t expect_paged_matches_cpu(const paged_pass& ps, const std::vector<float>& got, float scale,
                                 bool bf16) {
  const int64_t H = ps.n_heads, hd = ps.head_dim;
  int64_t n_tied = 0;
  for (int64_t t = 0; t < ps.n_tokens(); ++t) {
    const int64_t len = ps.lengths[t];
    const std::string what = "token " + std::to_string(t) + " of " + std::to_string(ps.n_tokens());
    std::vector<float> keys;
    for (int64_t i = 0; i < len; ++i) keys.insert(keys.end(), ps.key(t, i), ps.key(t, i) + hd);
    const std::vector<float> qt(ps.q.begin() + t * H * hd, ps.q.begin() + (t + 1) * H * hd);
    const std::vector<float> wt(ps.w.begin() + t * H, ps.w.begin() + (t + 1) * H);
    const auto want = len ? run_score(qt, wt, keys, H, hd, len, scale, bf16) : std::vector<float>();
    const float* row = got.data() + t * ps.stride;
    expect_bitwise(std::vector<float>(row, row + len), want, what);
    for (int64_t i = len; i < ps.stride; ++i) {
      EXPECT_EQ(row[i], 4321.0f) << what << " key " << i << " past its length was written";
    }
    std::vector<float> sorted = want;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i) {
      const bool as_prev = i > 0 && sorted[i] == sorted[i - 1];
      n_tied += as_prev || (i + 1 < sorted.size() && sorted[i] == sorted[i + 1]);
    }
  }
  return n_tied;
}

// The paged form over a pass: tokens of different lengths reading keys
// scattered over pages (rate 4, 16 positions per page, pages out of order)
// score bitwise what indexer_score_cpu gives on each token's gathered keys,
// fp32 and bf16; scores past a token's length stay untouched.
TEST(indexer, cuda_paged_scores_match_cpu_per_token) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (bool bf16 : {false, true}) {
    for (int64_t n_heads : {16, 64, 70}) {
      for (int64_t head_dim : {32, 33, 128}) {
        SCOPED_TRACE("bf16=" + std::to_string(bf16) + " n_heads=" + std::to_string(n_heads) +
                     " head_dim=" + std::to_string(head_dim));
        const paged_pass ps = make_paged_pass(rng, n_heads, head_dim, {0, 1, 5, 37, 9, 40}, 4, 16, 8, 4);
        const float scale = 1.0f / std::sqrt(float(head_dim));
        expect_paged_matches_cpu(ps, run_paged_cuda(ps, scale, bf16), scale, bf16);
      }
    }
  }
}

// The engine's indexer inputs in fp8 precision (attention.cpp, compressor.cpp):
// q and the keys bf16, Hadamard-rotated, rounded to bf16 and FP4-QDQ'd in
// blocks of 32 (runtime/model/linear_ops.cpp's hadamard_fp4_qdq_rows), the
// weights bf16 with the score scale folded in, softmax_scale 1.
void engine_fp8_inputs(paged_pass& ps) {
  const int64_t hd = ps.head_dim, per_page = ps.page_size / ps.rate;
  auto qdq = [hd](float* row) {
    for (int64_t d = 0; d < hd; ++d) row[d] = round_to_bf16(row[d]);
    ASSERT_TRUE(hadamard_transform(row, hd, 1.0f / std::sqrt(float(hd))).ok());
    for (int64_t d = 0; d < hd; ++d) row[d] = round_to_bf16(row[d]);
    ASSERT_TRUE(fp4_act_qdq(row, hd, std::min<int64_t>(32, hd)).ok());
  };
  for (int64_t r = 0; r < int64_t(ps.q.size()) / hd; ++r) qdq(ps.q.data() + r * hd);
  for (int64_t pg = 0; pg < int64_t(ps.store.size()) / ps.page_floats; ++pg) {
    for (int64_t i = 0; i < per_page; ++i) qdq(ps.store.data() + pg * ps.page_floats + ps.key_off + i * hd);
  }
  const float wscale = float(std::pow(double(hd), -0.5) * std::pow(double(ps.n_heads), -0.5));
  for (float& v : ps.w) v = round_to_bf16(round_to_bf16(v) * wscale);
}

// bf16 at V4's indexer shapes (8 and 64 heads of 128) and the engine's paging
// (256 positions a page, CSA rate 4: 64 keys a page): a decode token at 4100
// keys, a 2-token chunk at 0 and 1 keys, a 64-token chunk across the
// 4096-key page edge (4095..4111 keys), a 600-token prompt from position 0
// (0..150 keys). Tolerance: none, every score bitwise, since a score one bf16
// ulp off could change the top-k set (the CPU scores hold exact ties: 4100
// keys give about 1300 distinct values, asserted here as "some ties"). The
// device runs the CPU's fp32 operations in its order and rounds at its points
// with its bit trick, so nothing can differ. With the engine's FP4 inputs the
// dots would agree even in another order: each product is e2m1·e2m1 times
// power-of-two block scales (4 significant bits) and the 128-term sums stay
// inside fp32's 24 bits (a check found no inexact dot in 262,400); normal
// inputs, with inexact dots, check the order itself.
TEST(indexer, cuda_paged_bf16_v4_shapes_match_cpu) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const int64_t rate = 4, page_size = 256, head_dim = 128;
  // Token t at position p0 + t sees (p0 + t + 1) / rate keys.
  auto causal = [rate](int64_t p0, int64_t n_tokens) {
    std::vector<int32_t> lengths(n_tokens);
    for (int64_t t = 0; t < n_tokens; ++t) lengths[t] = int32_t((p0 + t + 1) / rate);
    return lengths;
  };
  const std::vector<std::vector<int32_t>> passes = {causal(16400, 1), causal(2, 2), causal(16380, 64),
                                                    causal(0, 600)};
  for (int64_t n_heads : {8, 64}) {
    for (const auto& lengths : passes) {
      for (bool engine_inputs : {true, false}) {
        // The CPU reference's slowest case; the engine inputs cover it.
        if (!engine_inputs && lengths.size() == 64 && n_heads == 64) continue;
        SCOPED_TRACE("n_heads=" + std::to_string(n_heads) + " n_tokens=" + std::to_string(lengths.size()) +
                     " engine_inputs=" + std::to_string(engine_inputs));
        paged_pass ps = make_paged_pass(rng, n_heads, head_dim, lengths, rate, page_size, 1000, 60);
        if (engine_inputs) engine_fp8_inputs(ps);
        const int64_t n_tied = expect_paged_matches_cpu(ps, run_paged_cuda(ps, 1.0f, true), 1.0f, true);
        if (lengths.back() >= 150) {
          EXPECT_GT(n_tied, 0) << "no exact ties: the case does not test them";
        }
      }
    }
  }
}

TEST(indexer, cuda_score_no_keys_and_bad_arguments) {
  HART_SKIP_WITHOUT_CUDA();
  EXPECT_TRUE(run_score_cuda({1, 2}, {1}, {0}, 1, 2, 0, 1.0f).empty());
  device_vec<float> d(std::vector<float>(8, 1.0f));
  EXPECT_EQ(score_cuda(d.get(), d.get(), d.get(), d.get(), 0, 2, 1, 1.0f).code(),
            status_code::invalid_argument);
  EXPECT_EQ(score_cuda(d.get(), d.get(), nullptr, d.get(), 1, 2, 1, 1.0f).code(),
            status_code::invalid_argument);
}

#endif  // HART_CUDA

}  // namespace
}  // namespace hart
