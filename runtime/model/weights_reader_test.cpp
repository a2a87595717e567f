// model_weights_reader: a lazy read gives every linear exactly what the eager
// load holds (whole or in row blocks), on checkpoints in each stored format
// (release FP8 + MXFP4, F32, sharded BF16); it says how each linear is stored;
// and its errors name the layer and tensor.
#include "runtime/core/status_testing.h"
#include "runtime/model/config.h"
#include "runtime/model/random_checkpoint.h"
#include "runtime/model/tensor_source.h"
#include "runtime/model/weights.h"
#include "tests/model/without_tensor.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

namespace hart {
namespace {

struct temp_dir {
  std::string path = (std::filesystem::temp_directory_path() /
                      ("hart-weights-reader-" + std::to_string(getpid()) + "-" + std::to_string(counter++)))
                         .string();
  ~temp_dir() { std::filesystem::remove_all(path); }
  static inline int counter = 0;
};

// A release-format random checkpoint of the official-fp8 `mixed4` shapes (SWA, CSA, HCA, CSA).
const std::string& release_dir() {
  static temp_dir d;
  static const bool written = [] {
    std::ifstream in(std::string(HART_TEST_DATA) + "/official-fp8/mixed4/config.json");
    random_checkpoint_options o;
    o.seed = 5;
    o.format = checkpoint_format::release;
    o.shard_bytes = 4 << 20;
    return random_checkpoint_write(d.path, nlohmann::json::parse(in), o).ok();
  }();
  EXPECT_TRUE(written);
  return d.path;
}

std::vector<const linear_weight*> linears_of(const layer_weights& L) {
  std::vector<const linear_weight*> v = {&L.wq_a, &L.wq_b,      &L.wkv,       &L.wo_a,     &L.wo_b,
                                         &L.gate, &L.shared.w1, &L.shared.w3, &L.shared.w2};
  if (L.kind != attention_kind::sliding) {
    for (const linear_weight* l : {&L.compressor.wkv, &L.compressor.wgate}) v.push_back(l);
  }
  if (L.kind == attention_kind::csa) {
    for (const linear_weight* l :
         {&L.indexer.wq_b, &L.indexer.weights_proj, &L.indexer.compressor.wkv, &L.indexer.compressor.wgate}) {
      v.push_back(l);
    }
  }
  for (const expert_weights& e : L.experts) {
    for (const linear_weight* l : {&e.w1, &e.w3, &e.w2}) v.push_back(l);
  }
  return v;
}

// The lazy `got` read from `r`, whole and in blocks of 128 rows, against the eager `want`.
void expect_same_linear(const model_weights_reader& r, const linear_weight& got, const linear_weight& want,
                        const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_TRUE(got.w.empty());
  ASSERT_NE(got.stored.values, nullptr);
  EXPECT_EQ(want.stored.values, nullptr);  // the eager load keeps no pointers into its source
  EXPECT_EQ(got.out, want.out);
  EXPECT_EQ(got.in, want.in);
  EXPECT_EQ(got.fp8_input, want.fp8_input);
  EXPECT_EQ(got.row_invariant, want.row_invariant);
  EXPECT_EQ(got.bf16_output, want.bf16_output);
  EXPECT_EQ(got.k_block, want.k_block);
  linear_weight whole = got;
  ASSERT_TRUE(r.read(&whole).ok());
  ASSERT_EQ(whole.w.size(), want.w.size());
  EXPECT_EQ(0, std::memcmp(whole.w.data(), want.w.data(), want.w.size() * sizeof(float)));
  std::vector<float> blocks(want.w.size());
  for (int64_t r0 = 0; r0 < got.out; r0 += 128) {
    const int64_t n = std::min<int64_t>(128, got.out - r0);
    ASSERT_TRUE(r.read_rows(got, r0, n, blocks.data() + r0 * got.in).ok());
  }
  EXPECT_EQ(0, std::memcmp(blocks.data(), want.w.data(), want.w.size() * sizeof(float)));
}

struct reader_case {
  const char* name;
  precision prec;
  bool bf16_activations;
};

void PrintTo(const reader_case& c, std::ostream* os) {
  *os << c.name << " " << precision_name(c.prec) << (c.bf16_activations ? " bf16 activations" : "");
}

class weights_reader : public ::testing::TestWithParam<reader_case> {};

TEST_P(weights_reader, lazy_pieces_read_to_the_eager_load) {
  const reader_case& c = GetParam();
  const std::string dir =
      std::string(c.name) == "release" ? release_dir() : std::string(HART_TEST_DATA) + "/" + c.name;
  auto cfg = model_config_load(dir);
  ASSERT_TRUE(cfg.ok()) << cfg.get_status().to_string();
  auto src = checkpoint_source_open(dir);
  ASSERT_TRUE(src.ok()) << src.get_status().to_string();
  auto eager = model_weights_load(**src, *cfg, c.prec, nullptr, {true, c.bf16_activations});
  ASSERT_TRUE(eager.ok()) << eager.get_status().to_string();
  auto r = model_weights_reader::open(**src, *cfg, c.prec, {true, c.bf16_activations, /*lazy=*/true});
  ASSERT_TRUE(r.ok()) << r.get_status().to_string();
  auto g = (*r)->globals();
  ASSERT_TRUE(g.ok()) << g.get_status().to_string();
  EXPECT_TRUE(g->layers.empty());
  expect_same_linear(**r, g->embed, eager->embed, "embed");
  expect_same_linear(**r, g->head, eager->head, "head");
  EXPECT_EQ(g->hc_head_fn, eager->hc_head_fn);
  EXPECT_EQ(g->inv_freq_compress, eager->inv_freq_compress);
  for (int64_t il = 0; il < cfg->n_layers; ++il) {
    auto L = (*r)->layer(il);
    ASSERT_TRUE(L.ok()) << L.get_status().to_string();
    const layer_weights& E = eager->layers[il];
    EXPECT_EQ(L->tid2eid, E.tid2eid);
    EXPECT_EQ(L->hc_ffn_fn, E.hc_ffn_fn);
    EXPECT_EQ(L->compressor.ape, E.compressor.ape);
    const auto got = linears_of(*L), want = linears_of(E);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      expect_same_linear(**r, *got[i], *want[i],
                         "layer " + std::to_string(il) + " linear " + std::to_string(i));
    }
  }
  EXPECT_EQ((*r)->n_params(), eager->n_params);
}

INSTANTIATE_TEST_SUITE_P(formats, weights_reader,
                         ::testing::Values(reader_case{"release", precision::fp8, true},
                                           reader_case{"release", precision::exact, false},
                                           reader_case{"tiny-a", precision::fp8, false},
                                           reader_case{"tiny-c", precision::fp8, true},
                                           reader_case{"tiny-c", precision::exact, false}),
                         [](const auto& info) {
                           return std::string(info.param.name == std::string("tiny-a")   ? "tiny_a"
                                              : info.param.name == std::string("tiny-c") ? "tiny_c"
                                                                                         : "release") +
                                  "_" + precision_name(info.param.prec) +
                                  (info.param.bf16_activations ? "_bf16" : "");
                         });

TEST(weights_reader_stored, says_how_each_linear_is_stored) {
  auto cfg = model_config_load(release_dir());
  ASSERT_TRUE(cfg.ok());
  auto src = checkpoint_source_open(release_dir());
  ASSERT_TRUE(src.ok());
  auto r = model_weights_reader::open(**src, *cfg, precision::fp8, {false, false, true});
  ASSERT_TRUE(r.ok());
  auto g = (*r)->globals();
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(g->head.stored.bf16());
  EXPECT_FALSE(g->head.stored.fp8_e8m0());
  auto L = (*r)->layer(1);
  ASSERT_TRUE(L.ok());
  EXPECT_TRUE(L->wq_b.stored.fp8_e8m0());
  EXPECT_TRUE(L->wo_a.stored.fp8_e8m0());
  EXPECT_TRUE(L->experts[0].w2.stored.mxfp4());
  EXPECT_FALSE(L->experts[0].w2.stored.fp8_e8m0());
  EXPECT_FALSE(L->compressor.wkv.stored.fp8_e8m0());  // BF16 in the release

  // tiny-c stores BF16: in fp8 precision its FP8 linears are quantized on read, so not "as stored".
  auto ccfg = model_config_load(std::string(HART_TEST_DATA) + "/tiny-c");
  auto csrc = checkpoint_source_open(std::string(HART_TEST_DATA) + "/tiny-c");
  ASSERT_TRUE(ccfg.ok() && csrc.ok());
  auto cr = model_weights_reader::open(**csrc, *ccfg, precision::fp8, {false, false, true});
  ASSERT_TRUE(cr.ok());
  auto cL = (*cr)->layer(0);
  ASSERT_TRUE(cL.ok());
  EXPECT_EQ(cL->wq_b.stored.qdq, weight_qdq::fp8);
  EXPECT_FALSE(cL->wq_b.stored.bf16());
  EXPECT_TRUE(cL->gate.stored.bf16());
}

TEST(weights_reader_errors, name_the_layer_and_tensor_and_bad_row_blocks) {
  auto cfg = model_config_load(release_dir());
  auto src = checkpoint_source_open(release_dir());
  ASSERT_TRUE(cfg.ok() && src.ok());
  testing::without_tensor missing(**src, "layers.2.ffn.experts.3.w3.weight");
  auto r = model_weights_reader::open(missing, *cfg, precision::fp8, {false, false, true});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE((*r)->layer(1).ok());
  auto L = (*r)->layer(2);
  ASSERT_STATUS(L, status_code::not_found, "layer 2");
  EXPECT_NE(L.get_status().message().find("layers.2.ffn.experts.3.w3.weight"), std::string::npos);
  EXPECT_EQ((*r)->layer(cfg->n_layers).get_status().code(), status_code::invalid_argument);

  auto L1 = (*r)->layer(1);
  ASSERT_TRUE(L1.ok());
  const linear_weight& wq_b = L1->wq_b;  // [8192, 256]
  std::vector<float> out(size_t(wq_b.out * wq_b.in));
  EXPECT_EQ((*r)->read_rows(wq_b, 64, 128, out.data()).code(), status_code::invalid_argument);
  EXPECT_EQ((*r)->read_rows(wq_b, wq_b.out - 128, 256, out.data()).code(), status_code::invalid_argument);
  linear_weight eager_like;  // values but no source
  eager_like.out = eager_like.in = 1;
  EXPECT_EQ((*r)->read_rows(eager_like, 0, 1, out.data()).code(), status_code::invalid_argument);
}

}  // namespace
}  // namespace hart
