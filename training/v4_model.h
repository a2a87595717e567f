// File: training/v4_model.h
// The DeepSeek-V4 forward pass in LibTorch with autograd, for training: one
// full causal pass over [B, S] tokens (no KV cache), the same math as the CPU
// engine (runtime/model, v4-model.md) in exact precision. Parameters carry the
// canonical hart names (runtime/model/weight_names.h: `layers.3.attn.wq_a.weight`,
// `hc_head_fn`), so named_parameters() maps 1:1 to checkpoint tensors.
//
// Frozen (requires_grad false, no gradient in the reference either): the
// Lightning Indexer (`layers.N.attn.indexer.*`), whose top-k selection is not
// differentiable. Expert selection and hash routing are not differentiable
// either, but the gate weights still get gradient through the chosen experts'
// routing weights. `ffn.gate.tid2eid` is a buffer, not a parameter.
//
//   HART_ASSIGN_OR_RETURN(model_config cfg, model_config_load("tests/data/tiny-a"));
//   auto model = std::make_shared<training::v4_model>(cfg);
//   model->init_random(/*seed=*/1);
//   torch::Tensor logits = model->forward(ids);   // ids [B, S] int64 -> [B, S, V]
#pragma once

#include "runtime/core/status.h"
#include "runtime/model/config.h"
#include "runtime/protocol/messages.h"

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace hart::training {

/// Sparse decisions forward() takes instead of making them (RL routing replay:
/// the rollout server's, docs/protocol.md §5.3), by layer index, int64
/// [B, S, k]: the routed experts of MoE layers, the Lightning Indexer's picks
/// of CSA layers (entry indices, -1 = none). Layers absent from a map decide
/// as usual. The routing weights still come from this model's router at the
/// forced experts, so the gate keeps its gradient.
struct forced_routing {
  std::map<int64_t, torch::Tensor> experts;
  std::map<int64_t, torch::Tensor> picks;
};

/// forced_routing over ids [B, S] from server captures of B samples, each
/// covering its first `positions` <= S positions. The rest (padding, or a
/// sample's last token, which the server never fed) routes to experts
/// 0..k-1 with no indexer picks: a causal pass lets them change only later
/// positions, which callers do not score. invalid_argument for rows that
/// disagree on layers or k, cover more than S positions, or hold other than
/// positions x k ids.
status_or<forced_routing> forced_routing_from(const std::vector<protocol::routing_info>& rows, int64_t S);

/// The Lightning Indexer's own decisions in one forward pass, by CSA layer
/// index, for comparing selections with a reference: its scores
/// [B, S, n_entries] (-inf where an entry is not yet visible) and top-k picks
/// [B, S, k] (entry indices, -1 = none, k = min(index_topk, n_entries)), the
/// layout of forced_routing::picks. Computed from that pass's activations even
/// where `forced` replaced the picks.
struct indexer_trace {
  std::map<int64_t, torch::Tensor> scores;
  std::map<int64_t, torch::Tensor> picks;
};

class v4_model : public torch::nn::Module {
 public:
  /// Allocates every parameter (zeros) for `cfg`; cfg must validate.
  explicit v4_model(const model_config& cfg);

  const model_config& config() const { return cfg_; }

  /// Casts the floating parameters only: LibTorch's C++ Module::to(dtype) would
  /// also cast the int64 `tid2eid` buffers (Python's skips integer tensors).
  using torch::nn::Module::to;
  void to(torch::Dtype dtype, bool non_blocking = false) override;

  /// Arithmetic dtype of the forward pass: kFloat32 (default), kFloat64 (for
  /// gradient checks, after to(kFloat64)) or kBFloat16 (weights cast to bf16
  /// on use, so fp32 master weights get fp32 gradients). Logits are always
  /// returned in the parameters' dtype.
  void set_compute_dtype(torch::Dtype d) { compute_dtype_ = d; }
  torch::Dtype compute_dtype() const { return compute_dtype_; }

  /// Random weights for tests and from-scratch training: linears N(0, std²),
  /// norm weights 1, hash tables random distinct experts per token.
  void init_random(uint64_t seed, double std = 0.02);

  /// ids [B, S] int64 in [0, vocab) -> logits [B, S, V]; every position sees
  /// positions <= itself only. Callers validate ids (see trainer) and
  /// `forced` (check_forced). `trace`, if given, receives the indexer's
  /// decisions (the indexer then also runs at CSA layers whose picks are forced).
  torch::Tensor forward(const torch::Tensor& ids, const forced_routing* forced = nullptr,
                        indexer_trace* trace = nullptr);
  /// invalid_argument unless every forced layer exists, has the right kind
  /// (MoE: any layer; picks: CSA layers), is int64 [B, S, k] with k = top_k
  /// for experts, and holds ids in range (experts in [0, E), picks in
  /// [-1, S / csa_rate)).
  status check_forced(const forced_routing& f, int64_t B, int64_t S) const;

  /// Parameter or buffer by canonical name; undefined tensor if absent.
  torch::Tensor find(const std::string& name) const;

 private:
  struct compressor_t {
    torch::Tensor wkv, wgate, ape, norm;  // [coff*c, D], [coff*c, D], [m, coff*c], [c]
    int64_t rate = 0, dim = 0;
    bool overlap = false;
  };
  struct layer_t {
    attention_kind kind = attention_kind::sliding;
    bool hash_moe = false;
    torch::Tensor hc_attn_fn, hc_attn_base, hc_attn_scale, hc_ffn_fn, hc_ffn_base, hc_ffn_scale;
    torch::Tensor attn_norm, ffn_norm;
    torch::Tensor wq_a, q_norm, wq_b, wkv, kv_norm, wo_a, wo_b, attn_sink;
    compressor_t compressor;                       // CSA / HCA
    torch::Tensor index_wq_b, index_weights_proj;  // CSA
    compressor_t index_compressor;                 // CSA
    torch::Tensor gate, gate_bias, tid2eid;        // [E, D], [E] or undefined, [V, K] int64
    std::vector<torch::Tensor> w1, w2, w3;         // routed experts
    torch::Tensor shared_w1, shared_w2, shared_w3;
  };

  torch::Tensor add_param(const std::string& name, std::vector<int64_t> shape, bool trainable = true);
  torch::Tensor add_buffer(const std::string& name, torch::Tensor t);
  torch::nn::Module& module_at(const std::string& path, std::string* leaf);
  compressor_t add_compressor(const std::string& prefix, int64_t rate, int64_t dim, bool overlap,
                              bool trainable);

  torch::Tensor w(const torch::Tensor& t) const;  // t in the compute dtype
  torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& pos, const torch::Tensor& inv_freq,
                     bool inverse) const;
  torch::Tensor rms(const torch::Tensor& x, const torch::Tensor& weight) const;
  torch::Tensor compress(const compressor_t& c, const torch::Tensor& x, const torch::Tensor& inv_freq) const;
  torch::Tensor attention(const layer_t& L, int64_t il, const torch::Tensor& x,
                          const torch::Tensor* forced_picks, indexer_trace* trace) const;
  torch::Tensor indexer_score(const layer_t& L, const torch::Tensor& x, const torch::Tensor& qr,
                              const torch::Tensor& inv_freq, int64_t n_entries) const;
  torch::Tensor moe(const layer_t& L, const torch::Tensor& x, const torch::Tensor& ids,
                    const torch::Tensor* forced_experts) const;
  torch::Tensor expert(const torch::Tensor& x, const torch::Tensor& w1, const torch::Tensor& w3,
                       const torch::Tensor& w2) const;

  model_config cfg_;
  torch::Dtype compute_dtype_ = torch::kFloat32;
  torch::Tensor embed_, head_, norm_, hc_head_fn_, hc_head_base_, hc_head_scale_;
  std::vector<layer_t> layers_;
  torch::Tensor inv_freq_main_, inv_freq_compress_;  // [rope_dim/2] fp32, not parameters
};

}  // namespace hart::training
