#include "runtime/model/weight_names.h"

#include "runtime/model/safetensors.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace hart {
namespace {

const std::string k_tiny_a = std::string(HART_TEST_DATA) + "/tiny-a";

struct name_case {
  const char* in;
  const char* want;
};

void expect_names(const std::vector<name_case>& cases) {
  for (const name_case& c : cases) EXPECT_EQ(canonical_weight_name(c.in), c.want) << "from '" << c.in << "'";
}

TEST(canonical_weight_name, official_names_are_canonical) {
  expect_names({
      {"layers.3.attn.wq_a.weight", "layers.3.attn.wq_a.weight"},
      {"embed.weight", "embed.weight"},
      {"head.weight", "head.weight"},
      {"norm.weight", "norm.weight"},
      {"layers.1.attn.kv_norm.weight", "layers.1.attn.kv_norm.weight"},
      {"layers.1.attn.compressor.norm.weight", "layers.1.attn.compressor.norm.weight"},
      {"layers.2.attn.indexer.compressor.ape", "layers.2.attn.indexer.compressor.ape"},
      {"layers.2.attn.indexer.weights_proj.weight", "layers.2.attn.indexer.weights_proj.weight"},
      {"layers.0.ffn.gate.tid2eid", "layers.0.ffn.gate.tid2eid"},
      {"layers.4.ffn.gate.bias", "layers.4.ffn.gate.bias"},
      {"layers.5.ffn.experts.7.w2.weight", "layers.5.ffn.experts.7.w2.weight"},
      {"layers.5.ffn.experts.7.w2.scale", "layers.5.ffn.experts.7.w2.scale"},
      {"layers.0.hc_attn_fn", "layers.0.hc_attn_fn"},
      {"hc_head_fn", "hc_head_fn"},
      {"layers.3.attn.wq_a.scale", "layers.3.attn.wq_a.scale"},
  });
}

TEST(canonical_weight_name, hf_module_names) {
  expect_names({
      {"model.layers.3.self_attn.q_a_proj.weight", "layers.3.attn.wq_a.weight"},
      {"model.layers.3.self_attn.q_a_norm.weight", "layers.3.attn.q_norm.weight"},
      {"model.layers.3.self_attn.q_b_proj.weight", "layers.3.attn.wq_b.weight"},
      {"model.layers.3.self_attn.kv_proj.weight", "layers.3.attn.wkv.weight"},
      {"model.layers.3.self_attn.o_a_proj.weight", "layers.3.attn.wo_a.weight"},
      {"model.layers.3.self_attn.o_b_proj.weight", "layers.3.attn.wo_b.weight"},
      {"model.layers.3.self_attn.sinks", "layers.3.attn.attn_sink"},
      {"model.embed_tokens.weight", "embed.weight"},
      {"lm_head.weight", "head.weight"},
      {"model.norm.weight", "norm.weight"},
      {"model.layers.1.self_attn.kv_norm.weight", "layers.1.attn.kv_norm.weight"},
      {"model.layers.1.self_attn.compressor.kv_norm.weight", "layers.1.attn.compressor.norm.weight"},
      {"model.layers.1.self_attn.compressor.position_bias", "layers.1.attn.compressor.ape"},
      {"model.layers.1.self_attn.compressor.kv_proj.weight", "layers.1.attn.compressor.wkv.weight"},
      {"model.layers.1.self_attn.compressor.gate_proj.weight", "layers.1.attn.compressor.wgate.weight"},
      {"model.layers.2.self_attn.compressor.indexer.position_bias", "layers.2.attn.indexer.compressor.ape"},
      {"model.layers.2.self_attn.compressor.indexer.kv_norm.weight",
       "layers.2.attn.indexer.compressor.norm.weight"},
      {"model.layers.2.self_attn.compressor.indexer.kv_proj.weight",
       "layers.2.attn.indexer.compressor.wkv.weight"},
      {"model.layers.2.self_attn.compressor.indexer.gate_proj.weight",
       "layers.2.attn.indexer.compressor.wgate.weight"},
      {"model.layers.2.self_attn.compressor.indexer.q_b_proj.weight", "layers.2.attn.indexer.wq_b.weight"},
      {"model.layers.2.self_attn.compressor.indexer.scorer.weights_proj.weight",
       "layers.2.attn.indexer.weights_proj.weight"},
      {"model.layers.4.mlp.gate.e_score_correction_bias", "layers.4.ffn.gate.bias"},
      {"model.layers.4.mlp.gate.weight", "layers.4.ffn.gate.weight"},
      {"model.layers.0.mlp.gate.tid2eid", "layers.0.ffn.gate.tid2eid"},
      {"model.layers.4.mlp.shared_experts.gate_proj.weight", "layers.4.ffn.shared_experts.w1.weight"},
      {"model.layers.4.mlp.shared_experts.up_proj.weight", "layers.4.ffn.shared_experts.w3.weight"},
      {"model.layers.4.mlp.shared_experts.down_proj.weight", "layers.4.ffn.shared_experts.w2.weight"},
      {"model.layers.0.input_layernorm.weight", "layers.0.attn_norm.weight"},
      {"model.layers.0.post_attention_layernorm.weight", "layers.0.ffn_norm.weight"},
      {"model.layers.0.attn_hc.fn", "layers.0.hc_attn_fn"},
      {"model.layers.0.attn_hc.base", "layers.0.hc_attn_base"},
      {"model.layers.0.ffn_hc.scale", "layers.0.hc_ffn_scale"},
      {"model.hc_head.hc_fn", "hc_head_fn"},
      {"model.hc_head.hc_base", "hc_head_base"},
      {"model.hc_head.hc_scale", "hc_head_scale"},
      {"model.layers.3.self_attn.q_a_proj.weight_scale_inv", "layers.3.attn.wq_a.scale"},
  });
}

TEST(canonical_weight_name, hf_save_time_mix) {
  expect_names({
      {"model.layers.3.attn.wq_a.weight", "layers.3.attn.wq_a.weight"},
      {"model.layers.1.attn.norm.weight", "layers.1.attn.kv_norm.weight"},
      {"model.layers.1.attn.compressor.norm.weight", "layers.1.attn.compressor.norm.weight"},
      {"model.layers.1.attn.indexer.compressor.norm.weight", "layers.1.attn.indexer.compressor.norm.weight"},
      {"model.layers.1.attn.q_norm.weight", "layers.1.attn.q_norm.weight"},
      {"model.layers.0.attn_norm.weight", "layers.0.attn_norm.weight"},
      {"model.layers.0.hc_attn_fn", "layers.0.hc_attn_fn"},
      {"model.layers.1.ffn.gate.e_score_correction_bias", "layers.1.ffn.gate.bias"},
      {"model.layers.1.ffn.gate.bias", "layers.1.ffn.gate.bias"},
      {"model.embed_tokens.weight", "embed.weight"},
      {"model.hc_head.hc_fn", "hc_head_fn"},
  });
}

TEST(canonical_weight_name, same_tensor_three_spellings_agree) {
  const std::vector<std::vector<const char*>> groups = {
      {"layers.1.attn.kv_norm.weight", "model.layers.1.self_attn.kv_norm.weight",
       "model.layers.1.attn.norm.weight"},
      {"embed.weight", "model.embed_tokens.weight"},
      {"head.weight", "lm_head.weight"},
      {"layers.3.attn.wq_a.scale", "model.layers.3.self_attn.q_a_proj.weight_scale_inv"},
      {"layers.2.attn.indexer.compressor.ape", "model.layers.2.self_attn.compressor.indexer.position_bias",
       "model.layers.2.attn.indexer.compressor.ape"},
  };
  for (const auto& g : groups) {
    for (const char* n : g) EXPECT_EQ(canonical_weight_name(n), canonical_weight_name(g[0])) << n;
  }
}

TEST(canonical_weight_name, tiny_a_names_are_distinct) {
  status_or<weight_store> store = weight_store::open(k_tiny_a);
  ASSERT_TRUE(store.ok()) << store.get_status().to_string();
  std::map<std::string, std::string> seen;
  const std::vector<std::string> names = store->names();
  ASSERT_GT(names.size(), 100u);
  for (const std::string& n : names) {
    const std::string c = canonical_weight_name(n);
    EXPECT_EQ(c.rfind("model.", 0), std::string::npos) << n << " -> " << c;
    auto [it, inserted] = seen.emplace(c, n);
    EXPECT_TRUE(inserted) << "'" << n << "' and '" << it->second << "' both map to '" << c << "'";
  }
  // Spot checks on the fixture's save-time spelling.
  EXPECT_EQ(seen.count("layers.1.attn.kv_norm.weight"), 1u);
  EXPECT_EQ(seen.count("layers.1.attn.compressor.norm.weight"), 1u);
  EXPECT_EQ(seen.count("embed.weight"), 1u);
  EXPECT_EQ(seen.count("head.weight"), 1u);
  EXPECT_EQ(seen.count("hc_head_fn"), 1u);
  EXPECT_EQ(seen.count("layers.0.ffn.gate.tid2eid"), 1u);
}

}  // namespace
}  // namespace hart
