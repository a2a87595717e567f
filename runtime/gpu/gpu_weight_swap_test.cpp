// The GPU engine's weight swap (gpu_weight_swap.h) against a fresh load: an
// engine that swapped in an update computes bitwise the logits of an engine
// loaded from the same tensors, in exact precision and in fp8 (the device
// re-quantization is bit-exact with the host's); a broken update or a stale
// version leaves the serving weights and version untouched. Skips without a device.
#include "runtime/gpu/gpu_weight_swap.h"

#include "runtime/core/codecs.h"
#include "runtime/gpu/gpu_engine.h"
#include "runtime/model/random_checkpoint_testing.h"
#include "runtime/model/safetensors.h"
#include "runtime/model/tensor_source.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

namespace hart::testing {
namespace {

namespace fs = std::filesystem;

#define SKIP_WITHOUT_GPU() \
  if (!gpu_device_available()) GTEST_SKIP() << "no CUDA device: GPU weight swap not checked on this machine"

const std::string k_tiny_a = std::string(HART_TEST_DATA) + "/tiny-a";

struct tensor_copy {
  std::string name;
  dtype type;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// tiny-a with every F32 tensor but the norms scaled by `scale` and sent as
// BF16 (what a trainer pushes); I64 tables as they are. The first tensor whose
// name contains `drop` (when given) is left out.
std::vector<tensor_copy> perturbed_tiny_a(float scale, const std::string& drop = "") {
  auto store = weight_store::open(k_tiny_a);
  EXPECT_TRUE(store.ok());
  std::vector<tensor_copy> out;
  bool dropped = false;
  for (const std::string& n : store->names()) {
    if (!drop.empty() && !dropped && n.find(drop) != std::string::npos) {
      dropped = true;
      continue;
    }
    const tensor_entry* e = store->find(n);
    if (e->type != dtype::f32) {
      out.push_back({n, e->type, e->shape, std::vector<uint8_t>(e->data, e->data + e->n_bytes)});
      continue;
    }
    std::vector<float> f(e->numel());
    std::memcpy(f.data(), e->data, e->n_bytes);
    for (float& x : f) x *= n.find("norm") == std::string::npos ? scale : 1.0f;
    std::vector<uint8_t> b(f.size() * 2);
    f32_to_bf16(f.data(), reinterpret_cast<uint16_t*>(b.data()), int64_t(f.size()));
    out.push_back({n, dtype::bf16, e->shape, std::move(b)});
  }
  return out;
}

std::unique_ptr<memory_tensor_source> source_of(const std::vector<tensor_copy>& ts) {
  auto src = std::make_unique<memory_tensor_source>("test update");
  for (const tensor_copy& t : ts) EXPECT_TRUE(src->add(t.name, t.type, t.shape, t.bytes).ok()) << t.name;
  return src;
}

// The same tensors as a checkpoint directory beside tiny-a's config and tokenizer.
std::string write_checkpoint(const std::vector<tensor_copy>& ts, const std::string& tag) {
  const fs::path dir = fs::temp_directory_path() / ("hart_gpu_swap_" + tag + "_" + std::to_string(getpid()));
  fs::create_directories(dir);
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"}) {
    fs::copy_file(fs::path(k_tiny_a) / f, dir / f, fs::copy_options::overwrite_existing);
  }
  std::vector<tensor_to_write> out;
  for (const tensor_copy& t : ts) out.push_back({t.name, t.type, t.shape, t.bytes.data(), t.bytes.size()});
  EXPECT_TRUE(safetensors_write((dir / "model.safetensors").string(), out).ok());
  return dir.string();
}

std::unique_ptr<gpu_engine> load_gpu(const std::string& dir, precision prec) {
  gpu_engine_params p;
  p.base.model_dir = dir;
  p.base.prec = prec;
  p.max_batch_tokens = 256;
  p.max_context = 512;
  auto e = gpu_engine::load(p);
  EXPECT_TRUE(e.ok()) << e.get_status().to_string();
  return e.ok() ? std::move(*e) : nullptr;
}

// Logits of a 40-token prompt (all positions) and of 3 decode steps after it.
std::vector<float> logits_of(const gpu_engine& eng) {
  std::vector<int32_t> prompt(40);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 37 + 11) % eng.config().vocab_size);
  sequence_state s = eng.new_sequence();
  std::vector<float> all, step;
  EXPECT_TRUE(eng.forward({{&s, prompt, logits_request::all}}, &all).ok());
  for (int32_t t : {5, 9, 2}) {
    EXPECT_TRUE(eng.forward({{&s, {t}, logits_request::last}}, &step).ok());
    all.insert(all.end(), step.begin(), step.end());
  }
  return all;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class gpu_weight_swap : public ::testing::TestWithParam<precision> {};

TEST_P(gpu_weight_swap, a_swapped_engine_computes_bitwise_what_a_fresh_load_of_the_update_computes) {
  SKIP_WITHOUT_GPU();
  const precision prec = GetParam();
  const std::vector<tensor_copy> update = perturbed_tiny_a(0.5f);
  auto fresh = load_gpu(write_checkpoint(update, precision_name(prec)), prec);
  auto served = load_gpu(k_tiny_a, prec);
  ASSERT_TRUE(fresh && served);
  const std::vector<float> before = logits_of(*served);

  auto built = served->build_weights(*source_of(update));
  ASSERT_TRUE(built.ok()) << built.get_status().to_string();
  EXPECT_TRUE(bitwise_equal(logits_of(*served), before)) << "building does not touch the serving weights";
  EXPECT_GT(served->decode_graphs(), 0u) << "decode ran as CUDA graphs, which the swap must drop";
  ASSERT_TRUE(served->swap_weights(std::move(*built), 1).ok());
  EXPECT_EQ(served->weight_version(), 1u);
  EXPECT_EQ(served->device_bytes(), fresh->device_bytes())
      << "same buffers: codes where the load keeps codes";

  const std::vector<float> want = logits_of(*fresh), got = logits_of(*served);
  ASSERT_FALSE(bitwise_equal(want, before))
      << "the update must change the logits for this test to mean anything";
  EXPECT_TRUE(bitwise_equal(got, want)) << "swapped engine differs from a fresh load of the update";
}

// A trainer's bf16 weights pushed into a server of a release checkpoint: the
// routed experts it keeps MXFP4 are re-quantized to MXFP4 on the device (not
// FP8), so the server holds what loading the release conversion of the pushed
// weights holds: the same bytes and the same logits, bit for bit.
TEST(gpu_weight_swap_release, a_pushed_update_keeps_the_mxfp4_experts) {
  SKIP_WITHOUT_GPU();
  const std::string config = std::string(HART_TEST_DATA) + "/official-fp8/csa/config.json";
  const temp_random_checkpoint served_ckpt(config, checkpoint_format::release, 1);
  const temp_random_checkpoint trainer(config, checkpoint_format::bf16, 2);
  const temp_random_checkpoint release(config, checkpoint_format::release, 2);
  auto served = load_gpu(served_ckpt.dir, precision::fp8);
  auto fresh = load_gpu(release.dir, precision::fp8);
  ASSERT_TRUE(served && fresh);
  auto pushed = checkpoint_source_open(trainer.dir);
  ASSERT_TRUE(pushed.ok()) << pushed.get_status().to_string();
  auto built = served->build_weights(**pushed);
  ASSERT_TRUE(built.ok()) << built.get_status().to_string();
  ASSERT_TRUE(served->swap_weights(std::move(*built), 1).ok());
  EXPECT_EQ(served->device_bytes(), fresh->device_bytes()) << "MXFP4 experts: half of FP8's bytes";
  const std::vector<float> want = logits_of(*fresh);
  EXPECT_TRUE(bitwise_equal(logits_of(*served), want)) << "swapped engine differs from the release load";
  EXPECT_FALSE(bitwise_equal(logits_of(*load_gpu(trainer.dir, precision::fp8)), want))
      << "a server of the bf16 checkpoint keeps FP8 experts: other values";
}

TEST_P(gpu_weight_swap, a_broken_update_or_a_stale_version_leaves_the_serving_weights) {
  SKIP_WITHOUT_GPU();
  const precision prec = GetParam();
  auto served = load_gpu(k_tiny_a, prec);
  ASSERT_TRUE(served);
  const std::vector<float> before = logits_of(*served);

  auto missing = served->build_weights(*source_of(perturbed_tiny_a(0.5f, ".attn.wkv.weight")));
  EXPECT_EQ(missing.get_status().code(), status_code::not_found) << missing.get_status().to_string();

  auto built = served->build_weights(*source_of(perturbed_tiny_a(0.5f)));
  ASSERT_TRUE(built.ok()) << built.get_status().to_string();
  EXPECT_EQ(served->swap_weights(std::move(*built), 0).code(), status_code::failed_precondition);
  EXPECT_EQ(served->swap_weights(nullptr, 3).code(), status_code::invalid_argument);

  auto other = load_gpu(k_tiny_a, prec);
  auto foreign = other->build_weights(*source_of(perturbed_tiny_a(0.5f)));
  ASSERT_TRUE(foreign.ok());
  EXPECT_EQ(served->swap_weights(std::move(*foreign), 3).code(), status_code::invalid_argument)
      << "another engine's";

  EXPECT_EQ(served->weight_version(), 0u);
  EXPECT_TRUE(bitwise_equal(logits_of(*served), before));
}

INSTANTIATE_TEST_SUITE_P(precisions, gpu_weight_swap, ::testing::Values(precision::exact, precision::fp8),
                         [](const ::testing::TestParamInfo<precision>& i) {
                           return std::string(precision_name(i.param));
                         });

}  // namespace
}  // namespace hart::testing
