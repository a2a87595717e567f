// File: runtime/model/engine.h
// The CPU DeepSeek-V4 engine: loads a checkpoint and runs the forward pass
// over a batch of sequences, each contributing a chunk of tokens (a prefill
// chunk of any length, or one decode token), with logits for the positions
// asked for. Sequences keep their state in KV pages (sequence_state,
// kv_store), so chunked prefill, token-by-token decode, batching and prefix
// reuse all compute the same logits.
//
//   engine_params p;
//   p.model_dir = "tests/data/tiny-a";
//   HART_ASSIGN_OR_RETURN(auto eng, engine::load(p));
//   sequence_state s = eng->new_sequence();
//   std::vector<float> logits;
//   HART_RETURN_IF_ERROR(eng->prefill(s, prompt, logits_request::last, &logits));
#pragma once

#include "runtime/core/status.h"
#include "runtime/model/config.h"
#include "runtime/model/kv_store.h"
#include "runtime/model/ring_snapshot.h"
#include "runtime/model/sequence_state.h"
#include "runtime/model/tensor_source.h"
#include "runtime/model/weights.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace hart {

struct engine_params {
  std::string model_dir;
  precision prec = precision::exact;
  int n_threads = 0;        // 0 = all cores (OpenMP / OpenBLAS default)
  int64_t page_size = 256;  // tokens per KV page; a multiple of every compress rate, >= the window
  /// Batch-invariant arithmetic: a token's logits are bitwise the same however
  /// it is batched, chunked or served from the prefix cache (slower GEMMs).
  bool deterministic = false;
  bool verbose_load = false;
  /// fp8 only: keep activations in fp32 between the quantization points instead
  /// of rounding them to bf16 where the official inference does
  /// (docs/precision.md). The GPU engine's fp8 mode still computes this way, so
  /// its tests compare against it.
  bool fp32_activations = false;

  /// The official inference's bf16 activations: fp8 without fp32_activations.
  bool bf16_activations() const { return prec == precision::fp8 && !fp32_activations; }

  status validate() const;
};

enum class logits_request { none, last, all };

/// One sequence's part of a forward call.
struct batch_item {
  sequence_state* seq = nullptr;
  std::vector<int32_t> tokens;
  logits_request logits = logits_request::last;
};

/// Optional per-call capture for tests and replay (v4-model.md; RL routing replay).
struct forward_trace {
  bool capture_hidden = false;
  /// [n_layers + 1] residual streams [D, n_hc, T]: after embedding, after each layer.
  std::vector<std::vector<float>> hidden;
  /// final normed hidden [D, T]
  std::vector<float> final_hidden;
  /// The residual streams after the last layer [D, n_hc, T] (before hc_head): what the MTP
  /// block is fed (engine::mtp_forward), without capture_hidden's every layer.
  bool capture_last_streams = false;
  std::vector<float> last_streams;
  /// CSA layer index → indexer picks [index_topk, T], -1 = no entry.
  std::map<int64_t, std::vector<int32_t>> topk;
  /// layer index → routed experts [top_k, T].
  std::map<int64_t, std::vector<int32_t>> experts;
};

/// ok when `version` is above `current`, else failed_precondition naming `what` (a weight swap or
/// relabel: versions only grow, so an event's version says which weights made it).
status weight_version_check(const char* what, uint64_t version, uint64_t current);

class engine {
 public:
  static status_or<std::unique_ptr<engine>> load(const engine_params& params);

  const model_config& config() const { return cfg_; }
  const engine_params& params() const { return params_; }
  int64_t n_params() const { return weights_->n_params; }

  // -- weight updates ---

  /// Builds weights for this engine (its config, precision and arithmetic
  /// flags) from `src`, validated exactly like a load. In fp8 precision the
  /// routed experts are quantized as the loaded checkpoint held them: MXFP4
  /// (per-32 scales) for a release checkpoint, else FP8. Touches no engine
  /// state, so it may run on another thread while forward() runs.
  status_or<std::shared_ptr<const model_weights>> build_weights(const tensor_source& src) const;
  /// Replaces the weights with `w` (from build_weights) and sets the version.
  /// Not concurrent with forward(): the caller swaps between forward calls.
  /// failed_precondition unless `version` > weight_version(); nothing changes then.
  /// Sequences keep their KV (computed with the old weights).
  status swap_weights(std::shared_ptr<const model_weights> w, uint64_t version);
  /// Names the serving weights `version` without changing them (a trainer that counts its
  /// steps: SGLang's /update_weight_version); the same rule and timing as swap_weights.
  status relabel_weights(uint64_t version);
  /// 0 for the weights loaded from params().model_dir.
  uint64_t weight_version() const { return weight_version_; }

  /// A sequence whose pages come from the engine's own store as it grows and
  /// go back when it is destroyed (it must not outlive the engine).
  sequence_state new_sequence() const;

  /// A store for ShadowRadix-managed pages of `page_size` tokens, laid out for
  /// this model; invalid_argument unless the page size is a multiple of 128,
  /// of every compress rate, and at least the window.
  status_or<std::unique_ptr<kv_store>> make_store(int64_t page_size) const;
  /// Points `seq` at pages a cache owns: positions p < full.size() * P live in
  /// full[p / P] / swa[p / P] of `store`; `n_computed` positions hold valid KV.
  static void bind_pages(sequence_state& seq, kv_store* store, const std::vector<int32_t>& full,
                         const std::vector<int32_t>& swa, int64_t n_computed);

  /// Runs every item's tokens through the model at positions seq->n_tokens...
  /// and advances each sequence. `logits` receives [vocab, rows], the rows in
  /// item order: every position for `all`, the last for `last`, none for `none`.
  /// Invalid input (empty chunk, token id outside the vocabulary, the same
  /// sequence twice, context past max_position) is an error that changes no state.
  /// One call at a time per engine: engine-owned sequences share its page store.
  status forward(const std::vector<batch_item>& batch, std::vector<float>* logits,
                 forward_trace* trace = nullptr) const;

  // -- speculative verification (docs/spec-decode.md) ---

  /// forward() where item i with keep_rings[i] set is a verify pass (the last
  /// accepted token and the drafts) that may be taken back: before it runs, the
  /// ring rows its positions overwrite are saved into *keep_rings[i], and its
  /// sequence's old SWA pages stay until rollback(), which must follow before
  /// the sequence's next forward. Such an item has at most
  /// kv_store::min_ring_rows() tokens. keep_rings is empty or one per item.
  status verify(const std::vector<batch_item>& batch, const std::vector<ring_snapshot*>& keep_rings,
                std::vector<float>* logits, forward_trace* trace = nullptr) const;
  /// Keeps positions [0, n_keep) of the verify pass `snap` recorded on `seq`
  /// and forgets the rest as if never fed: their ring rows are restored,
  /// n_tokens becomes n_keep, an engine-owned sequence returns the pages past
  /// n_keep and the SWA pages out of every window. Cache-bound pages stay
  /// (the cache reserved them; it must be told only the accepted tokens).
  /// n_keep in [snap.first, snap.first + snap.n]; failed_precondition unless
  /// `seq` is where the pass left it, and nothing changes then.
  status rollback(sequence_state& seq, int64_t n_keep, const ring_snapshot& snap) const;

  // -- MTP drafting (docs/spec-decode.md §6) ---

  /// MTP blocks loaded: config n_mtp_layers when the checkpoint holds `mtp.0.*`, else 0.
  int64_t n_mtp_blocks() const { return n_mtp_blocks_; }
  /// The first MTP block (v4-model.md §7.3) at positions [p0, p0 + T) of `seq`,
  /// T = next.size(): x = e_proj(enorm(embed(next[j]))) + h_proj(hnorm(streams)),
  /// the block at position p0 + j (SWA only), draft logits [V, T] =
  /// head(norm(hc_head_mtp(x))), predicting the token at p0 + j + 2. `streams`
  /// [D, n_hc, T]: the model's last residual streams at those positions
  /// (forward_trace::hidden.back()) or, for a chained draft, this call's
  /// `out_streams` [D, n_hc, T] at the position before; next[j]: the token at
  /// p0 + j + 1. Writes the MTP window KV of those positions into seq's pages
  /// (an engine-owned sequence gets pages past n_tokens as needed); reads that
  /// of the window before p0, which earlier calls must have written. Leaves
  /// n_tokens alone. failed_precondition without MTP weights.
  status mtp_forward(sequence_state& seq, int64_t p0, const std::vector<int32_t>& next,
                     const std::vector<float>& streams, std::vector<float>* logits,
                     std::vector<float>* out_streams) const;

  /// One sequence, one chunk.
  status prefill(sequence_state& seq, const std::vector<int32_t>& tokens, logits_request want,
                 std::vector<float>* logits, forward_trace* trace = nullptr) const;
  /// One token for each sequence (lengths may differ); logits [vocab, n].
  status decode(const std::vector<sequence_state*>& seqs, const std::vector<int32_t>& tokens,
                std::vector<float>* logits) const;

 private:
  engine() = default;
  /// How a load or an update reads its tensors (the arithmetic flags of params_).
  model_weights_reader::options load_options() const;
  status validate_batch(const std::vector<batch_item>& batch,
                        const std::vector<ring_snapshot*>& keep_rings) const;
  /// Gives an engine-owned sequence pages for positions [first, end) (never
  /// fails), or checks that a cache-bound one has them and that the SWA pages
  /// from first − swa_keep_ are live.
  status prepare_pages(sequence_state& seq, int64_t first, int64_t end) const;
  /// Returns engine-owned sequences' SWA pages that no window or ring can reach.
  void release_old_pages(sequence_state& seq) const;

  engine_params params_;
  uint64_t id_ = 0;  // distinct per loaded engine; stamps its sequences
  model_config cfg_;
  std::shared_ptr<const model_weights> weights_;
  uint64_t weight_version_ = 0;
  bool mxfp4_experts_ = false;       // the loaded checkpoint's routed experts were MXFP4 values
  int64_t n_mtp_blocks_ = 0;         // MTP blocks loaded; their window KV is in every store's SWA pages
  std::unique_ptr<kv_store> store_;  // pages of new_sequence() sequences
  int64_t swa_keep_ = 0;             // positions behind the newest that windows and rings still read
};

}  // namespace hart
