// File: kernels/compress_pool/compress_pool.h — the compressor's gated pooling
// (v4-model.md §4.4): out[ch] = Σ_j softmax_j(gate_j[ch]) · kv_j[ch], one
// softmax per channel over the candidate tokens. A candidate whose gate is
// -inf has weight 0 (CSA block 0's missing "previous block" half).
#pragma once

#include <cstdint>

#include "runtime/core/status.h"

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

#ifdef HART_CUDA
struct CUstream_st;
namespace hart {
/// Same contract as compress_pool_cpu on the device: kv and gate are device
/// arrays of device row pointers, out a device row. One thread per channel, no
/// allocation, no synchronisation.
status compress_pool_cuda(const compress_pool_params& p, CUstream_st* stream);

/// n_out poolings in one launch (a pass's compressed entries): output o pools
/// the candidates in slots [o·n_cand_max, o·n_cand_max + n_cand[o]) of kv and
/// gate into out + o·dim, exactly as compress_pool_cuda would (bitwise).
/// n_cand: device array [n_out], each in [1, n_cand_max] (not checked on the device).
struct compress_pool_batch_params {
  const float* const* kv = nullptr;    // [n_out · n_cand_max] device row pointers
  const float* const* gate = nullptr;  // [n_out · n_cand_max]
  const int64_t* n_cand = nullptr;     // [n_out]
  float* out = nullptr;                // [n_out][dim]
  int64_t n_out = 0;
  int64_t n_cand_max = 0;
  int64_t dim = 0;
};
status compress_pool_batch_cuda(const compress_pool_batch_params& p, CUstream_st* stream);
}  // namespace hart
#endif
