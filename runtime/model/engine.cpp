#include "runtime/model/engine.h"

#include "runtime/core/log.h"
#include "runtime/model/block.h"
#include "runtime/model/linear_ops.h"
#include "runtime/model/token_batch.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <set>

namespace hart {

status engine_params::validate() const {
  if (model_dir.empty()) return invalid_argument("engine: model_dir is empty");
  if (page_size <= 0 || page_size % 128)
    return invalid_argument("engine: page_size %lld must be a positive multiple of 128",
                            (long long)page_size);
  if (n_threads < 0) return invalid_argument("engine: n_threads %d must be >= 0", n_threads);
  return {};
}

namespace {

void report_progress(const load_progress& p) {
  HART_LOG_INFO("loaded layer %lld/%lld", (long long)p.layers_done, (long long)p.layers_total);
}

}  // namespace

status_or<std::unique_ptr<engine>> engine::load(const engine_params& params) {
  HART_RETURN_IF_ERROR(params.validate());
  if (params.n_threads > 0) {
    omp_set_num_threads(params.n_threads);
    openblas_set_num_threads(params.n_threads);
  }
  static std::atomic<uint64_t> next_id{1};
  std::unique_ptr<engine> e(new engine());
  e->params_ = params;
  e->id_ = next_id++;
  HART_ASSIGN_OR_RETURN(e->cfg_, model_config_load(params.model_dir));
  HART_LOG_INFO("%s", e->cfg_.summary().c_str());
  HART_ASSIGN_OR_RETURN(model_weights w, model_weights_load(params.model_dir, e->cfg_, params.prec,
                                                            params.verbose_load ? report_progress : nullptr,
                                                            e->load_options()));
  // Routed experts loaded MXFP4 (a release checkpoint's) are re-quantized to MXFP4 by updates, not FP8.
  e->mxfp4_experts_ =
      !w.layers.empty() &&
      std::all_of(w.layers.begin(), w.layers.end(), [](const layer_weights& L) { return L.mxfp4_experts; });
  e->n_mtp_blocks_ = int64_t(w.mtp.size());
  e->weights_ = std::make_shared<const model_weights>(std::move(w));
  HART_LOG_INFO("loaded %lld parameters from %s (precision %s)", (long long)e->weights_->n_params,
                params.model_dir.c_str(), precision_name(params.prec));
  HART_ASSIGN_OR_RETURN(e->store_, e->make_store(params.page_size));
  e->swa_keep_ = swa_live_tokens(e->cfg_);
  return e;
}

model_weights_reader::options engine::load_options() const {
  model_weights_reader::options o;
  o.row_invariant = params_.deterministic;
  o.bf16_activations = params_.bf16_activations();
  return o;
}

status_or<std::shared_ptr<const model_weights>> engine::build_weights(const tensor_source& src) const {
  model_weights_reader::options o = load_options();
  o.mxfp4_experts = mxfp4_experts_;
  HART_ASSIGN_OR_RETURN(model_weights w, model_weights_load(src, cfg_, params_.prec, nullptr, o));
  return std::make_shared<const model_weights>(std::move(w));
}

status weight_version_check(const char* what, uint64_t version, uint64_t current) {
  if (version > current) return {};
  return failed_precondition("%s: version %llu is not above the current %llu", what,
                             (unsigned long long)version, (unsigned long long)current);
}

status engine::swap_weights(std::shared_ptr<const model_weights> w, uint64_t version) {
  if (!w) return invalid_argument("swap_weights: no weights");
  HART_RETURN_IF_ERROR(weight_version_check("swap_weights", version, weight_version_));
  // build_weights checked every shape against cfg_; a layer count that differs means another engine's
  // weights.
  if (int64_t(w->layers.size()) != cfg_.n_layers || w->embed.out != cfg_.vocab_size) {
    return invalid_argument("swap_weights: weights for %zu layers, vocab %lld; this model has %lld, %lld",
                            w->layers.size(), (long long)w->embed.out, (long long)cfg_.n_layers,
                            (long long)cfg_.vocab_size);
  }
  weights_ = std::move(w);
  weight_version_ = version;
  return {};
}

status engine::relabel_weights(uint64_t version) {
  HART_RETURN_IF_ERROR(weight_version_check("relabel_weights", version, weight_version_));
  weight_version_ = version;
  return {};
}

sequence_state engine::new_sequence() const {
  sequence_state s;
  s.engine_id = id_;
  s.pages->store = store_.get();
  s.pages->owned = true;
  return s;
}

status_or<std::unique_ptr<kv_store>> engine::make_store(int64_t page_size) const {
  if (page_size <= 0 || page_size % 128 || page_size % cfg_.csa_rate || page_size % cfg_.hca_rate ||
      page_size < cfg_.window) {
    return invalid_argument(
        "engine: page_size %lld must be a multiple of 128 and of the compress rates (%lld, %lld) and >= the "
        "window %lld",
        (long long)page_size, (long long)cfg_.csa_rate, (long long)cfg_.hca_rate, (long long)cfg_.window);
  }
  return std::make_unique<kv_store>(cfg_, page_size, n_mtp_blocks_);
}

void engine::bind_pages(sequence_state& seq, kv_store* store, const std::vector<int32_t>& full,
                        const std::vector<int32_t>& swa, int64_t n_computed) {
  if (seq.pages->owned) seq.pages = std::make_unique<page_table>();
  seq.pages->store = store;
  seq.pages->owned = false;
  seq.pages->full = full;
  seq.pages->swa = swa;
  seq.n_tokens = n_computed;
}

status engine::prepare_pages(sequence_state& seq, int64_t first, int64_t end) const {
  page_table& pt = *seq.pages;
  const int64_t P = pt.store->page_size();
  const int64_t n_pages = (end + P - 1) / P;
  if (pt.owned) {
    while (int64_t(pt.full.size()) < n_pages) {
      pt.full.push_back(pt.store->alloc_full());
      pt.swa.push_back(pt.store->alloc_swa());
    }
    return {};
  }
  if (int64_t(pt.full.size()) < n_pages || int64_t(pt.swa.size()) < n_pages) {
    return failed_precondition("forward: positions up to %lld need %lld pages but the cache reserved %zu",
                               (long long)end, (long long)n_pages, pt.full.size());
  }
  for (int64_t pg = std::max<int64_t>(0, first - swa_keep_) / P; pg < n_pages; ++pg) {
    if (pt.swa[pg] < 0 || pt.full[pg] < 0) {
      return failed_precondition("forward: page %lld (positions from %lld) is not live", (long long)pg,
                                 (long long)(pg * P));
    }
  }
  return {};
}

void engine::release_old_pages(sequence_state& seq) const {
  page_table& pt = *seq.pages;
  if (!pt.owned) return;  // the cache decides for its pages
  const int64_t P = pt.store->page_size();
  const int64_t n_dead =
      std::max<int64_t>(0, seq.n_tokens - swa_keep_) / P;  // pages wholly behind every window
  for (int64_t pg = 0; pg < n_dead && pg < int64_t(pt.swa.size()); ++pg) {
    if (pt.swa[pg] >= 0) {
      pt.store->free_swa(pt.swa[pg]);
      pt.swa[pg] = -1;
    }
  }
}

status engine::validate_batch(const std::vector<batch_item>& batch,
                              const std::vector<ring_snapshot*>& keep_rings) const {
  if (batch.empty()) return invalid_argument("forward: empty batch");
  if (!keep_rings.empty() && keep_rings.size() != batch.size()) {
    return invalid_argument("verify: %zu snapshots for %zu items", keep_rings.size(), batch.size());
  }
  std::set<const sequence_state*> seen;
  for (size_t i = 0; i < batch.size(); ++i) {
    const batch_item& it = batch[i];
    if (!it.seq) return invalid_argument("forward: item %zu has no sequence", i);
    if (!seen.insert(it.seq).second) return invalid_argument("forward: item %zu repeats a sequence", i);
    if (it.seq->engine_id != id_ || !it.seq->pages || !it.seq->pages->store) {
      return invalid_argument("forward: item %zu's sequence was not made by this engine", i);
    }
    if (it.tokens.empty()) return invalid_argument("forward: item %zu has no tokens (empty prompt)", i);
    for (size_t j = 0; j < it.tokens.size(); ++j) {
      if (it.tokens[j] < 0 || it.tokens[j] >= cfg_.vocab_size) {
        return out_of_range("forward: item %zu token %zu has id %d, outside the vocabulary [0, %lld)", i, j,
                            it.tokens[j], (long long)cfg_.vocab_size);
      }
    }
    const int64_t end = it.seq->n_tokens + int64_t(it.tokens.size());
    if (cfg_.max_position > 0 && end > cfg_.max_position) {
      return out_of_range("forward: item %zu would reach %lld tokens, past max_position_embeddings %lld", i,
                          (long long)end, (long long)cfg_.max_position);
    }
    // Two positions of one pass in one ring row: the snapshot could not restore the first.
    const int64_t max_pass = it.seq->pages->store->min_ring_rows();
    if (!keep_rings.empty() && keep_rings[i] && max_pass > 0 && int64_t(it.tokens.size()) > max_pass) {
      return invalid_argument("verify: item %zu passes %zu tokens; the compressor rings keep at most %lld", i,
                              it.tokens.size(), (long long)max_pass);
    }
  }
  return {};
}

status engine::forward(const std::vector<batch_item>& batch, std::vector<float>* logits,
                       forward_trace* trace) const {
  return verify(batch, {}, logits, trace);
}

status engine::verify(const std::vector<batch_item>& batch, const std::vector<ring_snapshot*>& keep_rings,
                      std::vector<float>* logits, forward_trace* trace) const {
  HART_RETURN_IF_ERROR(validate_batch(batch, keep_rings));
  auto kept = [&keep_rings](size_t i) { return keep_rings.empty() ? nullptr : keep_rings[i]; };
  const int64_t D = cfg_.hidden_size, n = cfg_.hc_mult, V = cfg_.vocab_size;
  // fp8: the official inference's bf16 activations (residual streams, mHC and norm outputs).
  const bool bf16 = params_.bf16_activations();

  token_batch tb;
  std::vector<int64_t> logit_rows;
  for (const batch_item& it : batch) {
    token_batch::span sp{it.seq, tb.n_tokens(), int64_t(it.tokens.size())};
    for (int64_t j = 0; j < sp.n; ++j) {
      tb.ids.push_back(it.tokens[j]);
      tb.pos.push_back(it.seq->n_tokens + j);
      if (it.logits == logits_request::all || (it.logits == logits_request::last && j == sp.n - 1)) {
        logit_rows.push_back(sp.row0 + j);
      }
    }
    tb.spans.push_back(sp);
  }
  const int64_t T = tb.n_tokens();
  for (const batch_item& it : batch) {
    HART_RETURN_IF_ERROR(
        prepare_pages(*it.seq, it.seq->n_tokens, it.seq->n_tokens + int64_t(it.tokens.size())));
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    if (ring_snapshot* snap = kept(i)) {
      ring_snapshot_take(*batch[i].seq->pages, batch[i].seq->n_tokens, int64_t(batch[i].tokens.size()), snap);
    }
  }

  // Residual streams [D, n, T]: the embedding repeated n times.
  std::vector<float> X(T * n * D);
  for (int64_t t = 0; t < T; ++t) {
    const float* e = weights_->embed.w.data() + int64_t(tb.ids[t]) * D;
    for (int64_t i = 0; i < n; ++i) std::copy_n(e, D, X.data() + (t * n + i) * D);
  }
  if (bf16) round_to_bf16(X.data(), int64_t(X.size()));
  if (trace && trace->capture_hidden) trace->hidden.assign(1, X);

  for (int64_t il = 0; il < cfg_.n_layers; ++il) {
    const layer_weights& L = weights_->layers[il];
    attention_params ap{
        &cfg_,
        &L,
        (L.kind == attention_kind::sliding ? weights_->inv_freq_main : weights_->inv_freq_compress).data(),
        params_.prec,
        il,
        bf16};
    std::vector<int32_t>* topk = trace && L.kind == attention_kind::csa ? &trace->topk[il] : nullptr;
    std::vector<int32_t>* experts = trace ? &trace->experts[il] : nullptr;
    HART_RETURN_IF_ERROR(block_forward(ap, tb, X, topk, experts));
    if (trace && trace->capture_hidden) trace->hidden.push_back(X);
  }
  if (trace && trace->capture_last_streams) trace->last_streams = X;
  for (size_t i = 0; i < tb.spans.size(); ++i) {
    tb.spans[i].seq->n_tokens += tb.spans[i].n;
    // A verify pass may be taken back to its start, which still reads these pages.
    if (!kept(i)) release_old_pages(*tb.spans[i].seq);
  }

  // Head: collapse the streams, final norm, logits for the rows asked for.
  std::vector<float> normed;
  HART_RETURN_IF_ERROR(block_head(cfg_, X, T, weights_->hc_head_fn.data(), weights_->hc_head_base.data(),
                                  weights_->hc_head_scale.data(), weights_->norm.data(), bf16, &normed));
  if (trace && trace->capture_hidden) trace->final_hidden = normed;
  if (logits) {
    const int64_t R = int64_t(logit_rows.size());
    std::vector<float> rows(R * D);
    for (int64_t i = 0; i < R; ++i) std::copy_n(normed.data() + logit_rows[i] * D, D, rows.data() + i * D);
    logits->assign(R * V, 0.0f);
    if (R) HART_RETURN_IF_ERROR(linear_apply(weights_->head, rows.data(), R, logits->data()));
  }
  return {};
}

status engine::rollback(sequence_state& seq, int64_t n_keep, const ring_snapshot& snap) const {
  if (seq.engine_id != id_ || !seq.pages || !seq.pages->store) {
    return invalid_argument("rollback: the sequence was not made by this engine");
  }
  if (snap.pages != seq.pages.get() || seq.n_tokens != snap.first + snap.n) {
    return failed_precondition(
        "rollback: the snapshot is of positions [%lld, %lld) of another sequence or state (this one has "
        "%lld)",
        (long long)snap.first, (long long)(snap.first + snap.n), (long long)seq.n_tokens);
  }
  if (n_keep < snap.first || n_keep > seq.n_tokens) {
    return out_of_range("rollback: n_keep %lld outside the pass [%lld, %lld]", (long long)n_keep,
                        (long long)snap.first, (long long)seq.n_tokens);
  }
  page_table& pt = *seq.pages;
  ring_snapshot_restore(snap, pt, n_keep);
  seq.n_tokens = n_keep;
  if (pt.owned) {
    const int64_t P = pt.store->page_size(), n_pages = (n_keep + P - 1) / P;
    while (int64_t(pt.full.size()) > n_pages) {
      pt.store->free_full(pt.full.back());
      pt.full.pop_back();
      if (pt.swa.back() >= 0) pt.store->free_swa(pt.swa.back());
      pt.swa.pop_back();
    }
  }
  release_old_pages(seq);
  return {};
}

status engine::prefill(sequence_state& seq, const std::vector<int32_t>& tokens, logits_request want,
                       std::vector<float>* logits, forward_trace* trace) const {
  return forward({batch_item{&seq, tokens, want}}, logits, trace);
}

status engine::decode(const std::vector<sequence_state*>& seqs, const std::vector<int32_t>& tokens,
                      std::vector<float>* logits) const {
  if (seqs.size() != tokens.size()) {
    return invalid_argument("decode: %zu sequences but %zu tokens", seqs.size(), tokens.size());
  }
  std::vector<batch_item> batch;
  batch.reserve(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) batch.push_back({seqs[i], {tokens[i]}, logits_request::last});
  return forward(batch, logits);
}

}  // namespace hart
