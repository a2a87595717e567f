// File: kernels/quant/quant.h
// CPU reference of the DeepSeek-V4 quantization rules (v4-model.md sections 2
// and 9): activation FP8/FP4 QDQ with power-of-two block scales, the
// Walsh-Hadamard rotation used before FP4 QDQ, and the checkpoint weight
// formats (FP8 e4m3 with 128x128 block scales, MXFP4 with 1x32 block scales).
// Plain loops over contiguous fp32 buffers; every op validates its sizes and
// returns invalid_argument naming the offending field.
//
//   // window KV: QDQ the 448 non-RoPE dims of one 512-dim vector, block 64
//   HART_RETURN_IF_ERROR(act_quant_fp8_qdq(kv, 448, 64));
//
// Scale rule shared by every quantizer here, per block of values x:
//   amax = max(max|x|, floor);  k = ceil(log2(amax / q_max));  s = 2^k
//   q = encode(clamp(x / s, -q_max, q_max));  x' = decode(q) * s
// with (q_max, floor) = (448, 1e-4) for e4m3 and (6, 6 * 2^-126) for e2m1.
// k is computed exactly (pow2_scale_exponent); for amax >= floor it equals
// the reference's bit trick ceil_log2(amax * fl(1 / q_max)).
//
// Non-finite input: NaN elements come back NaN without affecting the block's
// amax; a block holding +-inf gets k = 128 (s = inf) and comes back NaN, as in
// the reference. Finite inputs within a rounding step of FLT_MAX can come back
// +-inf (amax = FLT_MAX: s = 2^120, x / s rounds up to 256, 256 * s = 2^128),
// also as in the reference.
#pragma once

#include "runtime/core/status.h"

#include <cstdint>

namespace hart {

/// Largest finite e4m3 (float8_e4m3fn) and e2m1 magnitudes.
inline constexpr float e4m3_max = 448.0f;
inline constexpr float e2m1_max = 6.0f;
/// Lower bounds on a block's amax before its scale is chosen.
inline constexpr float fp8_amax_floor = 1e-4f;
inline constexpr float fp4_amax_floor = 0x1.8p-124f;  // 6 * 2^-126

/// Exact ceil(log2(amax / q_max)) for finite amax, q_max > 0 (subnormals
/// included); returns 128 for amax = +inf or NaN.
int pow2_scale_exponent(float amax, float q_max);

// -- activations: blocks of `block` contiguous elements ---------------------

/// In-place FP8 QDQ (reference `act_quant(x, block, "ue8m0", inplace=True)`).
/// n must be a multiple of block. The results are exactly representable in
/// bf16, so storing them as bf16 adds no rounding.
status act_quant_fp8_qdq(float* x, int64_t n, int64_t block);

/// Same rule, returning codes and scales instead of writing back.
///   q:      [n] e4m3 codes
///   scales: [n / block] fp32, each a power of two
status act_quant_fp8(const float* x, int64_t n, int64_t block, uint8_t* q, float* scales);

/// out[i] = e4m3(q[i]) * scales[i / block]; the inverse of act_quant_fp8.
status act_dequant_fp8(const uint8_t* q, const float* scales, int64_t n, int64_t block, float* out);

/// In-place FP4 (e2m1) QDQ (reference `fp4_act_quant(x, block, inplace=True)`,
/// block 32). Results are exactly representable in bf16.
status fp4_act_qdq(float* x, int64_t n, int64_t block);

// -- Hadamard rotation ------------------------------------------------------

/// In place: x = (H_n x) * scale, H_n the Sylvester-order Walsh-Hadamard matrix
/// (H_1 = [1], H_2n = [[H_n, H_n], [H_n, -H_n]]), n a power of two >= 1. Same as
/// fast_hadamard_transform.hadamard_transform(x, scale); callers pass
/// scale = n^-0.5. Accumulates in fp64 and rounds once to fp32.
status hadamard_transform(float* x, int64_t n, float scale);

// -- FP8 weights: e4m3 [rows, cols] + one scale per block x block tile ------

/// w: [rows, cols] fp32 (row-major). q: [rows, cols] e4m3.
/// scale_e8m0: [ceil(rows / block), ceil(cols / block)], code k + 127 for s = 2^k.
/// Edge tiles are partial; their amax covers only the elements they hold.
status fp8_block_quantize(const float* w, int64_t rows, int64_t cols, int64_t block, uint8_t* q,
                          uint8_t* scale_e8m0);

/// out[r][c] = e4m3(q[r][c]) * 2^(scale[r / block][c / block] - 127), the
/// official checkpoint layout (block 128, F8_E8M0 scales). A NaN scale code
/// (0xff) returns data_loss.
status fp8_block_dequantize(const uint8_t* q, const uint8_t* scale_e8m0, int64_t rows, int64_t cols,
                            int64_t block, float* out);

/// Same with fp32 scales (checkpoints that store `weight_scale_inv` as F32):
/// out = e4m3(q) * scale, one fp32 multiply. A non-finite scale returns data_loss.
status fp8_block_dequantize(const uint8_t* q, const float* scale, int64_t rows, int64_t cols, int64_t block,
                            float* out);

// -- MXFP4 weights: e2m1 pairs [rows, cols / 2] + e8m0 [rows, cols / 32] ----

/// Inverse of mxfp4_dequantize with the e2m1 scale rule above (block 32 along
/// cols); cols must be a multiple of 32. packed: [rows, cols / 2] bytes, the
/// LOW nibble holding the even column. scale_e8m0: [rows, cols / 32].
status mxfp4_quantize(const float* w, int64_t rows, int64_t cols, uint8_t* packed, uint8_t* scale_e8m0);

/// out[r][k] = e2m1(nibble(r, k)) * 2^(scale[r][k / 32] - 127), exact. A NaN
/// scale code (0xff) returns data_loss.
status mxfp4_dequantize(const uint8_t* packed, const uint8_t* scale_e8m0, int64_t rows, int64_t cols,
                        float* out);

}  // namespace hart

#ifdef HART_CUDA
struct CUstream_st;
namespace hart {

// -- CUDA (quant.cu): the same rules on device pointers, bit-exact with the CPU
// functions above (same RNE codecs, saturation, power-of-two scales, NaN
// handling). No allocation, no synchronisation. They validate sizes and
// pointers like the CPU versions. The checkpoint weight formats are decoded on
// the host (weights.cpp) and re-encoded for the device by runtime/gpu.

/// NOTE(kept): the engine quantizes through fp8_act_quant_cuda (linear.h), its
/// own row QDQ and the fused kernels, which all share quant_codecs.cuh; these two
/// expose that codec at any block size, so the device parity tests can hold it
/// bit-exact to the CPU on adversarial inputs (rounding midpoints, saturation,
/// subnormals, non-finite blocks) that the fused kernels cannot be fed directly.
status act_quant_fp8_qdq_cuda(float* x, int64_t n, int64_t block, CUstream_st* stream);
/// NOTE(kept): as act_quant_fp8_qdq_cuda (the codes and scales form).
status act_quant_fp8_cuda(const float* x, int64_t n, int64_t block, uint8_t* q, float* scales,
                          CUstream_st* stream);
status fp4_act_qdq_cuda(float* x, int64_t n, int64_t block, CUstream_st* stream);

/// hadamard_transform on each of n_rows contiguous rows of n (a power of two,
/// n <= 4096: the fp64 row lives in shared memory).
status hadamard_transform_cuda(float* x, int64_t n_rows, int64_t n, float scale, CUstream_st* stream);

}  // namespace hart
#endif
