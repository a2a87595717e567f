// Standalone benchmark of FP8 block-scaled GEMMs at V4-Flash prefill shapes
// (target G2: >= 1450 TFLOP/s at M >= 4096 rows; perf-targets.md). Built
// without CMake by scripts/gpu/bench_linear.sh next to linear_bench (G1).
//
// Paths, each checked first on 64 sampled outputs of every 256th row against
// the host reference (linear_bench_common.cuh) within 2^-10 · Σ|x'·w'|:
//  - ours: linear_fp8_tc_cuda (the input's QDQ to codes + mma.sync e4m3),
//    what the engine runs for prefill today;
//  - ours on wgmma (fp8_wgmma_gemm: TMA, warp-specialised, 128×128 tiles),
//    the GEMM alone on the same quantized input as cuBLASLt;
//  - cuBLASLt's block-scaled FP8 GEMM (CUDA >= 12.9): x as e4m3 codes with one
//    fp32 scale per row per 128 channels (VEC128_32F), W with one per 128×128
//    block (BLK128x128_32F), fp32 out. The docs leave the scale tensors' order
//    unclear to us, so it runs with both orders of each (K-blocks inner or
//    outer): the check says which layout cuBLASLt means, the table what it
//    reaches. Time = the GEMM alone (the input quantization is printed apart).
// TFLOP/s = 2·M·in·out / time, median of 20 calls after 3 warm-ups.
#include "kernels/linear/linear.h"
#include "kernels/linear/linear_bench_common.cuh"
#include "kernels/linear/linear_impl.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

using namespace hart;
using namespace hart::bench;

namespace {

constexpr double k_rtol = 1.0 / 1024;  // 2^-10: FP8 MMA sums promoted to fp32 per K block
constexpr double k_g2_tflops = 1450;

const linear_shape k_shapes[] = {{"wq_a 4096->1024", 4096, 1024},
                                 {"wq_b 1024->32768", 1024, 32768},
                                 {"wo_b 8192->4096", 8192, 4096},
                                 {"w1/w3 4096->2048", 4096, 2048},
                                 {"w2 2048->4096", 2048, 4096}};
const int64_t k_rows[] = {4096, 8192};

// e8m0 codes [out/128][in/128] → fp32 scales in either order.
__global__ void scales_to_f32(const uint8_t* codes, float* out, int64_t n_ob, int64_t n_ib, bool k_outer) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_ob * n_ib) return;
  const int64_t ob = i / n_ib, ib = i % n_ib;
  out[k_outer ? ib * n_ob + ob : i] = ldexpf(1.0f, int(codes[i]) - 127);
}

// [rows][kb] → [kb][rows].
__global__ void transpose_f32(const float* in, float* out, int64_t rows, int64_t cols) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  out[(i % cols) * rows + i / cols] = in[i];
}

// One cuBLASLt block-scaled GEMM, planned once (descriptors, algorithm) so a
// timed call is the matmul alone: y [n][out] = x [n][in] · W^T.
class lt_gemm {
 public:
  lt_gemm(cublasLtHandle_t lt, void* ws, size_t ws_bytes) : lt_(lt), ws_(ws), ws_bytes_(ws_bytes) {}
  ~lt_gemm() {
    if (pref_) cublasLtMatmulPreferenceDestroy(pref_);
    for (cublasLtMatrixLayout_t l : {la_, lb_, ld_}) {
      if (l) cublasLtMatrixLayoutDestroy(l);
    }
    if (op_) cublasLtMatmulDescDestroy(op_);
  }
  lt_gemm(const lt_gemm&) = delete;
  lt_gemm& operator=(const lt_gemm&) = delete;

  /// Empty on success, else why cuBLASLt refused.
  std::string plan(const float* w_sc, const float* x_sc, int64_t out, int64_t n, int64_t in) {
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    const int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
                  b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    ok(cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
    ok(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "transa");
    ok(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "transb");
    ok(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof(a_mode)),
       "a scale mode");
    ok(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof(b_mode)),
       "b scale mode");
    ok(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_sc, sizeof(w_sc)),
       "a scale");
    ok(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_sc, sizeof(x_sc)),
       "b scale");
    // Column-major: A = W stored K-major (in × out), B = x (in × n), D = y (out × n).
    ok(cublasLtMatrixLayoutCreate(&la_, CUDA_R_8F_E4M3, uint64_t(in), uint64_t(out), in), "layout a");
    ok(cublasLtMatrixLayoutCreate(&lb_, CUDA_R_8F_E4M3, uint64_t(in), uint64_t(n), in), "layout b");
    ok(cublasLtMatrixLayoutCreate(&ld_, CUDA_R_32F, uint64_t(out), uint64_t(n), out), "layout d");
    ok(cublasLtMatmulPreferenceCreate(&pref_), "preference");
    ok(cublasLtMatmulPreferenceSetAttribute(pref_, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes_,
                                            sizeof(ws_bytes_)),
       "workspace");
    int found = 0;
    if (ok(cublasLtMatmulAlgoGetHeuristic(lt_, op_, la_, lb_, ld_, ld_, pref_, 1, &h_, &found),
           "heuristic") &&
        found == 0) {
      err_ = "no algorithm";
    }
    return err_;
  }
  std::string launch(const uint8_t* w, const uint8_t* xc, float* y) {
    const float alpha = 1.0f, beta = 0.0f;
    ok(cublasLtMatmul(lt_, op_, &alpha, w, la_, xc, lb_, &beta, y, ld_, y, ld_, &h_.algo, ws_, ws_bytes_,
                      nullptr),
       "matmul");
    return err_;
  }

 private:
  bool ok(cublasStatus_t s, const char* what) {
    if (s != CUBLAS_STATUS_SUCCESS && err_.empty())
      err_ = std::string(what) + ": status " + std::to_string(int(s));
    return err_.empty();
  }
  cublasLtHandle_t lt_;
  void* ws_;
  size_t ws_bytes_;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t la_ = nullptr, lb_ = nullptr, ld_ = nullptr;
  cublasLtMatmulPreference_t pref_ = nullptr;
  cublasLtMatmulHeuristicResult_t h_{};
  std::string err_;
};

template <class F>
double median_us(F&& f) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int i = 0; i < 23; ++i) {
    CK(cudaEventRecord(e0));
    f();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float t = 0;
    CK(cudaEventElapsedTime(&t, e0, e1));
    if (i >= 3) ms.push_back(t);
  }
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2] * 1e3;
}

struct row {
  std::string shape, path, note;
  int64_t m = 0;
  double us = 0, tflops = 0, worst = 0;
  bool ok = false;
};

}  // namespace

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs, cuBLASLt %zu\n", prop.name, prop.multiProcessorCount, cublasLtGetVersion());
  const int64_t max_rows = k_rows[sizeof(k_rows) / sizeof(k_rows[0]) - 1];
  auto ctx = linear_cuda_context::create(max_rows, 8192);
  if (!ctx.ok()) return std::fprintf(stderr, "%s\n", ctx.get_status().to_string().c_str()), 1;
  cublasLtHandle_t lt = nullptr;
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) return std::fprintf(stderr, "cublasLtCreate failed\n"), 1;
  const size_t ws_bytes = size_t(64) << 20;
  void* ws = nullptr;
  CK(cudaMalloc(&ws, ws_bytes));
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<row> table;
  for (const linear_shape& s : k_shapes) {
    const int64_t n_ob = (s.out + 127) / 128, n_ib = (s.in + 127) / 128;
    uint8_t *d_w, *d_s, *d_xc;
    float *d_x, *d_y, *d_ws[2], *d_xs[2];
    CK(cudaMalloc(&d_w, size_t(s.in * s.out)));
    CK(cudaMalloc(&d_s, size_t(n_ob * n_ib)));
    fill_codes<<<1024, 256>>>(d_w, s.in * s.out, 7, 0);
    fill_codes<<<64, 256>>>(d_s, n_ob * n_ib, 9, 1);
    for (int k = 0; k < 2; ++k) {
      CK(cudaMalloc(&d_ws[k], size_t(n_ob * n_ib) * 4));
      scales_to_f32<<<unsigned((n_ob * n_ib + 255) / 256), 256>>>(d_s, d_ws[k], n_ob, n_ib, k == 1);
      CK(cudaMalloc(&d_xs[k], size_t(max_rows * n_ib) * 4));
    }
    std::vector<float> x(size_t(max_rows * s.in));
    for (float& v : x) v = nd(rng);
    CK(cudaMalloc(&d_x, x.size() * 4));
    CK(cudaMemcpy(d_x, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&d_xc, x.size()));
    CK(cudaMalloc(&d_y, size_t(max_rows * s.out) * 4));
    const int64_t row_step = 256;
    for (int64_t m : k_rows) {
      const double flop = 2.0 * double(m) * double(s.in) * double(s.out);
      // Ours.
      {
        linear_fp8_params p{d_x, d_w, d_s, d_y, m, s.in, s.out};
        row r{s.name, "ours (mma.sync, incl. input QDQ)", "", m};
        CK(cudaMemset(d_y, 0xff, size_t(m * s.out) * 4));
        if (linear_fp8_tc_supported(p) && linear_fp8_tc_cuda(p, **ctx, nullptr).ok()) {
          CK(cudaDeviceSynchronize());
          r.worst = check_linear(s.in, s.out, m, d_x, d_w, d_s, d_y, k_rtol, row_step);
          r.ok = r.worst <= 1.0;
          r.us = median_us([&] { (void)linear_fp8_tc_cuda(p, **ctx, nullptr); });
        } else {
          r.note = "unsupported";
        }
        table.push_back(r);
      }
      // cuBLASLt: the input's codes and scales once, then the GEMM with each scale order.
      const double quant_us =
          median_us([&] { (void)fp8_act_quant_cuda(d_x, s.in, d_xc, d_xs[0], m, s.in, nullptr); });
      transpose_f32<<<unsigned((m * n_ib + 255) / 256), 256>>>(d_xs[0], d_xs[1], m, n_ib);
      CK(cudaDeviceSynchronize());
      // Ours on wgmma: the GEMM alone on those codes and the block-major scales.
      {
        row r{s.name, "ours (wgmma, TMA, 128x128 tiles)", "", m};
        CK(cudaMemset(d_y, 0xff, size_t(m * s.out) * 4));
        const status st = fp8_wgmma_gemm(d_xc, d_xs[1], d_w, d_s, d_y, m, s.in, s.out, s.out, false, nullptr);
        if (st.ok()) {
          CK(cudaDeviceSynchronize());
          r.worst = check_linear(s.in, s.out, m, d_x, d_w, d_s, d_y, k_rtol, row_step);
          r.ok = r.worst <= 1.0;
          r.us = median_us([&] {
            (void)fp8_wgmma_gemm(d_xc, d_xs[1], d_w, d_s, d_y, m, s.in, s.out, s.out, false, nullptr);
          });
        } else {
          r.note = st.to_string();
        }
        table.push_back(r);
      }
      for (int wk = 0; wk < 2; ++wk) {
        for (int xk = 0; xk < 2; ++xk) {
          row r{s.name,
                std::string("cuBLASLt, W scales ") + (wk ? "[in/128][out/128]" : "[out/128][in/128]") +
                    ", x scales " + (xk ? "[in/128][rows]" : "[rows][in/128]"),
                "", m};
          CK(cudaMemset(d_y, 0xff, size_t(m * s.out) * 4));
          lt_gemm g(lt, ws, ws_bytes);
          r.note = g.plan(d_ws[wk], d_xs[xk], s.out, m, s.in);
          if (r.note.empty()) r.note = g.launch(d_w, d_xc, d_y);
          if (r.note.empty()) {
            CK(cudaDeviceSynchronize());
            r.worst = check_linear(s.in, s.out, m, d_x, d_w, d_s, d_y, k_rtol, row_step);
            r.ok = r.worst <= 1.0;
            r.us = median_us([&] { (void)g.launch(d_w, d_xc, d_y); });
            char q[64];
            std::snprintf(q, sizeof q, "input quant %.1f us", quant_us);
            r.note = q;
          }
          (void)cudaGetLastError();
          table.push_back(r);
        }
      }
      for (row& r : table) {
        if (r.m == m && r.shape == s.name && r.us > 0) r.tflops = flop / (r.us * 1e-6) / 1e12;
      }
    }
    for (void* p : {(void*)d_w, (void*)d_s, (void*)d_xc, (void*)d_x, (void*)d_y, (void*)d_ws[0],
                    (void*)d_ws[1], (void*)d_xs[0], (void*)d_xs[1]}) {
      CK(cudaFree(p));
    }
  }
  std::printf(
      "\n| shape | rows | path | check (err / bound) | us (median) | TFLOP/s | G2 (>= %.0f) | note |\n",
      k_g2_tflops);
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (const row& r : table) {
    std::printf("| %s | %lld | %s | %s | %s | %s | %s | %s |\n", r.shape.c_str(), (long long)r.m,
                r.path.c_str(),
                r.us > 0 ? (std::to_string(r.worst).substr(0, 6) + (r.ok ? " ok" : " FAIL")).c_str() : "-",
                r.us > 0 ? std::to_string(r.us).substr(0, 8).c_str() : "-",
                r.us > 0 ? std::to_string(r.tflops).substr(0, 6).c_str() : "-",
                !r.ok                     ? "-"
                : r.tflops >= k_g2_tflops ? "met"
                                          : "missed",
                r.note.c_str());
  }
  std::printf("\nreproduce: bash scripts/gpu/bench_linear.sh\n");
  return 0;
}
