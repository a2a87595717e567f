// engine::mtp_forward: the MTP block of v4-model.md §7 on the CPU, in the
// engine's precision, on the sequence's pages (its window KV is the layer
// cfg.n_layers of every SWA page, kv_store.h).
#include "kernels/rms_norm/rms_norm.h"
#include "runtime/model/block.h"
#include "runtime/model/engine.h"
#include "runtime/model/linear_ops.h"

#include <algorithm>

namespace hart {

status engine::mtp_forward(sequence_state& seq, int64_t p0, const std::vector<int32_t>& next,
                           const std::vector<float>& streams, std::vector<float>* logits,
                           std::vector<float>* out_streams) const {
  // Pages have the MTP window when the loaded checkpoint had the block; weights swapped in since
  // may have dropped it (or brought one the pages have no room for).
  if (weights_->mtp.empty() || n_mtp_blocks_ == 0) {
    return failed_precondition("mtp_forward: %s has no MTP weights (mtp.0.* tensors)%s",
                               params_.model_dir.c_str(),
                               n_mtp_blocks_ > 0 ? " since the last weight swap" : "");
  }
  if (seq.engine_id != id_ || !seq.pages || !seq.pages->store) {
    return invalid_argument("mtp_forward: the sequence was not made by this engine");
  }
  const int64_t D = cfg_.hidden_size, n = cfg_.hc_mult, V = cfg_.vocab_size, T = int64_t(next.size());
  const float eps = float(cfg_.norm_eps);
  const bool bf16 = params_.bf16_activations();
  if (T == 0 || p0 < 0)
    return invalid_argument("mtp_forward: no positions (T %lld, p0 %lld)", (long long)T, (long long)p0);
  if (int64_t(streams.size()) != T * n * D) {
    return invalid_argument("mtp_forward: %zu stream values for %lld positions, expected [%lld, %lld, %lld]",
                            streams.size(), (long long)T, (long long)D, (long long)n, (long long)T);
  }
  for (int64_t j = 0; j < T; ++j) {
    if (next[j] < 0 || next[j] >= V) {
      return out_of_range("mtp_forward: next token %lld has id %d, outside the vocabulary [0, %lld)",
                          (long long)j, next[j], (long long)V);
    }
  }
  HART_RETURN_IF_ERROR(prepare_pages(seq, p0, p0 + T));
  const page_table& pt = *seq.pages;
  const int64_t P = pt.store->page_size();
  for (int64_t pg = std::max<int64_t>(0, p0 - cfg_.window + 1) / P; pg <= (p0 + T - 1) / P; ++pg) {
    if (pt.swa[pg] < 0) {
      return failed_precondition(
          "mtp_forward: the window of position %lld needs SWA page %lld, already freed", (long long)p0,
          (long long)pg);
    }
  }

  const mtp_weights& M = weights_->mtp[0];
  // e = e_proj(enorm(embed(next))) [D, T]; h = h_proj(hnorm(streams)) [D, n, T].
  std::vector<float> e(T * D), hn(T * n * D);
  for (int64_t t = 0; t < T; ++t)
    std::copy_n(weights_->embed.w.data() + int64_t(next[t]) * D, D, e.data() + t * D);
  HART_RETURN_IF_ERROR(rms_norm_cpu({e.data(), M.enorm.data(), e.data(), T, D, 0, 0, eps, bf16, bf16}));
  HART_RETURN_IF_ERROR(
      rms_norm_cpu({streams.data(), M.hnorm.data(), hn.data(), T * n, D, 0, 0, eps, bf16, bf16}));
  const std::vector<float> ep = linear_apply(M.e_proj, e.data(), T),
                           hp = linear_apply(M.h_proj, hn.data(), T * n);
  // X = e broadcast over the streams + h, per stream.
  std::vector<float> X(T * n * D);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = (t * n + i) * D;
      for (int64_t d = 0; d < D; ++d) X[r + d] = ep[t * D + d] + hp[r + d];
    }
  }
  if (bf16) round_to_bf16(X.data(), int64_t(X.size()));

  token_batch tb;
  tb.ids = next;
  for (int64_t j = 0; j < T; ++j) tb.pos.push_back(p0 + j);
  tb.spans.push_back({&seq, 0, T});
  const attention_params ap{&cfg_,        &M.block,      weights_->inv_freq_main.data(),
                            params_.prec, cfg_.n_layers, bf16};
  HART_RETURN_IF_ERROR(block_forward(ap, tb, X, nullptr, nullptr));

  std::vector<float> normed;
  HART_RETURN_IF_ERROR(block_head(cfg_, X, T, M.hc_head_fn.data(), M.hc_head_base.data(),
                                  M.hc_head_scale.data(), M.norm.data(), bf16, &normed));
  if (out_streams) *out_streams = std::move(X);
  if (logits) {
    logits->assign(T * V, 0.0f);
    HART_RETURN_IF_ERROR(linear_apply(weights_->head, normed.data(), T, logits->data()));
  }
  return {};
}

}  // namespace hart
