// File: kernels/linear/linear_grouped_fp4.h — internal to kernels/linear: the
// MXFP4 kernels behind linear_grouped_tc_cuda (linear_grouped_fp4.cu), which
// checks the arguments and sizes the grid (out / 128 × max_tiles) for both forms.
#pragma once

#include "kernels/linear/linear.h"

#include <cuda_runtime.h>

namespace hart {

/// Launches the narrow or wide MXFP4 kernel for checked params `p` (w_mxfp4);
/// the launch's error, if any.
cudaError_t launch_grouped_fp4(const linear_grouped_params& p, dim3 grid, cudaStream_t stream);

}  // namespace hart
