// File: kernels/sparse_decode_attention/sparse_decode_attention.h — V4 decode
// attention over FP8 KV entries (issue 6, A1). Per query token and head h:
// the keys are two gathered sets of 584-byte entries (kv_entry.h) — the SWA
// window and an extra set (CSA top-k or the visible HCA entries), each a list of
// pool slots with -1 for "none" — and K = V (v4-model.md §4.6):
//   l_j = (q_h · kv_j)·scale;  M = max(max_j l_j, sink_h)
//   o_h = Σ_j e^{l_j−M} kv_j / (Σ_j e^{l_j−M} + e^{sink_h−M})
// q and o are bf16 [n_queries][n_heads][512], or fp32 (q_f32: rounded to bf16
// as it is read; out_f32: the fp32 result, not rounded) for an engine that
// keeps its activations in fp32. The CUDA path splits the entry list over
// blocks (partial max / sum / output in `workspace`) and merges them in a
// second kernel; its grid depends only on the sizes, so it can be captured in
// a CUDA graph. `bf16` selects the official kernel's numerics instead
// (sparse_attention_params::bf16), which the engine's fp8 precision needs.
#pragma once

#include "kernels/sparse_decode_attention/kv_entry.h"
#include "runtime/core/status.h"

#include <cstddef>
#include <cstdint>

namespace hart {

struct sparse_decode_attention_params {
  const uint16_t* q = nullptr;    // [n_queries][n_heads][512] bf16
  const float* q_f32 = nullptr;   // or fp32 (exactly one of q, q_f32)
  kv_entry_pool pool0;            // window entries
  const int32_t* idx0 = nullptr;  // [n_queries][n_idx0] slots in pool0, -1 = none
  int64_t n_idx0 = 0;
  kv_entry_pool pool1;            // extra entries (CSA top-k / HCA), may be empty
  const int32_t* idx1 = nullptr;  // [n_queries][n_idx1] slots in pool1, -1 = none
  int64_t n_idx1 = 0;
  int64_t idx_stride = 0;       // elements from one query's lists to the next (both); 0 = n_idx0 / n_idx1
  const float* sink = nullptr;  // [n_heads] sink logits (not scaled)
  uint16_t* out = nullptr;      // [n_queries][n_heads][512] bf16
  float* out_f32 = nullptr;     // or fp32 (exactly one of out, out_f32)
  int64_t n_queries = 0;
  int64_t n_heads = 0;           // a multiple of 16 (one MMA tile of heads)
  float scale = 0.04419417382f;  // 512^-0.5
  /// The official sparse_attn numerics (sparse_attention_params::bf16) over the
  /// slot list idx0's n_idx0 slots then idx1's n_idx1: blocks of 64 slots from
  /// that list's slot 0, a -1 slot masked but keeping its place; probabilities
  /// rounded to bf16 before P·V; the output rounded to bf16 (out_f32 too).
  bool bf16 = false;
  void* workspace = nullptr;  // CUDA path: sparse_decode_attention_cuda_workspace_bytes()
  size_t workspace_bytes = 0;
};

/// An upper bound on the device scratch the CUDA path needs for these sizes on
/// any GPU (partial outputs for the most splits the entry list can take).
size_t sparse_decode_attention_workspace_bytes(int64_t n_queries, int64_t n_heads, int64_t n_idx0,
                                               int64_t n_idx1);

/// Reference: entries decoded exactly, then sparse_attention_cpu (fp32 math, or
/// with `bf16` its official numerics over the slot list, -1 slots as null rows);
/// the output rounded to bf16 into `out`. Host pointers; workspace unused.
status sparse_decode_attention_cpu(const sparse_decode_attention_params& p);

}  // namespace hart

#ifdef HART_CUDA
struct CUstream_st;
namespace hart {
/// The scratch the CUDA path needs on the current device for any call of up
/// to n_queries queries (the splits it picks for each count; at most the bound above).
size_t sparse_decode_attention_cuda_workspace_bytes(int64_t n_queries, int64_t n_heads, int64_t n_idx0,
                                                    int64_t n_idx1);

/// Same contract with device pointers; no allocation, no synchronisation.
status sparse_decode_attention_cuda(const sparse_decode_attention_params& p, CUstream_st* stream);
}  // namespace hart
#endif
