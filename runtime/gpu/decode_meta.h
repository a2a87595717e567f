// File: runtime/gpu/decode_meta.h
// A decode pass's per-layer metadata built on the device from (positions, page
// tables): window KV destinations, attention index lists, indexer page lists
// and lengths, in the layout gpu_attention.cpp's host builder fills for a
// prefill pass (the flash compressor plans its own work on the device).
// Nothing here reads host memory, so a decode step captured as a CUDA graph
// replays with fresh positions and pages
// (docs/gpu-engine.md, "CUDA graphs"). One token per sequence: token r is at
// position pos[r] and its sequence's page p is swa_pages / full_pages[r·stride + p].
// Engine-internal (no CPU twin): gpu_engine_test compares it with the host builder.
#pragma once

#include "runtime/core/status.h"
#include "runtime/gpu/kv_layer_addr.h"

#include <cstdint>

struct CUstream_st;

namespace hart::gpu {

struct decode_meta_params {
  kv_layer_addr layer;
  const int64_t* pos = nullptr;         // [T]
  const int32_t* swa_pages = nullptr;   // [T, stride]
  const int32_t* full_pages = nullptr;  // [T, stride]
  int64_t stride = 0;
  int64_t n_tokens = 0;
  int64_t window = 0;
  int64_t n_idx = 0;  // index list length: window + top-k (CSA) or + HCA entries
  bool hca = false;   // index lists end with every visible entry
  // Outputs.
  int64_t *win_dst = nullptr, *win_src = nullptr;  // [T] window KV rows
  int32_t* idx = nullptr;        // [n_idx, T]: window rows (oldest first), then HCA entries; −1 = none
  int32_t* page_base = nullptr;  // [T] r·stride (CSA; null otherwise)
  int32_t* lengths = nullptr;    // [T] visible indexer keys (CSA; null otherwise)
};

/// One launch (a block per token).
status decode_meta_cuda(const decode_meta_params& p, CUstream_st* stream);

}  // namespace hart::gpu
