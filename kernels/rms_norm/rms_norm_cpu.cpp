#include "kernels/rms_norm/rms_norm.h"

#include "kernels/rope/rope.h"

#include <cmath>

namespace hart {

status rms_norm_cpu(const rms_norm_params& p) {
  if (!p.x || !p.y) return invalid_argument("rms_norm: null pointer");
  if (p.dim <= 0 || p.n_rows < 0) return invalid_argument("rms_norm: bad dim %lld", (long long)p.dim);
  HART_RETURN_IF_ERROR(rms_norm_rope_check(p));
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
  if (!p.rope_pos) return {};
  for (int64_t r = 0; r < p.n_rows; ++r) {  // rope_cpu on each row as one head
    HART_RETURN_IF_ERROR(rope_cpu({p.y + r * ys, p.rope_pos + r / p.rope_rows_per_pos, p.rope_inv_freq, 1, 1, p.dim,
                                   p.rope_dim, 0, p.rope_attention_factor}));
  }
  return {};
}

status rms_norm_rope_check(const rms_norm_params& p) {
  if (!p.rope_pos) return {};
  if (!p.rope_inv_freq) return invalid_argument("rms_norm: rope_pos without rope_inv_freq");
  if (p.rope_dim <= 0 || p.rope_dim % 2 || p.rope_dim > p.dim || p.rope_rows_per_pos <= 0) {
    return invalid_argument("rms_norm: rope_dim %lld must be even and in (0, dim %lld], rope_rows_per_pos %lld >= 1",
                            (long long)p.rope_dim, (long long)p.dim, (long long)p.rope_rows_per_pos);
  }
  return {};
}

}  // namespace hart
