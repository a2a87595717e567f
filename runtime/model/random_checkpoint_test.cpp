// random_checkpoint_write's release format: DeepSeek's published layout (shards
// + index, FP8 with E8M0 tile scales, MXFP4 experts, BF16 rest), the same bytes
// for the same seed, loadable by the engine, and a shape the format cannot hold
// refused by name.
#include "runtime/model/random_checkpoint.h"

#include "runtime/core/status_testing.h"
#include "runtime/model/engine.h"
#include "runtime/model/safetensors.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace hart {
namespace {

nlohmann::json csa_config() {
  std::ifstream in(std::string(HART_TEST_DATA) + "/official-fp8/csa/config.json");
  return nlohmann::json::parse(in);
}

struct temp_dir {
  std::string path = (std::filesystem::temp_directory_path() /
                      ("hart-random-ckpt-" + std::to_string(getpid()) + "-" + std::to_string(counter++)))
                         .string();
  ~temp_dir() { std::filesystem::remove_all(path); }
  static inline int counter = 0;
};

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(random_checkpoint, release_format_is_the_published_layout) {
  temp_dir d;
  random_checkpoint_options o;
  o.seed = 3;
  o.format = checkpoint_format::release;
  o.shard_bytes = 4 << 20;
  ASSERT_TRUE(random_checkpoint_write(d.path, csa_config(), o).ok());
  ASSERT_TRUE(std::filesystem::exists(d.path + "/model.safetensors.index.json"));
  ASSERT_TRUE(std::filesystem::exists(d.path + "/model-00001-of-00003.safetensors"));
  auto store = weight_store::open(d.path);
  ASSERT_TRUE(store.ok()) << store.get_status().to_string();
  auto expect = [&](const std::string& name, dtype t, std::vector<int64_t> shape) {
    const tensor_entry* e = store->find(name);
    ASSERT_NE(e, nullptr) << name;
    EXPECT_EQ(e->type, t) << name;
    EXPECT_EQ(e->shape, shape) << name;
  };
  expect("layers.0.attn.wq_b.weight", dtype::e4m3, {16 * 512, 256});
  expect("layers.0.attn.wq_b.scale", dtype::e8m0, {64, 2});
  expect("layers.0.ffn.experts.7.w2.weight", dtype::i8, {512, 128});
  expect("layers.0.ffn.experts.7.w2.scale", dtype::e8m0, {512, 8});
  expect("layers.0.ffn.shared_experts.w1.weight", dtype::e4m3, {256, 512});
  expect("layers.0.attn.compressor.wkv.weight", dtype::bf16, {1024, 512});
  expect("layers.0.attn_norm.weight", dtype::bf16, {512});
  expect("layers.0.hc_attn_fn", dtype::f32, {24, 2048});
  expect("embed.weight", dtype::bf16, {128, 512});
  std::ifstream cfg(d.path + "/config.json");
  const nlohmann::json c = nlohmann::json::parse(cfg);
  EXPECT_EQ(c["expert_dtype"], "fp4");
  EXPECT_EQ(c["quantization_config"]["scale_fmt"], "ue8m0");

  temp_dir again;
  ASSERT_TRUE(random_checkpoint_write(again.path, csa_config(), o).ok());
  for (const char* f : {"model-00001-of-00003.safetensors", "model-00003-of-00003.safetensors"}) {
    EXPECT_EQ(bytes_of(d.path + "/" + f), bytes_of(again.path + "/" + f)) << f << ": same seed, same bytes";
  }

  engine_params p;
  p.model_dir = d.path;
  p.prec = precision::fp8;
  auto eng = engine::load(p);
  ASSERT_TRUE(eng.ok()) << eng.get_status().to_string();
  sequence_state s = (*eng)->new_sequence();
  std::vector<float> logits;
  ASSERT_TRUE((*eng)->prefill(s, {1, 2, 3, 4, 5, 6, 7, 8, 9}, logits_request::last, &logits).ok());
  ASSERT_EQ(logits.size(), 128u);
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
}

TEST(random_checkpoint, a_shape_the_release_format_cannot_hold_is_refused_by_name) {
  nlohmann::json c = csa_config();
  c["q_lora_rank"] = 200;  // wq_a [200, 512]: not whole 128x128 FP8 tiles
  temp_dir d;
  random_checkpoint_options o;
  o.format = checkpoint_format::release;
  const status s = random_checkpoint_write(d.path, c, o);
  EXPECT_STATUS(s, status_code::invalid_argument, "layers.0.attn.wq_a.weight");
}

}  // namespace
}  // namespace hart
