#include "kernels/indexer/indexer.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace hart {

status indexer_score_cpu(const indexer_score_params& p) {
  if (!p.q || !p.w || !p.score || (!p.keys && p.n_keys)) return invalid_argument("indexer_score: null pointer");
  if (p.n_heads <= 0 || p.head_dim <= 0 || p.n_keys < 0) return invalid_argument("indexer_score: bad sizes");
  for (int64_t s = 0; s < p.n_keys; ++s) {
    const float* k = p.keys + s * p.head_dim;
    float acc = 0;
    for (int64_t h = 0; h < p.n_heads; ++h) {
      const float* q = p.q + h * p.head_dim;
      float dot = 0;
      for (int64_t d = 0; d < p.head_dim; ++d) dot += q[d] * k[d];
      acc += std::fmax(dot, 0.0f) * p.softmax_scale * p.w[h];
    }
    p.score[s] = acc;
  }
  return {};
}

status topk_cpu(const topk_params& p) {
  if (!p.indices || (!p.values && p.n)) return invalid_argument("topk: null pointer");
  if (p.k < 0 || p.n < 0) return invalid_argument("topk: negative size");
  std::vector<int32_t> order;
  order.reserve(p.n);
  for (int64_t i = 0; i < p.n; ++i) {
    if (!std::isnan(p.values[i])) order.push_back(int32_t(i));
  }
  const int64_t take = std::min<int64_t>(p.k, int64_t(order.size()));
  auto better = [&](int32_t a, int32_t b) {
    return p.values[a] > p.values[b] || (p.values[a] == p.values[b] && a < b);
  };
  std::partial_sort(order.begin(), order.begin() + take, order.end(), better);
  for (int64_t i = 0; i < p.k; ++i) p.indices[i] = i < take ? order[i] : -1;
  return {};
}

}  // namespace hart
