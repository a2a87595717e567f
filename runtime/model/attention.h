// File: runtime/model/attention.h
// One V4 attention layer over a token batch (v4-model.md §4): low-rank q with
// per-head RMS, the shared K=V latent, sliding window, the CSA (indexer top-k)
// or HCA (all visible) compressed entries, attention sinks, inverse RoPE and
// the grouped output projection. Reads and advances the per-sequence layer
// state (compressors now, the window ring at the end).
#pragma once

#include "runtime/core/status.h"
#include "runtime/model/config.h"
#include "runtime/model/token_batch.h"
#include "runtime/model/weights.h"

#include <cstdint>
#include <vector>

namespace hart {

struct attention_params {
  const model_config* cfg = nullptr;
  const layer_weights* w = nullptr;
  const float* inv_freq = nullptr;  // [rope_dim/2] this layer's table
  precision prec = precision::exact;
  int64_t il = 0;     // layer index into sequence_state::layers
  bool bf16 = false;  // the official inference's bf16 activations (engine_params::bf16_activations)
};

/// y [D, T] = Attention(x [D, T]). `topk` (optional, CSA layers) receives the
/// indexer's picks per token, [index_topk, T], padded with -1.
status attention_forward(const attention_params& p, const token_batch& batch, const float* x, float* y,
                         std::vector<int32_t>* topk);

}  // namespace hart
