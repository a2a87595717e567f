#include "kernels/rope/rope.h"
#include "runtime/core/codecs.h"

#include <cmath>
#include <vector>

namespace hart {

status rope_cpu(const rope_params& p) {
  if (!p.x || !p.pos || !p.inv_freq) return invalid_argument("rope: null pointer");
  if (p.rope_dim <= 0 || p.rope_dim % 2 || p.rope_dim > p.head_dim) {
    return invalid_argument("rope: rope_dim %lld must be even and <= head_dim %lld", (long long)p.rope_dim,
                            (long long)p.head_dim);
  }
  const int64_t stride = p.row_stride ? p.row_stride : p.n_heads * p.head_dim;
  const int64_t half = p.rope_dim / 2;
#pragma omp parallel for schedule(static) if (p.n_rows > 64)
  for (int64_t r = 0; r < p.n_rows; ++r) {
    // The angle is an fp32 product, as in the reference (inv_freq @ positions in fp32).
    std::vector<float> c(half), s(half);
    for (int64_t i = 0; i < half; ++i) {
      const float angle = float(p.pos[r]) * p.inv_freq[i];
      c[i] = std::cos(angle) * p.attention_factor;
      s[i] = std::sin(angle) * p.attention_factor * (p.inverse ? -1.0f : 1.0f);
    }
    for (int64_t h = 0; h < p.n_heads; ++h) {
      float* v = p.x + r * stride + h * p.head_dim + (p.head_dim - p.rope_dim);
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[2 * i], b = v[2 * i + 1];
        const float a_rot = a * c[i] - b * s[i], b_rot = b * c[i] + a * s[i];
        v[2 * i] = p.bf16 ? round_to_bf16(a_rot) : a_rot;
        v[2 * i + 1] = p.bf16 ? round_to_bf16(b_rot) : b_rot;
      }
    }
  }
  return {};
}

}  // namespace hart
