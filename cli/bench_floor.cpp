#include "cli/bench_floor.h"

#include <algorithm>

namespace hart::cli {
namespace {

constexpr int64_t k_tile = 128;

// FP8 linear [out, in]: codes + one e8m0 per tile.
double fp8_bytes(int64_t out, int64_t in) {
  return double(out) * double(in) + double((out + k_tile - 1) / k_tile) * double((in + k_tile - 1) / k_tile);
}

}  // namespace

bench_model_bytes bench_model_bytes_of(const model_config& c, bool mxfp4_experts) {
  bench_model_bytes m;
  const int64_t D = c.hidden_size, H = c.n_heads, hd = c.head_dim, n = c.hc_mult, n_mix = (2 + n) * n;
  const int64_t I = c.moe_inter_dim, Is = I * c.n_shared_experts, E = c.n_routed_experts;
  m.expert_params = 3.0 * double(I) * double(D);
  m.expert_bytes = mxfp4_experts ? m.expert_params * (0.5 + 1.0 / 32) : 2 * fp8_bytes(I, D) + fp8_bytes(D, I);
  for (int64_t il = 0; il < c.n_layers; ++il) {
    double fp8 = 0, fp8_params = 0, bf16_params = 0, f32_floats = 0;
    auto lin8 = [&](int64_t out, int64_t in) {
      fp8 += fp8_bytes(out, in);
      fp8_params += double(out) * double(in);
    };
    lin8(c.q_lora_rank, D);                                 // wq_a
    lin8(H * hd, c.q_lora_rank);                            // wq_b
    lin8(hd, D);                                            // wkv
    lin8(c.o_groups * c.o_lora_rank, H * hd / c.o_groups);  // wo_a
    lin8(D, c.o_groups * c.o_lora_rank);                    // wo_b
    if (Is > 0) {
      lin8(Is, D);
      lin8(Is, D);
      lin8(D, Is);
    }
    bf16_params += double(E) * double(D);  // router
    f32_floats += 2.0 * (n_mix * n * D + n_mix + 3) + 2 * D + c.q_lora_rank + hd + H;
    const attention_kind k = c.layer_kinds[il];
    if (k != attention_kind::sliding) {
      const int64_t width = (k == attention_kind::csa ? 2 : 1) * hd;
      bf16_params += 2.0 * double(width) * double(D);  // compressor wkv, wgate
      f32_floats += double(c.compress_rate(k) * width + hd);
    }
    if (k == attention_kind::csa) {
      const int64_t dI = c.index_head_dim;
      lin8(c.index_n_heads * dI, c.q_lora_rank);           // indexer wq_b
      bf16_params += double(c.index_n_heads) * double(D);  // weights_proj
      bf16_params += 2.0 * double(2 * dI) * double(D);     // indexer compressor
      f32_floats += double(c.csa_rate * 2 * dI + dI);
    }
    m.dense_bytes += fp8 + 2 * bf16_params + 4 * f32_floats;
    m.dense_params += fp8_params + bf16_params;
  }
  m.head_params = double(c.vocab_size) * double(D);
  m.head_bytes = 2 * m.head_params;
  return m;
}

double bench_kv_read_bytes(const model_config& c, int64_t n_ctx) {
  double entries = 0, keys = 0;
  for (attention_kind k : c.layer_kinds) {
    entries += double(std::min(n_ctx, c.window));
    if (k == attention_kind::csa) {
      entries += double(std::min(c.index_topk, n_ctx / c.csa_rate));
      keys += double(n_ctx / c.csa_rate);
    }
    if (k == attention_kind::hca) entries += double(n_ctx / c.hca_rate);
  }
  return entries * k_kv_entry_bytes + keys * k_index_key_bytes;
}

double bench_floor_us(double bytes, double launch_us) {
  return bytes / k_h200_copy_bytes_per_s * 1e6 + launch_us;
}

}  // namespace hart::cli
