// File: kernels/flash_compressor/flash_compressor_plan.h — internal to
// kernels/flash_compressor: the shape rules the CPU reference and the CUDA
// kernels share (ring geometry, which ring rows a span keeps), host and device.
#pragma once

#include "kernels/flash_compressor/flash_compressor.h"
#include "kernels/sparse_decode_attention/kv_entry.h"

#include <cstdint>

#ifdef __CUDACC__
#define FC_HD __host__ __device__ __forceinline__
#else
#define FC_HD inline
#endif

namespace hart {

/// Floats per token of kv (and of gate): coff · c.
FC_HD int64_t fc_width(const flash_compressor_desc& d) {
  return d.overlap ? 2 * d.dim : d.dim;
}

/// Ring rows per SWA page: 2m (CSA, this block + the previous one) or m (HCA).
FC_HD int64_t fc_ring_rows(const flash_compressor_desc& d) {
  return d.overlap ? 2 * d.rate : d.rate;
}

/// Bytes of one stored entry: 584 (kv_entry) or c floats.
FC_HD int64_t fc_entry_bytes(const flash_compressor_desc& d) {
  return d.format == flash_entry_format::kv_entry ? kv_entry_bytes : d.dim * int64_t(sizeof(float));
}

/// Whether position q of a span ending at `end` (exclusive) is written to the
/// ring: a later call reads the open block at `end` and, with overlap, the block
/// before it; with overlap, a request continuing at a page edge reads the last
/// m rows before it.
FC_HD bool fc_ring_keeps(const flash_compressor_desc& d, int64_t page_size, int64_t q, int64_t end) {
  const int64_t m = d.rate;
  if (q >= end / m * m - (d.overlap ? m : 0)) return true;
  return d.overlap && q % page_size >= page_size - m;
}

/// Field checks shared by every entry point; `op` names the caller in messages.
status fc_validate(const flash_compressor_params& p, const char* op);

}  // namespace hart
