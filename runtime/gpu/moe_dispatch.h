// File: runtime/gpu/moe_dispatch.h — internal to runtime/gpu: the MoE's
// routed rows grouped by expert on the device, so a layer's MoE runs without
// a host round-trip (and can be captured in a CUDA graph):
//   moe_hash_cuda      hash layers' experts from the token ids
//   moe_plan_cuda      rows sorted by expert (tokens ascending inside one,
//                      moe.cpp's order), their gather offsets and weights,
//                      each (token, k)'s row, and tiles of <= 8 rows for
//                      linear_grouped_cuda (<= 64 for the tensor cores' wide tiles)
//   moe_combine_cuda   y[t] += the token's expert rows in ascending expert
//                      order: the CPU's summation order
#pragma once

#include "kernels/linear/linear.h"
#include "runtime/core/status.h"

#include <cstdint>

struct CUstream_st;

namespace hart::gpu {

/// experts[t·K + k] = tid2eid[ids[t]·K + k].
status moe_hash_cuda(const int32_t* ids, const int32_t* tid2eid, int64_t n_tokens, int64_t k,
                     int32_t* experts, CUstream_st* stream);

struct moe_plan_params {
  const int32_t* experts = nullptr;  // [K, T] routed experts of each token, distinct per token
  const float* weights = nullptr;    // [K, T] their routing weights
  int64_t n_tokens = 0, k = 0, n_experts = 0;
  int64_t row_width = 0;          // floats per token row of the gathered input (src offsets = t·row_width)
  int64_t* src = nullptr;         // [T·K] sorted row i gathers token row src[i]
  float* row_weight = nullptr;    // [T·K] sorted row i's routing weight
  int32_t* slot = nullptr;        // [T·K] (t, k) → its sorted row
  int32_t* tile_group = nullptr;  // [moe_plan_max_tiles] per tile: expert,
  int32_t* tile_row0 = nullptr;   //   first sorted row,
  int32_t* tile_rows = nullptr;   //   rows (1..max_tile_rows)
  int32_t* n_tiles = nullptr;     // tiles written
  /// An expert's rows are cut into tiles of this many (the last shorter):
  /// linear_grouped_tile_rows, or up to linear_grouped_wide_tile_rows.
  int32_t max_tile_rows = int32_t(linear_grouped_tile_rows);
};
/// Upper bound of moe_plan's tile count for n_rows = T·K routed rows.
int64_t moe_plan_max_tiles(int64_t n_rows, int64_t n_experts, int64_t tile_rows = linear_grouped_tile_rows);
/// Largest T·K one plan takes (its sort runs in one CTA's shared memory).
inline constexpr int64_t moe_plan_max_rows = 8192;
status moe_plan_cuda(const moe_plan_params& p, CUstream_st* stream);

/// y[t] += ye[slot[t·K + k]] for k in ascending experts[t·K + k]; rows of `width`.
/// `bf16` (the official inference's MoE sum): y[t] = bf16(Σ bf16(ye rows) + y[t]),
/// the routed rows (rounded as the experts' bf16 outputs) added from zero in
/// ascending expert order, then y's shared expert, the sum rounded.
status moe_combine_cuda(float* y, const float* ye, const int32_t* experts, const int32_t* slot,
                        int64_t n_tokens, int64_t k, int64_t width, bool bf16, CUstream_st* stream);

}  // namespace hart::gpu
