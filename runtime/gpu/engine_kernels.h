// File: runtime/gpu/engine_kernels.h
// The GPU engine's glue between ops: embedding gather, row copies by offset
// (KV scatter into pages, key gathers, MoE gather / scatter-add), strided
// FP8 QDQ, scaling, bf16 rounding and the translation of indexer picks into KV-pool rows. Device pointers;
// one launch each, no allocation, no synchronisation. Engine-internal (not ops: no CPU twin, each is checked
// through the engine's parity tests).
#pragma once

#include "runtime/core/status.h"

#include <cstdint>

struct CUstream_st;

namespace hart::gpu {

/// x [D, n_hc, T] = table[ids[t]] repeated n_hc times (`bf16`: rounded to bf16).
status embed_rows_cuda(const float* table, const int32_t* ids, int64_t n_tokens, int64_t n_hc, int64_t dim,
                       bool bf16, float* x, CUstream_st* stream);

/// For i < n: dst[dst_off[i] .. + width) (+)= src[src_off[i] .. + width); offsets in floats,
/// a negative dst_off[i] skips row i (a decode plan's token that closes no entry).
/// Rows written by one call must not overlap when `add`.
status copy_rows_cuda(float* dst, const int64_t* dst_off, const float* src, const int64_t* src_off,
                      int64_t width, int64_t n, bool add, CUstream_st* stream);

/// In place, per row of `stride`: FP8 e4m3 QDQ of the first `dim` values in
/// blocks of `block` (the last one shorter), bit-exact with act_quant_fp8_qdq.
status rows_fp8_qdq_cuda(float* x, int64_t n_rows, int64_t dim, int64_t block, int64_t stride,
                         CUstream_st* stream);

/// x[i] *= s (`bf16`: the product rounded to bf16).
status scale_cuda(float* x, int64_t n, float s, bool bf16, CUstream_st* stream);

/// In place: the first `width` values of each of n_rows rows (`stride` apart)
/// rounded to bf16 (RNE), the official inference's bf16 linear outputs.
status round_bf16_rows_cuda(float* x, int64_t n_rows, int64_t width, int64_t stride, CUstream_st* stream);

/// Indexer picks → KV-pool rows, written into the attention index lists.
struct picks_to_rows_params {
  const int32_t* picks = nullptr;       // [k, n_tokens] entry indices, -1 = none
  const int32_t* page_base = nullptr;   // [n_tokens] offset of the token's sequence in `full_pages`
  const int32_t* full_pages = nullptr;  // per sequence: full page ids, position p in page p / page_size
  int32_t* idx = nullptr;               // [n_idx, n_tokens] attention rows; columns col0.. written
  int64_t n_tokens = 0;
  int64_t k = 0;
  int64_t n_idx = 0;
  int64_t col0 = 0;
  int64_t rate = 0;            // m: entry i starts at position i·m
  int64_t page_size = 0;       // positions per page
  int64_t full_page_rows = 0;  // pool rows per full page
  int64_t entry_row0 = 0;      // the layer's first entry row inside a full page
};
status picks_to_rows_cuda(const picks_to_rows_params& p, CUstream_st* stream);

}  // namespace hart::gpu
