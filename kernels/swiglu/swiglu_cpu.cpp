#include "kernels/swiglu/swiglu.h"
#include "runtime/core/codecs.h"

#include <algorithm>
#include <cmath>

namespace hart {

status swiglu_cpu(const swiglu_params& p) {
  if (!p.gate || !p.up || !p.out) return invalid_argument("swiglu: null pointer");
  if (p.dim <= 0 || p.n_rows < 0 || p.limit < 0) return invalid_argument("swiglu: bad sizes or limit");
  const int64_t st = p.in_stride ? p.in_stride : p.dim;
  for (int64_t r = 0; r < p.n_rows; ++r) {
    const float w = p.row_weight ? p.row_weight[r] : 1.0f;
    for (int64_t i = 0; i < p.dim; ++i) {
      float g = p.gate[r * st + i], u = p.up[r * st + i];
      if (p.bf16) {
        g = round_to_bf16(g);
        u = round_to_bf16(u);
      }
      if (p.limit > 0) {
        g = std::min(g, p.limit);
        u = std::clamp(u, -p.limit, p.limit);
      }
      const float h = g / (1.0f + std::exp(-g)) * u * w;
      p.out[r * p.dim + i] = p.bf16 ? round_to_bf16(h) : h;
    }
  }
  return {};
}

}  // namespace hart
