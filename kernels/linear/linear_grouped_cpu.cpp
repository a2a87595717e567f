// CPU reference of the grouped linear: each group's weight decoded to fp32
// (FP8 or MXFP4 codes times 2^scale, exact), then linear_cpu over each tile's rows.
#include "kernels/linear/linear.h"
#include "kernels/quant/quant.h"

#include <cstdint>
#include <map>
#include <vector>

namespace hart {

status linear_grouped_cpu(const linear_grouped_params& p) {
  if (!p.x || !p.y || !p.groups || !p.tile_group || !p.tile_row0 || !p.tile_rows || !p.n_tiles) {
    return invalid_argument("linear_grouped_cpu: null pointer");
  }
  if (p.in <= 0 || p.out <= 0 || p.n_rows < 0 || p.n_groups < 0 || p.max_tiles < 0) {
    return invalid_argument("linear_grouped_cpu: bad sizes in=%lld out=%lld n_rows=%lld", (long long)p.in,
                            (long long)p.out, (long long)p.n_rows);
  }
  if (p.max_tile_rows < 1 || p.max_tile_rows > linear_grouped_wide_tile_rows) {
    return invalid_argument("linear_grouped_cpu: max_tile_rows=%lld outside [1, %lld]",
                            (long long)p.max_tile_rows, (long long)linear_grouped_wide_tile_rows);
  }
  if (p.w_mxfp4 && p.in % 128 != 0) {
    return invalid_argument("linear_grouped_cpu: MXFP4 groups need in %% 128 == 0 (in=%lld)",
                            (long long)p.in);
  }
  const int64_t n_tiles = *p.n_tiles;
  if (n_tiles < 0 || n_tiles > p.max_tiles) {
    return invalid_argument("linear_grouped_cpu: n_tiles=%lld outside [0, %lld]", (long long)n_tiles,
                            (long long)p.max_tiles);
  }
  for (int64_t i = 0; i < n_tiles; ++i) {
    const int64_t g = p.tile_group[i], r0 = p.tile_row0[i], n = p.tile_rows[i];
    if (g < 0 || g >= p.n_groups || !p.groups[g].w || reinterpret_cast<uintptr_t>(p.groups[g].w) % 16 ||
        n < 1 || n > p.max_tile_rows || r0 < 0 || r0 + n > p.n_rows) {
      return invalid_argument(
          "linear_grouped_cpu: tile %lld (group %lld, rows %lld+%lld) outside %lld groups x %lld rows, or "
          "its weight null or not 16-byte aligned",
          (long long)i, (long long)g, (long long)r0, (long long)n, (long long)p.n_groups,
          (long long)p.n_rows);
    }
  }
  std::map<int64_t, std::vector<float>> decoded;  // codes groups, decoded once
  for (int64_t i = 0; i < n_tiles; ++i) {
    const linear_group_weight& gw = p.groups[p.tile_group[i]];
    const float* w = static_cast<const float*>(gw.w);
    if (p.w_mxfp4 && !gw.w_scale)
      return invalid_argument("linear_grouped_cpu: MXFP4 group %d without scales", p.tile_group[i]);
    if (gw.w_scale) {
      auto [it, fresh] = decoded.try_emplace(p.tile_group[i]);
      if (fresh) {
        it->second.resize(size_t(p.out * p.in));
        const auto* codes = static_cast<const uint8_t*>(gw.w);
        if (p.w_mxfp4) {
          std::vector<uint8_t> pairs(size_t(p.out * p.in / 2));
          HART_RETURN_IF_ERROR(mxfp4_mma_order(codes, p.out, p.in, pairs.data()));
          HART_RETURN_IF_ERROR(mxfp4_dequantize(pairs.data(), gw.w_scale, p.out, p.in, it->second.data()));
        } else {
          HART_RETURN_IF_ERROR(
              fp8_block_dequantize(codes, gw.w_scale, p.out, p.in, k_linear_fp8_block, it->second.data()));
        }
      }
      w = it->second.data();
    }
    linear_params lp;
    lp.x = p.x + p.tile_row0[i] * p.in;
    lp.w = w;
    lp.y = p.y + p.tile_row0[i] * p.out;
    lp.n_rows = p.tile_rows[i];
    lp.in = p.in;
    lp.out = p.out;
    lp.row_invariant = true;
    HART_RETURN_IF_ERROR(linear_cpu(lp));
  }
  return {};
}

}  // namespace hart
