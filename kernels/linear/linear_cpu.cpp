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
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)p.n_rows, (blasint)p.out,
              (blasint)p.in, 1.0f, p.x, (blasint)xs, p.w, (blasint)p.in,
              p.accumulate ? 1.0f : 0.0f, p.y, (blasint)ys);
  return {};
}

}  // namespace hart
