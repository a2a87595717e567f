// File: runtime/model/config.h
// DeepSeek-V4 hyper-parameters, parsed once from a checkpoint's config.json and
// immutable afterwards (style R30). Accepts the Hugging Face form (`layer_types`
// + `compress_rates`, `mlp_layer_types`, `rope_parameters` with `main` and
// `compress` entries) and the official form (`compress_ratios`, `rope_scaling`,
// `compress_rope_theta`, `num_hash_layers`, and ModelArgs names such as `dim`).
//
//   HART_ASSIGN_OR_RETURN(model_config cfg, model_config_load("/models/v4/config.json"));
#pragma once

#include "runtime/core/status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace hart {

enum class attention_kind { sliding, csa, hca };
const char* attention_kind_name(attention_kind k);

struct rope_config {
  double theta = 10000.0;
  bool yarn = false;
  double factor = 1.0;
  int64_t original_max_position = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double attention_factor = 1.0;  // cos/sin magnitude; V4 uses 1
  double partial_rotary_factor = 1.0;
};

struct model_config {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;  // D
  int64_t n_layers = 0;
  int64_t n_mtp_layers = 0;
  int64_t n_heads = 0;   // H
  int64_t head_dim = 0;  // 512 on real models
  int64_t rope_dim = 0;  // trailing RoPE dims of every head (64)
  int64_t q_lora_rank = 0;
  int64_t o_groups = 0;
  int64_t o_lora_rank = 0;
  int64_t window = 0;  // sliding window, tokens including self
  int64_t csa_rate = 4;
  int64_t hca_rate = 128;
  std::vector<attention_kind> layer_kinds;  // one per main layer
  std::vector<bool> layer_hash_moe;         // one per main layer
  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;
  int64_t n_routed_experts = 0;
  int64_t n_shared_experts = 0;
  int64_t n_activated_experts = 0;
  int64_t moe_inter_dim = 0;
  double route_scale = 1.0;
  double swiglu_limit = 0.0;  // 0 = no clamp
  int64_t hc_mult = 4;
  int64_t hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6;
  double norm_eps = 1e-6;
  rope_config rope_main;      // sliding-only layers
  rope_config rope_compress;  // CSA / HCA layers
  int64_t max_position = 0;
  int32_t bos_token_id = 0;
  int32_t eos_token_id = 1;
  bool tie_word_embeddings = false;

  int64_t compress_rate(attention_kind k) const;
  const rope_config& rope_for(attention_kind k) const;
  /// Internal consistency (head split, group split, rope dims, layer lists).
  status validate() const;
  /// One line: "V4 6 layers (SWA,CSA,HCA,...) D=128 H=4x64 experts 8 top-2 vocab 512".
  std::string summary() const;
};

/// ok when `other` (the config.json of `origin`) describes the same network as `serving`:
/// every shape, layer kind, routing and RoPE setting equal (the weights of one can replace the
/// other's); invalid_argument naming the first field that differs.
status model_config_same_shapes(const model_config& serving, const model_config& other,
                                const std::string& origin);

/// Parses config.json text; `origin` names the source in error messages.
status_or<model_config> model_config_parse(const std::string& json_text, const std::string& origin);
/// Reads `path` (a config.json, or a directory containing one).
status_or<model_config> model_config_load(const std::string& path);
/// `path`'s config with `layers` main layers instead of its own: SWA first,
/// then CSA and HCA alternating (4: SWA, CSA, HCA, CSA), the first
/// `hash_layers` hash-routed, its MTP layers kept. The full-width shapes of a
/// real model at a size one device holds (`hart bench`, wide-model tests).
status_or<model_config> model_config_load_layers(const std::string& path, int64_t layers,
                                                 int64_t hash_layers);

}  // namespace hart
