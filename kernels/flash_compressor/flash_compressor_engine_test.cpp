// flash_compressor_cpu against the CPU engine's compressor (compressor_push on
// a kv_store, token by token): for every compressor of tiny-a and tiny-c (CSA
// main + indexer, HCA; their dims, rates and rope dims, and tiny-c's again with
// V4's dims) with the fp8 precision mode's quantization, random projections,
// position bias and norm weights, in fp32 and with the official bf16 roundings
// (compressor_params::bf16, flash_compressor_desc::bf16), the entries are
// bitwise equal, whole or fed in chunks.
#include "kernels/flash_compressor/flash_compressor.h"
#include "kernels/flash_compressor/flash_compressor_cases.h"
#include "kernels/testing/op_test_util.h"
#include "runtime/model/compressor.h"
#include "runtime/model/config.h"
#include "runtime/model/kv_store.h"
#include "runtime/model/sequence_state.h"
#include "runtime/model/weights.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace hart {
namespace {

using namespace fc_testing;

// v4_dims: V4's compressor dims (entries 512, indexer keys 128, RoPE 64) on the
// model's layer pattern and rates.
void check_model(const std::string& name, uint32_t seed, bool v4_dims = false) {
  SCOPED_TRACE(name + (v4_dims ? " with V4 dims" : ""));
  status_or<model_config> cfg_or = model_config_load(std::string(HART_TEST_DATA) + "/" + name);
  ASSERT_TRUE(cfg_or.ok()) << cfg_or.get_status().to_string();
  model_config cfg = cfg_or.value();
  if (v4_dims) {
    cfg.head_dim = 512;
    cfg.index_head_dim = 128;
    cfg.rope_dim = 64;
  }
  const int64_t P = std::max<int64_t>(cfg.hca_rate, cfg.window);
  const int64_t N = 2 * P + cfg.hca_rate + 7;  // crosses page edges and leaves an open block
  std::mt19937 rng(seed);
  for (int64_t il = 0; il < cfg.n_layers; ++il) {
    const attention_kind k = cfg.layer_kinds[il];
    if (k == attention_kind::sliding) continue;
    for (bool bf16 : {false, true}) {
      for (bool indexer : {false, true}) {
        if (indexer && k != attention_kind::csa) continue;
        SCOPED_TRACE("layer " + std::to_string(il) + (indexer ? " indexer" : " main") +
                     (bf16 ? " bf16" : ""));
        const comp_shape sh{indexer ? cfg.csa_rate : cfg.compress_rate(k),
                            indexer ? cfg.index_head_dim : cfg.head_dim,
                            cfg.rope_dim,
                            k == attention_kind::csa,
                            indexer ? flash_entry_quant::hadamard_fp4 : flash_entry_quant::fp8_nope,
                            flash_entry_format::f32,
                            bf16};
        problem pr = make_problem({sh}, P, 1, N, rng);
        set_spans(pr, {0}, {N});
        fill_projections(pr, rng);

        // The engine, token by token.
        kv_store store(cfg, P);
        page_table pt;
        for (int64_t i = 0; i < (N + P - 1) / P; ++i) {
          pt.full.push_back(store.alloc_full());
          pt.swa.push_back(store.alloc_swa());
        }
        compressor_weights w;
        w.rate = sh.rate;
        w.dim = sh.dim;
        w.overlap = sh.overlap;
        w.ape = pr.comps[0].ape;
        w.norm = pr.comps[0].norm;
        compressor_params cp;
        cp.w = &w;
        cp.inv_freq = pr.comps[0].inv_freq.data();
        cp.rope_dim = sh.rope_dim;
        cp.norm_eps = 1e-6f;
        cp.quant = indexer ? entry_quant::hadamard_fp4 : entry_quant::fp8_nope;
        cp.indexer = indexer;
        cp.il = il;
        cp.bf16 = bf16;
        const int64_t width = width_of(sh);
        for (int64_t q = 0; q < N; ++q) {
          compressor_push(cp, store, pt, q, pr.comps[0].kv.data() + q * width,
                          pr.comps[0].gate.data() + q * width);
        }

        // The reference, in two chunks (the second starts mid-block).
        const int64_t split = P + 3;
        problem a = pr;
        set_spans(a, {0}, {split});
        ASSERT_TRUE(flash_compressor_cpu(host_params(a)).ok());
        problem b = a;
        set_spans(b, {split}, {N - split});
        b.comps[0].kv.assign(pr.comps[0].kv.begin() + split * width, pr.comps[0].kv.end());
        b.comps[0].gate.assign(pr.comps[0].gate.begin() + split * width, pr.comps[0].gate.end());
        ASSERT_TRUE(flash_compressor_cpu(host_params(b)).ok());

        for (int64_t blk = 0; blk < N / sh.rate; ++blk) {
          const int64_t first = blk * sh.rate;
          const float* want = indexer ? store.index_key_row(il, pt.full[first / P], first % P)
                                      : store.entry_row(il, pt.full[first / P], first % P);
          const uint8_t* got = b.comps[0].entries.data() + entry_offset(b, 0, 0, blk);
          ASSERT_EQ(std::memcmp(got, want, size_t(sh.dim) * 4), 0) << "block " << blk;
        }
      }
    }
  }
}

TEST(FlashCompressorEngine, CpuReferenceEqualsCompressorPush) {
  const uint32_t seed = testing::test_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  check_model("tiny-a", seed);
  check_model("tiny-c", seed + 1);
  check_model("tiny-c", seed + 2, true);
}

}  // namespace
}  // namespace hart
