#include "kernels/indexer/indexer.h"
#include "runtime/core/codecs.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace hart {

status indexer_score_cpu(const indexer_score_params& p) {
  if (!p.q || !p.w || !p.score || (!p.keys && p.n_keys))
    return invalid_argument("indexer_score: null pointer");
  if (p.n_heads <= 0 || p.head_dim <= 0 || p.n_keys < 0) return invalid_argument("indexer_score: bad sizes");
  if (p.bf16) {
    for (int64_t s = 0; s < p.n_keys; ++s) {
      const float* k = p.keys + s * p.head_dim;
      float acc = 0;
      for (int64_t h = 0; h < p.n_heads; ++h) {
        const float* q = p.q + h * p.head_dim;
        float dot = 0;
        for (int64_t d = 0; d < p.head_dim; ++d) dot += q[d] * k[d];
        acc += round_to_bf16(std::fmax(round_to_bf16(dot * p.softmax_scale), 0.0f) * p.w[h]);
      }
      p.score[s] = round_to_bf16(acc);
    }
    return {};
  }
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

namespace {

// torch.topk(largest=True) on CPU (aten TopKImpl.h): a queue of (value as
// double, index) pairs in index order; partial_sort when k * 64 <= n, else
// nth_element. Comparisons only look at values, so which of several equal
// values survive is whatever these libstdc++ algorithms leave in front.
void topk_torch_order(const topk_params& p) {
  using elem = std::pair<double, int64_t>;
  std::vector<elem> queue(p.n);
  for (int64_t i = 0; i < p.n; ++i) queue[i] = {double(p.values[i]), i};
  const int64_t k = std::min(p.k, p.n);
  auto cmp = [](const elem& x, const elem& y) {
    return (std::isnan(x.first) && !std::isnan(y.first)) || x.first > y.first;
  };
  if (k > 0) {
    if (k * 64 <= p.n) {
      std::partial_sort(queue.begin(), queue.begin() + k, queue.end(), cmp);
    } else {
      std::nth_element(queue.begin(), queue.begin() + k - 1, queue.end(), cmp);
    }
  }
  // Best first among the chosen (lowest index among equals); NaN never selected.
  std::vector<elem> chosen(queue.begin(), queue.begin() + k);
  std::sort(chosen.begin(), chosen.end(), [](const elem& x, const elem& y) {
    return x.first > y.first || (x.first == y.first && x.second < y.second);
  });
  int64_t out = 0;
  for (const elem& e : chosen) {
    if (!std::isnan(e.first)) p.indices[out++] = int32_t(e.second);
  }
  for (; out < p.k; ++out) p.indices[out] = -1;
}

}  // namespace

status topk_cpu(const topk_params& p) {
  if (!p.indices || (!p.values && p.n)) return invalid_argument("topk: null pointer");
  if (p.k < 0 || p.n < 0) return invalid_argument("topk: negative size");
  if (p.torch_order) {
    topk_torch_order(p);
    return {};
  }
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
