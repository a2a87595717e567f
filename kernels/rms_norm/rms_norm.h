// File: kernels/rms_norm/rms_norm.h — y = x * rsqrt(mean(x^2) + eps) [* w], row-wise.
#pragma once

#include <cstdint>

#include "runtime/core/status.h"

namespace hart {

struct rms_norm_params {
  const float* x = nullptr;  // [dim, n_rows], row stride `x_stride`
  const float* w = nullptr;  // [dim] or null for the unweighted norm (V4's per-head q RMS)
  float* y = nullptr;        // [dim, n_rows], row stride `y_stride`; may alias x
  int64_t n_rows = 0;
  int64_t dim = 0;
  int64_t x_stride = 0;      // elements; 0 = dim
  int64_t y_stride = 0;      // elements; 0 = dim
  float eps = 1e-6f;
};

status rms_norm_cpu(const rms_norm_params& p);

}  // namespace hart

#ifdef HART_CUDA
struct CUstream_st;
namespace hart {
/// Same contract as rms_norm_cpu with device pointers; fp32, one block per row.
status rms_norm_cuda(const rms_norm_params& p, CUstream_st* stream);
}  // namespace hart
#endif
