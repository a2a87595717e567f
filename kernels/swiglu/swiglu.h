// File: kernels/swiglu/swiglu.h — V4's clamped SwiGLU (v4-model.md §6.2):
// h = silu(min(g, limit)) · clamp(u, -limit, limit) [· row_weight]; limit 0 = no clamp.
#pragma once

#include "runtime/core/status.h"

#include <cstdint>

namespace hart {

struct swiglu_params {
  const float* gate = nullptr;        // [dim, n_rows], row stride `in_stride`
  const float* up = nullptr;          // [dim, n_rows], row stride `in_stride`
  const float* row_weight = nullptr;  // [n_rows] routing weight per row, or null
  float* out = nullptr;               // [dim, n_rows], contiguous
  int64_t n_rows = 0;
  int64_t dim = 0;
  int64_t in_stride = 0;  // elements; 0 = dim
  float limit = 0.0f;
  /// The official experts' bf16 tensors: gate and up read rounded to bf16 (their
  /// linears' bf16 outputs), the weighted product rounded to bf16 (w2's input).
  bool bf16 = false;
};

status swiglu_cpu(const swiglu_params& p);

}  // namespace hart

#ifdef HART_CUDA
struct CUstream_st;
namespace hart {
/// Same contract as swiglu_cpu with device pointers; fp32, one block per row, no
/// allocation, no synchronisation.
status swiglu_cuda(const swiglu_params& p, CUstream_st* stream);
}  // namespace hart
#endif
