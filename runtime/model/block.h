// File: runtime/model/block.h
// One V4 block over a token batch's residual streams (v4-model.md §3, §5):
// the attention and the MoE sublayers, each inside its mHC site
// X ← hc_post(sublayer(norm(hc_pre(X))), X). The main layers and the MTP
// block run through it; the final mixing (hc_head, norm) is block_head.
#pragma once

#include "runtime/core/status.h"
#include "runtime/model/attention.h"
#include "runtime/model/token_batch.h"

#include <cstdint>
#include <vector>

namespace hart {

/// X [D, n_hc, T] ← the block `a.w` of X, in place. `topk` (CSA layers) and
/// `experts` (optional) receive the indexer's picks and the routed experts.
status block_forward(const attention_params& a, const token_batch& tb, std::vector<float>& X,
                     std::vector<int32_t>* topk, std::vector<int32_t>* experts);

/// normed [D, T] = RMSNorm(hc_head(X [D, n_hc, T])) with one head's mixing and norm weights.
status block_head(const model_config& cfg, const std::vector<float>& X, int64_t T, const float* fn,
                  const float* base, const float* scale, const float* norm, bool bf16,
                  std::vector<float>* normed);

}  // namespace hart
