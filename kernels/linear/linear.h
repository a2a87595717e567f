// File: kernels/linear/linear.h — y = x W^T for a batch of rows (fp32, OpenBLAS).
#pragma once

#include <cstdint>

#include "runtime/core/status.h"

namespace hart {

struct linear_params {
  const float* x = nullptr;  // [in, n_rows], row stride `x_stride`
  const float* w = nullptr;  // [in, out]: row-major [out][in], as checkpoints store it
  float* y = nullptr;        // [out, n_rows], row stride `y_stride`
  int64_t n_rows = 0;
  int64_t in = 0;
  int64_t out = 0;
  int64_t x_stride = 0;      // elements; 0 = in
  int64_t y_stride = 0;      // elements; 0 = out
  bool accumulate = false;   // y += x W^T instead of y = x W^T
  /// Every output computed by one fixed-order dot product, so a row's result
  /// does not depend on how many rows share the call (batch-invariant mode;
  /// slower than the BLAS path, whose blocking depends on n_rows).
  bool row_invariant = false;
};

status linear_cpu(const linear_params& p);

}  // namespace hart
