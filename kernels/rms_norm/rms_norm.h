// File: kernels/rms_norm/rms_norm.h — y = x * rsqrt(mean(x^2) + eps) [* w], row-wise;
// optionally followed by V4's partial RoPE on each output row (kernels/rope's
// rotation, fused so the GPU engine's q, kv and compressed entries take one launch).
#pragma once

#include "runtime/core/status.h"

#include <cstdint>

namespace hart {

struct rms_norm_params {
  const float* x = nullptr;  // [dim, n_rows], row stride `x_stride`
  const float* w = nullptr;  // [dim] or null for the unweighted norm (V4's per-head q RMS)
  float* y = nullptr;        // [dim, n_rows], row stride `y_stride`; may alias x
  int64_t n_rows = 0;
  int64_t dim = 0;
  int64_t x_stride = 0;  // elements; 0 = dim
  int64_t y_stride = 0;  // elements; 0 = dim
  float eps = 1e-6f;
  /// The official inference's fp32 arithmetic (its RMSNorm runs in PyTorch on CUDA):
  /// the mean square summed as sum_squares_torch_order sums it, rsqrt rounded
  /// once, y = w · (x · r).
  bool official = false;
  /// The official inference's bf16 tensors. With w: the official arithmetic (implied),
  /// each output rounded to bf16 (RNE). Without w (V4's per-head q RMS, `official`
  /// ignored): each x² rounded to bf16 and summed in fp32 in channel order, the mean,
  /// mean + eps and 1 / sqrt of it each rounded to bf16, y = x · r rounded to bf16.
  /// With rope_pos, the rotated channels are rounded to bf16 again (rope_params::bf16).
  bool bf16 = false;
  // Then, with rope_pos set: output row r's trailing rope_dim channels rotate as
  // rope_cpu rotates a head, at position rope_pos[r / rope_rows_per_pos] (rows of
  // one token's heads share it), by rope_inv_freq [rope_dim / 2].
  const int64_t* rope_pos = nullptr;
  const float* rope_inv_freq = nullptr;
  int64_t rope_dim = 0;  // even, <= dim
  int64_t rope_rows_per_pos = 1;
  float rope_attention_factor = 1.0f;
};

status rms_norm_cpu(const rms_norm_params& p);

/// Σ x[i]² over a contiguous row of n in PyTorch's CUDA reduction order (the
/// official inference's norms are PyTorch ops): with L = the largest power of
/// two <= min(n / 4, 32) lanes, lane l adds the float4 vectors l, l + L, ...
/// into four accumulators and folds them in order, then the lanes combine by
/// shuffle-down (L/2, ..., 2, 1). Bitwise what torch 2.11 sums on an H200 for
/// many rows of 512 (other widths follow the same rule, not measured; PyTorch
/// uses more lanes when few rows are reduced). n % 4 != 0: the exactly rounded sum.
float sum_squares_torch_order(const float* x, int64_t n);
/// The rotation's arguments (both backends check them the same way).
status rms_norm_rope_check(const rms_norm_params& p);

}  // namespace hart

#ifdef HART_CUDA
struct CUstream_st;
namespace hart {
/// Same contract as rms_norm_cpu with device pointers; one block per row (a warp per
/// row for the unweighted bf16 norm). The norm is rms_norm_cpu's bit for bit under
/// `official` or `bf16`; the rotation is rope_cuda's bit for bit (cosf/sinf: within a
/// few fp32 ulps of rope_cpu's).
status rms_norm_cuda(const rms_norm_params& p, CUstream_st* stream);
}  // namespace hart
#endif
