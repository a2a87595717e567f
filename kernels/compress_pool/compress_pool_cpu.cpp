#include "kernels/compress_pool/compress_pool.h"

#include <cmath>

namespace hart {

status compress_pool_cpu(const compress_pool_params& p) {
  if (!p.kv || !p.gate || !p.out) return invalid_argument("compress_pool: null pointer");
  if (p.n_cand <= 0 || p.dim <= 0)
    return invalid_argument("compress_pool: n_cand %lld dim %lld", (long long)p.n_cand, (long long)p.dim);
  for (int64_t ch = 0; ch < p.dim; ++ch) {
    float mx = -INFINITY;
    for (int64_t j = 0; j < p.n_cand; ++j) mx = std::fmax(mx, p.gate[j][ch]);
    if (mx == -INFINITY) {
      p.out[ch] = 0.0f;
      continue;
    }
    float denom = 0;
    for (int64_t j = 0; j < p.n_cand; ++j) denom += std::exp(p.gate[j][ch] - mx);
    float acc = 0;
    for (int64_t j = 0; j < p.n_cand; ++j) {
      const float w = std::exp(p.gate[j][ch] - mx) / denom;
      if (w != 0.0f) acc += p.kv[j][ch] * w;
    }
    p.out[ch] = acc;
  }
  return {};
}

}  // namespace hart
