#include "runtime/model/linear_ops.h"

#include "kernels/linear/linear.h"
#include "kernels/quant/quant.h"
#include "runtime/core/check.h"
#include "runtime/core/codecs.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>

namespace hart {

void fp8_qdq_rows(float* x, int64_t n_rows, int64_t dim, int64_t block, int64_t row_stride) {
  const int64_t stride = row_stride ? row_stride : dim;
#pragma omp parallel for schedule(static) if (n_rows > 16)
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t b = 0; b < dim; b += block) {
      const int64_t len = std::min(block, dim - b);
      HART_CHECK(act_quant_fp8_qdq(x + r * stride + b, len, len).ok());
    }
  }
}

void hadamard_fp4_qdq_rows(float* x, int64_t n_rows, int64_t dim, bool bf16) {
  const float scale = 1.0f / std::sqrt(float(dim));
#pragma omp parallel for schedule(static) if (n_rows > 16)
  for (int64_t r = 0; r < n_rows; ++r) {
    HART_CHECK(hadamard_transform(x + r * dim, dim, scale).ok());
    if (bf16) round_to_bf16(x + r * dim, dim);
    HART_CHECK(fp4_act_qdq(x + r * dim, dim, std::min<int64_t>(32, dim)).ok());
  }
}

void round_to_bf16(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = hart::round_to_bf16(x[i]);
}

void linear_blocked(const float* x, int64_t x_stride, const float* w, int64_t in, int64_t out, int64_t n_rows,
                    int64_t k_block, float* y, int64_t y_stride) {
  if (k_block == 1) {  // fp32 products added in K order
#pragma omp parallel for schedule(static) if (n_rows > 4)
    for (int64_t r = 0; r < n_rows; ++r) {
      for (int64_t o = 0; o < out; ++o) {
        float acc = 0;
        for (int64_t k = 0; k < in; ++k) acc += x[r * x_stride + k] * w[o * in + k];
        y[r * y_stride + o] = acc;
      }
    }
    return;
  }
  const int64_t n_blocks = in / k_block;
  std::vector<double> xb(size_t(n_rows * k_block)), wb(size_t(out * k_block)), part(size_t(n_rows * out));
  std::vector<float> acc(size_t(n_rows * out), 0.0f);
  for (int64_t b = 0; b < n_blocks; ++b) {
    for (int64_t r = 0; r < n_rows; ++r) {
      for (int64_t k = 0; k < k_block; ++k) xb[size_t(r * k_block + k)] = x[r * x_stride + b * k_block + k];
    }
    for (int64_t o = 0; o < out; ++o) {
      for (int64_t k = 0; k < k_block; ++k) wb[size_t(o * k_block + k)] = w[o * in + b * k_block + k];
    }
    // fp64 sums of fp32 products of quantized (or bf16) values: exact, then rounded once.
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)n_rows, (blasint)out, (blasint)k_block, 1.0,
                xb.data(), (blasint)k_block, wb.data(), (blasint)k_block, 0.0, part.data(), (blasint)out);
    for (size_t i = 0; i < acc.size(); ++i) acc[i] += float(part[i]);
  }
  for (int64_t r = 0; r < n_rows; ++r) std::copy_n(acc.data() + r * out, out, y + r * y_stride);
}

status linear_apply(const linear_weight& w, const float* x, int64_t n_rows, float* y, int64_t x_stride,
                    int64_t y_stride) {
  const int64_t xs = x_stride ? x_stride : w.in, ys = y_stride ? y_stride : w.out;
  std::vector<float> q;
  if (w.fp8_input) {
    q.resize(n_rows * w.in);
    for (int64_t r = 0; r < n_rows; ++r) std::copy(x + r * xs, x + r * xs + w.in, q.data() + r * w.in);
    fp8_qdq_rows(q.data(), n_rows, w.in, 128);
  }
  const float* in = w.fp8_input ? q.data() : x;
  const int64_t in_stride = w.fp8_input ? w.in : xs;
  if (w.k_block > 0) {
    linear_blocked(in, in_stride, w.w.data(), w.in, w.out, n_rows, w.k_block, y, ys);
  } else {
    HART_RETURN_IF_ERROR(
        linear_cpu({in, w.w.data(), y, n_rows, w.in, w.out, in_stride, y_stride, false, w.row_invariant}));
  }
  if (w.bf16_output) {
    for (int64_t r = 0; r < n_rows; ++r) round_to_bf16(y + r * ys, w.out);
  }
  return {};
}

std::vector<float> linear_apply(const linear_weight& w, const float* x, int64_t n_rows) {
  std::vector<float> y(n_rows * w.out);
  HART_CHECK(linear_apply(w, x, n_rows, y.data()).ok()) << "linear " << w.out << "x" << w.in;
  return y;
}

}  // namespace hart
