// The same checkpoint in the official release's spelling — ModelArgs config
// (inference/config.json: compress_ratios, flat YaRN keys, n_hash_layers) and
// official tensor names in one file — gives the reference logits too.
#include "runtime/model/weight_names.h"
#include "tests/golden/golden_fixture.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace hart::testing {
namespace {

TEST(golden_official_form, tiny_c_renamed_matches_reference) {
  const std::string src = std::string(HART_TEST_DATA) + "/tiny-c";
  char tmpl[] = "/tmp/hart_official_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;

  auto store = weight_store::open(src);
  ASSERT_TRUE(store.ok()) << store.get_status().to_string();
  std::vector<tensor_to_write> out;
  std::vector<std::string> names = store->names();
  for (const std::string& n : names) {
    const tensor_entry* e = store->find(n);
    out.push_back({canonical_weight_name(n), e->type, e->shape, e->data, e->n_bytes});
  }
  ASSERT_TRUE(safetensors_write(dir + "/model.safetensors", out).ok());
  std::ofstream(dir + "/config.json") << R"({
    "vocab_size": 601, "dim": 192, "n_layers": 7, "n_mtp_layers": 1, "n_heads": 6, "head_dim": 128,
    "rope_head_dim": 32, "q_lora_rank": 72, "o_groups": 3, "o_lora_rank": 40, "window_size": 128,
    "compress_ratios": [128, 0, 4, 128, 4, 128, 4, 0], "n_hash_layers": 3,
    "index_n_heads": 8, "index_head_dim": 64, "index_topk": 24,
    "n_routed_experts": 12, "n_shared_experts": 1, "n_activated_experts": 3, "moe_inter_dim": 64,
    "score_func": "sqrtsoftplus", "route_scale": 2.5, "swiglu_limit": 10.0,
    "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6, "norm_eps": 1e-6,
    "rope_theta": 10000.0, "compress_rope_theta": 160000.0, "rope_factor": 16,
    "original_seq_len": 65536, "beta_fast": 32, "beta_slow": 1, "max_position_embeddings": 1048576})";

  auto ref = golden_load("tiny-c");
  engine_params p;
  p.model_dir = dir;
  p.deterministic = golden_deterministic("tiny-c");
  auto eng = engine::load(p);
  ASSERT_TRUE(eng.ok()) << eng.get_status().to_string();
  sequence_state s = (*eng)->new_sequence();
  s.tie_reference_length = ref->seq;
  std::vector<float> got;
  ASSERT_TRUE((*eng)->prefill(s, ref->input_ids[0], logits_request::all, &got).ok());
  EXPECT_LE(max_rel_error_row(*ref, got, ref->floats("logits"), 0), 1e-4);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hart::testing
