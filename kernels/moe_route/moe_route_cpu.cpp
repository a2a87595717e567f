#include "kernels/indexer/indexer.h"
#include "kernels/moe_route/moe_route.h"

#include <cmath>
#include <vector>

namespace hart {
namespace {

// torch.nn.functional.softplus with beta 1, threshold 20.
float softplus(float x) {
  return x > 20.0f ? x : std::log1p(std::exp(x));
}

}  // namespace

status moe_route_cpu(const moe_route_params& p) {
  if (!p.logits || !p.experts || !p.weights) return invalid_argument("moe_route: null pointer");
  if (p.top_k <= 0 || p.top_k > p.n_experts) {
    return invalid_argument("moe_route: top_k %lld not in [1, %lld]", (long long)p.top_k,
                            (long long)p.n_experts);
  }
  const int64_t E = p.n_experts, K = p.top_k;
  std::vector<float> s(E), sel(E);
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    for (int64_t e = 0; e < E; ++e) {
      s[e] = std::sqrt(softplus(p.logits[t * E + e]));
      sel[e] = s[e] + (p.bias ? p.bias[e] : 0.0f);
    }
    int32_t* ids = p.experts + t * K;
    if (p.hash_ids) {
      for (int64_t k = 0; k < K; ++k) {
        const int32_t e = p.hash_ids[t * K + k];
        if (e < 0 || e >= E)
          return out_of_range("moe_route: hash expert id %d not in [0, %lld)", e, (long long)E);
        ids[k] = e;
      }
    } else {
      HART_RETURN_IF_ERROR(topk_cpu({sel.data(), ids, E, K}));
    }
    float sum = 0;
    for (int64_t k = 0; k < K; ++k) sum += s[ids[k]];
    for (int64_t k = 0; k < K; ++k) p.weights[t * K + k] = s[ids[k]] / (sum + 1e-20f) * p.route_scale;
  }
  return {};
}

}  // namespace hart
