// File: kernels/sparse_attention/sparse_attention.h — one query token's
// multi-head attention over a gathered key set with an attention sink
// (v4-model.md §4.6). K = V (one shared latent per entry):
//   l_j = (q_h · kv_j)·scale;  M = max(max_j l_j, sink_h)
//   o_h = Σ_j e^{l_j−M} kv_j / (Σ_j e^{l_j−M} + e^{sink_h−M})
#pragma once

#include <cstdint>

#include "runtime/core/status.h"

namespace hart {

struct sparse_attention_params {
  const float* q = nullptr;               // [head_dim, n_heads]
  const float* const* kv = nullptr;       // [n_kv] rows of [head_dim]
  const float* sink = nullptr;            // [n_heads] sink logits (not scaled)
  float* out = nullptr;                   // [head_dim, n_heads]
  int64_t n_heads = 0;
  int64_t head_dim = 0;
  int64_t n_kv = 0;                       // may be 0: the output is then 0
  float scale = 1.0f;                     // head_dim^-0.5
};

status sparse_attention_cpu(const sparse_attention_params& p);

}  // namespace hart
