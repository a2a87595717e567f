#include "runtime/model/block.h"

#include "kernels/mhc/mhc.h"
#include "kernels/rms_norm/rms_norm.h"
#include "runtime/model/moe.h"

namespace hart {
namespace {

// One mHC site's weights around a sublayer.
struct hc_site {
  const std::vector<float>& fn;
  const std::vector<float>& base;
  const std::vector<float>& scale;
  const std::vector<float>& norm;
};

}  // namespace

status block_forward(const attention_params& a, const token_batch& tb, std::vector<float>& X,
                     std::vector<int32_t>* topk, std::vector<int32_t>* experts) {
  const model_config& cfg = *a.cfg;
  const layer_weights& L = *a.w;
  const int64_t D = cfg.hidden_size, n = cfg.hc_mult, T = tb.n_tokens();
  const float eps = float(cfg.norm_eps), hc_eps = float(cfg.hc_eps);
  const bool bf16 = a.bf16;
  std::vector<float> collapsed(T * D), normed(T * D), out(T * D), post(T * n), comb(T * n * n), Xn(T * n * D);
  // bf16: each op below rounds its own outputs as the official inference does.
  auto run_site = [&](const hc_site& s, auto&& sublayer) -> status {
    hc_pre_params pre{X.data(),
                      s.fn.data(),
                      s.base.data(),
                      s.scale.data(),
                      collapsed.data(),
                      post.data(),
                      comb.data(),
                      T,
                      n,
                      D,
                      cfg.hc_sinkhorn_iters,
                      eps,
                      hc_eps};
    pre.bf16 = bf16;
    HART_RETURN_IF_ERROR(hc_pre_cpu(pre));
    HART_RETURN_IF_ERROR(
        rms_norm_cpu({collapsed.data(), s.norm.data(), normed.data(), T, D, 0, 0, eps, bf16, bf16}));
    HART_RETURN_IF_ERROR(sublayer(normed.data(), out.data()));
    hc_post_params mix{X.data(), out.data(), post.data(), comb.data(), Xn.data(), T, n, D};
    mix.bf16 = bf16;
    HART_RETURN_IF_ERROR(hc_post_cpu(mix));
    X.swap(Xn);
    return {};
  };
  HART_RETURN_IF_ERROR(
      run_site({L.hc_attn_fn, L.hc_attn_base, L.hc_attn_scale, L.attn_norm},
               [&](const float* x, float* y) { return attention_forward(a, tb, x, y, topk); }));
  return run_site({L.hc_ffn_fn, L.hc_ffn_base, L.hc_ffn_scale, L.ffn_norm}, [&](const float* x, float* y) {
    return moe_forward(cfg, L, x, tb.ids.data(), T, y, experts, bf16);
  });
}

status block_head(const model_config& cfg, const std::vector<float>& X, int64_t T, const float* fn,
                  const float* base, const float* scale, const float* norm, bool bf16,
                  std::vector<float>* normed) {
  const int64_t D = cfg.hidden_size, n = cfg.hc_mult;
  const float eps = float(cfg.norm_eps);
  std::vector<float> collapsed(T * D);
  hc_head_params head{X.data(), fn, base, scale, collapsed.data(), T, n, D, eps, float(cfg.hc_eps)};
  head.bf16 = bf16;
  HART_RETURN_IF_ERROR(hc_head_cpu(head));
  normed->resize(T * D);
  return rms_norm_cpu({collapsed.data(), norm, normed->data(), T, D, 0, 0, eps, bf16, bf16});
}

}  // namespace hart
