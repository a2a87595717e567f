// File: runtime/model/moe.h
// The V4 MoE block (v4-model.md §6): router (sqrt-softplus scores, bias-only
// selection or hash table), routed experts with clamped SwiGLU weighted
// before w2, plus the shared expert.
#pragma once

#include "runtime/core/status.h"
#include "runtime/model/config.h"
#include "runtime/model/weights.h"

#include <cstdint>
#include <vector>

namespace hart {

/// y [D, T] = MoE(x [D, T]); `ids` [T] are the token ids (hash routing).
/// `experts_out` (optional) receives the routed expert ids, [top_k, T].
/// `bf16`: the official inference's order and roundings (the weighted SwiGLU
/// output rounded to bf16 before w2; routed experts summed in expert order,
/// then the shared expert; the sum rounded to bf16).
status moe_forward(const model_config& cfg, const layer_weights& w, const float* x, const int32_t* ids,
                   int64_t n_tokens, float* y, std::vector<int32_t>* experts_out, bool bf16 = false);

}  // namespace hart
