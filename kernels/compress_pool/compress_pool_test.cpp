// compress_pool_cpu against a double-precision per-channel softmax pooling
// written from v4-model.md §4.4: out[ch] = Σ_j softmax_j(gate_j[ch])·kv_j[ch],
// where −inf gates get weight 0 and a channel whose gates are all −inf pools to 0.
#include "kernels/compress_pool/compress_pool.h"

#include "kernels/testing/cuda_test_util.h"
#include "kernels/testing/op_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace hart {
namespace {

// -- test helpers --------------------------------------------------------------

using testing::all_close;
using testing::guarded_buffer;
using testing::guards_intact;
using testing::k_nan;
using testing::seed_trace;
using testing::test_seed;
using testing::unguarded;

const float k_ninf = -std::numeric_limits<float>::infinity();
constexpr float k_guard_val = 12345.0f;  // one guard on each side of the output

// Candidates as separate rows (the op takes row pointers, as gathered from a cache).
struct candidates {
  std::vector<std::vector<float>> kv, gate;
  std::vector<const float*> kv_ptr, gate_ptr;
  void index() {
    kv_ptr.clear();
    gate_ptr.clear();
    for (auto& r : kv) kv_ptr.push_back(r.data());
    for (auto& r : gate) gate_ptr.push_back(r.data());
  }
};

candidates random_candidates(std::mt19937& rng, int64_t n_cand, int64_t dim, float gate_sigma) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  candidates c;
  c.kv.assign(n_cand, std::vector<float>(dim));
  c.gate.assign(n_cand, std::vector<float>(dim));
  for (int64_t j = 0; j < n_cand; ++j) {
    for (int64_t ch = 0; ch < dim; ++ch) {
      c.kv[j][ch] = nd(rng);
      c.gate[j][ch] = gate_sigma * nd(rng);
    }
  }
  c.index();
  return c;
}

std::vector<float> run(const candidates& c, int64_t dim) {
  std::vector<float> out = guarded_buffer(dim, 1, k_nan, k_guard_val);
  compress_pool_params p;
  p.kv = c.kv_ptr.data();
  p.gate = c.gate_ptr.data();
  p.out = out.data() + 1;
  p.n_cand = int64_t(c.kv.size());
  p.dim = dim;
  const status st = compress_pool_cpu(p);
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_TRUE(guards_intact(out, 1, k_guard_val));
  return unguarded(out, 1);
}

// want[ch] and mag[ch] = Σ_j w_j·|kv_j[ch]| (bounds the rounding of the weighted sum).
void reference(const candidates& c, int64_t dim, std::vector<double>& want, std::vector<double>& mag) {
  want.assign(dim, 0.0);
  mag.assign(dim, 0.0);
  for (int64_t ch = 0; ch < dim; ++ch) {
    double mx = -INFINITY;
    for (const auto& g : c.gate) {
      if (g[ch] != k_ninf) mx = std::max(mx, double(g[ch]));
    }
    if (mx == -INFINITY) continue;  // no live candidate: 0
    double z = 0;
    for (const auto& g : c.gate) z += g[ch] == k_ninf ? 0.0 : std::exp(double(g[ch]) - mx);
    for (size_t j = 0; j < c.gate.size(); ++j) {
      if (c.gate[j][ch] == k_ninf) continue;
      const double w = std::exp(double(c.gate[j][ch]) - mx) / z;
      want[ch] += w * c.kv[j][ch];
      mag[ch] += w * std::fabs(c.kv[j][ch]);
    }
  }
}

// fp32 exp/divide per weight and an fp32 sum of n_cand products: a few ulps of
// Σ w·|kv|, and an error of δ in a gate moves its weight by about δ.
constexpr double k_rtol = 1e-5;

const int64_t k_n_cands[] = {1, 2, 3, 8, 19, 111, 128};
const int64_t k_dims[] = {1, 3, 19, 111, 512};

// -- tests -----------------------------------------------------------------------

TEST(compress_pool, matches_reference) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (int64_t n_cand : k_n_cands) {
    for (int64_t dim : k_dims) {
      SCOPED_TRACE("n_cand=" + std::to_string(n_cand) + " dim=" + std::to_string(dim));
      const auto c = random_candidates(rng, n_cand, dim, 3.0f);
      const auto got = run(c, dim);
      std::vector<double> want, mag;
      reference(c, dim, want, mag);
      EXPECT_TRUE(all_close(got.data(), got.size(), want, mag, k_rtol, 0.0));
    }
  }
}

// Gate logits of ±1e4 overflow a naive exp; the softmax must stay finite.
TEST(compress_pool, large_gates_are_stable) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (int64_t n_cand : {2, 8, 111}) {
    SCOPED_TRACE("n_cand=" + std::to_string(n_cand));
    auto c = random_candidates(rng, n_cand, 19, 1.0f);
    // offsets of ±1e4 with O(1) spread around them; fp32 spacing at 1e4 is ~1e-3,
    // which the reference sees exactly (it reads the same fp32 gates)
    for (int64_t j = 0; j < n_cand; ++j) {
      for (auto& g : c.gate[j]) g += (j % 2 ? 1e4f : -1e4f);
    }
    const auto got = run(c, 19);
    std::vector<double> want, mag;
    reference(c, 19, want, mag);
    EXPECT_TRUE(all_close(got.data(), got.size(), want, mag, k_rtol, 0.0));
  }
}

// One softmax per channel, not per token: channel 0 prefers candidate 0,
// channel 1 prefers candidate 1.
TEST(compress_pool, softmax_is_per_channel) {
  candidates c;
  c.kv = {{1.0f, 2.0f}, {3.0f, 4.0f}};
  c.gate = {{50.0f, -50.0f}, {-50.0f, 50.0f}};
  c.index();
  const auto got = run(c, 2);
  EXPECT_NEAR(got[0], 1.0f, 1e-6);
  EXPECT_NEAR(got[1], 4.0f, 1e-6);
  // equal gates: plain mean
  c.gate = {{0.5f, -3.0f}, {0.5f, -3.0f}};
  c.index();
  const auto mean = run(c, 2);
  EXPECT_NEAR(mean[0], 2.0f, 1e-6);
  EXPECT_NEAR(mean[1], 3.0f, 1e-6);
}

// −inf gates get weight exactly 0 (CSA block 0's absent "previous block"
// half): the result equals pooling over the live candidates only, whatever
// the dead candidates' kv holds.
TEST(compress_pool, neg_inf_gates_have_zero_weight) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  std::bernoulli_distribution dead(0.4);
  for (int64_t n_cand : {2, 3, 8, 19}) {
    for (int64_t dim : {1, 19, 111}) {
      SCOPED_TRACE("n_cand=" + std::to_string(n_cand) + " dim=" + std::to_string(dim));
      auto c = random_candidates(rng, n_cand, dim, 3.0f);
      for (int64_t j = 0; j < n_cand; ++j) {
        for (int64_t ch = 0; ch < dim; ++ch) {
          if (dead(rng)) {
            c.gate[j][ch] = k_ninf;
            c.kv[j][ch] = 1e30f;  // would dominate if it leaked in
          }
        }
      }
      const auto got = run(c, dim);
      std::vector<double> want, mag;
      reference(c, dim, want, mag);
      EXPECT_TRUE(all_close(got.data(), got.size(), want, mag, k_rtol, 0.0));
    }
  }
  // CSA block 0 layout: 4 dead "A" candidates, 4 live "B" candidates
  auto c = random_candidates(rng, 8, 128, 2.0f);
  auto live = c;
  live.kv.erase(live.kv.begin(), live.kv.begin() + 4);
  live.gate.erase(live.gate.begin(), live.gate.begin() + 4);
  live.index();
  for (int j = 0; j < 4; ++j) {
    for (auto& g : c.gate[j]) g = k_ninf;
  }
  const auto got = run(c, 128);
  const auto got_live = run(live, 128);
  std::vector<double> want, mag;
  reference(live, 128, want, mag);
  EXPECT_TRUE(all_close(got.data(), got.size(), want, mag, k_rtol, 0.0));
  for (int64_t ch = 0; ch < 128; ++ch) EXPECT_NEAR(got[ch], got_live[ch], 1e-6 * (mag[ch] + 1e-30)) << ch;
}

// A missing candidate's kv may hold anything (CSA block 0 has no previous
// block to read): with a −inf gate, even an Inf or NaN kv must not reach the
// output, since its weight is 0, not 0·kv.
TEST(compress_pool, neg_inf_gate_ignores_non_finite_kv) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const int64_t dim = 19;
  auto c = random_candidates(rng, 8, dim, 2.0f);
  for (int j = 0; j < 4; ++j) {
    for (int64_t ch = 0; ch < dim; ++ch) {
      c.gate[j][ch] = k_ninf;
      c.kv[j][ch] = ch % 2 ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
    }
  }
  const auto got = run(c, dim);
  std::vector<double> want, mag;
  reference(c, dim, want, mag);
  EXPECT_TRUE(all_close(got.data(), got.size(), want, mag, k_rtol, 0.0));
}

// A channel whose every gate is −inf pools to exactly 0 (not NaN); the other
// channels are unaffected.
TEST(compress_pool, all_neg_inf_channel_is_zero) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (int64_t n_cand : {1, 3, 8}) {
    auto c = random_candidates(rng, n_cand, 19, 3.0f);
    for (auto& g : c.gate) g[0] = g[7] = g[18] = k_ninf;
    const auto got = run(c, 19);
    EXPECT_EQ(got[0], 0.0f);
    EXPECT_EQ(got[7], 0.0f);
    EXPECT_EQ(got[18], 0.0f);
    std::vector<double> want, mag;
    reference(c, 19, want, mag);
    EXPECT_TRUE(all_close(got.data(), got.size(), want, mag, k_rtol, 0.0));
  }
}

// One candidate has weight exactly 1: out == kv bit for bit, whatever its gate.
TEST(compress_pool, single_candidate_returns_kv_exactly) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (int64_t dim : k_dims) {
    auto c = random_candidates(rng, 1, dim, 100.0f);
    c.gate[0][0] = 3e38f;
    c.gate[0][dim - 1] = -3e38f;
    const auto got = run(c, dim);
    for (int64_t ch = 0; ch < dim; ++ch) EXPECT_EQ(got[ch], c.kv[0][ch]) << "dim=" << dim << " ch=" << ch;
  }
}

TEST(compress_pool, rejects_bad_arguments) {
  candidates c;
  c.kv = {{1.0f}};
  c.gate = {{0.0f}};
  c.index();
  float out = 0;
  compress_pool_params p;
  p.kv = c.kv_ptr.data();
  p.gate = c.gate_ptr.data();
  p.out = &out;
  p.n_cand = 1;
  p.dim = 1;
  ASSERT_TRUE(compress_pool_cpu(p).ok());
  compress_pool_params q = p;
  q.dim = 0;
  EXPECT_FALSE(compress_pool_cpu(q).ok());
  q = p;
  q.gate = nullptr;
  EXPECT_FALSE(compress_pool_cpu(q).ok());
}

// -- CUDA parity -------------------------------------------------------------------

#ifdef HART_CUDA

using testing::cuda_synced;
using testing::device_vec;

// compress_pool_cuda vs compress_pool_cpu: the same fp32 operations in the same
// order per channel, except expf (2 ulp on the device, 1 in glibc): each weight
// moves by ~3 ulp relative, so |Δout| <= ~4e-7 · Σ w·|kv|: rtol 2e-6 of that sum.
constexpr double k_cuda_rtol = 2e-6;

// Runs compress_pool_cuda with the candidate rows stored in reverse order and
// 7-float NaN gaps in one device buffer (only the row pointers locate them).
std::vector<float> run_cuda(const candidates& c, int64_t dim) {
  const int64_t n_cand = int64_t(c.kv.size()), pitch = dim + 7;
  std::vector<float> rows(2 * n_cand * pitch, k_nan);
  for (int64_t j = 0; j < n_cand; ++j) {
    const int64_t slot = n_cand - 1 - j;
    std::copy(c.kv[j].begin(), c.kv[j].end(), rows.begin() + slot * pitch);
    std::copy(c.gate[j].begin(), c.gate[j].end(), rows.begin() + (n_cand + slot) * pitch);
  }
  device_vec<float> d_rows(rows);
  std::vector<const float*> kv_ptr(n_cand), gate_ptr(n_cand);
  for (int64_t j = 0; j < n_cand; ++j) {
    kv_ptr[j] = d_rows.get() + (n_cand - 1 - j) * pitch;
    gate_ptr[j] = d_rows.get() + (2 * n_cand - 1 - j) * pitch;
  }
  device_vec<const float*> d_kv(kv_ptr), d_gate(gate_ptr);
  device_vec<float> d_out(guarded_buffer(dim, 1, k_nan, k_guard_val));
  compress_pool_params p;
  p.kv = d_kv.get();
  p.gate = d_gate.get();
  p.out = d_out.get() + 1;
  p.n_cand = n_cand;
  p.dim = dim;
  const status st = compress_pool_cuda(p, nullptr);
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_TRUE(cuda_synced(nullptr));
  const auto out = d_out.to_host();
  EXPECT_TRUE(guards_intact(out, 1, k_guard_val));
  return unguarded(out, 1);
}

TEST(compress_pool, cuda_matches_cpu) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  std::bernoulli_distribution dead(0.3);
  for (int64_t n_cand : {1, 2, 3, 8, 19, 128, 1000}) {
    for (int64_t dim : {1, 3, 19, 257, 512, 2049}) {
      for (int variant = 0; variant < 3; ++variant) {  // plain, large gates, dead (-inf) candidates
        SCOPED_TRACE("n_cand=" + std::to_string(n_cand) + " dim=" + std::to_string(dim) +
                     " variant=" + std::to_string(variant));
        auto c = random_candidates(rng, n_cand, dim, variant == 1 ? 100.0f : 3.0f);
        if (variant == 2) {
          for (int64_t j = 0; j < n_cand; ++j) {
            for (int64_t ch = 0; ch < dim; ++ch) {
              if (dead(rng) || ch % 5 == 0) {  // every 5th channel: all dead, pools to 0
                c.gate[j][ch] = k_ninf;
                c.kv[j][ch] = ch % 2 ? k_nan : std::numeric_limits<float>::infinity();
              }
            }
          }
        }
        const auto want_f = run(c, dim);
        const auto got = run_cuda(c, dim);
        std::vector<double> want, mag;
        reference(c, dim, want, mag);
        want.assign(want_f.begin(), want_f.end());
        EXPECT_TRUE(all_close(got.data(), got.size(), want, mag, k_cuda_rtol, 0.0));
        if (n_cand == 1) {  // weight exactly 1 (or 0 for a dead channel) on the device too
          EXPECT_EQ(0, std::memcmp(got.data(), want_f.data(), got.size() * sizeof(float)));
        }
      }
    }
  }
}

// The batched form: several outputs with different candidate counts (and
// dead channels) in one launch equal one compress_pool_cuda call each, bitwise.
TEST(compress_pool, cuda_batch_equals_one_call_per_output) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const int64_t dim = 300, n_cand_max = 16;
  const std::vector<int64_t> counts = {1, 8, 16, 3, 16, 5};
  const int64_t n_out = int64_t(counts.size());
  std::vector<float> rows;
  std::vector<const float*> kv_slot(n_out * n_cand_max, nullptr), gate_slot(n_out * n_cand_max, nullptr);
  std::vector<std::pair<int64_t, int64_t>> where;  // (kv row, gate row) per slot, resolved after upload
  for (int64_t o = 0; o < n_out; ++o) {
    auto c = random_candidates(rng, counts[size_t(o)], dim, 3.0f);
    for (int64_t j = 0; j < counts[size_t(o)]; ++j) {
      if (o == 1) c.gate[j][7] = k_ninf;  // one channel all dead: pools to 0
      rows.insert(rows.end(), c.kv[j].begin(), c.kv[j].end());
      rows.insert(rows.end(), c.gate[j].begin(), c.gate[j].end());
      where.push_back({o * n_cand_max + j, int64_t(rows.size()) / dim - 2});
    }
  }
  device_vec<float> d_rows(rows);
  for (const auto& [slot, row] : where) {
    kv_slot[size_t(slot)] = d_rows.get() + row * dim;
    gate_slot[size_t(slot)] = d_rows.get() + (row + 1) * dim;
  }
  device_vec<const float*> d_kv(kv_slot), d_gate(gate_slot);
  device_vec<int64_t> d_n(counts);
  device_vec<float> d_batch(std::vector<float>(n_out * dim, k_nan)), d_one(std::vector<float>(n_out * dim, k_nan));
  compress_pool_batch_params bp;
  bp.kv = d_kv.get();
  bp.gate = d_gate.get();
  bp.n_cand = d_n.get();
  bp.out = d_batch.get();
  bp.n_out = n_out;
  bp.n_cand_max = n_cand_max;
  bp.dim = dim;
  ASSERT_TRUE(compress_pool_batch_cuda(bp, nullptr).ok());
  for (int64_t o = 0; o < n_out; ++o) {
    compress_pool_params p;
    p.kv = d_kv.get() + o * n_cand_max;
    p.gate = d_gate.get() + o * n_cand_max;
    p.out = d_one.get() + o * dim;
    p.n_cand = counts[size_t(o)];
    p.dim = dim;
    ASSERT_TRUE(compress_pool_cuda(p, nullptr).ok());
  }
  ASSERT_TRUE(cuda_synced(nullptr));
  const auto batch = d_batch.to_host(), one = d_one.to_host();
  EXPECT_EQ(0, std::memcmp(batch.data(), one.data(), batch.size() * sizeof(float)));
  EXPECT_EQ(batch[size_t(1 * dim + 7)], 0.0f) << "a channel with no live candidate pools to 0";
}

TEST(compress_pool, cuda_rejects_bad_arguments) {
  HART_SKIP_WITHOUT_CUDA();
  device_vec<float> d_row(std::vector<float>(4, 1.0f));
  device_vec<const float*> d_ptr(std::vector<const float*>{d_row.get()});
  compress_pool_params p;
  p.kv = d_ptr.get();
  p.gate = d_ptr.get();
  p.out = d_row.get();
  p.n_cand = 0;
  p.dim = 4;
  EXPECT_EQ(compress_pool_cuda(p, nullptr).code(), status_code::invalid_argument);
  p.n_cand = 1;
  p.dim = 0;
  EXPECT_EQ(compress_pool_cuda(p, nullptr).code(), status_code::invalid_argument);
  p.dim = 4;
  p.gate = nullptr;
  EXPECT_EQ(compress_pool_cuda(p, nullptr).code(), status_code::invalid_argument);
}

#endif  // HART_CUDA

}  // namespace
}  // namespace hart
