#include "examples/rl/sort_task.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace hart::rl {

namespace fs = std::filesystem;
using json = nlohmann::json;

sort_example sort_task_example(std::mt19937_64& rng) {
  std::uniform_int_distribution<uint32_t> digit(0, 9);
  uint32_t d[3] = {digit(rng), digit(rng), digit(rng)};
  sort_example e;
  e.prompt = {k_bos, k_digit0 + d[0], k_digit0 + d[1], k_digit0 + d[2], k_equals};
  std::sort(d, d + 3);
  e.answer = {k_digit0 + d[0], k_digit0 + d[1], k_digit0 + d[2], k_eos};
  return e;
}

double sort_task_reward(const sort_example& e, const std::vector<uint32_t>& sampled) {
  size_t right = 0;
  for (size_t i = 0; i < e.answer.size() && i < sampled.size(); ++i) right += sampled[i] == e.answer[i];
  return double(right) / double(e.answer.size());
}

namespace {

// Small enough that a GRPO step (256 samples of 9 tokens) trains in about a
// second on 2 cores, yet every V4 block is there: mHC, SWA, CSA + indexer,
// hash routing and scored MoE.
json model_config() {
  return {
      {"architectures", {"DeepseekV4ForCausalLM"}},
      {"model_type", "deepseek_v4"},
      {"vocab_size", k_vocab_size},
      {"bos_token_id", k_bos},
      {"eos_token_id", k_eos},
      {"hidden_size", 128},
      {"num_hidden_layers", 2},
      {"layer_types", {"sliding_attention", "compressed_sparse_attention"}},
      {"mlp_layer_types", {"hash_moe", "moe"}},
      {"compress_rates", {{"compressed_sparse_attention", 4}, {"heavily_compressed_attention", 16}}},
      {"num_attention_heads", 4},
      {"num_key_value_heads", 1},
      {"head_dim", 64},
      {"qk_rope_head_dim", 16},
      {"partial_rotary_factor", 0.25},
      {"q_lora_rank", 64},
      {"o_groups", 2},
      {"o_lora_rank", 32},
      {"index_n_heads", 8},
      {"index_head_dim", 32},
      {"index_topk", 4},
      {"n_routed_experts", 4},
      {"num_experts_per_tok", 2},
      {"n_shared_experts", 1},
      {"moe_intermediate_size", 64},
      {"norm_topk_prob", true},
      {"routed_scaling_factor", 1.5},
      {"scoring_func", "sqrtsoftplus"},
      {"swiglu_limit", 10.0},
      {"hc_mult", 4},
      {"hc_sinkhorn_iters", 20},
      {"hc_eps", 1e-6},
      {"rms_norm_eps", 1e-6},
      {"sliding_window", 32},
      {"max_position_embeddings", 4096},
      {"rope_theta", 10000.0},
      {"compress_rope_theta", 160000.0},
      {"rope_parameters",
       {{"main", {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.25}}},
        {"compress", {{"rope_type", "default"}, {"rope_theta", 160000.0}, {"partial_rotary_factor", 0.25}}}}},
      {"tie_word_embeddings", false},
      {"dtype", "float32"},
  };
}

// Byte-level BPE without merges: every vocabulary entry is one byte, spelled
// as the byte-level alphabet spells it (digits as themselves, ' ' as "Ġ").
json tokenizer_json() {
  json vocab = {{"<｜begin▁of▁sentence｜>", k_bos}, {"<｜end▁of▁sentence｜>", k_eos}};
  for (uint32_t d = 0; d < 10; ++d) vocab[std::string(1, char('0' + d))] = k_digit0 + d;
  vocab["="] = k_equals;
  vocab["+"] = 13;
  vocab[","] = 14;
  vocab["Ġ"] = 15;
  auto added = [](uint32_t id, const char* text) {
    return json{{"id", id},        {"content", text},     {"single_word", false}, {"lstrip", false},
                {"rstrip", false}, {"normalized", false}, {"special", true}};
  };
  return {
      {"version", "1.0"},
      {"added_tokens", {added(k_bos, "<｜begin▁of▁sentence｜>"), added(k_eos, "<｜end▁of▁sentence｜>")}},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}},
      {"post_processor", nullptr},
      {"decoder",
       {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"vocab", vocab},
        {"merges", json::array()}}},
  };
}

status write_json(const fs::path& path, const json& j) {
  std::ofstream f(path);
  f << j.dump(2) << "\n";
  if (!f) return invalid_argument("sort_task: cannot write %s", path.c_str());
  return {};
}

}  // namespace

status sort_task_write_model_files(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return invalid_argument("sort_task: cannot create %s: %s", dir.c_str(), ec.message().c_str());
  const fs::path d(dir);
  HART_RETURN_IF_ERROR(write_json(d / "config.json", model_config()));
  HART_RETURN_IF_ERROR(
      write_json(d / "generation_config.json", {{"bos_token_id", k_bos}, {"eos_token_id", k_eos}}));
  HART_RETURN_IF_ERROR(write_json(d / "tokenizer.json", tokenizer_json()));
  return write_json(d / "tokenizer_config.json", {{"bos_token", "<｜begin▁of▁sentence｜>"},
                                                  {"eos_token", "<｜end▁of▁sentence｜>"},
                                                  {"add_bos_token", true}});
}

}  // namespace hart::rl
