#include "runtime/model/linear_ops.h"

#include <algorithm>
#include <cmath>

#include "kernels/linear/linear.h"
#include "kernels/quant/quant.h"
#include "runtime/core/check.h"
#include "runtime/core/codecs.h"

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

status linear_apply(const linear_weight& w, const float* x, int64_t n_rows, float* y,
                    int64_t x_stride, int64_t y_stride) {
  if (!w.fp8_input) {
    HART_RETURN_IF_ERROR(
        linear_cpu({x, w.w.data(), y, n_rows, w.in, w.out, x_stride, y_stride, false, w.row_invariant}));
  } else {
    const int64_t xs = x_stride ? x_stride : w.in;
    std::vector<float> q(n_rows * w.in);
    for (int64_t r = 0; r < n_rows; ++r) std::copy(x + r * xs, x + r * xs + w.in, q.data() + r * w.in);
    fp8_qdq_rows(q.data(), n_rows, w.in, 128);
    HART_RETURN_IF_ERROR(
        linear_cpu({q.data(), w.w.data(), y, n_rows, w.in, w.out, 0, y_stride, false, w.row_invariant, w.k_block}));
  }
  if (w.bf16_output) {
    const int64_t ys = y_stride ? y_stride : w.out;
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
