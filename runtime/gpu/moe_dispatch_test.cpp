// The device MoE plan (moe_dispatch.h) against a host plan built the CPU
// MoE's way (rows grouped by expert ascending, (t, k) in index order inside
// one, tiles of <= 8 rows): offsets, weights, slots and tiles all equal, on
// fresh random routings from one token to the plan's row limit, expert counts
// that do and do not fill a CTA, ids outside [0, E) routed nowhere.
#include "runtime/gpu/moe_dispatch.h"

#include "kernels/testing/cuda_test_util.h"
#include "kernels/testing/op_test_util.h"
#include "runtime/core/codecs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace hart::gpu {
namespace {

using testing::cuda_synced;
using testing::device_vec;
using testing::seed_trace;
using testing::test_seed;

struct plan {
  std::vector<int64_t> src;
  std::vector<float> row_weight;
  std::vector<int32_t> slot, tile_group, tile_row0, tile_rows;
};

plan host_plan(const std::vector<int32_t>& experts, const std::vector<float>& weights, int64_t k, int64_t E,
               int64_t row_width, int32_t tile) {
  plan h;
  h.slot.assign(experts.size(), -1);
  for (int32_t e = 0; e < E; ++e) {
    const int32_t first = int32_t(h.src.size());
    for (size_t i = 0; i < experts.size(); ++i) {
      if (experts[i] != e) continue;
      h.slot[i] = int32_t(h.src.size());
      h.src.push_back(int64_t(i) / k * row_width);
      h.row_weight.push_back(weights[i]);
    }
    for (int32_t r = first; r < int32_t(h.src.size()); r += tile) {
      h.tile_group.push_back(e);
      h.tile_row0.push_back(r);
      h.tile_rows.push_back(std::min<int32_t>(tile, int32_t(h.src.size()) - r));
    }
  }
  return h;
}

void run_case(std::mt19937& rng, int64_t T, int64_t k, int64_t E, bool stray_ids, int32_t tile = 8) {
  SCOPED_TRACE("tokens=" + std::to_string(T) + " k=" + std::to_string(k) + " experts=" + std::to_string(E) +
               " tiles of " + std::to_string(tile));
  const int64_t n = T * k, row_width = 4096;
  std::vector<int32_t> experts(static_cast<size_t>(n)), all(static_cast<size_t>(E));
  std::vector<float> weights(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  for (int64_t t = 0; t < T; ++t) {  // k distinct experts per token, skewed towards the low ids
    std::shuffle(all.begin(), all.begin() + std::min<int64_t>(E, 4 * k), rng);
    if (t % 3 == 0) std::shuffle(all.begin(), all.end(), rng);
    for (int64_t j = 0; j < k; ++j)
      experts[size_t(t * k + j)] = all[size_t(j)], weights[size_t(t * k + j)] = u(rng);
  }
  if (stray_ids) experts[0] = -1, experts[size_t(n - 1)] = int32_t(E);
  const plan want = host_plan(experts, weights, k, E, row_width, tile);

  const int64_t max_tiles = moe_plan_max_tiles(n, E, tile);
  ASSERT_GE(max_tiles, int64_t(want.tile_group.size()));
  device_vec<int32_t> d_e(experts), d_slot(std::vector<int32_t>(size_t(n), 7)), d_n(std::vector<int32_t>{-1});
  device_vec<float> d_w(weights), d_rw(std::vector<float>(size_t(n), -1.f));
  device_vec<int64_t> d_src(std::vector<int64_t>(size_t(n), -1));
  device_vec<int32_t> d_tg(std::vector<int32_t>(size_t(max_tiles), -1)),
      d_tr(std::vector<int32_t>(size_t(max_tiles), -1)), d_tn(std::vector<int32_t>(size_t(max_tiles), -1));
  moe_plan_params p;
  p.experts = d_e.get();
  p.weights = d_w.get();
  p.n_tokens = T;
  p.k = k;
  p.n_experts = E;
  p.row_width = row_width;
  p.src = d_src.get();
  p.row_weight = d_rw.get();
  p.slot = d_slot.get();
  p.tile_group = d_tg.get();
  p.tile_row0 = d_tr.get();
  p.tile_rows = d_tn.get();
  p.n_tiles = d_n.get();
  p.max_tile_rows = tile;
  const status st = moe_plan_cuda(p, nullptr);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_TRUE(cuda_synced(nullptr));

  const size_t rows = want.src.size(), tiles = want.tile_group.size();
  ASSERT_EQ(d_n.to_host()[0], int32_t(tiles));
  EXPECT_EQ(d_slot.to_host(), want.slot);
  const std::vector<int64_t> src = d_src.to_host();
  const std::vector<float> rw = d_rw.to_host();
  EXPECT_EQ(std::vector<int64_t>(src.begin(), src.begin() + rows), want.src);
  EXPECT_EQ(std::vector<float>(rw.begin(), rw.begin() + rows), want.row_weight);
  const auto tg = d_tg.to_host(), tr = d_tr.to_host(), tn = d_tn.to_host();
  EXPECT_EQ(std::vector<int32_t>(tg.begin(), tg.begin() + tiles), want.tile_group);
  EXPECT_EQ(std::vector<int32_t>(tr.begin(), tr.begin() + tiles), want.tile_row0);
  EXPECT_EQ(std::vector<int32_t>(tn.begin(), tn.begin() + tiles), want.tile_rows);
}

TEST(moe_dispatch, plan_equals_the_host_plan) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  run_case(rng, 1, 6, 256, false);
  run_case(rng, 32, 6, 256, false);
  run_case(rng, 300, 8, 64, true);
  run_case(rng, 5, 2, 3000, true);      // more experts than the CTA's threads
  run_case(rng, 1024, 8, 256, false);   // the plan's row limit
  run_case(rng, 300, 8, 64, true, 64);  // wide tiles (prefill on tensor cores)
  run_case(rng, 512, 6, 256, false, 64);
}

// The combine against a host sum in the stated order, every bit: y[t] += the
// token's rows in ascending expert order (the shared expert already in y), and
// with bf16 the official order: bf16(Σ bf16(rows) from zero, + y) — the two
// orders differ in fp32 rounding, so an order swapped either way shows.
TEST(moe_dispatch, combine_sums_in_expert_order) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const int64_t T = 37, k = 6, E = 64, width = 300, n_rows = T * k;
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<int32_t> experts(static_cast<size_t>(n_rows)), slot(static_cast<size_t>(n_rows)),
      all(static_cast<size_t>(E));
  std::iota(all.begin(), all.end(), 0);
  for (int64_t t = 0; t < T; ++t) {
    std::shuffle(all.begin(), all.end(), rng);
    std::copy_n(all.begin(), k, experts.begin() + t * k);
  }
  std::iota(slot.begin(), slot.end(), 0);
  std::shuffle(slot.begin(), slot.end(), rng);
  slot[5] = -1;  // a row routed nowhere adds nothing
  std::vector<float> ye(static_cast<size_t>(n_rows * width)), y0(static_cast<size_t>(T * width));
  for (float& v : ye) v = nd(rng) * 100.0f;
  for (float& v : y0) v = round_to_bf16(nd(rng));
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "fp32");
    std::vector<float> want = y0;
    for (int64_t t = 0; t < T; ++t) {
      std::vector<std::pair<int32_t, int32_t>> rows;
      for (int64_t j = 0; j < k; ++j) {
        if (slot[size_t(t * k + j)] >= 0)
          rows.push_back({experts[size_t(t * k + j)], slot[size_t(t * k + j)]});
      }
      std::sort(rows.begin(), rows.end());
      for (int64_t c = 0; c < width; ++c) {
        float acc = bf16 ? 0.0f : y0[size_t(t * width + c)];
        for (auto [e, sl] : rows) {
          const float v = ye[size_t(int64_t(sl) * width + c)];
          acc = acc + (bf16 ? round_to_bf16(v) : v);
        }
        want[size_t(t * width + c)] = bf16 ? round_to_bf16(acc + y0[size_t(t * width + c)]) : acc;
      }
    }
    device_vec<float> d_y(y0), d_ye(ye);
    device_vec<int32_t> d_experts(experts), d_slot(slot);
    ASSERT_TRUE(
        moe_combine_cuda(d_y.get(), d_ye.get(), d_experts.get(), d_slot.get(), T, k, width, bf16, nullptr)
            .ok());
    ASSERT_TRUE(cuda_synced(nullptr));
    const std::vector<float> got = d_y.to_host();
    int64_t n_diff = 0;
    for (size_t i = 0; i < got.size(); ++i) n_diff += got[i] != want[i];
    EXPECT_EQ(n_diff, 0) << "of " << got.size();
  }
}

}  // namespace
}  // namespace hart::gpu
