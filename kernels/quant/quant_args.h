// File: kernels/quant/quant_args.h — argument checks shared by the CPU and CUDA
// quant entry points (shapes and pointers; each names the op and the field).
#pragma once

#include "runtime/core/status.h"

#include <cstdint>

namespace hart::quant_args {

/// n >= 0, block > 0, n a multiple of block.
status check_blocks(const char* op, int64_t n, int64_t block);
/// p non-null when n > 0 elements go through it.
status check_ptr(const char* op, const char* field, const void* p, int64_t n);
/// rows >= 0 and cols >= 0.
status check_matrix(const char* op, int64_t rows, int64_t cols);

}  // namespace hart::quant_args
