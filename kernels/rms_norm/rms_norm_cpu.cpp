#include "kernels/rms_norm/rms_norm.h"

#include <cmath>

namespace hart {

status rms_norm_cpu(const rms_norm_params& p) {
  if (!p.x || !p.y) return invalid_argument("rms_norm: null pointer");
  if (p.dim <= 0 || p.n_rows < 0) return invalid_argument("rms_norm: bad dim %lld", (long long)p.dim);
  const int64_t xs = p.x_stride ? p.x_stride : p.dim;
  const int64_t ys = p.y_stride ? p.y_stride : p.dim;
#pragma omp parallel for schedule(static) if (p.n_rows > 64)
  for (int64_t r = 0; r < p.n_rows; ++r) {
    const float* x = p.x + r * xs;
    float* y = p.y + r * ys;
    double ss = 0;
    for (int64_t i = 0; i < p.dim; ++i) ss += double(x[i]) * double(x[i]);
    const float inv = 1.0f / std::sqrt(float(ss / double(p.dim)) + p.eps);
    for (int64_t i = 0; i < p.dim; ++i) {
      const float v = x[i] * inv;
      y[i] = p.w ? p.w[i] * v : v;
    }
  }
  return {};
}

}  // namespace hart
