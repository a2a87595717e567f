// File: runtime/model/compressor.h
// Token-level KV compression for CSA (rate 4, overlapping A/B halves) and HCA
// (rate 128), v4-model.md §4.4. Tokens are pushed one at a time, in position
// order: each writes its row [kv | gate + position bias] into the compressor
// ring of its SWA page; when a block closes ((pos+1) % m == 0) one entry is
// emitted from the ring rows — gated pooling, RMSNorm, RoPE at the block's
// first position, the precision mode's QDQ — into the full page's shadow.
// Emission depends only on the tokens, never on how they were chunked or
// which request computed the earlier block, so any prefill split, decode,
// and a prefix-cache hit all agree.
#pragma once

#include "runtime/model/kv_store.h"
#include "runtime/model/sequence_state.h"
#include "runtime/model/weights.h"

#include <cstdint>

namespace hart {

enum class entry_quant { none, fp8_nope, hadamard_fp4 };

struct compressor_params {
  const compressor_weights* w = nullptr;
  const float* inv_freq = nullptr;  // [rope_dim/2] the layer's (compress) table
  int64_t rope_dim = 0;
  float norm_eps = 1e-6f;
  entry_quant quant = entry_quant::none;
  bool indexer = false;  // the indexer's compressor: index ring and index keys
  int64_t il = 0;        // layer
  bool bf16 = false;     // the official inference's bf16 roundings of the entry
};

/// Feeds token `pos` with projections a = x·Wkv^T and z = x·Wgate^T (both
/// [coff·c], position bias not yet added). Pages for `pos` (and, for CSA, the
/// previous block) must be live in `pt`.
void compressor_push(const compressor_params& p, const kv_store& store, const page_table& pt, int64_t pos,
                     const float* a, const float* z);

}  // namespace hart
