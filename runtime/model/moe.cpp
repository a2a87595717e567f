#include "runtime/model/moe.h"

#include "kernels/moe_route/moe_route.h"
#include "kernels/swiglu/swiglu.h"
#include "runtime/model/linear_ops.h"

#include <algorithm>

namespace hart {
namespace {

// out [D, n] = w2(swiglu(w1 x, w3 x) · row_weight); inputs quantized per the weights' mode.
status expert_forward(const expert_weights& e, const float* x, int64_t n, const float* row_weight,
                      float limit, float* out, bool bf16) {
  std::vector<float> g = linear_apply(e.w1, x, n);
  std::vector<float> u = linear_apply(e.w3, x, n);
  std::vector<float> h(n * e.w1.out);
  swiglu_params sw{g.data(), u.data(), row_weight, h.data(), n, e.w1.out, 0, limit};
  sw.bf16 = bf16;
  HART_RETURN_IF_ERROR(swiglu_cpu(sw));
  return linear_apply(e.w2, h.data(), n, out);
}

}  // namespace

status moe_forward(const model_config& cfg, const layer_weights& w, const float* x, const int32_t* ids,
                   int64_t T, float* y, std::vector<int32_t>* experts_out, bool bf16) {
  const int64_t D = cfg.hidden_size, E = cfg.n_routed_experts, K = cfg.n_activated_experts;
  const float limit = float(cfg.swiglu_limit);
  std::vector<float> logits = linear_apply(w.gate, x, T);
  std::vector<int32_t> hash;
  if (w.hash_moe) {
    hash.resize(T * K);
    for (int64_t t = 0; t < T; ++t)
      std::copy_n(w.tid2eid.data() + int64_t(ids[t]) * K, K, hash.data() + t * K);
  }
  std::vector<int32_t> experts(T * K);
  std::vector<float> weights(T * K);
  HART_RETURN_IF_ERROR(moe_route_cpu({logits.data(), w.gate_bias.empty() ? nullptr : w.gate_bias.data(),
                                      w.hash_moe ? hash.data() : nullptr, experts.data(), weights.data(), T,
                                      E, K, float(cfg.route_scale)}));
  // Shared expert first, then each routed expert over the tokens that chose it
  // (bf16: the routed ones first, the shared one added last, as the reference sums).
  if (cfg.n_shared_experts > 0 && !bf16) {
    HART_RETURN_IF_ERROR(expert_forward(w.shared, x, T, nullptr, limit, y, false));
  } else {
    std::fill(y, y + T * D, 0.0f);
  }
  std::vector<std::vector<int64_t>> rows(E);
  std::vector<std::vector<float>> row_w(E);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t k = 0; k < K; ++k) {
      rows[experts[t * K + k]].push_back(t);
      row_w[experts[t * K + k]].push_back(weights[t * K + k]);
    }
  }
  std::vector<float> xe, ye;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = int64_t(rows[e].size());
    if (n == 0) continue;
    xe.resize(n * D);
    ye.resize(n * D);
    for (int64_t i = 0; i < n; ++i) std::copy_n(x + rows[e][i] * D, D, xe.data() + i * D);
    HART_RETURN_IF_ERROR(expert_forward(w.experts[e], xe.data(), n, row_w[e].data(), limit, ye.data(), bf16));
    for (int64_t i = 0; i < n; ++i) {
      float* dst = y + rows[e][i] * D;
      for (int64_t d = 0; d < D; ++d) dst[d] += ye[i * D + d];
    }
  }
  if (bf16) {
    if (cfg.n_shared_experts > 0) {
      std::vector<float> s(T * D);
      HART_RETURN_IF_ERROR(expert_forward(w.shared, x, T, nullptr, limit, s.data(), true));
      for (int64_t i = 0; i < T * D; ++i) y[i] += s[i];
    }
    round_to_bf16(y, T * D);
  }
  if (experts_out) *experts_out = std::move(experts);
  return {};
}

}  // namespace hart
