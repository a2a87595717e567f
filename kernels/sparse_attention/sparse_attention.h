// File: kernels/sparse_attention/sparse_attention.h — one query token's
// multi-head attention over a gathered key set with an attention sink
// (v4-model.md §4.6). K = V (one shared latent per entry):
//   l_j = (q_h · kv_j)·scale;  M = max(max_j l_j, sink_h)
//   o_h = Σ_j e^{l_j−M} kv_j / (Σ_j e^{l_j−M} + e^{sink_h−M})
#pragma once

#include "runtime/core/status.h"

#include <cstdint>

namespace hart {

struct sparse_attention_params {
  const float* q = nullptr;          // [head_dim, n_heads]
  const float* const* kv = nullptr;  // [n_kv] rows of [head_dim]
  const float* sink = nullptr;       // [n_heads] sink logits (not scaled)
  float* out = nullptr;              // [head_dim, n_heads]
  int64_t n_heads = 0;
  int64_t head_dim = 0;
  int64_t n_kv = 0;    // may be 0: the output is then 0
  float scale = 1.0f;  // head_dim^-0.5
  /// The official sparse_attn kernel's numerics: an online softmax over blocks
  /// of 64 slots in list order (a null row is a masked slot), probabilities
  /// rounded to bf16 before P·V, the output rounded to bf16.
  bool bf16 = false;
};

status sparse_attention_cpu(const sparse_attention_params& p);

/// Many query tokens, each attending to its own list of rows of one entry pool
/// (the device form: indices instead of pointers). Query t, head h attends to
/// kv rows idx[t * n_idx + j] for every j with a valid index; -1 marks an empty
/// slot (short top-k lists, the window's start), and a row of all -1 gives 0.
struct sparse_attention_gather_params {
  const float* q = nullptr;      // [head_dim, n_heads, n_queries]
  const float* kv = nullptr;     // [head_dim, n_entries], row stride `kv_stride`
  const int32_t* idx = nullptr;  // [n_idx, n_queries] rows of kv, -1 = empty
  const float* sink = nullptr;   // [n_heads] sink logits (not scaled)
  float* out = nullptr;          // [head_dim, n_heads, n_queries]
  int64_t n_queries = 0;
  int64_t n_heads = 0;
  int64_t head_dim = 0;
  int64_t n_idx = 0;      // index slots per query, may be 0
  int64_t n_entries = 0;  // rows in kv; valid indices are in [0, n_entries)
  int64_t kv_stride = 0;  // elements; 0 = head_dim
  float scale = 1.0f;     // head_dim^-0.5
  // CUDA path only: scratch for slicing long index lists over more blocks when
  // there are few queries (sparse_attention_cuda_workspace_bytes). Null: one
  // slice per query, so a query's output does not depend on the batch around it.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  /// The official numerics (sparse_attention_params::bf16) over each query's
  /// n_idx slots, a -1 slot masked but keeping its place in the 64-slot blocks.
  /// The CUDA path then takes one slice per query (the running max of a block
  /// needs every earlier block's), whatever the workspace.
  bool bf16 = false;
};

/// The reference for the gathered form: sparse_attention_cpu per query over its
/// valid rows in index order (bf16: over all its slots, -1 ones as null rows).
/// An index outside [-1, n_entries) is out_of_range.
status sparse_attention_gather_cpu(const sparse_attention_gather_params& p);

}  // namespace hart

#ifdef HART_CUDA
struct CUstream_st;
namespace hart {
/// Same contract as sparse_attention_gather_cpu with device pointers; fp32, a
/// block per (query, group of up to 8 heads, slice of the index list), any
/// n_idx, head_dim <= 1024. Indices are read on the device, so a bad one
/// cannot be reported: any index outside [0, n_entries) counts as empty.
status sparse_attention_cuda(const sparse_attention_gather_params& p, CUstream_st* stream);
/// The workspace that lets any batch of `n_heads` × `head_dim` queries be sliced
/// as finely as sparse_attention_cuda would (a bound over every n_queries and n_idx).
size_t sparse_attention_cuda_workspace_bytes(int64_t n_heads, int64_t head_dim);
constexpr int64_t sparse_attention_cuda_max_head_dim = 1024;
}  // namespace hart
#endif
