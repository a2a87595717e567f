// File: kernels/lightning_topk/lightning_topk_cases.h — host-side inputs shared by
// lightning_topk_test.cpp (GoogleTest) and lightning_topk_bench.cu (the GPU machine has
// no GTest, so the bench re-runs the same adversarial cases there), plus the
// independent brute-force reference (std::sort by (value desc, index asc)).
#pragma once

#include "kernels/lightning_topk/lightning_topk.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace hart {
namespace lt_cases {

struct lt_case {
  std::string name;
  int64_t batch = 1;
  int64_t row_stride = 0;
  int64_t k = 512;
  std::vector<float> scores;        // batch * row_stride (+ offset slack, see below)
  std::vector<int32_t> lengths;     // batch
  std::vector<int32_t> page_table;  // batch * pt_stride, empty = none
  int64_t pt_stride = 0;
  int32_t page_bits = 0;
  int64_t scores_offset = 0;  // elements: scores start at scores.data() + offset (misalignment)

  lightning_topk_params params(const float* s, const int32_t* len, const int32_t* pt, int32_t* out) const {
    lightning_topk_params p;
    p.scores = s;
    p.lengths = len;
    p.page_table = page_table.empty() ? nullptr : pt;
    p.out = out;
    p.batch = batch;
    p.row_stride = row_stride;
    p.k = k;
    p.page_table_stride = pt_stride;
    p.page_bits = page_bits;
    return p;
  }
};

inline float normal(std::mt19937& g) {
  return std::normal_distribution<float>(0.f, 1.f)(g);
}

inline lt_case make(const std::string& name, int64_t batch, int64_t stride, int64_t k) {
  lt_case c;
  c.name = name;
  c.batch = batch;
  c.row_stride = stride;
  c.k = k;
  c.scores.assign(size_t(batch * stride), 0.f);
  c.lengths.assign(size_t(batch), int32_t(stride));
  return c;
}

inline void fill_normal(lt_case& c, std::mt19937& g) {
  for (float& v : c.scores) v = normal(g);
}

/// Edge-heavy cases (style R35 eval_cases). Sizes cover every CUDA path: cluster sizes
/// 1/2/4/8, resident and streaming, float4 and scalar loads, candidate overflow, ties
/// across CTAs. `big` adds the 1M-element rows (slow on a small CPU).
inline std::vector<lt_case> eval_cases(uint32_t seed, bool big = true) {
  std::mt19937 g(seed);
  std::vector<lt_case> cs;
  {
    lt_case c = make("random_ragged", 8, 5000, 512);
    fill_normal(c, g);
    const int32_t lens[8] = {5000, 0, 100, 512, 513, 4999, 1, 3333};
    for (int b = 0; b < 8; ++b) c.lengths[b] = lens[b];
    cs.push_back(c);
  }
  for (int64_t n : {int64_t(9000), int64_t(20000), int64_t(60000), int64_t(262144)}) {
    lt_case c = make("random_n" + std::to_string(n), 2, n, 512);
    fill_normal(c, g);
    c.lengths[1] = int32_t(n - 7);
    cs.push_back(c);
  }
  {
    lt_case c = make("all_equal", 2, 70000, 512);
    std::fill(c.scores.begin(), c.scores.end(), 1.5f);
    c.lengths[1] = 65537;
    cs.push_back(c);
  }
  {
    lt_case c = make("narrow_range_streaming", 1, 300000, 2048);
    for (float& v : c.scores)
      v = std::nextafter(1.0f, 2.0f) + float(g() % 4) * std::numeric_limits<float>::epsilon();
    cs.push_back(c);
  }
  {
    // Odd stride (scalar loads), streaming at any cluster size, candidate overflow, a tie
    // across CTAs at the threshold.
    lt_case c = make("narrow_odd_streaming", 1, 600001, 512);
    for (float& v : c.scores) v = -3.0f - float(g() % 5) * 4 * std::numeric_limits<float>::epsilon();
    cs.push_back(c);
  }
  {
    lt_case c = make("narrow_range_resident", 2, 100000, 1024);
    for (float& v : c.scores) v = 1.0f + float(g() % 3) * std::numeric_limits<float>::epsilon();
    cs.push_back(c);
  }
  {
    lt_case c = make("inf_mix", 3, 20000, 512);
    const float inf = std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < 20000; ++i) {
      const uint32_t r = g() % 100;
      c.scores[i] = r < 1 ? inf : r < 60 ? -inf : normal(g);  // row 0: a few +inf, many -inf
      c.scores[20000 + i] = -inf;                             // row 1: all -inf
      c.scores[40000 + i] = r < 5 ? inf : normal(g);          // row 2: > k +inf (ties at +inf)
    }
    cs.push_back(c);
  }
  {
    lt_case c = make("nan_mix", 4, 3000, 2048);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (int64_t i = 0; i < 3000; ++i) {
      c.scores[i] = g() % 10 < 3 ? nan : normal(g);          // row 0: 30% NaN, > k valid
      c.scores[3000 + i] = nan;                              // row 1: all NaN
      c.scores[6000 + i] = g() % 10 < 6 ? -nan : normal(g);  // row 2: ~1200 valid < k (padded)
      c.scores[9000 + i] = normal(g);
    }
    c.lengths[3] = 2049;
    cs.push_back(c);
  }
  {
    lt_case c = make("nan_mix_cluster", 1, 200000, 512);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (float& v : c.scores) v = g() % 1000 < 999 ? nan : normal(g);  // ~200 valid < k
    cs.push_back(c);
  }
  {
    lt_case c = make("signed_zero_ties", 1, 50000, 512);
    for (float& v : c.scores) v = g() % 2 ? 0.0f : -0.0f;
    cs.push_back(c);
  }
  {
    lt_case c = make("few_levels_ties", 2, 100000, 512);
    for (float& v : c.scores) v = float(g() % 2000);  // ~50 per level: a tie crosses the boundary
    cs.push_back(c);
  }
  {
    lt_case c = make("short_rows", 3, 300, 512);
    fill_normal(c, g);
    c.lengths = {300, 0, 17};
    cs.push_back(c);
  }
  {
    lt_case c = make("len0", 2, 40000, 512);
    fill_normal(c, g);
    c.lengths = {0, 0};
    cs.push_back(c);
  }
  {
    lt_case c = make("k1", 2, 100000, 1);
    fill_normal(c, g);
    c.lengths[1] = 99999;
    cs.push_back(c);
  }
  {
    lt_case c = make("k2048", 2, 200000, 2048);
    fill_normal(c, g);
    c.lengths[1] = 2047;
    cs.push_back(c);
  }
  {
    lt_case c = make("uniform_overflow", 1, 400000, 512);
    for (float& v : c.scores) v = std::uniform_real_distribution<float>(0.5f, 1.0f)(g);
    cs.push_back(c);
  }
  {
    lt_case c = make("misaligned_stride", 3, 33331, 512);  // odd stride: scalar loads
    fill_normal(c, g);
    c.lengths[2] = 20000;
    cs.push_back(c);
  }
  {
    lt_case c = make("misaligned_base", 2, 40000, 512);  // 16-byte-unaligned base pointer
    c.scores_offset = 1;
    c.scores.resize(c.scores.size() + 1);
    fill_normal(c, g);
    cs.push_back(c);
  }
  {
    lt_case c = make("page_table", 3, 40000, 512);
    fill_normal(c, g);
    c.page_bits = 6;
    c.pt_stride = (40000 >> 6) + 1;
    c.page_table.resize(size_t(3 * c.pt_stride));
    for (int64_t b = 0; b < 3; ++b) {
      std::vector<int32_t> perm(size_t(c.pt_stride));
      std::iota(perm.begin(), perm.end(), int32_t(1000 * b + 7));
      std::shuffle(perm.begin(), perm.end(), g);
      std::copy(perm.begin(), perm.end(), c.page_table.begin() + b * c.pt_stride);
    }
    c.lengths = {40000, 300, 39000};
    cs.push_back(c);
  }
  if (big) {
    lt_case c = make("random_1M_k1024", 1, 1 << 20, 1024);
    fill_normal(c, g);
    cs.push_back(c);
  }
  return cs;
}

/// Independent reference: all non-NaN indices sorted by (value desc, index asc), first k,
/// -1 padded, then page translation.
inline std::vector<int32_t> brute_force(const lt_case& c) {
  std::vector<int32_t> out(size_t(c.batch * c.k), -1);
  const float* base = c.scores.data() + c.scores_offset;
  for (int64_t b = 0; b < c.batch; ++b) {
    const float* x = base + b * c.row_stride;
    const int64_t len = std::clamp<int64_t>(c.lengths[b], 0, c.row_stride);
    std::vector<int32_t> idx;
    for (int64_t i = 0; i < len; ++i)
      if (!std::isnan(x[i])) idx.push_back(int32_t(i));
    std::sort(idx.begin(), idx.end(),
              [&](int32_t a, int32_t d) { return x[a] > x[d] || (x[a] == x[d] && a < d); });
    for (int64_t j = 0; j < c.k && j < int64_t(idx.size()); ++j) {
      int64_t i = idx[j];
      if (!c.page_table.empty()) {
        const int64_t mask = (int64_t(1) << c.page_bits) - 1;
        i = (int64_t(c.page_table[b * c.pt_stride + (i >> c.page_bits)]) << c.page_bits) | (i & mask);
      }
      out[b * c.k + j] = int32_t(i);
    }
  }
  return out;
}

}  // namespace lt_cases
}  // namespace hart
