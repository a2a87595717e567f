// The grouped linear (MoE experts in one call) on fresh random inputs:
//   - linear_grouped_cpu against a double sum of the same products, within
//     1e-5·Σ|x·w| (linear_cpu's bound); rows in no tile untouched; bad tiles,
//     counts and misaligned weights refused;
//   - under HART_CUDA, linear_grouped_cuda: groups of e4m3 codes bitwise equal
//     to linear_fp8_cuda on the same QDQ'd rows (one dot product for both),
//     fp32 groups within 2e-5·Σ|x·w| of the CPU; tiles past *n_tiles and rows
//     in no tile untouched; vector (in % 16 == 0) and scalar paths;
//     linear_grouped_tc_cuda (tensor cores) within 2^-12·Σ|x'·w'| of the exact
//     sum of the QDQ'd rows, for FP8 and for MXFP4 groups (the CPU decodes
//     MXFP4 groups exactly; the CUDA-core form refuses them).
#include "kernels/linear/linear.h"
#include "kernels/quant/quant.h"
#include "kernels/testing/op_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <tuple>
#include <vector>
#ifdef HART_CUDA
#include "kernels/testing/cuda_test_util.h"
#endif

namespace hart {
namespace {

using testing::all_close;
using testing::k_sentinel;
using testing::normal_vec;
using testing::seed_trace;
using testing::test_seed;

// One group's weight: codes + scales (fp8, or MXFP4 pairs + per-32 scales)
// or fp32 values; `deq` is what the product sees.
struct group_weight {
  bool fp8 = false;
  std::vector<uint8_t> q, scale;
  std::vector<float> f32, deq;
};

// MXFP4 weights whose 32-blocks span scales 2^-40..2^0 (and one all-zero
// block per row), so the per-block scaling is exercised beyond one exponent.
group_weight random_mxfp4_group(std::mt19937& rng, int64_t out, int64_t in) {
  group_weight g;
  g.fp8 = true;
  auto w = normal_vec(rng, out * in, 0.05f);
  std::uniform_int_distribution<int> shift(-40, 0);
  for (int64_t r = 0; r < out; ++r) {
    for (int64_t b = 0; b < in / 32; ++b) {
      const float f = b == (r % (in / 32)) ? 0.0f : std::ldexp(1.0f, shift(rng));
      for (int64_t k = 0; k < 32; ++k) w[size_t(r * in + b * 32 + k)] *= f;
    }
  }
  g.q.resize(size_t(out * in / 2));
  g.scale.resize(size_t(out * in / 32));
  g.deq.resize(size_t(out * in));
  EXPECT_TRUE(mxfp4_quantize(w.data(), out, in, g.q.data(), g.scale.data()).ok());
  EXPECT_TRUE(mxfp4_dequantize(g.q.data(), g.scale.data(), out, in, g.deq.data()).ok());
  EXPECT_TRUE(mxfp4_mma_order(g.q.data(), out, in, g.q.data()).ok());  // the grouped linear's order
  return g;
}

group_weight random_group(std::mt19937& rng, int64_t out, int64_t in, bool fp8) {
  group_weight g;
  g.fp8 = fp8;
  auto w = normal_vec(rng, out * in, 0.05f);
  if (!fp8) {
    g.f32 = w;
    g.deq = w;
    return g;
  }
  g.q.resize(size_t(out * in));
  g.scale.resize(size_t(((out + 127) / 128) * ((in + 127) / 128)));
  g.deq.resize(size_t(out * in));
  EXPECT_TRUE(fp8_block_quantize(w.data(), out, in, 128, g.q.data(), g.scale.data()).ok());
  EXPECT_TRUE(fp8_block_dequantize(g.q.data(), g.scale.data(), out, in, 128, g.deq.data()).ok());
  return g;
}

// A random grouping of n_rows rows: each group's rows contiguous, cut into tiles of <= 8.
struct tiling {
  std::vector<int32_t> group, row0, rows;
  std::vector<int32_t> group_of_row;  // -1: the row is in no tile
};

void fill_tiling(std::mt19937& rng, int64_t n_rows, int64_t n_groups, tiling& t, int32_t tile_max) {
  std::uniform_int_distribution<int> len(0, 2 * tile_max + 3), g(0, int(n_groups - 1)), skip(0, 5);
  int32_t r = 0;
  while (r < n_rows) {
    if (skip(rng) == 0) {  // a row no tile covers
      ++r;
      continue;
    }
    const int32_t grp = g(rng), n = std::min<int32_t>(int32_t(n_rows) - r, len(rng) + 1);
    for (int32_t done = 0; done < n;) {
      const int32_t k = std::min<int32_t>(n - done, tile_max);
      t.group.push_back(grp);
      t.row0.push_back(r + done);
      t.rows.push_back(k);
      done += k;
    }
    for (int32_t i = 0; i < n; ++i) t.group_of_row[size_t(r + i)] = grp;
    r += n;
  }
}

// At least one tile when n_rows > 0 (an empty tile table has null data(),
// which the ops rightly refuse).
tiling random_tiling(std::mt19937& rng, int64_t n_rows, int64_t n_groups,
                     int32_t tile_max = int32_t(linear_grouped_tile_rows)) {
  tiling t;
  do {
    t = tiling{};
    t.group_of_row.assign(size_t(n_rows), -1);
    fill_tiling(rng, n_rows, n_groups, t, tile_max);
  } while (n_rows > 0 && t.group.empty());
  return t;
}

// x QDQ'd per row per 128 channels (what the fp8 weights expect).
std::vector<float> qdq_rows(std::vector<float> x, int64_t n_rows, int64_t in) {
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t k0 = 0; k0 < in; k0 += 128) {
      const int64_t len = std::min<int64_t>(128, in - k0);
      EXPECT_TRUE(act_quant_fp8_qdq(x.data() + r * in + k0, len, len).ok());
    }
  }
  return x;
}

// Double sums and Σ|terms| for every covered row.
void exact(const std::vector<float>& x, const std::vector<group_weight>& gw, const tiling& t, int64_t in,
           int64_t out, std::vector<double>* want, std::vector<double>* mag) {
  const int64_t n_rows = int64_t(t.group_of_row.size());
  want->assign(size_t(n_rows * out), 0.0);
  mag->assign(size_t(n_rows * out), 0.0);
  for (int64_t r = 0; r < n_rows; ++r) {
    const int32_t g = t.group_of_row[size_t(r)];
    if (g < 0) continue;
    for (int64_t o = 0; o < out; ++o) {
      double a = 0, m = 0;
      for (int64_t i = 0; i < in; ++i) {
        const double p = double(x[size_t(r * in + i)]) * gw[size_t(g)].deq[size_t(o * in + i)];
        a += p;
        m += std::fabs(p);
      }
      (*want)[size_t(r * out + o)] = a;
      (*mag)[size_t(r * out + o)] = m;
    }
  }
}

struct problem {
  int64_t in = 0, out = 0, n_rows = 0;
  std::vector<group_weight> groups;
  tiling tiles;
  std::vector<float> x;  // QDQ'd: the fp8 groups' products are then exact
};

problem make_problem(std::mt19937& rng, int64_t in, int64_t out, int64_t n_rows) {
  problem p;
  p.in = in;
  p.out = out;
  p.n_rows = n_rows;
  for (int g = 0; g < 5; ++g) p.groups.push_back(random_group(rng, out, in, g % 2 == 0));
  p.tiles = random_tiling(rng, n_rows, int64_t(p.groups.size()));
  p.x = qdq_rows(normal_vec(rng, n_rows * in, 1.0f), n_rows, in);
  return p;
}

std::vector<linear_group_weight> host_groups(const problem& p) {
  std::vector<linear_group_weight> g;
  for (const group_weight& w : p.groups) {
    g.push_back(w.fp8 ? linear_group_weight{w.q.data(), w.scale.data()}
                      : linear_group_weight{w.f32.data(), nullptr});
  }
  return g;
}

// linear_grouped_cpu on `p` within 1e-5·Σ|x·w| of the double sums (linear_cpu's bound), rows in no tile
// untouched.
void expect_cpu_exact(const problem& p, bool mxfp4) {
  const std::vector<linear_group_weight> g = host_groups(p);
  std::vector<float> y(size_t(p.n_rows * p.out), k_sentinel);
  const int32_t n_tiles = int32_t(p.tiles.group.size());
  linear_grouped_params lp{p.x.data(),
                           y.data(),
                           g.data(),
                           int64_t(g.size()),
                           p.tiles.group.data(),
                           p.tiles.row0.data(),
                           p.tiles.rows.data(),
                           &n_tiles,
                           n_tiles,
                           p.n_rows,
                           p.in,
                           p.out};
  lp.w_mxfp4 = mxfp4;
  ASSERT_TRUE(linear_grouped_cpu(lp).ok());
  std::vector<double> want, mag;
  exact(p.x, p.groups, p.tiles, p.in, p.out, &want, &mag);
  for (int64_t r = 0; r < p.n_rows; ++r) {
    for (int64_t o = 0; o < p.out; ++o) {
      const size_t i = size_t(r * p.out + o);
      if (p.tiles.group_of_row[size_t(r)] < 0) {
        ASSERT_EQ(y[i], k_sentinel) << "row " << r << " is in no tile";
      } else {
        ASSERT_LE(std::fabs(y[i] - want[i]), 1e-5 * mag[i]) << "row " << r << " out " << o;
      }
    }
  }
}

TEST(linear_grouped, cpu_matches_the_exact_sum_and_leaves_other_rows) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (const auto& [in, out, n_rows] :
       {std::tuple<int64_t, int64_t, int64_t>{256, 136, 40}, {200, 64, 17}, {129, 7, 3}}) {
    expect_cpu_exact(make_problem(rng, in, out, n_rows), false);
  }
}

TEST(linear_grouped, cpu_decodes_mxfp4_groups) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const int64_t in = 256, out = 64, n_rows = 30;
  problem p;
  p.in = in;
  p.out = out;
  p.n_rows = n_rows;
  for (int i = 0; i < 3; ++i) p.groups.push_back(random_mxfp4_group(rng, out, in));
  p.tiles = random_tiling(rng, n_rows, 3);
  p.x = qdq_rows(normal_vec(rng, n_rows * in, 1.0f), n_rows, in);
  expect_cpu_exact(p, true);
  const std::vector<linear_group_weight> g = host_groups(p);
  std::vector<float> y(size_t(n_rows * out), k_sentinel);
  const int32_t n_tiles = int32_t(p.tiles.group.size());
  linear_grouped_params lp{p.x.data(),
                           y.data(),
                           g.data(),
                           int64_t(g.size()),
                           p.tiles.group.data(),
                           p.tiles.row0.data(),
                           p.tiles.rows.data(),
                           &n_tiles,
                           n_tiles,
                           n_rows,
                           96,
                           out};
  lp.w_mxfp4 = true;  // in = 96: not whole 128-blocks
  EXPECT_EQ(linear_grouped_cpu(lp).code(), status_code::invalid_argument);
}

// mxfp4_mma_order by hand: lane t's bytes of 32-block j land at 16t + 4j, and twice is the identity.
TEST(linear_grouped, mxfp4_mma_order_moves_each_lanes_pieces_together) {
  std::vector<uint8_t> pairs(2 * 128), once(pairs.size()), twice(pairs.size());
  for (size_t i = 0; i < pairs.size(); ++i) pairs[i] = uint8_t(i);
  ASSERT_TRUE(mxfp4_mma_order(pairs.data(), 1, 512, once.data()).ok());
  for (int b = 0; b < 4; ++b) {
    for (int t = 0; t < 4; ++t) {
      for (int j = 0; j < 4; ++j) {
        for (int i = 0; i < 4; ++i) {
          // byte 16j + 4t + i holds channels 32j + 8t + 2i and + 1 of block b
          ASSERT_EQ(once[size_t(b * 64 + 16 * t + 4 * j + i)], pairs[size_t(b * 64 + 16 * j + 4 * t + i)]);
        }
      }
    }
  }
  ASSERT_TRUE(mxfp4_mma_order(once.data(), 1, 512, twice.data()).ok());
  EXPECT_EQ(twice, pairs);
  EXPECT_EQ(mxfp4_mma_order(pairs.data(), 1, 96, once.data()).code(), status_code::invalid_argument);
}

TEST(linear_grouped, cpu_refuses_bad_tiles) {
  std::mt19937 rng(3);
  problem p = make_problem(rng, 32, 8, 12);
  const std::vector<linear_group_weight> g = host_groups(p);
  std::vector<float> y(size_t(12 * 8), 0.0f);
  int32_t group = 0, row0 = 0, rows = 4, n_tiles = 1;
  auto call = [&] {
    return linear_grouped_cpu(
        {p.x.data(), y.data(), g.data(), int64_t(g.size()), &group, &row0, &rows, &n_tiles, 1, 12, 32, 8});
  };
  EXPECT_TRUE(call().ok());
  group = 5;
  EXPECT_FALSE(call().ok()) << "group past n_groups";
  group = 0;
  rows = 9;
  EXPECT_FALSE(call().ok()) << "more rows than a tile holds";
  rows = 0;
  EXPECT_FALSE(call().ok()) << "an empty tile";
  rows = 4;
  row0 = 10;
  EXPECT_FALSE(call().ok()) << "rows past n_rows";
  row0 = 0;
  n_tiles = 2;
  EXPECT_FALSE(call().ok()) << "n_tiles past max_tiles";
  n_tiles = 1;
  std::vector<linear_group_weight> shifted = g;
  shifted[0].w = static_cast<const uint8_t*>(g[0].w) + 1;
  EXPECT_FALSE(linear_grouped_cpu({p.x.data(), y.data(), shifted.data(), int64_t(g.size()), &group, &row0,
                                   &rows, &n_tiles, 1, 12, 32, 8})
                   .ok())
      << "a misaligned weight";
}

#ifdef HART_CUDA

using testing::cuda_synced;
using testing::device_vec;

void run_cuda(std::mt19937& rng, int64_t in, int64_t out, int64_t n_rows) {
  SCOPED_TRACE("in=" + std::to_string(in) + " out=" + std::to_string(out) +
               " n_rows=" + std::to_string(n_rows));
  const problem p = make_problem(rng, in, out, n_rows);
  std::vector<std::unique_ptr<device_vec<uint8_t>>> dq, ds;
  std::vector<std::unique_ptr<device_vec<float>>> df;
  std::vector<linear_group_weight> g;
  for (const group_weight& w : p.groups) {
    if (w.fp8) {
      dq.push_back(std::make_unique<device_vec<uint8_t>>(w.q));
      ds.push_back(std::make_unique<device_vec<uint8_t>>(w.scale));
      g.push_back({dq.back()->get(), ds.back()->get()});
    } else {
      df.push_back(std::make_unique<device_vec<float>>(w.f32));
      g.push_back({df.back()->get(), nullptr});
    }
  }
  const int32_t n_tiles = int32_t(p.tiles.group.size());
  const int64_t max_tiles = n_tiles + 3;  // the plan's bound; the extra CTAs must do nothing
  std::vector<int32_t> tg = p.tiles.group, tr = p.tiles.row0, tn = p.tiles.rows;
  for (int i = 0; i < 3; ++i) tg.push_back(0), tr.push_back(0), tn.push_back(8);  // would overwrite rows 0..7
  device_vec<linear_group_weight> d_g(g);
  device_vec<int32_t> d_tg(tg), d_tr(tr), d_tn(tn), d_n(std::vector<int32_t>{n_tiles});
  device_vec<float> d_x(p.x), d_y(std::vector<float>(size_t(n_rows * out), k_sentinel));
  ASSERT_TRUE(linear_grouped_cuda({d_x.get(), d_y.get(), d_g.get(), int64_t(g.size()), d_tg.get(), d_tr.get(),
                                   d_tn.get(), d_n.get(), max_tiles, n_rows, in, out},
                                  nullptr)
                  .ok());
  ASSERT_TRUE(cuda_synced(nullptr));
  const std::vector<float> got = d_y.to_host();

  const std::vector<linear_group_weight> hg = host_groups(p);
  std::vector<float> cpu(size_t(n_rows * out), k_sentinel);
  ASSERT_TRUE(
      linear_grouped_cpu({p.x.data(), cpu.data(), hg.data(), int64_t(hg.size()), p.tiles.group.data(),
                          p.tiles.row0.data(), p.tiles.rows.data(), &n_tiles, n_tiles, n_rows, in, out})
          .ok());
  std::vector<double> want, mag;
  exact(p.x, p.groups, p.tiles, in, out, &want, &mag);

  // The fp8 groups' rows through linear_fp8_cuda, one call per group's run of rows.
  auto ctx = linear_cuda_context::create(64, 8192);
  ASSERT_TRUE(ctx.ok());
  device_vec<float> d_ref(std::vector<float>(size_t(n_rows * out), k_sentinel));
  for (size_t i = 0; i < p.tiles.group.size(); ++i) {
    const group_weight& w = p.groups[size_t(p.tiles.group[i])];
    if (!w.fp8) continue;
    const int64_t r0 = p.tiles.row0[i];
    ASSERT_TRUE(linear_fp8_cuda(
                    {d_x.get() + r0 * in, static_cast<const uint8_t*>(g[size_t(p.tiles.group[i])].w),
                     g[size_t(p.tiles.group[i])].w_scale, d_ref.get() + r0 * out, p.tiles.rows[i], in, out},
                    **ctx, nullptr)
                    .ok());
  }
  ASSERT_TRUE(cuda_synced(nullptr));
  const std::vector<float> ref = d_ref.to_host();

  for (int64_t r = 0; r < n_rows; ++r) {
    const int32_t grp = p.tiles.group_of_row[size_t(r)];
    for (int64_t o = 0; o < out; ++o) {
      const size_t i = size_t(r * out + o);
      if (grp < 0) {
        ASSERT_EQ(got[i], k_sentinel) << "row " << r << " is in no tile";
      } else if (p.groups[size_t(grp)].fp8) {
        ASSERT_EQ(std::memcmp(&got[i], &ref[i], sizeof(float)), 0)
            << "row " << r << " out " << o << ": " << got[i] << " vs linear_fp8_cuda " << ref[i];
      } else {
        ASSERT_LE(std::fabs(double(got[i]) - cpu[i]), 2e-5 * mag[i]) << "row " << r << " out " << o;
      }
    }
  }
}

// The tensor-core form: every group e4m3, x quantized on the device
// (fp8_act_quant_cuda), each covered row within 2^-12·Σ|x'·w'| of the exact
// sum of its QDQ'd row (the MMA's per-block fp32 sums, as the dense
// tensor-core linear); rows in no tile and tiles past *n_tiles untouched.
double run_cuda_tc(std::mt19937& rng, int64_t in, int64_t out, int64_t n_rows,
                   int32_t tile_max = int32_t(linear_grouped_tile_rows), bool mxfp4 = false) {
  SCOPED_TRACE(std::string(mxfp4 ? "MXFP4" : "FP8") + " tensor cores in=" + std::to_string(in) +
               " out=" + std::to_string(out) + " n_rows=" + std::to_string(n_rows) + " tiles of up to " +
               std::to_string(tile_max));
  std::vector<group_weight> groups;
  for (int g = 0; g < 5; ++g) {
    groups.push_back(mxfp4 ? random_mxfp4_group(rng, out, in) : random_group(rng, out, in, true));
  }
  const tiling tiles = random_tiling(rng, n_rows, int64_t(groups.size()), tile_max);
  const std::vector<float> raw = normal_vec(rng, n_rows * in, 1.0f);
  std::vector<std::unique_ptr<device_vec<uint8_t>>> dq, ds;
  std::vector<linear_group_weight> g;
  for (const group_weight& w : groups) {
    dq.push_back(std::make_unique<device_vec<uint8_t>>(w.q));
    ds.push_back(std::make_unique<device_vec<uint8_t>>(w.scale));
    g.push_back({dq.back()->get(), ds.back()->get()});
  }
  const int32_t n_tiles = int32_t(tiles.group.size());
  std::vector<int32_t> tg = tiles.group, tr = tiles.row0, tn = tiles.rows;
  for (int i = 0; i < 3; ++i)
    tg.push_back(0), tr.push_back(0), tn.push_back(8);  // past *n_tiles: must do nothing
  device_vec<linear_group_weight> d_g(g);
  device_vec<int32_t> d_tg(tg), d_tr(tr), d_tn(tn), d_n(std::vector<int32_t>{n_tiles});
  device_vec<float> d_raw(raw), d_y(std::vector<float>(size_t(n_rows * out), k_sentinel));
  device_vec<float> d_scales(std::vector<float>(size_t(n_rows * in / 128), 0.0f));
  device_vec<uint8_t> d_codes(std::vector<uint8_t>(size_t(n_rows * in), 0));
  EXPECT_TRUE(fp8_act_quant_cuda(d_raw.get(), in, d_codes.get(), d_scales.get(), n_rows, in, nullptr).ok());
  linear_grouped_params p{nullptr,    d_y.get(),  d_g.get(), int64_t(g.size()),  d_tg.get(),
                          d_tr.get(), d_tn.get(), d_n.get(), int64_t(tg.size()), n_rows,
                          in,         out};
  p.x_codes = d_codes.get();
  p.x_scales = d_scales.get();
  p.max_tile_rows = tile_max;
  p.w_mxfp4 = mxfp4;
  const status st = linear_grouped_tc_cuda(p, nullptr);
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_TRUE(cuda_synced(nullptr));
  const std::vector<float> got = d_y.to_host();
  std::vector<double> want, mag;
  exact(qdq_rows(raw, n_rows, in), groups, tiles, in, out, &want, &mag);
  double worst = 0;
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      const size_t i = size_t(r * out + o);
      if (tiles.group_of_row[size_t(r)] < 0) {
        EXPECT_EQ(got[i], k_sentinel) << "row " << r << " is in no tile";
        continue;
      }
      const double err = std::fabs(double(got[i]) - want[i]);
      worst = std::max(worst, err / std::max(mag[i], 1e-30));
      EXPECT_LE(err, std::ldexp(mag[i], -12))
          << "row " << r << " out " << o << ": " << got[i] << " vs " << want[i];
    }
  }
  return worst;
}

TEST(linear_grouped, cuda_tensor_cores_match_the_exact_sum) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  double worst = 0;
  worst = std::max(worst, run_cuda_tc(rng, 256, 128, 40));
  worst = std::max(worst, run_cuda_tc(rng, 4096, 256, 9));
  worst = std::max(worst, run_cuda_tc(rng, 2048, 512, 1));
  std::printf("linear_grouped_tc: worst |gpu - exact| / sum|x'w'| = %.3g\n", worst);
}

// Wide tiles (prefill): up to 64 rows of one group per tile, every 16 in one
// MMA; runs of 1-131 rows per group, so tiles of 1, 16, 17 and 64 rows occur.
TEST(linear_grouped, cuda_tensor_cores_wide_tiles_match_the_exact_sum) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const int32_t wide = int32_t(linear_grouped_wide_tile_rows);
  double worst = 0;
  worst = std::max(worst, run_cuda_tc(rng, 256, 128, 300, wide));
  worst = std::max(worst, run_cuda_tc(rng, 4096, 256, 200, wide));
  worst = std::max(worst, run_cuda_tc(rng, 2048, 512, 1, wide));
  worst = std::max(worst, run_cuda_tc(rng, 512, 384, 100, 16));
  std::printf("linear_grouped_tc wide: worst |gpu - exact| / sum|x'w'| = %.3g\n", worst);
}

// MXFP4 groups (W4A8): decode's narrow tiles at 1..64 routed rows and
// prefill's wide ones, at V4-Flash's expert shapes (4096 -> 2048 -> 4096)
// and small ones; the same bound as the FP8 groups (each 32-block's MMA sum,
// then its scales, in fp32).
TEST(linear_grouped, cuda_mxfp4_tensor_cores_match_the_exact_sum) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const int32_t narrow = int32_t(linear_grouped_tile_rows), wide = int32_t(linear_grouped_wide_tile_rows);
  double worst = 0;
  for (int64_t rows : {1, 2, 7, 64}) worst = std::max(worst, run_cuda_tc(rng, 4096, 256, rows, narrow, true));
  worst = std::max(worst, run_cuda_tc(rng, 2048, 512, 9, narrow, true));
  worst = std::max(worst, run_cuda_tc(rng, 128, 128, 40, narrow, true));
  worst = std::max(worst, run_cuda_tc(rng, 256, 128, 300, wide, true));
  worst = std::max(worst, run_cuda_tc(rng, 4096, 256, 200, wide, true));
  worst = std::max(worst, run_cuda_tc(rng, 512, 384, 100, 16, true));
  std::printf("linear_grouped_tc MXFP4: worst |gpu - exact| / sum|x'w'| = %.3g\n", worst);
}

TEST(linear_grouped, cuda_tensor_cores_refuse_what_they_do_not_take) {
  HART_SKIP_WITHOUT_CUDA();
  device_vec<int32_t> d_i(std::vector<int32_t>(4, 0));
  device_vec<float> d_f(std::vector<float>(256, 0.0f));
  device_vec<uint8_t> d_c(std::vector<uint8_t>(256, 0));
  device_vec<linear_group_weight> d_g(std::vector<linear_group_weight>{{d_c.get(), d_c.get()}});
  linear_grouped_params p{nullptr,   d_f.get(), d_g.get(), 1, d_i.get(), d_i.get(),
                          d_i.get(), d_i.get(), 1,         1, 200,       128};
  p.x_codes = d_c.get();
  p.x_scales = d_f.get();
  EXPECT_EQ(linear_grouped_tc_cuda(p, nullptr).code(), status_code::unimplemented);  // in % 128 != 0
  p.in = 128;
  p.out = 100;
  EXPECT_EQ(linear_grouped_tc_cuda(p, nullptr).code(), status_code::unimplemented);  // out % 128 != 0
  p.out = 128;
  p.max_tile_rows = 65;  // over the wide tiles
  EXPECT_EQ(linear_grouped_tc_cuda(p, nullptr).code(), status_code::invalid_argument);
  p.max_tile_rows = 8;
  p.x_codes = nullptr;
  EXPECT_EQ(linear_grouped_tc_cuda(p, nullptr).code(), status_code::invalid_argument);
  // The CUDA-core grouped linear does not take MXFP4 groups.
  linear_grouped_params q{d_f.get(), d_f.get(), d_g.get(), 1, d_i.get(), d_i.get(),
                          d_i.get(), d_i.get(), 1,         1, 128,       128};
  q.w_mxfp4 = true;
  EXPECT_EQ(linear_grouped_cuda(q, nullptr).code(), status_code::unimplemented);
}

TEST(linear_grouped, cuda_equals_the_fp8_linear_and_the_cpu) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  run_cuda(rng, 256, 136, 40);  // vector path
  run_cuda(rng, 4096, 64, 9);   // vector path, many 128-channel blocks
  run_cuda(rng, 200, 64, 17);   // scalar path (in % 16 != 0)
  run_cuda(rng, 129, 7, 3);
  run_cuda(rng, 256, 1061, 12);  // two output rows per warp, the last warp's second past `out`
}

#endif  // HART_CUDA

}  // namespace
}  // namespace hart
