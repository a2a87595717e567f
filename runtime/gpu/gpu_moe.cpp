// The MoE block on the device (runtime/model/moe.cpp is the reference):
// router GEMM and routing on the device; the routed rows are grouped per
// expert on the host (v1: one download per layer), gathered once, run expert
// by expert, and added into y in expert order after the shared expert, the
// CPU's summation order.
#include <algorithm>

#include "kernels/moe_route/moe_route.h"
#include "kernels/swiglu/swiglu.h"
#include "runtime/gpu/engine_kernels.h"
#include "runtime/gpu/gpu_engine_impl.h"

namespace hart::gpu {
namespace {

// out [D, n] = w2(swiglu(w1 x, w3 x) · row_weight).
status expert_run(engine_state& s, const device_expert& e, const float* x, int64_t n, const float* row_weight,
                  float* out) {
  arena_buffers& A = s.a;
  HART_RETURN_IF_ERROR(linear_run(s, e.w1, x, n, A.g));
  HART_RETURN_IF_ERROR(linear_run(s, e.w3, x, n, A.up));
  HART_RETURN_IF_ERROR(swiglu_cuda({A.g, A.up, row_weight, A.h, n, e.w1.out, 0, float(s.cfg.swiglu_limit)}, s.stream));
  return linear_run(s, e.w2, A.h, n, out);
}

}  // namespace

status moe_run(engine_state& s, const pass& p, int64_t il, const float* x, float* y, std::vector<int32_t>* experts_out) {
  arena_buffers& A = s.a;
  const model_config& c = s.cfg;
  const device_layer& w = s.w.layers[il];
  const int64_t T = p.n_tokens(), D = c.hidden_size, E = c.n_routed_experts, K = c.n_activated_experts;
  HART_RETURN_IF_ERROR(linear_run(s, w.gate, x, T, A.route_logits));
  if (w.hash_moe) {
    std::vector<int32_t> hash(T * K);
    for (int64_t t = 0; t < T; ++t) std::copy_n(w.tid2eid.data() + int64_t(p.ids[t]) * K, K, hash.data() + t * K);
    HART_RETURN_IF_ERROR(s.upload(A.hash, hash));
  }
  HART_RETURN_IF_ERROR(moe_route_cuda({A.route_logits, w.gate_bias, w.hash_moe ? A.hash : nullptr, A.experts,
                                       A.route_w, T, E, K, float(c.route_scale)}, s.stream));
  if (c.n_shared_experts > 0) {
    HART_RETURN_IF_ERROR(expert_run(s, w.shared, x, T, nullptr, y));
  } else {
    HART_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(y, 0, size_t(T * D) * sizeof(float), s.stream), "gpu engine: moe"));
  }
  std::vector<int32_t> experts;
  std::vector<float> weights;
  HART_RETURN_IF_ERROR(s.download(&experts, A.experts, T * K));
  HART_RETURN_IF_ERROR(s.download(&weights, A.route_w, T * K));
  // Rows grouped by expert, tokens ascending inside a group (moe.cpp's order).
  std::vector<int64_t> count(E + 1, 0);
  for (int32_t e : experts) {
    if (e < 0 || e >= E) return internal_error("moe: layer %lld routed a token to expert %d", (long long)il, e);
    ++count[e + 1];
  }
  for (int64_t e = 0; e < E; ++e) count[e + 1] += count[e];
  std::vector<int64_t> src(T * K);
  std::vector<float> row_w(T * K);
  std::vector<int64_t> fill(count.begin(), count.end() - 1);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t k = 0; k < K; ++k) {
      const int64_t at = fill[experts[t * K + k]]++;
      src[at] = t * D;
      row_w[at] = weights[t * K + k];
    }
  }
  HART_RETURN_IF_ERROR(s.upload(A.moe_src, src));
  HART_RETURN_IF_ERROR(s.upload(A.moe_w, row_w));
  HART_RETURN_IF_ERROR(copy_rows_cuda(A.xe, A.iota_d, x, A.moe_src, D, T * K, false, s.stream));
  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = count[e + 1] - count[e];
    if (n == 0) continue;
    HART_RETURN_IF_ERROR(expert_run(s, w.experts[e], A.xe + count[e] * D, n, A.moe_w + count[e], A.ye));
    HART_RETURN_IF_ERROR(copy_rows_cuda(y, A.moe_src + count[e], A.ye, A.iota_d, D, n, true, s.stream));
  }
  if (experts_out) *experts_out = std::move(experts);
  return {};
}

}  // namespace hart::gpu
