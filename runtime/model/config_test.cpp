#include "runtime/model/config.h"

#include "runtime/model/safetensors.h"
#include "runtime/model/weights.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

namespace hart {

// Readable gtest output for layer kinds (found by ADL, so outside the anonymous namespace).
void PrintTo(attention_kind k, std::ostream* os) {
  *os << attention_kind_name(k);
}

namespace {

using json = nlohmann::json;

const std::string k_data = HART_TEST_DATA;
constexpr attention_kind k_swa = attention_kind::sliding;
constexpr attention_kind k_csa = attention_kind::csa;
constexpr attention_kind k_hca = attention_kind::hca;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json tiny_config_json(const std::string& model) {
  return json::parse(read_text(k_data + "/" + model + "/config.json"));
}

// The status is an error whose message contains every needle.
void expect_error(const status& s, std::initializer_list<const char*> needles,
                  status_code code = status_code::ok) {
  ASSERT_FALSE(s.ok()) << "expected an error containing '" << *needles.begin() << "'";
  for (const char* n : needles) {
    EXPECT_NE(s.message().find(n), std::string::npos)
        << "message '" << s.message() << "' lacks '" << n << "'";
  }
  if (code != status_code::ok) {
    EXPECT_EQ(s.code(), code) << s.to_string();
  }
}

status parse_json(const json& j) {
  return model_config_parse(j.dump(), "test.json").get_status();
}

// The official (inference/ModelArgs) form of a V4-Flash-shaped config: 43 layers,
// compress_ratios with one extra entry for the MTP layer.
json official_flash_json() {
  std::vector<int> ratios = {0, 0};
  for (int k = 0; k < 20; ++k) {
    ratios.push_back(4);
    ratios.push_back(128);
  }
  ratios.push_back(4);
  ratios.push_back(0);  // MTP
  json j = {
      {"vocab_size", 129280},
      {"dim", 4096},
      {"moe_inter_dim", 2048},
      {"n_layers", 43},
      {"num_hash_layers", 3},
      {"n_mtp_layers", 1},
      {"n_heads", 64},
      {"n_routed_experts", 256},
      {"n_shared_experts", 1},
      {"n_activated_experts", 6},
      {"route_scale", 1.5},
      {"swiglu_limit", 10.0},
      {"q_lora_rank", 1024},
      {"head_dim", 512},
      {"rope_head_dim", 64},
      {"norm_eps", 1e-6},
      {"o_groups", 8},
      {"o_lora_rank", 1024},
      {"window_size", 128},
      {"compress_ratios", ratios},
      {"rope_theta", 10000},
      {"compress_rope_theta", 160000},
      {"rope_scaling",
       {{"type", "yarn"},
        {"factor", 16},
        {"original_max_position_embeddings", 65536},
        {"beta_fast", 32},
        {"beta_slow", 1}}},
      {"index_n_heads", 64},
      {"index_head_dim", 128},
      {"index_topk", 512},
      {"hc_mult", 4},
      {"hc_sinkhorn_iters", 20},
      {"hc_eps", 1e-6},
  };
  return j;
}

// -- the fixtures ------------------------------------------------------------

TEST(model_config, tiny_a) {
  status_or<model_config> r = model_config_load(k_data + "/tiny-a/config.json");
  ASSERT_TRUE(r.ok()) << r.get_status().to_string();
  const model_config& c = r.value();
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.hidden_size, 128);
  EXPECT_EQ(c.n_layers, 6);
  EXPECT_EQ(c.n_mtp_layers, 1);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.rope_dim, 16);
  EXPECT_EQ(c.q_lora_rank, 64);
  EXPECT_EQ(c.o_groups, 2);
  EXPECT_EQ(c.o_lora_rank, 32);
  EXPECT_EQ(c.window, 32);
  EXPECT_EQ(c.csa_rate, 4);
  EXPECT_EQ(c.hca_rate, 16);
  EXPECT_EQ(c.compress_rate(k_swa), 0);
  EXPECT_EQ(c.compress_rate(k_csa), 4);
  EXPECT_EQ(c.compress_rate(k_hca), 16);
  EXPECT_EQ(c.layer_kinds, (std::vector<attention_kind>{k_swa, k_csa, k_hca, k_csa, k_hca, k_swa}));
  EXPECT_EQ(c.layer_hash_moe, (std::vector<bool>{true, false, false, false, false, false}));
  EXPECT_EQ(c.index_n_heads, 16);
  EXPECT_EQ(c.index_head_dim, 32);
  EXPECT_EQ(c.index_topk, 8);
  EXPECT_EQ(c.n_routed_experts, 8);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_EQ(c.n_activated_experts, 2);
  EXPECT_EQ(c.moe_inter_dim, 64);
  EXPECT_DOUBLE_EQ(c.route_scale, 1.5);
  EXPECT_DOUBLE_EQ(c.swiglu_limit, 10.0);
  EXPECT_EQ(c.hc_mult, 4);
  EXPECT_EQ(c.hc_sinkhorn_iters, 20);
  EXPECT_EQ(c.max_position, 1048576);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c.rope_main.theta, 10000.0);
  EXPECT_FALSE(c.rope_main.yarn);
  EXPECT_DOUBLE_EQ(c.rope_main.partial_rotary_factor, 0.25);
  EXPECT_DOUBLE_EQ(c.rope_compress.theta, 160000.0);
  EXPECT_FALSE(c.rope_compress.yarn);
  EXPECT_EQ(&c.rope_for(k_swa), &c.rope_main);
  EXPECT_EQ(&c.rope_for(k_csa), &c.rope_compress);
  EXPECT_EQ(&c.rope_for(k_hca), &c.rope_compress);
  EXPECT_TRUE(c.validate().ok());
}

TEST(model_config, tiny_b_from_directory) {
  status_or<model_config> r = model_config_load(k_data + "/tiny-b");  // a directory works too
  ASSERT_TRUE(r.ok()) << r.get_status().to_string();
  const model_config& c = r.value();
  EXPECT_EQ(c.n_layers, 4);
  EXPECT_EQ(c.window, 128);
  EXPECT_EQ(c.csa_rate, 4);
  EXPECT_EQ(c.hca_rate, 128);
  EXPECT_EQ(c.index_topk, 16);
  EXPECT_EQ(c.layer_kinds, (std::vector<attention_kind>{k_hca, k_csa, k_hca, k_csa}));
  EXPECT_EQ(c.layer_hash_moe, (std::vector<bool>{true, true, false, false}));
  EXPECT_FALSE(c.rope_main.yarn);
  EXPECT_DOUBLE_EQ(c.rope_main.theta, 10000.0);
  const rope_config& rc = c.rope_compress;
  EXPECT_TRUE(rc.yarn);
  EXPECT_DOUBLE_EQ(rc.theta, 160000.0);
  EXPECT_DOUBLE_EQ(rc.factor, 16.0);
  EXPECT_EQ(rc.original_max_position, 65536);
  EXPECT_DOUBLE_EQ(rc.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(rc.beta_slow, 1.0);
  EXPECT_DOUBLE_EQ(rc.attention_factor, 1.0);
  EXPECT_DOUBLE_EQ(rc.partial_rotary_factor, 0.25);
}

// -- the official form -------------------------------------------------------

TEST(model_config, official_form) {
  status_or<model_config> r = model_config_parse(official_flash_json().dump(), "official.json");
  ASSERT_TRUE(r.ok()) << r.get_status().to_string();
  const model_config& c = r.value();
  EXPECT_EQ(c.vocab_size, 129280);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.n_layers, 43);
  EXPECT_EQ(c.n_mtp_layers, 1);
  EXPECT_EQ(c.n_heads, 64);
  EXPECT_EQ(c.head_dim, 512);
  EXPECT_EQ(c.rope_dim, 64);
  EXPECT_EQ(c.moe_inter_dim, 2048);
  EXPECT_EQ(c.n_activated_experts, 6);
  EXPECT_EQ(c.window, 128);
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.route_scale, 1.5);
  EXPECT_EQ(c.csa_rate, 4);
  EXPECT_EQ(c.hca_rate, 128);
  ASSERT_EQ(c.layer_kinds.size(), 43u);
  for (int64_t il = 0; il < 43; ++il) {
    const attention_kind want = il < 2 ? k_swa : (il % 2 == 0 ? k_csa : k_hca);
    EXPECT_EQ(c.layer_kinds[il], want) << "layer " << il;
  }
  ASSERT_EQ(c.layer_hash_moe.size(), 43u);
  for (int64_t il = 0; il < 43; ++il) EXPECT_EQ(c.layer_hash_moe[il], il < 3) << "layer " << il;
  // rope_theta for SWA layers, no YaRN there; YaRN only on the compress rope.
  EXPECT_DOUBLE_EQ(c.rope_main.theta, 10000.0);
  EXPECT_FALSE(c.rope_main.yarn);
  EXPECT_DOUBLE_EQ(c.rope_compress.theta, 160000.0);
  EXPECT_TRUE(c.rope_compress.yarn);
  EXPECT_DOUBLE_EQ(c.rope_compress.factor, 16.0);
  EXPECT_EQ(c.rope_compress.original_max_position, 65536);
  EXPECT_DOUBLE_EQ(c.rope_compress.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(c.rope_compress.beta_slow, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_compress.attention_factor, 1.0);
  EXPECT_EQ(rope_inv_freq(c.rope_main, c.head_dim).size(), 32u);
  EXPECT_EQ(rope_inv_freq(c.rope_compress, c.head_dim).size(), 32u);
}

TEST(model_config, official_form_hca_first) {
  // The smaller nonzero ratio is CSA even when the larger one comes first.
  json j = official_flash_json();
  j["n_layers"] = 4;
  j["compress_ratios"] = {128, 4, 0, 128, 0};
  j["num_hash_layers"] = 1;
  status_or<model_config> r = model_config_parse(j.dump(), "official.json");
  ASSERT_TRUE(r.ok()) << r.get_status().to_string();
  EXPECT_EQ(r->layer_kinds, (std::vector<attention_kind>{k_hca, k_csa, k_swa, k_hca}));
  EXPECT_EQ(r->layer_hash_moe, (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ(r->csa_rate, 4);
  EXPECT_EQ(r->hca_rate, 128);
}

TEST(model_config, official_form_pro_layout) {
  // V4-Pro: [128, 128, (4, 128) x 29, 4, 0] (v4-model.md §1.2): 61 layers, no SWA-only main layer.
  json j = official_flash_json();
  std::vector<int> ratios = {128, 128};
  for (int k = 0; k < 29; ++k) {
    ratios.push_back(4);
    ratios.push_back(128);
  }
  ratios.push_back(4);
  ratios.push_back(0);
  j["n_layers"] = 61;
  j["compress_ratios"] = ratios;
  status_or<model_config> r = model_config_parse(j.dump(), "pro.json");
  ASSERT_TRUE(r.ok()) << r.get_status().to_string();
  ASSERT_EQ(r->layer_kinds.size(), 61u);
  for (int64_t il = 0; il < 61; ++il) {
    const attention_kind want = il < 2 ? k_hca : (il % 2 == 0 ? k_csa : k_hca);
    EXPECT_EQ(r->layer_kinds[il], want) << "layer " << il;
  }
  EXPECT_EQ(r->csa_rate, 4);
  EXPECT_EQ(r->hca_rate, 128);
}

TEST(model_config, official_form_single_ratio_128_is_hca) {
  // v4-model.md §1.2: ratio 128 is HCA, ratio 4 is CSA. With only one nonzero
  // ratio in the list (e.g. Pro's list cut to its first 2 layers) the kind must
  // still follow the ratio, not the order in which ratios first appear.
  json j = official_flash_json();
  j["n_layers"] = 3;
  j["compress_ratios"] = {128, 128, 0, 0};
  status_or<model_config> r = model_config_parse(j.dump(), "official.json");
  ASSERT_TRUE(r.ok()) << r.get_status().to_string();
  EXPECT_EQ(r->layer_kinds, (std::vector<attention_kind>{k_hca, k_hca, k_swa}));
  EXPECT_EQ(r->hca_rate, 128);
  EXPECT_EQ(r->compress_rate(r->layer_kinds[0]), 128);

  j["compress_ratios"] = {0, 4, 4, 0};
  r = model_config_parse(j.dump(), "official.json");
  ASSERT_TRUE(r.ok()) << r.get_status().to_string();
  EXPECT_EQ(r->layer_kinds, (std::vector<attention_kind>{k_swa, k_csa, k_csa}));
  EXPECT_EQ(r->csa_rate, 4);
}

TEST(model_config, flash_shaped_hf_form) {
  json j = tiny_config_json("tiny-a");
  j["hidden_size"] = 4096;
  j["num_hidden_layers"] = 43;
  j["num_attention_heads"] = 64;
  j["head_dim"] = 512;
  j["qk_rope_head_dim"] = 64;
  j["partial_rotary_factor"] = 0.125;
  j["q_lora_rank"] = 1024;
  j["o_groups"] = 8;
  j["o_lora_rank"] = 1024;
  j["n_routed_experts"] = 256;
  j["num_experts_per_tok"] = 6;
  j["moe_intermediate_size"] = 2048;
  j["index_n_heads"] = 64;
  j["index_head_dim"] = 128;
  j["index_topk"] = 512;
  j["sliding_window"] = 128;
  j["vocab_size"] = 129280;
  j["compress_rates"] = {{"compressed_sparse_attention", 4}, {"heavily_compressed_attention", 128}};
  json lt = json::array({"sliding_attention", "sliding_attention"});
  for (int k = 0; k < 20; ++k) {
    lt.push_back("compressed_sparse_attention");
    lt.push_back("heavily_compressed_attention");
  }
  lt.push_back("compressed_sparse_attention");
  j["layer_types"] = lt;
  json mlt = json::array();
  for (int il = 0; il < 43; ++il) mlt.push_back(il < 3 ? "hash_moe" : "moe");
  j["mlp_layer_types"] = mlt;
  for (const char* k : {"main", "compress"}) j["rope_parameters"][k]["partial_rotary_factor"] = 0.125;
  j["rope_parameters"]["compress"] = {{"rope_type", "yarn"},
                                      {"rope_theta", 160000.0},
                                      {"factor", 16.0},
                                      {"original_max_position_embeddings", 65536},
                                      {"beta_fast", 32.0},
                                      {"beta_slow", 1.0},
                                      {"partial_rotary_factor", 0.125}};
  status_or<model_config> r = model_config_parse(j.dump(), "flash.json");
  ASSERT_TRUE(r.ok()) << r.get_status().to_string();
  const model_config& c = r.value();
  EXPECT_EQ(c.n_layers, 43);
  EXPECT_EQ(c.rope_dim, 64);
  EXPECT_EQ(c.hca_rate, 128);
  EXPECT_EQ(c.layer_kinds[0], k_swa);
  EXPECT_EQ(c.layer_kinds[2], k_csa);
  EXPECT_EQ(c.layer_kinds[42], k_csa);
  EXPECT_TRUE(c.layer_hash_moe[2]);
  EXPECT_FALSE(c.layer_hash_moe[3]);
  EXPECT_TRUE(c.rope_compress.yarn);
  const std::string s = c.summary();
  EXPECT_NE(s.find("43 layers"), std::string::npos) << s;
  EXPECT_NE(s.find("4096"), std::string::npos) << s;
  EXPECT_NE(s.find("256"), std::string::npos) << s;
}

// -- RoPE tables -------------------------------------------------------------

void expect_inv_freq_matches_golden(const std::string& model) {
  SCOPED_TRACE(model);
  status_or<model_config> cfg = model_config_load(k_data + "/" + model);
  ASSERT_TRUE(cfg.ok()) << cfg.get_status().to_string();
  status_or<weight_store> golden = weight_store::open(k_data + "/" + model + "/golden.safetensors");
  ASSERT_TRUE(golden.ok()) << golden.get_status().to_string();
  struct {
    const char* name;
    const rope_config* rope;
  } tables[] = {{"rope.main.inv_freq", &cfg->rope_main}, {"rope.compress.inv_freq", &cfg->rope_compress}};
  for (const auto& t : tables) {
    SCOPED_TRACE(t.name);
    const tensor_entry* e = golden->find(t.name);
    ASSERT_NE(e, nullptr);
    ASSERT_EQ(e->type, dtype::f32);
    const std::vector<float> got = rope_inv_freq(*t.rope, cfg->head_dim);
    ASSERT_EQ(int64_t(got.size()), e->numel());
    ASSERT_EQ(int64_t(got.size()) * 2, cfg->rope_dim);
    const float* want = reinterpret_cast<const float*>(e->data);
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-6 * std::fabs(want[i])) << "i = " << i;
    }
  }
}

// The repository's Flash config cut to a few layers (hart bench, the
// Flash-width GPU tests): Flash's dims, SWA then CSA / HCA alternating, the
// first layers hash-routed, the MTP layer kept; bad counts and paths refused.
TEST(model_config, flash_with_fewer_layers) {
  const std::string flash = std::string(HART_TEST_DATA) + "/../../configs/deepseek-v4-flash";
  auto full = model_config_load(flash);
  ASSERT_TRUE(full.ok()) << full.get_status().to_string();
  auto c = model_config_load_layers(flash, 4, 1);
  ASSERT_TRUE(c.ok()) << c.get_status().to_string();
  EXPECT_EQ(c->n_layers, 4);
  EXPECT_EQ(c->layer_kinds, (std::vector<attention_kind>{attention_kind::sliding, attention_kind::csa,
                                                         attention_kind::hca, attention_kind::csa}));
  EXPECT_EQ(c->layer_hash_moe, (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ(c->n_mtp_layers, full->n_mtp_layers);
  EXPECT_EQ(c->hidden_size, full->hidden_size);
  EXPECT_EQ(c->n_routed_experts, full->n_routed_experts);
  EXPECT_EQ(c->vocab_size, full->vocab_size);
  EXPECT_EQ(model_config_load_layers(flash, 0, 0).get_status().code(), status_code::invalid_argument);
  EXPECT_EQ(model_config_load_layers(flash, 2, 3).get_status().code(), status_code::invalid_argument);
  EXPECT_EQ(model_config_load_layers(flash + "/missing", 2, 0).get_status().code(), status_code::not_found);
}

TEST(rope_inv_freq, tiny_a_matches_golden) {
  expect_inv_freq_matches_golden("tiny-a");
}
TEST(rope_inv_freq, tiny_b_matches_golden) {
  expect_inv_freq_matches_golden("tiny-b");
}

// v4-model.md §8.3: θ = 160000, 64 rope dims, factor 16 over 65536 positions,
// β 32 / 1: low = 15, high = 25; i ≤ 15 unchanged, i ≥ 25 divided by 16, linear between.
void expect_v4_yarn_table(const std::vector<float>& f) {
  ASSERT_EQ(f.size(), 32u);
  for (int i = 0; i < 32; ++i) {
    const double base = std::pow(160000.0, -2.0 * i / 64.0);
    const double smooth = 1.0 - std::clamp((i - 15) / 10.0, 0.0, 1.0);
    const double want = base * smooth + base / 16.0 * (1.0 - smooth);
    EXPECT_NEAR(f[i], want, 2e-6 * want) << "i = " << i;
    if (i <= 15) {
      EXPECT_NEAR(f[i], base, 2e-6 * base) << "i = " << i << " must be unchanged";
    }
    if (i >= 25) {
      EXPECT_NEAR(f[i], base / 16.0, 2e-6 * base / 16.0) << "i = " << i << " must be divided by 16";
    }
  }
}

TEST(rope_inv_freq, v4_yarn_section_8_3) {
  rope_config r;
  r.theta = 160000.0;
  r.yarn = true;
  r.factor = 16.0;
  r.original_max_position = 65536;
  r.beta_fast = 32.0;
  r.beta_slow = 1.0;
  expect_v4_yarn_table(rope_inv_freq(r, 64));
  // The same 64 rope dims as the trailing eighth of a 512-dim head.
  r.partial_rotary_factor = 0.125;
  expect_v4_yarn_table(rope_inv_freq(r, 512));
}

TEST(rope_inv_freq, official_form_compress_rope_is_v4_yarn) {
  status_or<model_config> r = model_config_parse(official_flash_json().dump(), "official.json");
  ASSERT_TRUE(r.ok()) << r.get_status().to_string();
  expect_v4_yarn_table(rope_inv_freq(r->rope_compress, r->head_dim));
  const std::vector<float> main = rope_inv_freq(r->rope_main, r->head_dim);
  ASSERT_EQ(main.size(), 32u);
  for (int i = 0; i < 32; ++i) {
    const double want = std::pow(10000.0, -2.0 * i / 64.0);
    EXPECT_NEAR(main[i], want, 2e-6 * want) << "i = " << i;
  }
}

// -- errors ------------------------------------------------------------------

TEST(model_config_errors, not_json) {
  expect_error(model_config_parse("{\"hidden_size\": 12", "bad.json").get_status(), {"bad.json", "JSON"},
               status_code::invalid_argument);
}

TEST(model_config_errors, json_array) {
  expect_error(model_config_parse("[1, 2, 3]", "arr.json").get_status(), {"arr.json", "object"},
               status_code::invalid_argument);
}

TEST(model_config_errors, wrong_model_type) {
  json j = tiny_config_json("tiny-a");
  j["model_type"] = "llama";
  expect_error(parse_json(j), {"llama", "deepseek_v4"}, status_code::invalid_argument);
}

TEST(model_config_errors, missing_hidden_size) {
  json j = tiny_config_json("tiny-a");
  j.erase("hidden_size");
  expect_error(parse_json(j), {"hidden_size", "missing"}, status_code::invalid_argument);
}

TEST(model_config_errors, hidden_size_string) {
  json j = tiny_config_json("tiny-a");
  j["hidden_size"] = "128";
  expect_error(parse_json(j), {"hidden_size", "number"}, status_code::invalid_argument);
}

TEST(model_config_errors, unknown_layer_type) {
  json j = tiny_config_json("tiny-a");
  j["layer_types"][2] = "foo_attention";
  expect_error(parse_json(j), {"foo_attention"}, status_code::invalid_argument);
}

TEST(model_config_errors, layer_types_length) {
  json j = tiny_config_json("tiny-a");
  j["layer_types"].erase(j["layer_types"].size() - 1);
  expect_error(parse_json(j), {"layer_types", "5", "6"}, status_code::invalid_argument);
}

TEST(model_config_errors, no_layer_layout) {
  json j = tiny_config_json("tiny-a");
  j.erase("layer_types");
  expect_error(parse_json(j), {"compress_ratios", "layer_types"}, status_code::invalid_argument);
}

TEST(model_config_errors, third_compression_ratio) {
  json j = official_flash_json();
  j["compress_ratios"][5] = 16;
  expect_error(parse_json(j), {"compress_ratios[5]", "16", "third"}, status_code::invalid_argument);
}

TEST(model_config_errors, heads_not_divisible_by_o_groups) {
  json j = tiny_config_json("tiny-a");
  j["o_groups"] = 3;
  expect_error(parse_json(j), {"4 heads", "3 output groups"}, status_code::invalid_argument);
}

TEST(model_config_errors, unknown_rope_type) {
  json j = tiny_config_json("tiny-a");
  j["rope_parameters"]["compress"]["rope_type"] = "dynamic";
  expect_error(parse_json(j), {"rope_type", "dynamic"}, status_code::invalid_argument);
  json o = official_flash_json();
  o["rope_scaling"]["type"] = "longrope";
  expect_error(parse_json(o), {"rope_type", "longrope"}, status_code::invalid_argument);
}

TEST(model_config_errors, yarn_without_factor) {
  json j = tiny_config_json("tiny-b");
  j["rope_parameters"]["compress"].erase("factor");
  expect_error(parse_json(j), {"factor", "missing"}, status_code::invalid_argument);
  json o = official_flash_json();
  o["rope_scaling"].erase("factor");
  expect_error(parse_json(o), {"factor", "missing"}, status_code::invalid_argument);
}

TEST(model_config_errors, missing_file) {
  const std::string path = k_data + "/no-such-model/config.json";
  expect_error(model_config_load(path).get_status(), {"no-such-model/config.json"}, status_code::not_found);
}

}  // namespace
}  // namespace hart
