// Weights from a memory_tensor_source (a staged update) load exactly like the
// same tensors from a checkpoint directory, are validated the same way, and
// swap into a live engine only with a rising version.
#include "runtime/core/codecs.h"
#include "runtime/core/status_testing.h"
#include "runtime/model/engine.h"
#include "runtime/model/random_checkpoint_testing.h"
#include "runtime/model/tensor_source.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

namespace hart {
namespace {

namespace fs = std::filesystem;
const std::string k_tiny_a = std::string(HART_TEST_DATA) + "/tiny-a";

struct tensor_copy {
  std::string name;
  dtype type;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// Every tensor of tiny-a; the F32 ones scaled by `scale` and stored as `as`.
std::vector<tensor_copy> tiny_a_tensors(float scale, dtype as) {
  auto store = weight_store::open(k_tiny_a);
  EXPECT_TRUE(store.ok());
  std::vector<tensor_copy> out;
  for (const std::string& n : store->names()) {
    const tensor_entry* e = store->find(n);
    tensor_copy t{n, e->type, e->shape, std::vector<uint8_t>(e->data, e->data + e->n_bytes)};
    if (e->type == dtype::f32) {
      std::vector<float> f(e->numel());
      std::memcpy(f.data(), e->data, e->n_bytes);
      for (float& x : f) x *= (n.find("norm") == std::string::npos ? scale : 1.0f);
      if (as == dtype::bf16) {
        t.bytes.resize(f.size() * 2);
        f32_to_bf16(f.data(), reinterpret_cast<uint16_t*>(t.bytes.data()), int64_t(f.size()));
        t.type = dtype::bf16;
      } else {
        std::memcpy(t.bytes.data(), f.data(), t.bytes.size());
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::unique_ptr<memory_tensor_source> source_of(const std::vector<tensor_copy>& ts,
                                                const std::string& skip = "") {
  auto m = std::make_unique<memory_tensor_source>("weight update");
  for (const tensor_copy& t : ts) {
    if (t.name == skip) continue;
    EXPECT_TRUE(m->add(t.name, t.type, t.shape, t.bytes).ok()) << t.name;
  }
  return m;
}

// Writes `ts` as a checkpoint next to tiny-a's config.
std::string write_checkpoint(const std::vector<tensor_copy>& ts, const std::string& tag) {
  const fs::path dir =
      fs::temp_directory_path() / ("hart_weight_swap_" + tag + "_" + std::to_string(getpid()));
  fs::create_directories(dir);
  fs::copy_file(fs::path(k_tiny_a) / "config.json", dir / "config.json",
                fs::copy_options::overwrite_existing);
  std::vector<tensor_to_write> w;
  for (const tensor_copy& t : ts) w.push_back({t.name, t.type, t.shape, t.bytes.data(), t.bytes.size()});
  EXPECT_TRUE(safetensors_write((dir / "model.safetensors").string(), w).ok());
  return dir.string();
}

std::unique_ptr<engine> load(const std::string& dir, precision prec) {
  engine_params p;
  p.model_dir = dir;
  p.prec = prec;
  p.deterministic = true;
  auto e = engine::load(p);
  EXPECT_TRUE(e.ok()) << e.get_status().to_string();
  return std::move(e).value();
}

std::vector<float> logits_of(const engine& e) {
  sequence_state s = e.new_sequence();
  std::vector<float> logits;
  EXPECT_TRUE(e.prefill(s, {0, 17, 42, 99, 7, 300, 5, 81, 64}, logits_request::all, &logits).ok());
  return logits;
}

class weight_swap : public ::testing::TestWithParam<precision> {};

TEST_P(weight_swap, swapped_weights_compute_what_a_fresh_load_of_the_same_tensors_computes) {
  const auto perturbed = tiny_a_tensors(1.25f, dtype::bf16);
  const std::string dir = write_checkpoint(perturbed, precision_name(GetParam()));
  auto served = load(k_tiny_a, GetParam());
  const std::vector<float> before = logits_of(*served);
  auto w = served->build_weights(*source_of(perturbed));
  ASSERT_TRUE(w.ok()) << w.get_status().to_string();
  EXPECT_EQ(logits_of(*served), before) << "building must not touch the serving weights";
  ASSERT_TRUE(served->swap_weights(*w, 1).ok());
  EXPECT_EQ(served->weight_version(), 1u);
  const std::vector<float> after = logits_of(*served);
  EXPECT_NE(after, before);
  EXPECT_EQ(after, logits_of(*load(dir, GetParam())))
      << "bitwise equal to a fresh load of the perturbed checkpoint";
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(precisions, weight_swap, ::testing::Values(precision::exact, precision::fp8),
                         [](const auto& i) { return std::string(precision_name(i.param)); });

std::vector<float> small_vocab_logits(const engine& e) {
  sequence_state s = e.new_sequence();
  std::vector<float> logits;
  std::vector<int32_t> prompt(150);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 37 + 11) % e.config().vocab_size);
  EXPECT_TRUE(e.prefill(s, prompt, logits_request::all, &logits).ok());
  return logits;
}

// A trainer pushes bf16 weights into a server of the release checkpoint: the
// routed experts are re-quantized to MXFP4 (per 32), as the release format
// holds them, not to FP8, so the server computes what loading the release
// conversion of the pushed weights computes.
TEST(weight_swap_release, a_pushed_update_keeps_the_release_checkpoints_mxfp4_experts) {
  const std::string config = std::string(HART_TEST_DATA) + "/official-fp8/csa/config.json";
  const temp_random_checkpoint served_ckpt(config, checkpoint_format::release, 1);
  const temp_random_checkpoint trainer(config, checkpoint_format::bf16, 2);
  const temp_random_checkpoint release(config, checkpoint_format::release, 2);
  auto served = load(served_ckpt.dir, precision::fp8);
  auto pushed = checkpoint_source_open(trainer.dir);
  ASSERT_TRUE(pushed.ok()) << pushed.get_status().to_string();
  auto w = served->build_weights(**pushed);
  ASSERT_TRUE(w.ok()) << w.get_status().to_string();
  ASSERT_TRUE(served->swap_weights(*w, 1).ok());
  const std::vector<float> got = small_vocab_logits(*served);
  EXPECT_EQ(got, small_vocab_logits(*load(release.dir, precision::fp8)))
      << "bitwise what the release conversion of the pushed weights computes";
  EXPECT_NE(got, small_vocab_logits(*load(trainer.dir, precision::fp8)))
      << "a server of the bf16 checkpoint quantizes the experts to FP8: other values";
}

TEST(weight_swap_errors, a_staged_update_is_validated_like_a_load_and_names_the_tensor) {
  auto eng = load(k_tiny_a, precision::exact);
  auto ts = tiny_a_tensors(1.0f, dtype::f32);
  {
    auto w = eng->build_weights(*source_of(ts, "model.layers.2.attn.wkv.weight"));
    ASSERT_STATUS(w, status_code::not_found, "layers.2.attn.wkv.weight");
  }
  for (tensor_copy& t : ts) {
    if (t.name == "model.layers.1.attn.wq_a.weight") t.shape = {t.shape[1], t.shape[0]};
  }
  {
    auto w = eng->build_weights(*source_of(ts));
    ASSERT_STATUS(w, status_code::invalid_argument, "wq_a");
  }
  ts = tiny_a_tensors(1.0f, dtype::f32);
  for (tensor_copy& t : ts) {
    if (t.name == "model.norm.weight") t.type = dtype::i32;  // same byte count, wrong dtype
  }
  {
    auto w = eng->build_weights(*source_of(ts));
    ASSERT_FALSE(w.ok());
    EXPECT_NE(w.get_status().message().find("norm.weight"), std::string::npos) << w.get_status().to_string();
  }
  memory_tensor_source m("update");
  EXPECT_FALSE(m.add("x", dtype::f64, {1}, std::vector<uint8_t>(8)).ok());
  EXPECT_FALSE(m.add("x", dtype::f32, {3}, std::vector<uint8_t>(8)).ok());
  EXPECT_TRUE(m.add("x", dtype::f32, {2}, std::vector<uint8_t>(8)).ok());
  EXPECT_FALSE(m.add("x", dtype::f32, {2}, std::vector<uint8_t>(8)).ok()) << "duplicate name";
  EXPECT_EQ(m.size(), 1u);
}

TEST(weight_swap_errors, a_version_that_does_not_rise_changes_nothing) {
  auto eng = load(k_tiny_a, precision::exact);
  const std::vector<float> before = logits_of(*eng);
  auto w = eng->build_weights(*source_of(tiny_a_tensors(0.5f, dtype::f32)));
  ASSERT_TRUE(w.ok());
  const status s = eng->swap_weights(*w, 0);
  EXPECT_EQ(s.code(), status_code::failed_precondition) << s.to_string();
  EXPECT_EQ(eng->weight_version(), 0u);
  EXPECT_EQ(logits_of(*eng), before);
  EXPECT_FALSE(eng->swap_weights(nullptr, 5).ok());
}

}  // namespace
}  // namespace hart
