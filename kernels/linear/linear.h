// File: kernels/linear/linear.h — y = x W^T for a batch of rows (fp32, OpenBLAS).
#pragma once

#include "runtime/core/status.h"

#include <cstdint>

namespace hart {

struct linear_params {
  const float* x = nullptr;  // [in, n_rows], row stride `x_stride`
  const float* w = nullptr;  // [in, out]: row-major [out][in], as checkpoints store it
  float* y = nullptr;        // [out, n_rows], row stride `y_stride`
  int64_t n_rows = 0;
  int64_t in = 0;
  int64_t out = 0;
  int64_t x_stride = 0;     // elements; 0 = in
  int64_t y_stride = 0;     // elements; 0 = out
  bool accumulate = false;  // y += x W^T instead of y = x W^T
  /// Every output computed by one fixed-order dot product, so a row's result
  /// does not depend on how many rows share the call (batch-invariant mode;
  /// slower than the BLAS path, whose blocking depends on n_rows).
  bool row_invariant = false;
};

status linear_cpu(const linear_params& p);

/// Block edge of the FP8 weight scales and of the activation quantization.
inline constexpr int64_t k_linear_fp8_block = 128;

/// The weight of one group of rows in a grouped linear.
struct linear_group_weight {
  const void* w = nullptr;  // [in, out] row-major [out][in]: e4m3 codes when w_scale is set, else fp32
                            // (linear_grouped_params::w_mxfp4: e2m1 pairs [out][in/2], low nibble even)
  const uint8_t* w_scale = nullptr;  // [ceil(in/128), ceil(out/128)] e8m0 codes, row-major; null: fp32
                                     // weights (w_mxfp4: one e8m0 per 32 channels, [out][in/32])
};

/// Rows that use different weights in one call (MoE experts): tile i is rows
/// [tile_row0[i], tile_row0[i] + tile_rows[i]) of x and y, 1 <= tile_rows[i]
/// <= linear_grouped_tile_rows, through weight groups[tile_group[i]]. Tiles in
/// use: *n_tiles (<= max_tiles), so a device-side plan can size the work
/// without the host knowing it. Rows in no tile are not written.
///   y[r] = x[r] · W_g^T   (fp32 accumulation; codes times 2^scale are exact)
/// x must already be what the weights expect (FP8 QDQ'd for the fp8 mode's
/// weights): the op does not quantize. Every group's w is 16-byte aligned.
inline constexpr int64_t linear_grouped_tile_rows = 8;
/// linear_grouped_tc_cuda's wide tiles (max_tile_rows above 8, up to this):
/// prefill's experts, whose weights are then read once per 64 rows, not per 8.
inline constexpr int64_t linear_grouped_wide_tile_rows = 64;
struct linear_grouped_params {
  const float* x = nullptr;  // [in, n_rows] dense
  float* y = nullptr;        // [out, n_rows] dense
  const linear_group_weight* groups = nullptr;
  int64_t n_groups = 0;
  const int32_t* tile_group = nullptr;  // [max_tiles]
  const int32_t* tile_row0 = nullptr;   // [max_tiles]
  const int32_t* tile_rows = nullptr;   // [max_tiles]
  const int32_t* n_tiles = nullptr;     // one value
  int64_t max_tiles = 0;
  int64_t n_rows = 0;  // rows of x and y (bounds the tiles)
  int64_t in = 0;
  int64_t out = 0;
  /// Every tile has at most this many rows: linear_grouped_tile_rows, or up to
  /// linear_grouped_wide_tile_rows for linear_grouped_tc_cuda (and the CPU).
  int64_t max_tile_rows = linear_grouped_tile_rows;
  // linear_grouped_tc_cuda's x instead: e4m3 codes [in, n_rows] and one
  // power-of-two scale per row per 128 channels [in / 128, n_rows]
  // (fp8_act_quant_cuda: codes · scale is the QDQ'd row).
  const uint8_t* x_codes = nullptr;
  const float* x_scales = nullptr;
  /// Every group is MXFP4 (routed experts as the checkpoint ships them):
  /// e2m1 pairs in mxfp4_mma_order and one e8m0 scale per 32 channels of a
  /// row ([out][in/32], kernels/quant's layout); in % 128 == 0.
  /// linear_grouped_cpu and linear_grouped_tc_cuda only.
  bool w_mxfp4 = false;
};

/// MXFP4 pairs (kernels/quant's [rows][cols/2], low nibble even) in the order
/// the tensor-core kernel loads them: within each 128-channel block of a row
/// (64 bytes), byte 16t + 4j + i holds channels 32j + 8t + 2i (low nibble) and
/// 32j + 8t + 2i + 1, for t, j, i in 0..3 — lane t's 4-byte pieces of the four
/// 32-blocks in one 16-byte load. The permutation is its own inverse. `out`
/// may be `packed`. cols must be a multiple of 128.
status mxfp4_mma_order(const uint8_t* packed, int64_t rows, int64_t cols, uint8_t* out);
/// Host pointers; checks every tile against n_rows, n_groups and the tile size.
status linear_grouped_cpu(const linear_grouped_params& p);

}  // namespace hart

#ifdef HART_CUDA
#include <memory>

struct CUstream_st;
namespace hart {

// -- CUDA ------------------------------------------------------------------------
//
//   auto ctx = linear_cuda_context::create(/*max_fp8_rows=*/64, /*max_fp8_in=*/16384);
//   HART_RETURN_IF_ERROR(linear_cuda(p, **ctx, stream));        // fp32, cuBLASLt
//   HART_RETURN_IF_ERROR(linear_fp8_cuda(q, **ctx, stream));    // e4m3 weights

/// Device state shared by the CUDA linears: the cuBLASLt handle, its workspace
/// and the FP8 path's quantized-activation buffer, allocated once here so the
/// ops themselves never allocate. One context per stream at a time (calls on
/// one context must not run concurrently: they share the workspaces).
class linear_cuda_context {
 public:
  /// max_fp8_rows x max_fp8_in bounds the FP8 inputs (larger calls are refused).
  /// Every context also holds widen_floats fp32 for linear_bf16w_cuda's chunks.
  static constexpr int64_t widen_floats = int64_t(8) << 20;  // 32 MiB
  static status_or<std::unique_ptr<linear_cuda_context>> create(int64_t max_fp8_rows, int64_t max_fp8_in);
  ~linear_cuda_context();
  linear_cuda_context(const linear_cuda_context&) = delete;
  linear_cuda_context& operator=(const linear_cuda_context&) = delete;

  struct impl;
  impl& state() { return *impl_; }

 private:
  explicit linear_cuda_context(std::unique_ptr<impl> s);
  std::unique_ptr<impl> impl_;
};

/// Same contract as linear_cpu with device pointers: fp32 in, fp32 out, fp32
/// accumulation (cuBLASLt, CUBLAS_COMPUTE_32F, no TF32). row_invariant: a
/// warp-per-output GEMV instead (cuBLASLt picks its kernel by shape), so a
/// row's result does not depend on the others in the call; slower for many rows.
status linear_cuda(const linear_params& p, linear_cuda_context& ctx, CUstream_st* stream);

struct linear_bf16w_params {
  const float* x = nullptr;     // [in, n_rows] fp32, row stride `x_stride`
  const uint16_t* w = nullptr;  // [in, out] bf16 bits, row-major [out][in]
  float* y = nullptr;           // [out, n_rows] fp32, row stride `y_stride`
  int64_t n_rows = 0;
  int64_t in = 0;
  int64_t out = 0;
  int64_t x_stride = 0;     // elements; 0 = in
  int64_t y_stride = 0;     // elements; 0 = out
  bool accumulate = false;  // y += x W^T
  /// The GEMV at every row count (no tensor cores, no cuBLASLt): a row's
  /// result does not depend on the others in the call (batch-invariant mode).
  bool row_invariant = false;
};

/// fp32 x times bf16 W (widened exactly), fp32 accumulation and output: equals
/// linear_cpu on the widened weights up to fp32 summation order. For weights
/// the checkpoint stores in bf16 (LM head, compressors, router), so decode
/// reads half the bytes of an fp32 copy. Up to 64 rows a CUDA-core GEMV that
/// reads the weights once; more rows run cuBLASLt on fp32 chunks of W widened
/// into the context's buffer (in <= linear_cuda_context::widen_floats).
status linear_bf16w_cuda(const linear_bf16w_params& p, linear_cuda_context& ctx, CUstream_st* stream);

struct linear_fp8_params {
  const float* x = nullptr;          // [in, n_rows] fp32 (unquantized), row stride `x_stride`
  const uint8_t* w = nullptr;        // [in, out] e4m3 codes, row-major [out][in]
  const uint8_t* w_scale = nullptr;  // [ceil(in/128), ceil(out/128)] e8m0 codes (2^(c-127)), row-major
  float* y = nullptr;                // [out, n_rows] fp32, row stride `y_stride`
  int64_t n_rows = 0;
  int64_t in = 0;
  int64_t out = 0;
  int64_t x_stride = 0;     // elements; 0 = in
  int64_t y_stride = 0;     // elements; 0 = out
  bool accumulate = false;  // y += x W^T
  /// false: x is used as it is (weights that are FP8 values applied to
  /// unquantized inputs, wo_a); the context's buffer is not used.
  bool quantize_input = true;
  /// W is a slice of a larger quantized matrix starting this many rows into
  /// the 128-row scale block whose scale row w_scale points at (0..127).
  int64_t w_scale_row_offset = 0;
  /// > 0 (with quantize_input = false): output rows come in groups of this
  /// many, group g applied to x + g·x_group_stride (a block-diagonal linear
  /// such as wo_a, whose G groups each read their own slice of the row).
  int64_t x_group_rows = 0;
  int64_t x_group_stride = 0;
};

/// The fp8 precision mode's linear on the device: x is quantized per row per
/// 128 channels (kernels/quant rule, the last block shorter when in % 128 != 0)
/// into the context's buffer, then y = Q(x) · (e4m3(W) · 2^scale)^T with fp32
/// accumulation. Every product is exact, so the result equals linear_cpu on
/// fp8_qdq_rows(x) and the dequantized W up to fp32 summation order. Rows are
/// independent and summed in a fixed order: batch-invariant. With
/// quantize_input = false the same product runs on x as given (FP8 weight
/// values, unquantized inputs): linear_cpu on x and the dequantized W up to
/// fp32 rounding.
/// CUDA cores, dequantized in registers, exact products: the path for few rows
/// (linear_fp8_tc_cuda below is the one for many).
status linear_fp8_cuda(const linear_fp8_params& p, linear_cuda_context& ctx, CUstream_st* stream);

/// linear_fp8_cuda's product on tensor cores (mma.sync m16n8k32 e4m3, fp32
/// accumulation per 128-channel block, then the blocks' power-of-two scales):
/// the same quantized x and W, the sums in the MMA's order (so within a few
/// fp32 roundings per block of linear_cpu on fp8_qdq_rows(x) and the
/// dequantized W, not bitwise linear_fp8_cuda). For many rows, where the
/// CUDA-core dot is bound by its FMAs (G1, G2). Layers with few output tiles
/// split K over CTAs, summed in a fixed order: repeatable, but the split
/// depends on the row count, so not batch-invariant. Needs quantized inputs,
/// in % 128 == 0, out % 128 == 0 and 16-byte aligned weights
/// (linear_fp8_tc_supported); unimplemented otherwise. One stream per context
/// at a time (its buffers hold the quantized rows and the split partials).
status linear_fp8_tc_cuda(const linear_fp8_params& p, linear_cuda_context& ctx, CUstream_st* stream);
bool linear_fp8_tc_supported(const linear_fp8_params& p);

/// linear_fp8_cuda's quantize_input = false product (FP8 weight values on fp32
/// inputs as they are: wo_a, grouped or not) on tensor cores: the codes widened
/// to bf16 and each input split into three bf16 terms, both exactly, so every
/// product is exact; fp32 sums per 128-channel block in the MMA's order, then
/// the block's scale (within a few fp32 roundings per block of linear_cpu on x
/// and the dequantized W). Layers with few output tiles split K as
/// linear_fp8_tc_cuda does (repeatable; the split depends on the row count, so
/// not batch-invariant). Needs in % 128 == 0, out % 128 == 0, groups of a
/// multiple of 128 rows, 16-byte aligned rows, no scale row offset
/// (linear_fp8_raw_tc_supported); unimplemented otherwise. One stream per
/// context at a time (its split partials).
status linear_fp8_raw_tc_cuda(const linear_fp8_params& p, linear_cuda_context& ctx, CUstream_st* stream);
bool linear_fp8_raw_tc_supported(const linear_fp8_params& p);
/// linear_fp8_tc_cuda's contract through cuBLASLt's block-scaled FP8 GEMM
/// (the input's codes and block-major scales, the weight's scales widened to
/// fp32, then one cublasLtMatmul): 6-9x linear_fp8_tc_cuda at prefill's row
/// counts (G2 v1). Hopper's FP8 MMA keeps fewer accumulator bits than fp32,
/// so within 2^-10 · Σ|x'·w'| of the exact sum, not a few roundings (measured
/// 2^-12); the kernel cuBLASLt picks depends on the row count: not
/// batch-invariant. Rows past the last multiple of 4 go to linear_fp8_tc_cuda
/// (cuBLASLt wants the scales' leading dimension 16-byte aligned). Same
/// support rule as linear_fp8_tc (linear_fp8_lt_supported) plus a 16-byte
/// aligned y row stride; the context's buffers bound n_rows.
status linear_fp8_lt_cuda(const linear_fp8_params& p, linear_cuda_context& ctx, CUstream_st* stream);
bool linear_fp8_lt_supported(const linear_fp8_params& p);
/// The same product on our own Hopper kernel (linear_fp8_wgmma.cu: TMA into a
/// 5-stage ring, two consumer warpgroups on wgmma m64n128k32 e4m3, each
/// 128-channel block's sum scaled into an fp32 accumulator): within 2^-10 ·
/// Σ|x'·w'| like cuBLASLt (Hopper's FP8 MMA), a fixed order per output (the
/// same bits for the same inputs, whatever the row count). Any row count; the
/// same support rule as linear_fp8_tc plus an 8-byte aligned, even y stride.
/// NOTE(kept): not yet the engine's (63-66% of cuBLASLt's speed, perf-notes G2
/// v2); linear_prefill_bench measures it beside cuBLASLt each time it changes,
/// and prefill takes it once it is faster (issue 26).
status linear_fp8_wgmma_cuda(const linear_fp8_params& p, linear_cuda_context& ctx, CUstream_st* stream);
bool linear_fp8_wgmma_supported(const linear_fp8_params& p);

/// linear_grouped_cpu's contract with device pointers (groups too). Each
/// output is the warp dot product linear_fp8_cuda uses for codes (bitwise the
/// same result for the same QDQ'd row), lane-strided fp32 FMAs for fp32
/// weights. Bad tiles are not detected on the device (the plan that writes
/// them is trusted); sizes are checked here.
status linear_grouped_cuda(const linear_grouped_params& p, CUstream_st* stream);

/// linear_grouped_cuda's product on tensor cores for e4m3 groups (every tile's
/// group must have codes; x given as x_codes / x_scales): mma.sync m16n8k32
/// with fp32 accumulation per 128-channel block, then the blocks' scales, so
/// within a few fp32 roundings per block of the exact sum (not bitwise
/// linear_grouped_cuda). Each row's result depends on its own codes only
/// (batch-invariant) at a given max_tile_rows; wide tiles (> 8) sum the blocks
/// in another order than narrow ones, so a row's bits differ between the two.
/// Needs in % 128 == 0, out % 128 == 0, 16-byte aligned groups; unimplemented
/// otherwise.
/// MXFP4 groups (w_mxfp4, linear_grouped_fp4.cu): the e2m1 codes widened to
/// e4m3 in registers (exact, 2^-6 of their value), one MMA per 32-channel
/// block, each block's fp32 partial times 2^(scale - 127) (the reference
/// fp4_gemm's per-32 sums); decode tiles add a 128-block's four such terms
/// before its s_x, prefill tiles add each into the accumulator with s_x.
/// Scale codes 1..254: a code 0 (2^-127) reads as 0 (the engine's upload
/// keeps such weights out of MXFP4).
status linear_grouped_tc_cuda(const linear_grouped_params& p, CUstream_st* stream);

/// x [in, n_rows] (row stride x_stride) as e4m3 codes + one power-of-two scale
/// per row per 128 channels (the last block shorter): codes · scale is the fp8
/// mode's QDQ of x bitwise. The tensor-core linears' input form. Scales are
/// [in/128, n_rows] (a row's blocks together), or [n_rows, in/128] with
/// block_major_scales (a block's rows together: cuBLASLt's order).
status fp8_act_quant_cuda(const float* x, int64_t x_stride, uint8_t* codes, float* scales, int64_t n_rows,
                          int64_t in, CUstream_st* stream, bool block_major_scales = false);

}  // namespace hart
#endif
