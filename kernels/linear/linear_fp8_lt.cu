// CUDA FP8 linear at prefill's row counts: the fp8 mode's product through
// cuBLASLt's block-scaled FP8 GEMM (CUDA >= 12.9 on sm_90). The input is
// quantized to e4m3 codes with its per-row per-128 scales block-major (the
// order cuBLASLt reads, G2 v1), the weight's e8m0 block scales widened to fp32
// in the context (rows padded, below), then one cublasLtMatmul writes y in fp32.
#include "kernels/linear/linear.h"
#include "kernels/linear/linear_impl.h"

namespace hart {
namespace {

constexpr int64_t k_block = k_linear_fp8_block;

// cuBLASLt reads BLK128x128 scales [out/128][ld] with ld = in/128 rounded up
// to a multiple of 4 (16 bytes): with in/128 = 1, 2 or 3 and out > 128, an
// unpadded copy gives every row block past the first another block's scale
// (PyTorch's _scaled_mm asks the same stride).
int64_t lt_w_scale_ld(int64_t in) {
  return (in / k_block + 3) / 4 * 4;
}

__global__ void widen_scales_kernel(const uint8_t* __restrict__ codes, float* __restrict__ out,
                                    int64_t k_blocks, int64_t ld, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i / k_blocks * ld + i % k_blocks] = ldexpf(1.0f, int(codes[i]) - 127);
}

}  // namespace

bool linear_fp8_lt_supported(const linear_fp8_params& p) {
  const int64_t ys = p.y_stride ? p.y_stride : p.out;
  return linear_fp8_tc_supported(p) && ys % 4 == 0 && reinterpret_cast<uintptr_t>(p.y) % 16 == 0;
}

status linear_fp8_lt_cuda(const linear_fp8_params& p, linear_cuda_context& ctx, CUstream_st* stream) {
  linear_cuda_context::impl& s = ctx.state();
  HART_RETURN_IF_ERROR(block_scaled_fp8_check("linear_fp8_lt_cuda", p, linear_fp8_lt_supported(p), s));
  const int64_t xs = p.x_stride ? p.x_stride : p.in, ys = p.y_stride ? p.y_stride : p.out;
  const int64_t k_blocks = p.in / k_block, w_blocks = p.out / k_block * k_blocks, ld = lt_w_scale_ld(p.in);
  if (p.out / k_block * ld > s.lt_w_scale_floats) {
    return resource_exhausted("linear_fp8_lt_cuda: %lld weight blocks (padded) over the context's %lld",
                              (long long)(p.out / k_block * ld), (long long)s.lt_w_scale_floats);
  }
  // cuBLASLt reads the block-major scales with a leading dimension of the row
  // count, which it needs 16-byte aligned: a multiple of 4 rows goes to it, the
  // last 1-3 rows to linear_fp8_tc_cuda (after it on the stream: they share
  // the context's input buffer).
  const int64_t lt_rows = p.n_rows / 4 * 4;
  if (lt_rows > 0) {
    block_major_input x;
    HART_RETURN_IF_ERROR(quantize_block_major(p, lt_rows, s, stream, &x));
    widen_scales_kernel<<<unsigned((w_blocks + 255) / 256), 256, 0, stream>>>(p.w_scale, s.lt_w_scales,
                                                                              k_blocks, ld, w_blocks);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return internal_error("linear_fp8_lt_cuda: %s", cudaGetErrorString(e));
    const lt_block_scales scales{s.lt_w_scales, x.scales};
    HART_RETURN_IF_ERROR(lt_matmul("linear_fp8_lt_cuda", s, CUDA_R_8F_E4M3, x.codes, p.w, p.y, lt_rows, p.in,
                                   p.out, p.in, ys, p.accumulate, stream, &scales));
  }
  if (lt_rows == p.n_rows) return {};
  linear_fp8_params tail = p;
  tail.x = p.x + lt_rows * xs;
  tail.y = p.y + lt_rows * ys;
  tail.n_rows = p.n_rows - lt_rows;
  return linear_fp8_tc_cuda(tail, ctx, stream);
}

}  // namespace hart
