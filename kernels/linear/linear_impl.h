// File: kernels/linear/linear_impl.h — internal to kernels/linear (style R3):
// what the CUDA linears share (the context's state) and the FP8 activation
// quantizer, exposed for its bitwise test against kernels/quant.
#pragma once

#include "kernels/linear/linear.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hart {

struct linear_cuda_context::impl {
  cublasLtHandle_t lt = nullptr;
  void* lt_workspace = nullptr;  // cuBLASLt scratch
  int64_t lt_workspace_bytes = 0;
  float* x_qdq = nullptr;  // [max_fp8_in, max_fp8_rows] quantized-dequantized FP8 inputs
  int64_t max_fp8_rows = 0;
  int64_t max_fp8_in = 0;
  float* widen = nullptr;  // [widen_floats] bf16 weights widened for cuBLASLt
  int64_t widen_floats = 0;
  float* tc_partials = nullptr;  // [tc_partial_floats] split-K partial sums of linear_fp8_tc_cuda
  int64_t tc_partial_floats = 0;
  int* tc_arrivals = nullptr;  // [tc_arrivals_count] per output tile: splits done (0 between launches)
  int64_t tc_arrivals_count = 0;
  float* lt_w_scales = nullptr;  // [lt_w_scale_floats] an FP8 weight's block scales widened for cuBLASLt
  int64_t lt_w_scale_floats = 0;
};

/// Block scales of an FP8 cuBLASLt GEMM (CUDA >= 12.9): W one fp32 per
/// 128x128 block [out/128][in/128]; x one fp32 per row per 128 channels,
/// block-major [in/128][n_rows] (cuBLASLt's VEC128 order; measured, G2 v1).
struct lt_block_scales {
  const float* w = nullptr;
  const float* x = nullptr;
};

/// Row-major y[n_rows][out] (+)= x[n_rows][in] · W^T through cuBLASLt, fp32
/// accumulation and output; `scales` set: x and W are e4m3 codes scaled per
/// block. x, w in `ab_type`; row strides xs, ys in elements.
status lt_matmul(const char* op, linear_cuda_context::impl& s, cudaDataType_t ab_type, const void* x,
                 const void* w, float* y, int64_t n_rows, int64_t in, int64_t out, int64_t xs, int64_t ys,
                 bool accumulate, cudaStream_t stream, const lt_block_scales* scales = nullptr);

/// x quantized for a block-scaled FP8 GEMM (linear_fp8_lt_cuda,
/// linear_fp8_wgmma_cuda) in the context's fp32 input buffer: the e4m3 codes
/// [rows][in], then, 16-byte aligned, the scales block-major [in/128][rows].
struct block_major_input {
  uint8_t* codes = nullptr;
  float* scales = nullptr;
};

/// Those two entry points' argument checks (pointers, sizes, `supported`, row
/// strides, the context's FP8 input buffer), in `op`'s words.
status block_scaled_fp8_check(const char* op, const linear_fp8_params& p, bool supported,
                              const linear_cuda_context::impl& s);

/// x's first `rows` rows quantized into the context's input buffer (checked first).
status quantize_block_major(const linear_fp8_params& p, int64_t rows, linear_cuda_context::impl& s,
                            cudaStream_t stream, block_major_input* out);

/// linear_fp8_wgmma_cuda's GEMM on quantized input: y [n_rows][out] (row
/// stride ys) (+)= (x_codes · x_scales) · (w · w_scale)^T; x_codes [n_rows][in]
/// dense, x_scales block-major [in/128][n_rows], w e4m3 [out][in], w_scale
/// e8m0 [out/128][in/128]. Sizes are the caller's to check (in, out % 128 == 0).
status fp8_wgmma_gemm(const uint8_t* x_codes, const float* x_scales, const uint8_t* w, const uint8_t* w_scale,
                      float* y, int64_t n_rows, int64_t in, int64_t out, int64_t ys, bool accumulate,
                      cudaStream_t stream);

/// out[r][i] = e4m3 QDQ of x[r][i] with one power-of-two scale per 128
/// channels (last block shorter): bitwise act_quant_fp8_qdq per block.
/// x: [in, n_rows] row stride x_stride; out: [in, n_rows] dense.
cudaError_t linear_fp8_act_qdq_launch(const float* x, int64_t x_stride, float* out, int64_t n_rows,
                                      int64_t in, cudaStream_t stream);

}  // namespace hart
