// CUDA linear, dense path: fp32 through cuBLASLt with fp32 accumulation, and
// the context every CUDA linear shares.
#include "kernels/linear/linear.h"
#include "kernels/linear/linear_fp8_device.cuh"
#include "kernels/linear/linear_impl.h"

#include <climits>

namespace hart {
namespace {

// cuBLASLt scratch: 32 MiB lets the heuristic pick split-K kernels for the
// decode shapes (n_rows small, in large) that need it.
constexpr int64_t k_lt_workspace_bytes = int64_t(32) << 20;
// linear_fp8_lt_cuda's widened weight scales: 2^18 blocks of 128x128 cover any
// V4 weight (the LM head has 1010 x 32).
constexpr int64_t k_lt_w_scale_floats = int64_t(1) << 18;

#define LT_RETURN_IF_ERROR(op, expr)                                                \
  do {                                                                              \
    const cublasStatus_t st_ = (expr);                                              \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                               \
      return internal_error("%s: %s: %s", op, #expr, cublasLtGetStatusString(st_)); \
  } while (0)

status check_dense(const char* op, const void* x, const void* w, const float* y, int64_t n_rows, int64_t in,
                   int64_t out, int64_t xs, int64_t ys) {
  if (!x || !w || !y) return invalid_argument("%s: null pointer", op);
  if (n_rows < 0 || in <= 0 || out <= 0) {
    return invalid_argument("%s: bad sizes n_rows=%lld in=%lld out=%lld", op, (long long)n_rows,
                            (long long)in, (long long)out);
  }
  if (xs < in || ys < out) {
    return invalid_argument("%s: row strides x=%lld y=%lld smaller than the rows (in=%lld out=%lld)", op,
                            (long long)xs, (long long)ys, (long long)in, (long long)out);
  }
  // cuBLASLt takes 64-bit leading dimensions but 32-bit-safe sizes are what its kernels are tuned for.
  if (n_rows > INT32_MAX || in > INT32_MAX || out > INT32_MAX)
    return invalid_argument("%s: size over 2^31", op);
  return {};
}

// Largest power of two (<= 256) dividing the address.
uint32_t alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al) al >>= 1;
  return al;
}

}  // namespace

// Row-major y[n_rows][out] = x[n_rows][in] · W^T is, column-major, Y (out x n_rows) = op(W)·X with W
// seen as an (in x out) column-major matrix, transposed.
status lt_matmul(const char* op, linear_cuda_context::impl& s, cudaDataType_t ab_type, const void* x,
                 const void* w, float* y, int64_t n_rows, int64_t in, int64_t out, int64_t xs, int64_t ys,
                 bool accumulate, cudaStream_t stream, const lt_block_scales* scales) {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  auto run = [&]() -> status {
    LT_RETURN_IF_ERROR(op, cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
    LT_RETURN_IF_ERROR(
        op, cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof trans_a));
    LT_RETURN_IF_ERROR(
        op, cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof trans_b));
    if (scales) {  // W: one fp32 scale per 128x128 block; x: one per row per 128 channels
      const int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
                    b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
      LT_RETURN_IF_ERROR(op, cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode,
                                                            sizeof a_mode));
      LT_RETURN_IF_ERROR(op, cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode,
                                                            sizeof b_mode));
      LT_RETURN_IF_ERROR(op, cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                            &scales->w, sizeof scales->w));
      LT_RETURN_IF_ERROR(op, cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                            &scales->x, sizeof scales->x));
    }
    LT_RETURN_IF_ERROR(op, cublasLtMatrixLayoutCreate(&a, ab_type, uint64_t(in), uint64_t(out), in));
    LT_RETURN_IF_ERROR(op, cublasLtMatrixLayoutCreate(&b, ab_type, uint64_t(in), uint64_t(n_rows), xs));
    LT_RETURN_IF_ERROR(op, cublasLtMatrixLayoutCreate(&c, CUDA_R_32F, uint64_t(out), uint64_t(n_rows), ys));
    LT_RETURN_IF_ERROR(op, cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = uint64_t(s.lt_workspace_bytes);
    LT_RETURN_IF_ERROR(op, cublasLtMatmulPreferenceSetAttribute(
                               pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    // The heuristic assumes 256-byte aligned buffers unless told otherwise.
    const uint32_t align[4] = {alignment(w), alignment(x), alignment(y), alignment(y)};
    const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; ++i) {
      LT_RETURN_IF_ERROR(
          op, cublasLtMatmulPreferenceSetAttribute(pref, align_attr[i], &align[i], sizeof align[i]));
    }
    cublasLtMatmulHeuristicResult_t heur{};
    int n_found = 0;
    LT_RETURN_IF_ERROR(op, cublasLtMatmulAlgoGetHeuristic(s.lt, desc, a, b, c, c, pref, 1, &heur, &n_found));
    if (n_found == 0) {
      return unimplemented("%s: cuBLASLt has no kernel for n_rows=%lld in=%lld out=%lld", op,
                           (long long)n_rows, (long long)in, (long long)out);
    }
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;  // beta = 0: y is never read
    LT_RETURN_IF_ERROR(op, cublasLtMatmul(s.lt, desc, &alpha, w, a, x, b, &beta, y, c, y, c, &heur.algo,
                                          s.lt_workspace, size_t(s.lt_workspace_bytes), stream));
    return {};
  };
  const status result = run();
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (c) cublasLtMatrixLayoutDestroy(c);
  if (b) cublasLtMatrixLayoutDestroy(b);
  if (a) cublasLtMatrixLayoutDestroy(a);
  if (desc) cublasLtMatmulDescDestroy(desc);
  return result;
}

namespace {

// row_invariant: a warp per output and input row, the lane-strided fp32 dot
// product the grouped linear uses for fp32 weights, then a butterfly sum: the
// same operations for a row whatever else shares the call. Block b: input row
// b % n_rows of 8 outputs (b / n_rows), so a weight block's rows run side by side.
constexpr int k_gemv_warps = 8;

template <bool VEC>
__global__ void __launch_bounds__(k_gemv_warps * 32)
    f32_gemv_kernel(linear_params p, int64_t xs, int64_t ys) {
  const int64_t r = blockIdx.x % p.n_rows, o = blockIdx.x / p.n_rows * k_gemv_warps + threadIdx.x / 32;
  if (o >= p.out) return;
  float acc[1][1];
  linear_dev::f32_dot_rows<1, 1, VEC>(p.w + o * p.in, 1, p.x + r * xs, p.in, 1, threadIdx.x % 32, acc);
  linear_dev::warp_sum(acc);
  if (threadIdx.x % 32 == 0) linear_dev::store_rows(acc, p.y, ys, r, o, 1, 1, p.accumulate);
}

status f32_gemv(const linear_params& p, int64_t xs, int64_t ys, cudaStream_t stream) {
  const int64_t blocks = (p.out + k_gemv_warps - 1) / k_gemv_warps * p.n_rows;
  if (blocks > INT_MAX)
    return invalid_argument("linear_cuda: row_invariant out=%lld x n_rows=%lld over the grid",
                            (long long)p.out, (long long)p.n_rows);
  const bool vec = p.in % 16 == 0 && xs % 4 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(p.w) % 16 == 0;
  if (vec) {
    f32_gemv_kernel<true><<<unsigned(blocks), k_gemv_warps * 32, 0, stream>>>(p, xs, ys);
  } else {
    f32_gemv_kernel<false><<<unsigned(blocks), k_gemv_warps * 32, 0, stream>>>(p, xs, ys);
  }
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return internal_error("linear_cuda: %s", cudaGetErrorString(e));
  return {};
}

}  // namespace

// -- context ---------------------------------------------------------------------

linear_cuda_context::linear_cuda_context(std::unique_ptr<impl> s) : impl_(std::move(s)) {}

linear_cuda_context::~linear_cuda_context() {
  if (impl_->lt) cublasLtDestroy(impl_->lt);
  cudaFree(impl_->lt_workspace);
  cudaFree(impl_->x_qdq);
  cudaFree(impl_->widen);
  cudaFree(impl_->tc_partials);
  cudaFree(impl_->tc_arrivals);
  cudaFree(impl_->lt_w_scales);
}

status_or<std::unique_ptr<linear_cuda_context>> linear_cuda_context::create(int64_t max_fp8_rows,
                                                                            int64_t max_fp8_in) {
  if (max_fp8_rows < 0 || max_fp8_in < 0) {
    return invalid_argument("linear_cuda_context: max_fp8_rows=%lld max_fp8_in=%lld must be >= 0",
                            (long long)max_fp8_rows, (long long)max_fp8_in);
  }
  std::unique_ptr<linear_cuda_context> ctx(new linear_cuda_context(std::make_unique<impl>()));
  impl& s = *ctx->impl_;  // destroyed with ctx on every early return below
  const cublasStatus_t st = cublasLtCreate(&s.lt);
  if (st != CUBLAS_STATUS_SUCCESS) {
    s.lt = nullptr;
    return status(status_code::unavailable,
                  std::string("linear_cuda_context: cublasLtCreate: ") + cublasLtGetStatusString(st));
  }
  cudaError_t e = cudaMalloc(&s.lt_workspace, size_t(k_lt_workspace_bytes));
  if (e != cudaSuccess)
    return resource_exhausted("linear_cuda_context: workspace: %s", cudaGetErrorString(e));
  s.lt_workspace_bytes = k_lt_workspace_bytes;
  if (max_fp8_rows > 0 && max_fp8_in > 0) {
    e = cudaMalloc(&s.x_qdq, size_t(max_fp8_rows * max_fp8_in) * sizeof(float));
    if (e != cudaSuccess)
      return resource_exhausted("linear_cuda_context: fp8 input buffer: %s", cudaGetErrorString(e));
    // linear_fp8_tc_cuda's split K: four 32-row CTAs' partials per SM, a counter per SM's worth of tiles.
    const int64_t sms = cuda_sm_count();
    e = cudaMalloc(&s.tc_partials, size_t(4 * sms * 4096) * sizeof(float));
    if (e == cudaSuccess) e = cudaMalloc(&s.tc_arrivals, size_t(sms) * sizeof(int));
    if (e == cudaSuccess) e = cudaMemset(s.tc_arrivals, 0, size_t(sms) * sizeof(int));
    if (e == cudaSuccess) e = cudaDeviceSynchronize();  // zeroed before any stream's first launch
    if (e != cudaSuccess)
      return resource_exhausted("linear_cuda_context: split-K buffers: %s", cudaGetErrorString(e));
    s.tc_partial_floats = 4 * sms * 4096;
    s.tc_arrivals_count = sms;
    e = cudaMalloc(&s.lt_w_scales, size_t(k_lt_w_scale_floats) * sizeof(float));
    if (e != cudaSuccess)
      return resource_exhausted("linear_cuda_context: fp8 scale buffer: %s", cudaGetErrorString(e));
    s.lt_w_scale_floats = k_lt_w_scale_floats;
  }
  s.max_fp8_rows = max_fp8_rows;
  s.max_fp8_in = max_fp8_in;
  e = cudaMalloc(&s.widen, size_t(widen_floats) * sizeof(float));
  if (e != cudaSuccess)
    return resource_exhausted("linear_cuda_context: widening buffer: %s", cudaGetErrorString(e));
  s.widen_floats = widen_floats;
  return status_or<std::unique_ptr<linear_cuda_context>>(std::move(ctx));
}

// -- dense linears ------------------------------------------------------------------

status linear_cuda(const linear_params& p, linear_cuda_context& ctx, CUstream_st* stream) {
  const int64_t xs = p.x_stride ? p.x_stride : p.in, ys = p.y_stride ? p.y_stride : p.out;
  HART_RETURN_IF_ERROR(check_dense("linear_cuda", p.x, p.w, p.y, p.n_rows, p.in, p.out, xs, ys));
  if (p.n_rows == 0) return {};
  if (p.row_invariant) return f32_gemv(p, xs, ys, stream);
  return lt_matmul("linear_cuda", ctx.state(), CUDA_R_32F, p.x, p.w, p.y, p.n_rows, p.in, p.out, xs, ys,
                   p.accumulate, stream);
}

}  // namespace hart
