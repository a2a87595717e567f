// File: kernels/sparse_decode_attention/sparse_decode_attention_split.h — how
// the CUDA path cuts the work, shared by the host code that sizes the workspace.
#pragma once

#include "runtime/core/status.h"

#include <cstddef>
#include <cstdint>

namespace hart {

struct sparse_decode_attention_params;

/// Entries per block: one per lane of a warp in the softmax step.
inline constexpr int64_t sda_chunk = 32;
inline int64_t sda_n_splits(int64_t n_entries) {
  return (n_entries + sda_chunk - 1) / sda_chunk;
}

/// The bf16 mode's first pass: each chunk's max logit per (query, head), after
/// the splits' partials in the workspace.
inline size_t sda_chunk_max_bytes(int64_t n_queries, int64_t n_heads, int64_t n_entries) {
  return size_t(n_queries * sda_n_splits(n_entries) * n_heads) * sizeof(float);
}

/// Argument checks shared by the CPU and CUDA entry points.
status sparse_decode_attention_validate(const sparse_decode_attention_params& p);

}  // namespace hart
