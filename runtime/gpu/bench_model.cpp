#include "runtime/gpu/bench_model.h"

#include "runtime/gpu/bench_fill.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace hart::gpu {
namespace {

constexpr int64_t k_block = 128;  // FP8 weight tile edge

// Allocates and fills the weights; every buffer ends up in d->buffers.
class maker {
 public:
  maker(device_weights* d, precision prec, uint64_t seed, bool mxfp4_experts)
      : d_(d), prec_(prec), seed_(seed), mxfp4_experts_(mxfp4_experts) {}

  template <class T>
  status_or<T*> alloc(int64_t n) {
    HART_ASSIGN_OR_RETURN(device_buffer b, device_buffer::create(size_t(n) * sizeof(T)));
    T* p = static_cast<T*>(b.get());
    d_->bytes += b.bytes();
    d_->buffers.push_back(std::move(b));
    return p;
  }

  /// n floats uniform in [lo, hi).
  status_or<const float*> f32(int64_t n, float lo, float hi) {
    HART_ASSIGN_OR_RETURN(float* p, alloc<float>(n));
    HART_RETURN_IF_ERROR(bench_fill_f32(p, n, next_seed(), lo, hi, nullptr));
    return static_cast<const float*>(p);
  }

  /// A linear [out][in] with values of standard deviation ~in^-1/2; e4m3 + scales
  /// when `fp8` (the reference runs it in FP8) and the precision is fp8, else
  /// bf16 as the checkpoint stores it (the engine keeps such values in bf16;
  /// experts fp32, as the grouped MoE linears take them).
  status linear(int64_t out, int64_t in, bool fp8, device_linear* w, bool expert = false) {
    w->out = out;
    w->in = in;
    d_->max_linear_in = std::max(d_->max_linear_in, in);
    if (fp8 && prec_ == precision::fp8) {
      const int64_t n_scales = ((out + k_block - 1) / k_block) * ((in + k_block - 1) / k_block);
      HART_ASSIGN_OR_RETURN(uint8_t * q, alloc<uint8_t>(out * in));
      HART_ASSIGN_OR_RETURN(uint8_t * s, alloc<uint8_t>(n_scales));
      HART_RETURN_IF_ERROR(bench_fill_e4m3(q, out * in, next_seed(), nullptr));
      // codes are ~1 in magnitude: scale 2^-round(log2 sqrt(in)) gives ~in^-1/2.
      const int shift = int(std::lround(0.5 * std::log2(double(in))));
      HART_RETURN_IF_ERROR(bench_fill_e8m0(s, n_scales, uint8_t(127 - shift), nullptr));
      w->codes = q;
      w->scales = s;
      return {};
    }
    const float a = std::sqrt(3.0f / float(in));  // uniform ±a: standard deviation in^-1/2
    if (expert) {
      HART_ASSIGN_OR_RETURN(w->f32, f32(out * in, -a, a));
      return {};
    }
    HART_ASSIGN_OR_RETURN(uint16_t * b, alloc<uint16_t>(out * in));
    HART_RETURN_IF_ERROR(bench_fill_bf16(b, out * in, next_seed(), -a, a, nullptr));
    w->bf16 = b;
    return {};
  }

  status compressor(const model_config& c, int64_t rate, int64_t dim, bool overlap, device_compressor* o) {
    const int64_t width = (overlap ? 2 : 1) * dim;
    HART_RETURN_IF_ERROR(linear(width, c.hidden_size, false, &o->wkv));
    HART_RETURN_IF_ERROR(linear(width, c.hidden_size, false, &o->wgate));
    HART_ASSIGN_OR_RETURN(o->ape, f32(rate * width, -0.1f, 0.1f));
    HART_ASSIGN_OR_RETURN(o->norm, f32(dim, 0.9f, 1.1f));
    o->rate = rate;
    o->dim = dim;
    o->overlap = overlap;
    return {};
  }

  status expert(const model_config& c, int64_t inter, device_expert* e, bool routed = false) {
    auto make = routed && mxfp4_experts_ && prec_ == precision::fp8
                    ? &maker::mxfp4
                    : +[](maker& m, int64_t out, int64_t in, device_linear* w) {
                        return m.linear(out, in, true, w, true);
                      };
    HART_RETURN_IF_ERROR(make(*this, inter, c.hidden_size, &e->w1));
    HART_RETURN_IF_ERROR(make(*this, inter, c.hidden_size, &e->w3));
    return make(*this, c.hidden_size, inter, &e->w2);
  }

  /// A routed expert's linear as MXFP4: random e2m1 pairs (rms ~2.9) and one
  /// scale 2^-round(log2(2.9 sqrt(in))) per 32, so values have sd ~in^-1/2.
  static status mxfp4(maker& m, int64_t out, int64_t in, device_linear* w) {
    w->out = out;
    w->in = in;
    m.d_->max_linear_in = std::max(m.d_->max_linear_in, in);
    HART_ASSIGN_OR_RETURN(uint8_t * q, m.alloc<uint8_t>(out * in / 2));
    HART_ASSIGN_OR_RETURN(uint8_t * s, m.alloc<uint8_t>(out * in / 32));
    HART_RETURN_IF_ERROR(bench_fill_bytes(q, out * in / 2, m.next_seed(), nullptr));
    const int shift = int(std::lround(std::log2(2.9 * std::sqrt(double(in)))));
    HART_RETURN_IF_ERROR(bench_fill_e8m0(s, out * in / 32, uint8_t(127 - shift), nullptr));
    w->fp4 = q;
    w->fp4_scales = s;
    return {};
  }

  status layer(const model_config& c, int64_t il, device_layer* L) {
    const int64_t D = c.hidden_size, n = c.hc_mult, H = c.n_heads, hd = c.head_dim, n_mix = (2 + n) * n;
    const float fn = 1.0f / std::sqrt(float(n * D));
    L->kind = c.layer_kinds[il];
    L->hash_moe = c.layer_hash_moe[il];
    HART_ASSIGN_OR_RETURN(L->hc_attn_fn, f32(n_mix * n * D, -fn, fn));
    HART_ASSIGN_OR_RETURN(L->hc_attn_base, f32(n_mix, -0.1f, 0.1f));
    HART_ASSIGN_OR_RETURN(L->hc_attn_scale, f32(3, 0.05f, 0.15f));
    HART_ASSIGN_OR_RETURN(L->hc_ffn_fn, f32(n_mix * n * D, -fn, fn));
    HART_ASSIGN_OR_RETURN(L->hc_ffn_base, f32(n_mix, -0.1f, 0.1f));
    HART_ASSIGN_OR_RETURN(L->hc_ffn_scale, f32(3, 0.05f, 0.15f));
    HART_ASSIGN_OR_RETURN(L->attn_norm, f32(D, 0.9f, 1.1f));
    HART_ASSIGN_OR_RETURN(L->ffn_norm, f32(D, 0.9f, 1.1f));
    HART_RETURN_IF_ERROR(linear(c.q_lora_rank, D, true, &L->wq_a));
    HART_RETURN_IF_ERROR(linear(H * hd, c.q_lora_rank, true, &L->wq_b));
    HART_RETURN_IF_ERROR(linear(hd, D, true, &L->wkv));
    HART_RETURN_IF_ERROR(linear(D, c.o_groups * c.o_lora_rank, true, &L->wo_b));
    HART_RETURN_IF_ERROR(linear(c.o_groups * c.o_lora_rank, H * hd / c.o_groups, true, &L->wo_a));
    L->wo_a.raw_input = L->wo_a.codes != nullptr;  // FP8 values, unquantized inputs
    HART_ASSIGN_OR_RETURN(L->q_norm, f32(c.q_lora_rank, 0.9f, 1.1f));
    HART_ASSIGN_OR_RETURN(L->kv_norm, f32(hd, 0.9f, 1.1f));
    HART_ASSIGN_OR_RETURN(L->attn_sink, f32(H, -1.0f, 1.0f));
    if (L->kind != attention_kind::sliding) {
      const bool csa = L->kind == attention_kind::csa;
      HART_RETURN_IF_ERROR(compressor(c, c.compress_rate(L->kind), hd, csa, &L->compressor));
      if (csa) {
        HART_RETURN_IF_ERROR(compressor(c, c.csa_rate, c.index_head_dim, true, &L->index_compressor));
        HART_RETURN_IF_ERROR(linear(c.index_n_heads * c.index_head_dim, c.q_lora_rank, true, &L->index_wq_b));
        HART_RETURN_IF_ERROR(linear(c.index_n_heads, D, false, &L->index_weights_proj));
      }
    }
    const int64_t E = c.n_routed_experts, K = c.n_activated_experts;
    HART_RETURN_IF_ERROR(linear(E, D, false, &L->gate));
    std::vector<int32_t> tid2eid;
    if (L->hash_moe) {
      // K distinct experts per token: a random start and a stride coprime to E.
      std::mt19937_64 rng(next_seed());
      tid2eid.resize(size_t(c.vocab_size * K));
      for (int64_t t = 0; t < c.vocab_size; ++t) {
        const int64_t e0 = int64_t(rng() % uint64_t(E));
        for (int64_t k = 0; k < K; ++k) tid2eid[t * K + k] = int32_t((e0 + k * 37) % E);
      }
    } else {
      HART_ASSIGN_OR_RETURN(L->gate_bias, f32(E, -0.01f, 0.01f));
    }
    L->experts.resize(E);
    for (device_expert& e : L->experts) HART_RETURN_IF_ERROR(expert(c, c.moe_inter_dim, &e, /*routed=*/true));
    if (c.n_shared_experts > 0)
      HART_RETURN_IF_ERROR(expert(c, c.moe_inter_dim * c.n_shared_experts, &L->shared));
    return device_layer_finish(L, tid2eid, d_);
  }

 private:
  uint64_t next_seed() { return seed_ * 0x100000001B3ull + ++n_filled_; }

  device_weights* d_;
  precision prec_;
  uint64_t seed_;
  bool mxfp4_experts_;
  uint64_t n_filled_ = 0;
};

}  // namespace

status_or<device_weights> bench_weights_make(const model_config& cfg, precision prec, uint64_t seed,
                                             bool mxfp4_experts) {
  HART_RETURN_IF_ERROR(cfg.validate());
  if (mxfp4_experts && (prec != precision::fp8 || cfg.hidden_size % 128 || cfg.moe_inter_dim % 128)) {
    return invalid_argument(
        "bench model: MXFP4 experts need fp8 precision and hidden/moe_inter dims multiples of 128");
  }
  if (cfg.n_routed_experts > 0 && cfg.n_routed_experts % 37 == 0) {
    return invalid_argument(
        "bench model: %lld routed experts: the hash-routing stride 37 must be coprime to it",
        (long long)cfg.n_routed_experts);
  }
  device_weights d;
  maker mk(&d, prec, seed, mxfp4_experts);
  const int64_t D = cfg.hidden_size, V = cfg.vocab_size, n = cfg.hc_mult;
  HART_ASSIGN_OR_RETURN(d.embed, mk.f32(V * D, -1.0f, 1.0f));
  HART_RETURN_IF_ERROR(mk.linear(V, D, false, &d.head));
  HART_ASSIGN_OR_RETURN(d.norm, mk.f32(D, 0.9f, 1.1f));
  const float fn = 1.0f / std::sqrt(float(n * D));
  HART_ASSIGN_OR_RETURN(d.hc_head_fn, mk.f32(n * n * D, -fn, fn));
  HART_ASSIGN_OR_RETURN(d.hc_head_base, mk.f32(n, -0.1f, 0.1f));
  HART_ASSIGN_OR_RETURN(d.hc_head_scale, mk.f32(1, 0.05f, 0.15f));
  d.layers.resize(size_t(cfg.n_layers));
  for (int64_t il = 0; il < cfg.n_layers; ++il) HART_RETURN_IF_ERROR(mk.layer(cfg, il, &d.layers[il]));
  // RoPE tables as the checkpoint loader computes them (weights.h).
  const std::vector<float> main = rope_inv_freq(cfg.rope_main, cfg.head_dim);
  const std::vector<float> comp = rope_inv_freq(cfg.rope_compress, cfg.head_dim);
  HART_ASSIGN_OR_RETURN(float* fm, mk.alloc<float>(int64_t(main.size())));
  HART_ASSIGN_OR_RETURN(float* fc, mk.alloc<float>(int64_t(comp.size())));
  HART_RETURN_IF_ERROR(
      cuda_status(cudaMemcpy(fm, main.data(), main.size() * sizeof(float), cudaMemcpyHostToDevice),
                  "bench model: rope table"));
  HART_RETURN_IF_ERROR(
      cuda_status(cudaMemcpy(fc, comp.data(), comp.size() * sizeof(float), cudaMemcpyHostToDevice),
                  "bench model: rope table"));
  d.inv_freq_main = fm;
  d.inv_freq_compress = fc;
  HART_RETURN_IF_ERROR(cuda_status(cudaDeviceSynchronize(), "bench model: fill"));
  return d;
}

}  // namespace hart::gpu
