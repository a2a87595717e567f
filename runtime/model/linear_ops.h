// File: runtime/model/linear_ops.h
// The engine's linear layer: y = x W^T through OpenBLAS, with the fp8
// precision mode's input rule (per row, per 128 channels, power-of-two
// scale, e4m3 QDQ) and bf16 output applied when the weight asks for them.
#pragma once

#include "runtime/core/status.h"
#include "runtime/model/weights.h"

#include <cstdint>
#include <vector>

namespace hart {

/// y [out, n_rows] = x [in, n_rows] · W^T; `x_stride`/`y_stride` in elements (0 = dense).
status linear_apply(const linear_weight& w, const float* x, int64_t n_rows, float* y, int64_t x_stride = 0,
                    int64_t y_stride = 0);
std::vector<float> linear_apply(const linear_weight& w, const float* x, int64_t n_rows);

/// y [out, n_rows] = x W^T summed as the official block-scaled GEMMs sum
/// (linear_weight::k_block): per K block of k_block (dividing in) a dot rounded
/// once to fp32 (exact fp64 sums of the products), the blocks added in fp32 in
/// order (k_block 1: fp32 products added in K order). Exact per row, so the
/// same bits on any CPU, thread count or batch.
void linear_blocked(const float* x, int64_t x_stride, const float* w, int64_t in, int64_t out, int64_t n_rows,
                    int64_t k_block, float* y, int64_t y_stride);

/// In place, per row of `dim`: FP8 e4m3 QDQ over blocks of `block` channels
/// (the last block may be shorter when dim % block != 0).
void fp8_qdq_rows(float* x, int64_t n_rows, int64_t dim, int64_t block, int64_t row_stride = 0);
/// In place, per row: Hadamard (scale dim^-0.5) then FP4 e2m1 QDQ in blocks of 32;
/// `bf16` rounds the Hadamard's output to bf16 first, as the official inference does.
void hadamard_fp4_qdq_rows(float* x, int64_t n_rows, int64_t dim, bool bf16 = false);

/// In place: each of n values rounded to the nearest bf16 (RNE), the official
/// inference's activation dtype.
void round_to_bf16(float* x, int64_t n);

}  // namespace hart
