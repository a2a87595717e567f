#include "runtime/model/weight_names.h"

#include <utility>

namespace hart {
namespace {

bool starts_with(std::string_view s, std::string_view p) {
  return s.substr(0, p.size()) == p;
}
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

// Replaces the first occurrence of `from` by `to` when `from` is a whole
// dot-separated segment run. Returns true if it replaced.
bool replace_segment(std::string& s, std::string_view from, std::string_view to) {
  size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    const bool left_ok = pos == 0 || s[pos - 1] == '.';
    const size_t end = pos + from.size();
    const bool right_ok = end == s.size() || s[end] == '.';
    if (left_ok && right_ok) {
      s.replace(pos, from.size(), to);
      return true;
    }
    pos = end;
  }
  return false;
}

// HF module path → official path, applied in order, longest first where they nest.
constexpr std::pair<std::string_view, std::string_view> k_segment_map[] = {
    {"self_attn.compressor.indexer.scorer.weights_proj", "attn.indexer.weights_proj"},
    {"self_attn.compressor.indexer.q_b_proj", "attn.indexer.wq_b"},
    {"self_attn.compressor.indexer.kv_proj", "attn.indexer.compressor.wkv"},
    {"self_attn.compressor.indexer.gate_proj", "attn.indexer.compressor.wgate"},
    {"self_attn.compressor.indexer.position_bias", "attn.indexer.compressor.ape"},
    {"self_attn.compressor.indexer.kv_norm", "attn.indexer.compressor.norm"},
    {"self_attn.compressor.kv_proj", "attn.compressor.wkv"},
    {"self_attn.compressor.gate_proj", "attn.compressor.wgate"},
    {"self_attn.compressor.position_bias", "attn.compressor.ape"},
    {"self_attn.compressor.kv_norm", "attn.compressor.norm"},
    {"self_attn.q_a_proj", "attn.wq_a"},
    {"self_attn.q_a_norm", "attn.q_norm"},
    {"self_attn.q_b_proj", "attn.wq_b"},
    {"self_attn.kv_proj", "attn.wkv"},
    {"self_attn.kv_norm", "attn.kv_norm"},
    {"self_attn.o_a_proj", "attn.wo_a"},
    {"self_attn.o_b_proj", "attn.wo_b"},
    {"self_attn.sinks", "attn.attn_sink"},
    {"input_layernorm", "attn_norm"},
    {"post_attention_layernorm", "ffn_norm"},
    {"mlp.gate.e_score_correction_bias", "ffn.gate.bias"},
    {"mlp.shared_experts.gate_proj", "ffn.shared_experts.w1"},
    {"mlp.shared_experts.up_proj", "ffn.shared_experts.w3"},
    {"mlp.shared_experts.down_proj", "ffn.shared_experts.w2"},
    {"mlp", "ffn"},
    {"attn_hc.fn", "hc_attn_fn"},
    {"attn_hc.base", "hc_attn_base"},
    {"attn_hc.scale", "hc_attn_scale"},
    {"ffn_hc.fn", "hc_ffn_fn"},
    {"ffn_hc.base", "hc_ffn_base"},
    {"ffn_hc.scale", "hc_ffn_scale"},
    {"attn.norm", "attn.kv_norm"},  // HF's save-time spelling of the attention kv norm
    {"ffn.gate.e_score_correction_bias", "ffn.gate.bias"},
};

}  // namespace

std::string canonical_weight_name(std::string_view name) {
  std::string s(name);
  if (starts_with(s, "model.")) s.erase(0, 6);
  // Model-level tensors.
  if (s == "embed_tokens.weight" || s == "embed.weight") return "embed.weight";
  if (s == "lm_head.weight" || s == "head.weight") return "head.weight";
  if (s == "hc_head.hc_fn" || s == "hc_head_fn") return "hc_head_fn";
  if (s == "hc_head.hc_base" || s == "hc_head_base") return "hc_head_base";
  if (s == "hc_head.hc_scale" || s == "hc_head_scale") return "hc_head_scale";
  // FP8 scale companions.
  if (ends_with(s, ".weight_scale_inv")) s.replace(s.size() - 17, 17, ".scale");
  if (ends_with(s, ".weight.scale")) s.replace(s.size() - 13, 13, ".scale");
  for (const auto& [from, to] : k_segment_map) {
    if (replace_segment(s, from, to)) break;
  }
  return s;
}

}  // namespace hart
