// File: runtime/gpu/bench_fill.h — device helpers of `hart bench`: random
// data made in place on the device from a counter-based hash of (seed, index),
// so a model of tens of GB is filled in well under a second and never exists
// on the host (deterministic for a seed); and the launch floor.
//
//   HART_RETURN_IF_ERROR(bench_fill_e4m3(codes, n, seed, stream));
#pragma once

#include "runtime/core/status.h"

#include <cstdint>

struct CUstream_st;

namespace hart::gpu {

/// n e4m3 codes with random sign and magnitude in [0.5, 2) (exponent fields 6
/// and 7, any mantissa): never NaN, never 0, so a linear y = x·W^T with the
/// block scale 2^-round(log2 sqrt(in)) keeps y's scale near x's.
status bench_fill_e4m3(uint8_t* codes, int64_t n, uint64_t seed, CUstream_st* stream);

/// n uniformly random bytes (MXFP4 experts: every byte is a pair of finite e2m1 codes).
status bench_fill_bytes(uint8_t* bytes, int64_t n, uint64_t seed, CUstream_st* stream);

/// n e8m0 scale codes, all `code` (2^(code-127)).
status bench_fill_e8m0(uint8_t* scales, int64_t n, uint8_t code, CUstream_st* stream);

/// n floats uniform in [lo, hi).
status bench_fill_f32(float* x, int64_t n, uint64_t seed, float lo, float hi, CUstream_st* stream);

/// n bf16 values (bits) in about [lo, hi) (uniform values truncated to bf16).
status bench_fill_bf16(uint16_t* x, int64_t n, uint64_t seed, float lo, float hi, CUstream_st* stream);

/// Median CUDA-event time of one empty kernel launch (µs) over `n` launches:
/// the launch part of a step's floor.
status_or<double> bench_empty_launch_us(int n);

}  // namespace hart::gpu
