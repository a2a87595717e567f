#include "kernels/sparse_attention/sparse_attention.h"

#include <cmath>
#include <vector>

namespace hart {

status sparse_attention_cpu(const sparse_attention_params& p) {
  if (!p.q || !p.sink || !p.out || (!p.kv && p.n_kv)) return invalid_argument("sparse_attention: null pointer");
  if (p.n_heads <= 0 || p.head_dim <= 0 || p.n_kv < 0) return invalid_argument("sparse_attention: bad sizes");
  std::vector<float> logit(p.n_kv);
  for (int64_t h = 0; h < p.n_heads; ++h) {
    const float* q = p.q + h * p.head_dim;
    float mx = p.sink[h];
    for (int64_t j = 0; j < p.n_kv; ++j) {
      float dot = 0;
      for (int64_t d = 0; d < p.head_dim; ++d) dot += q[d] * p.kv[j][d];
      logit[j] = dot * p.scale;
      mx = std::fmax(mx, logit[j]);
    }
    float denom = std::exp(p.sink[h] - mx);
    for (int64_t j = 0; j < p.n_kv; ++j) denom += (logit[j] = std::exp(logit[j] - mx));
    float* o = p.out + h * p.head_dim;
    for (int64_t d = 0; d < p.head_dim; ++d) o[d] = 0.0f;
    for (int64_t j = 0; j < p.n_kv; ++j) {
      const float w = logit[j] / denom;
      for (int64_t d = 0; d < p.head_dim; ++d) o[d] += w * p.kv[j][d];
    }
  }
  return {};
}

}  // namespace hart
