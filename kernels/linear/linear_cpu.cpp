#include "kernels/linear/linear.h"

#include <cblas.h>

namespace hart {

status linear_cpu(const linear_params& p) {
  if (!p.x || !p.w || !p.y) return invalid_argument("linear: null pointer");
  if (p.n_rows < 0 || p.in <= 0 || p.out <= 0) {
    return invalid_argument("linear: bad sizes n_rows=%lld in=%lld out=%lld", (long long)p.n_rows,
                            (long long)p.in, (long long)p.out);
  }
  if (p.n_rows == 0) return {};
  const int64_t xs = p.x_stride ? p.x_stride : p.in, ys = p.y_stride ? p.y_stride : p.out;
  if (xs < p.in || ys < p.out) return invalid_argument("linear: row strides smaller than the rows");
  if (p.row_invariant) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t r = 0; r < p.n_rows; ++r) {
      for (int64_t o = 0; o < p.out; ++o) {
        const float* x = p.x + r * xs;
        const float* w = p.w + o * p.in;
        float lane[8] = {};  // 8 fixed lanes, then a fixed tree: same order for every call
        int64_t k = 0;
        for (; k + 8 <= p.in; k += 8) {
          for (int l = 0; l < 8; ++l) lane[l] += x[k + l] * w[k + l];
        }
        for (; k < p.in; ++k) lane[k % 8] += x[k] * w[k];
        const float dot =
            ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
        float& y = p.y[r * ys + o];
        y = p.accumulate ? y + dot : dot;
      }
    }
    return {};
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)p.n_rows, (blasint)p.out, (blasint)p.in, 1.0f,
              p.x, (blasint)xs, p.w, (blasint)p.in, p.accumulate ? 1.0f : 0.0f, p.y, (blasint)ys);
  return {};
}

}  // namespace hart
