// File: kernels/compress_pool/compress_pool.h — the compressor's gated pooling
// (v4-model.md §4.4): out[ch] = Σ_j softmax_j(gate_j[ch]) · kv_j[ch], one
// softmax per channel over the candidate tokens. A candidate whose gate is
// -inf has weight 0 (CSA block 0's missing "previous block" half). The CPU
// engine's compressor and the flash compressor's reference use it; on the
// device the pooling is part of flash_compressor_*_cuda.
#pragma once

#include "runtime/core/status.h"

#include <cstdint>

namespace hart {

struct compress_pool_params {
  const float* const* kv = nullptr;    // [n_cand] rows of [dim]
  const float* const* gate = nullptr;  // [n_cand] rows of [dim], position bias already added
  float* out = nullptr;                // [dim]
  int64_t n_cand = 0;
  int64_t dim = 0;
};

status compress_pool_cpu(const compress_pool_params& p);

}  // namespace hart
