// File: kernels/moe_route/moe_route.h — V4 expert routing (v4-model.md §6.1):
// s = sqrt(softplus(logits)); selection by top-k of s + bias (or a fixed
// per-token hash table); weights = s[sel] / (Σ s[sel] + 1e-20) · route_scale.
#pragma once

#include <cstdint>

#include "runtime/core/status.h"

namespace hart {

struct moe_route_params {
  const float* logits = nullptr;     // [n_experts, n_tokens] router logits (fp32)
  const float* bias = nullptr;       // [n_experts] selection-only bias, or null
  const int32_t* hash_ids = nullptr; // [top_k, n_tokens] fixed expert ids (hash layers), or null
  int32_t* experts = nullptr;        // [top_k, n_tokens] out
  float* weights = nullptr;          // [top_k, n_tokens] out
  int64_t n_tokens = 0;
  int64_t n_experts = 0;
  int64_t top_k = 0;
  float route_scale = 1.0f;
};

status moe_route_cpu(const moe_route_params& p);

}  // namespace hart
