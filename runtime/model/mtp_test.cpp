// The MTP block (v4-model.md §7) on the CPU engine: random_checkpoint writes
// `mtp.0.*` for a config with MTP layers and none without; the engine loads
// the block, loads a checkpoint without it (as the Hugging Face fixtures are)
// with none, names a missing tensor, and runs the block: draft logits of the
// right shape, finite, and bit for bit the same whether its positions come in
// one call or several (its window KV lives on the sequence's pages), also
// past the window and chained past n_tokens. No golden exists for MTP logits
// yet (the HF reference drops mtp.*, the official generate.py never runs the
// block), so their values are not checked against a reference.
#include "runtime/model/engine.h"
#include "runtime/model/random_checkpoint.h"
#include "runtime/model/safetensors.h"
#include "runtime/model/tensor_source.h"
#include "tests/model/without_tensor.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace hart {
namespace {

namespace fs = std::filesystem;

struct temp_dir {
  std::string path =
      (fs::temp_directory_path() / ("hart_mtp_" + std::to_string(getpid()) + "_" + std::to_string(counter++)))
          .string();
  ~temp_dir() { fs::remove_all(path); }
  static inline int counter = 0;
};

nlohmann::json config_of(const std::string& fixture) {
  std::ifstream in(std::string(HART_TEST_DATA) + "/" + fixture + "/config.json");
  return nlohmann::json::parse(in);
}

// tiny-a's shapes (num_nextn_predict_layers 1) with random weights, MTP block included.
const std::string& mtp_checkpoint() {
  static temp_dir d;
  static const bool written = random_checkpoint_write(d.path, config_of("tiny-a"), {3}).ok();
  EXPECT_TRUE(written);
  return d.path;
}

std::unique_ptr<engine> load(const std::string& dir) {
  engine_params p;
  p.model_dir = dir;
  p.deterministic = true;
  p.page_size = 128;
  auto e = engine::load(p);
  EXPECT_TRUE(e.ok()) << e.get_status().to_string();
  return e.ok() ? std::move(e).value() : nullptr;
}

const tensor_entry* find(const tensor_source& src, const std::string& name) {
  for (const tensor_entry* e : src.tensors()) {
    if (e->name == name) return e;
  }
  return nullptr;
}

TEST(mtp, random_checkpoint_writes_the_block_when_the_config_has_one) {
  auto src = checkpoint_source_open(mtp_checkpoint());
  ASSERT_TRUE(src.ok()) << src.get_status().to_string();
  const tensor_entry* e_proj = find(**src, "mtp.0.e_proj.weight");
  ASSERT_NE(e_proj, nullptr);
  EXPECT_EQ(e_proj->shape, (std::vector<int64_t>{128, 128}));
  EXPECT_NE(find(**src, "mtp.0.attn.wq_a.weight"), nullptr);
  EXPECT_NE(find(**src, "mtp.0.ffn.gate.bias"), nullptr);               // score routing, never hash
  EXPECT_EQ(find(**src, "mtp.0.attn.compressor.wkv.weight"), nullptr);  // SWA only

  temp_dir none;
  nlohmann::json c = config_of("official-fp8/swa");  // num_nextn_predict_layers 0
  ASSERT_TRUE(random_checkpoint_write(none.path, c, {3}).ok());
  auto plain = checkpoint_source_open(none.path);
  ASSERT_TRUE(plain.ok());
  for (const tensor_entry* e : (*plain)->tensors()) EXPECT_NE(e->name.rfind("mtp.", 0), 0u) << e->name;
}

TEST(mtp, the_engine_loads_the_block_or_names_what_is_missing) {
  std::unique_ptr<engine> eng = load(mtp_checkpoint());
  ASSERT_TRUE(eng);
  EXPECT_EQ(eng->n_mtp_blocks(), 1);

  auto src = checkpoint_source_open(mtp_checkpoint());
  ASSERT_TRUE(src.ok());
  testing::without_tensor partial(**src, "mtp.0.h_proj.weight");
  const auto w = model_weights_load(partial, eng->config(), precision::exact);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.get_status().code(), status_code::not_found) << w.get_status().to_string();
  EXPECT_NE(w.get_status().message().find("MTP block 0"), std::string::npos) << w.get_status().to_string();
  EXPECT_NE(w.get_status().message().find("'mtp.0.h_proj.weight'"), std::string::npos)
      << w.get_status().to_string();
}

TEST(mtp, a_checkpoint_without_the_block_serves_but_cannot_draft) {
  std::unique_ptr<engine> eng = load(std::string(HART_TEST_DATA) + "/tiny-a");
  ASSERT_TRUE(eng);
  EXPECT_EQ(eng->config().n_mtp_layers, 1);
  EXPECT_EQ(eng->n_mtp_blocks(), 0);
  sequence_state s = eng->new_sequence();
  std::vector<float> logits;
  ASSERT_TRUE(eng->prefill(s, {3, 4}, logits_request::last, &logits).ok());
  const status st = eng->mtp_forward(
      s, 0, {4}, std::vector<float>(size_t(eng->config().hidden_size * eng->config().hc_mult)), &logits,
      nullptr);
  EXPECT_EQ(st.code(), status_code::failed_precondition) << st.to_string();
}

TEST(mtp, draft_logits_do_not_depend_on_how_positions_are_fed) {
  std::unique_ptr<engine> eng = load(mtp_checkpoint());
  ASSERT_TRUE(eng);
  const model_config& c = eng->config();
  const int64_t L = 45, V = c.vocab_size, S = c.hidden_size * c.hc_mult;  // past tiny-a's window of 32
  std::vector<int32_t> tokens;
  for (int64_t i = 0; i < L; ++i) tokens.push_back(int32_t((i * 37 + 5) % V));
  // The model's last residual streams at every position, and the MTP block over positions
  // [0, L-1) (the token after each known) fed in `chunks`.
  auto run = [&](const std::vector<int64_t>& chunks, sequence_state& s, std::vector<float>* streams) {
    forward_trace trace;
    trace.capture_hidden = true;
    std::vector<float> unused, all, part;
    EXPECT_TRUE(eng->prefill(s, tokens, logits_request::none, &unused, &trace).ok());
    *streams = trace.hidden.back();
    int64_t p0 = 0;
    for (int64_t n : chunks) {
      const std::vector<int32_t> next(tokens.begin() + p0 + 1, tokens.begin() + p0 + 1 + n);
      const std::vector<float> x(streams->begin() + p0 * S, streams->begin() + (p0 + n) * S);
      const status st = eng->mtp_forward(s, p0, next, x, &part, nullptr);
      EXPECT_TRUE(st.ok()) << st.to_string();
      all.insert(all.end(), part.begin(), part.end());
      p0 += n;
    }
    return all;
  };
  sequence_state a = eng->new_sequence(), b = eng->new_sequence();
  std::vector<float> streams;
  const std::vector<float> whole = run({L - 1}, a, &streams);
  const std::vector<float> pieces = run({20, 1, 23}, b, &streams);
  ASSERT_EQ(whole.size(), size_t((L - 1) * V));
  EXPECT_TRUE(std::all_of(whole.begin(), whole.end(), [](float v) { return std::isfinite(v); }));
  ASSERT_EQ(pieces.size(), whole.size());
  for (int64_t p = 0; p < L - 1; ++p) {
    EXPECT_EQ(0, std::memcmp(whole.data() + p * V, pieces.data() + p * V, size_t(V) * sizeof(float)))
        << "position " << p;
  }

  // A chained draft: the block's own streams at L-2 with the token after L-1, at position L-1
  // and then L (past n_tokens: an engine-owned sequence gets the pages).
  std::vector<float> own, logits, unused;
  ASSERT_TRUE(eng->mtp_forward(a, L - 1, {tokens[0]}, std::vector<float>(streams.end() - S, streams.end()),
                               &logits, &own)
                  .ok());
  ASSERT_EQ(own.size(), size_t(S));
  const int32_t draft = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  ASSERT_TRUE(eng->mtp_forward(a, L, {draft}, own, &logits, &unused).ok());
  EXPECT_EQ(logits.size(), size_t(V));
  EXPECT_TRUE(std::all_of(logits.begin(), logits.end(), [](float v) { return std::isfinite(v); }));
  EXPECT_EQ(a.n_tokens, L);
}

}  // namespace
}  // namespace hart
