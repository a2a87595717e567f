// File: kernels/rope/rope.h — V4's interleaved partial RoPE: the trailing
// `rope_dim` channels of every head rotate as pairs (x[2i], x[2i+1]) by
// angle pos * inv_freq[i]; `inverse` rotates by -angle (used on the attention
// output, at the query position).
#pragma once

#include "runtime/core/status.h"

#include <cstdint>

namespace hart {

struct rope_params {
  float* x = nullptr;               // [head_dim, n_heads, n_rows], in place; row stride `row_stride`
  const int64_t* pos = nullptr;     // [n_rows] absolute positions
  const float* inv_freq = nullptr;  // [rope_dim / 2]
  int64_t n_rows = 0;
  int64_t n_heads = 1;
  int64_t head_dim = 0;
  int64_t rope_dim = 0;           // trailing channels rotated, even, <= head_dim
  int64_t row_stride = 0;         // elements; 0 = n_heads * head_dim
  float attention_factor = 1.0f;  // cos/sin magnitude (1 for V4)
  bool inverse = false;
  /// The official inference's bf16 activations: each rotated value rounded to bf16
  /// (RNE). Only the rope channels move, so the rest must be bf16 already for the
  /// whole row to equal rope, then round_to_bf16 on it (the indexer's q after RoPE,
  /// the attention output after the inverse RoPE).
  bool bf16 = false;
};

status rope_cpu(const rope_params& p);

}  // namespace hart

#ifdef HART_CUDA
struct CUstream_st;
namespace hart {
/// Same contract as rope_cpu with device pointers (x, pos, inv_freq); one block
/// per row, no allocation, no synchronisation.
status rope_cuda(const rope_params& p, CUstream_st* stream);
}  // namespace hart
#endif
