// File: runtime/gpu/decode_meta.h
// A decode pass's per-layer metadata built on the device from (positions, page
// tables): window KV destinations, attention index lists, indexer page lists
// and lengths, and both compressors' plans, in the layout gpu_attention.cpp's
// host builder fills for a prefill pass. Nothing here reads host memory, so a
// decode step captured as a CUDA graph replays with fresh positions and pages
// (docs/gpu-engine.md, "CUDA graphs"). One token per sequence: token r is at
// position pos[r] and its sequence's page p is swa_pages / full_pages[r·stride + p].
// Engine-internal (no CPU twin): gpu_engine_test compares it with the host builder.
#pragma once

#include <cstdint>

#include "runtime/core/status.h"
#include "runtime/gpu/kv_layer_addr.h"

struct CUstream_st;

namespace hart::gpu {

/// A compressor's plan at device addresses, as compress_pool_batch_cuda and
/// copy_rows_cuda read it: entry o pools n_cand[o] candidates (kvp / gp[o ·
/// n_cand_max ..]) into the staging at ent_src[o], takes RoPE at ent_pos[o] and
/// lands at ent_dst[o] (−1: none); ring row i goes from ring_src[i] to ring_dst[i].
/// The host builder (gpu_attention.cpp) and decode_meta_cuda fill the same arrays.
struct compress_plan_arrays {
  const float** kvp = nullptr;
  const float** gp = nullptr;
  int64_t *n_cand = nullptr, *ent_pos = nullptr, *ent_dst = nullptr, *ent_src = nullptr;
  int64_t *ring_dst = nullptr, *ring_src = nullptr;
};

/// A decode pass's plan: one slot per token. Token r's entry (when its block
/// closes at r) pools into staging row r; its ring row is staging row r.
struct decode_compressor_plan : compress_plan_arrays {
  int64_t rate = 0, dim = 0;
  bool overlap = false;   // the CSA compressors pool the previous block's rows too
  bool indexer = false;   // the indexer's compressor: its rings and keys
};

struct decode_meta_params {
  kv_layer_addr layer;
  const float* pool = nullptr;          // the KV pool's base
  const float* ring_stage = nullptr;    // [rows of 2·width, T] this pass's ring rows
  const int64_t* pos = nullptr;         // [T]
  const int32_t* swa_pages = nullptr;   // [T, stride]
  const int32_t* full_pages = nullptr;  // [T, stride]
  int64_t stride = 0;
  int64_t n_tokens = 0;
  int64_t window = 0;
  int64_t n_idx = 0;                    // index list length: window + top-k (CSA) or + HCA entries
  bool hca = false;                     // index lists end with every visible entry
  int64_t n_cand_max = 0;
  // Outputs.
  int64_t *win_dst = nullptr, *win_src = nullptr;  // [T] window KV rows
  int32_t* idx = nullptr;                          // [n_idx, T]: window rows, then HCA entries; −1 = none
  int32_t* page_base = nullptr;                    // [T] r·stride (CSA; null otherwise)
  int32_t* lengths = nullptr;                      // [T] visible indexer keys (CSA; null otherwise)
  decode_compressor_plan comp, index_comp;         // kvp null: the layer has no such compressor
};

/// One launch (a block per token).
status decode_meta_cuda(const decode_meta_params& p, CUstream_st* stream);

}  // namespace hart::gpu
