// File: kernels/moe_route/moe_route.h — V4 expert routing (v4-model.md §6.1):
// s = sqrt(softplus(logits)); selection by top-k of s + bias (or a fixed
// per-token hash table); weights = s[sel] / (Σ s[sel] + 1e-20) · route_scale.
#pragma once

#include "runtime/core/status.h"

#include <cstdint>

namespace hart {

struct moe_route_params {
  const float* logits = nullptr;      // [n_experts, n_tokens] router logits (fp32)
  const float* bias = nullptr;        // [n_experts] selection-only bias, or null
  const int32_t* hash_ids = nullptr;  // [top_k, n_tokens] fixed expert ids (hash layers), or null
  int32_t* experts = nullptr;         // [top_k, n_tokens] out
  float* weights = nullptr;           // [top_k, n_tokens] out
  int64_t n_tokens = 0;
  int64_t n_experts = 0;
  int64_t top_k = 0;
  float route_scale = 1.0f;
};

status moe_route_cpu(const moe_route_params& p);

}  // namespace hart

#ifdef HART_CUDA
struct CUstream_st;
namespace hart {
/// Same contract as moe_route_cpu with device pointers (n_experts <= 2048); one
/// block per token, same tie rule (equal keys: lowest expert id), no allocation,
/// no synchronisation. Differences the device cannot avoid without a host round
/// trip: a hash id outside [0, n_experts) gives expert -1 with weight 0 instead of
/// out_of_range; a -1 slot from NaN keys (undefined on the CPU) gets weight 0.
status moe_route_cuda(const moe_route_params& p, CUstream_st* stream);
}  // namespace hart
#endif
