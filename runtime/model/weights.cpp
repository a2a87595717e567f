#include "runtime/model/weights.h"

#include <climits>
#include <cmath>
#include <cstring>
#include <map>

#include "kernels/quant/quant.h"
#include "runtime/core/codecs.h"
#include "runtime/core/log.h"
#include "runtime/model/safetensors.h"
#include "runtime/model/tensor_source.h"
#include "runtime/model/weight_names.h"

namespace hart {

const char* precision_name(precision p) { return p == precision::exact ? "exact" : "fp8"; }

bool precision_parse(const std::string& s, precision* out) {
  if (s == "exact" || s == "fp32") *out = precision::exact;
  else if (s == "fp8") *out = precision::fp8;
  else return false;
  return true;
}

namespace {

constexpr int64_t k_fp8_block = 128;  // weight tile and activation block of the FP8 linears

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// Reads tensors by canonical name and converts them to fp32.
class tensor_reader {
 public:
  static status_or<tensor_reader> open(const tensor_source& src) {
    tensor_reader r;
    r.what_ = src.describe();
    for (const tensor_entry* e : src.tensors()) {
      const std::string& name = e->name;
      if (name.rfind("mtp.", 0) == 0 || name.rfind("model.mtp.", 0) == 0) continue;  // MTP: not used yet
      std::string canon = canonical_weight_name(name);
      auto [it, inserted] = r.by_canonical_.emplace(canon, e);
      if (!inserted) {
        return invalid_argument("%s has two spellings of tensor '%s': '%s' and '%s'", src.describe().c_str(),
                                canon.c_str(), it->second->name.c_str(), name.c_str());
      }
    }
    return r;
  }

  const tensor_entry* find(const std::string& canon) const {
    auto it = by_canonical_.find(canon);
    return it == by_canonical_.end() ? nullptr : it->second;
  }

  // Floats of tensor `canon` with logical shape `shape` (packed FP4 counts logical columns).
  status_or<std::vector<float>> floats(const std::string& canon, std::vector<int64_t> shape) const {
    const tensor_entry* e = find(canon);
    if (!e) return not_found("%s lacks tensor '%s'", what_.c_str(), canon.c_str());
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    std::vector<float> out(numel);
    const bool packed_fp4 = (e->type == dtype::i8 || e->type == dtype::u8 || e->type == dtype::e2m1x2);
    std::vector<int64_t> stored = shape;
    if (packed_fp4 && !stored.empty()) stored.back() /= 2;
    if (e->shape != stored) {
      return invalid_argument("tensor '%s' (%s) has shape %s %s, expected %s", canon.c_str(),
                              e->name.c_str(), e->shape_string().c_str(),
                              std::string(dtype_name(e->type)).c_str(), shape_str(stored).c_str());
    }
    switch (e->type) {
      case dtype::f32: std::memcpy(out.data(), e->data, numel * sizeof(float)); break;
      case dtype::f64:
        for (int64_t i = 0; i < numel; ++i) {
          double v;
          std::memcpy(&v, e->data + i * 8, 8);
          out[i] = float(v);
        }
        break;
      case dtype::bf16: bf16_to_f32(reinterpret_cast<const uint16_t*>(e->data), out.data(), numel); break;
      case dtype::f16: f16_to_f32(reinterpret_cast<const uint16_t*>(e->data), out.data(), numel); break;
      case dtype::e4m3: {
        if (shape.size() != 2) return invalid_argument("FP8 tensor '%s' must be 2-D", canon.c_str());
        HART_ASSIGN_OR_RETURN(const tensor_entry* s, scale_of(canon, {(shape[0] + 127) / 128, (shape[1] + 127) / 128}));
        if (s->type == dtype::e8m0) {
          HART_RETURN_IF_ERROR(fp8_block_dequantize(e->data, s->data, shape[0], shape[1], k_fp8_block, out.data()));
        } else {
          HART_ASSIGN_OR_RETURN(std::vector<float> sf, floats(canonical_scale_name(canon), s->shape));
          HART_RETURN_IF_ERROR(fp8_block_dequantize(e->data, sf.data(), shape[0], shape[1], k_fp8_block, out.data()));
        }
        break;
      }
      case dtype::i8: case dtype::u8: case dtype::e2m1x2: {
        if (shape.size() != 2 || shape[1] % 32) return invalid_argument("FP4 tensor '%s' must be 2-D with K %% 32 == 0", canon.c_str());
        HART_ASSIGN_OR_RETURN(const tensor_entry* s, scale_of(canon, {shape[0], shape[1] / 32}));
        if (s->type != dtype::e8m0 && s->type != dtype::u8) {
          return invalid_argument("FP4 tensor '%s' needs an F8_E8M0 scale, got %s", canon.c_str(),
                                  std::string(dtype_name(s->type)).c_str());
        }
        HART_RETURN_IF_ERROR(mxfp4_dequantize(e->data, s->data, shape[0], shape[1], out.data()));
        break;
      }
      default:
        return invalid_argument("tensor '%s' has unsupported dtype %s", canon.c_str(),
                                std::string(dtype_name(e->type)).c_str());
    }
    return out;
  }

  status_or<std::vector<int32_t>> ints(const std::string& canon, std::vector<int64_t> shape) const {
    const tensor_entry* e = find(canon);
    if (!e) return not_found("%s lacks tensor '%s'", what_.c_str(), canon.c_str());
    if (e->shape != shape) {
      return invalid_argument("tensor '%s' has shape %s, expected %s", canon.c_str(),
                              e->shape_string().c_str(), shape_str(shape).c_str());
    }
    std::vector<int32_t> out(e->numel());
    for (int64_t i = 0; i < e->numel(); ++i) {
      if (e->type == dtype::i64) {
        int64_t v;
        std::memcpy(&v, e->data + i * 8, 8);
        if (v < INT32_MIN || v > INT32_MAX) {
          return invalid_argument("tensor '%s' holds %lld at index %lld, outside int32", canon.c_str(),
                                  (long long)v, (long long)i);
        }
        out[i] = int32_t(v);
      } else if (e->type == dtype::i32) {
        std::memcpy(&out[i], e->data + i * 4, 4);
      } else {
        return invalid_argument("tensor '%s' must be I64 or I32, got %s", canon.c_str(),
                                std::string(dtype_name(e->type)).c_str());
      }
    }
    return out;
  }

 private:
  static std::string canonical_scale_name(const std::string& canon) {
    std::string base = canon;
    if (base.size() > 7 && base.compare(base.size() - 7, 7, ".weight") == 0) base.resize(base.size() - 7);
    return base + ".scale";
  }

  status_or<const tensor_entry*> scale_of(const std::string& canon, std::vector<int64_t> shape) const {
    const std::string sname = canonical_scale_name(canon);
    const tensor_entry* s = find(sname);
    if (!s) return not_found("quantized tensor '%s' has no scale tensor '%s'", canon.c_str(), sname.c_str());
    if (s->shape != shape) {
      return invalid_argument("scale '%s' has shape %s, expected %s", sname.c_str(),
                              s->shape_string().c_str(), shape_str(shape).c_str());
    }
    return s;
  }

  std::string what_;  // the source, for error messages
  std::map<std::string, const tensor_entry*> by_canonical_;  // entries owned by the tensor_source
};

// The loader's state: reader, config, precision and a parameter count.
struct loader {
  const tensor_reader& r;
  const model_config& cfg;
  precision prec;
  bool bf16;  // linears whose outputs the official inference keeps in bf16 say so
  int64_t n_params = 0;

  status vec(const std::string& name, int64_t n, std::vector<float>* out) {
    HART_ASSIGN_OR_RETURN(*out, r.floats(name, {n}));
    n_params += n;
    return {};
  }

  status mat(const std::string& name, int64_t rows, int64_t cols, std::vector<float>* out) {
    HART_ASSIGN_OR_RETURN(*out, r.floats(name, {rows, cols}));
    n_params += rows * cols;
    return {};
  }

  // `fp8`: the reference runs this linear in FP8 (weights e4m3, inputs quantized per 128).
  // `fp8_weight_only`: weights are FP8 values but inputs stay unquantized (wo_a).
  // `fp32_output`: the reference keeps this linear's output in fp32 (fp32 weights there).
  // Reads `fp4` from the tensor's dtype (MXFP4 experts keep their values, sum per 32).
  status linear(const std::string& name, int64_t out, int64_t in, bool fp8, linear_weight* w,
                bool fp8_weight_only = false, bool fp32_output = false) {
    w->out = out;
    w->in = in;
    w->bf16_output = bf16 && !fp32_output;
    HART_RETURN_IF_ERROR(mat(name, out, in, &w->w));
    const bool quantize = prec == precision::fp8 && (fp8 || fp8_weight_only);
    const tensor_entry* e = r.find(name);
    const bool fp4 = e && (e->type == dtype::i8 || e->type == dtype::e2m1x2);
    if (quantize) {
      const bool already_fp8 = e && e->type == dtype::e4m3;
      if (!already_fp8 && !fp4) {
        // Round-trip through the checkpoint's FP8 format so fp32 weights carry FP8 values.
        std::vector<uint8_t> q(w->w.size());
        std::vector<uint8_t> s(((out + 127) / 128) * ((in + 127) / 128));
        HART_RETURN_IF_ERROR(fp8_block_quantize(w->w.data(), out, in, k_fp8_block, q.data(), s.data()));
        HART_RETURN_IF_ERROR(fp8_block_dequantize(q.data(), s.data(), out, in, k_fp8_block, w->w.data()));
      }
      w->fp8_input = fp8;
    }
    // bf16 activations: the official kernels' sums (fp8_gemm per 128, fp4_gemm per 32); its fp32
    // GEMMs (fp32 weights: compressors, router, head) in K order as cuBLAS's SGEMM adds (blocks
    // of 1: measured to keep the CSA layer's picks where one exact dot flips one); its bf16 GEMMs
    // (and widths its kernels cannot take) as one exactly rounded dot.
    if (bf16) {
      const int64_t block = quantize && fp8 ? (fp4 ? 32 : 128) : fp32_output ? 1 : in;
      w->k_block = in % block == 0 ? block : in;
    }
    return {};
  }

  status compressor(const std::string& p, int64_t rate, int64_t dim, bool overlap, compressor_weights* c) {
    const int64_t D = cfg.hidden_size, width = (overlap ? 2 : 1) * dim;
    c->rate = rate;
    c->dim = dim;
    c->overlap = overlap;
    HART_RETURN_IF_ERROR(linear(p + ".wkv.weight", width, D, false, &c->wkv, false, /*fp32_output=*/true));
    HART_RETURN_IF_ERROR(linear(p + ".wgate.weight", width, D, false, &c->wgate, false, /*fp32_output=*/true));
    HART_RETURN_IF_ERROR(mat(p + ".ape", rate, width, &c->ape));
    return vec(p + ".norm.weight", dim, &c->norm);
  }

  status experts(const std::string& p, layer_weights* L) {
    const int64_t D = cfg.hidden_size, I = cfg.moe_inter_dim, E = cfg.n_routed_experts;
    L->experts.resize(E);
    if (!r.find(p + ".experts.0.w1.weight") && r.find(p + ".experts.gate_up_proj")) {
      // HF stacked layout: gate_up_proj [E, 2I, D] (gate rows first), down_proj [E, D, I].
      HART_ASSIGN_OR_RETURN(std::vector<float> gu, r.floats(p + ".experts.gate_up_proj", {E, 2 * I, D}));
      HART_ASSIGN_OR_RETURN(std::vector<float> dn, r.floats(p + ".experts.down_proj", {E, D, I}));
      for (int64_t e = 0; e < E; ++e) {
        expert_weights& x = L->experts[e];
        x.w1 = {std::vector<float>(gu.begin() + e * 2 * I * D, gu.begin() + (e * 2 + 1) * I * D), I, D, false};
        x.w3 = {std::vector<float>(gu.begin() + (e * 2 + 1) * I * D, gu.begin() + (e + 1) * 2 * I * D), I, D, false};
        x.w2 = {std::vector<float>(dn.begin() + e * D * I, dn.begin() + (e + 1) * D * I), D, I, false};
        for (linear_weight* w : {&x.w1, &x.w3, &x.w2}) {
          if (prec == precision::fp8) {
            std::vector<uint8_t> q(w->w.size()), s(((w->out + 127) / 128) * ((w->in + 127) / 128));
            HART_RETURN_IF_ERROR(fp8_block_quantize(w->w.data(), w->out, w->in, k_fp8_block, q.data(), s.data()));
            HART_RETURN_IF_ERROR(fp8_block_dequantize(q.data(), s.data(), w->out, w->in, k_fp8_block, w->w.data()));
            w->fp8_input = true;
            if (bf16) w->k_block = 128;
          }
          w->bf16_output = bf16;
        }
      }
      n_params += E * 3 * I * D;
      return {};
    }
    for (int64_t e = 0; e < E; ++e) {
      const std::string q = p + ".experts." + std::to_string(e);
      HART_RETURN_IF_ERROR(linear(q + ".w1.weight", I, D, true, &L->experts[e].w1));
      HART_RETURN_IF_ERROR(linear(q + ".w3.weight", I, D, true, &L->experts[e].w3));
      HART_RETURN_IF_ERROR(linear(q + ".w2.weight", D, I, true, &L->experts[e].w2));
    }
    return {};
  }

  status layer(int64_t il, layer_weights* L) {
    const std::string p = "layers." + std::to_string(il);
    const int64_t D = cfg.hidden_size, n = cfg.hc_mult, H = cfg.n_heads, hd = cfg.head_dim;
    const int64_t n_mix = (2 + n) * n;
    L->kind = cfg.layer_kinds[il];
    L->hash_moe = cfg.layer_hash_moe[il];
    HART_RETURN_IF_ERROR(mat(p + ".hc_attn_fn", n_mix, n * D, &L->hc_attn_fn));
    HART_RETURN_IF_ERROR(vec(p + ".hc_attn_base", n_mix, &L->hc_attn_base));
    HART_RETURN_IF_ERROR(vec(p + ".hc_attn_scale", 3, &L->hc_attn_scale));
    HART_RETURN_IF_ERROR(mat(p + ".hc_ffn_fn", n_mix, n * D, &L->hc_ffn_fn));
    HART_RETURN_IF_ERROR(vec(p + ".hc_ffn_base", n_mix, &L->hc_ffn_base));
    HART_RETURN_IF_ERROR(vec(p + ".hc_ffn_scale", 3, &L->hc_ffn_scale));
    HART_RETURN_IF_ERROR(vec(p + ".attn_norm.weight", D, &L->attn_norm));
    HART_RETURN_IF_ERROR(vec(p + ".ffn_norm.weight", D, &L->ffn_norm));

    const std::string a = p + ".attn";
    HART_RETURN_IF_ERROR(linear(a + ".wq_a.weight", cfg.q_lora_rank, D, true, &L->wq_a));
    HART_RETURN_IF_ERROR(vec(a + ".q_norm.weight", cfg.q_lora_rank, &L->q_norm));
    HART_RETURN_IF_ERROR(linear(a + ".wq_b.weight", H * hd, cfg.q_lora_rank, true, &L->wq_b));
    HART_RETURN_IF_ERROR(linear(a + ".wkv.weight", hd, D, true, &L->wkv));
    HART_RETURN_IF_ERROR(vec(a + ".kv_norm.weight", hd, &L->kv_norm));
    HART_RETURN_IF_ERROR(linear(a + ".wo_a.weight", cfg.o_groups * cfg.o_lora_rank, H * hd / cfg.o_groups,
                                false, &L->wo_a, /*fp8_weight_only=*/true));
    HART_RETURN_IF_ERROR(linear(a + ".wo_b.weight", D, cfg.o_groups * cfg.o_lora_rank, true, &L->wo_b));
    HART_RETURN_IF_ERROR(vec(a + ".attn_sink", H, &L->attn_sink));
    if (L->kind != attention_kind::sliding) {
      const bool csa = L->kind == attention_kind::csa;
      HART_RETURN_IF_ERROR(compressor(a + ".compressor", cfg.compress_rate(L->kind), hd, csa, &L->compressor));
      if (csa) {
        const std::string x = a + ".indexer";
        HART_RETURN_IF_ERROR(linear(x + ".wq_b.weight", cfg.index_n_heads * cfg.index_head_dim,
                                    cfg.q_lora_rank, true, &L->indexer.wq_b));
        HART_RETURN_IF_ERROR(linear(x + ".weights_proj.weight", cfg.index_n_heads, D, false, &L->indexer.weights_proj));
        HART_RETURN_IF_ERROR(compressor(x + ".compressor", cfg.csa_rate, cfg.index_head_dim, true, &L->indexer.compressor));
      }
    }

    const std::string f = p + ".ffn";
    const int64_t E = cfg.n_routed_experts, I = cfg.moe_inter_dim;
    HART_RETURN_IF_ERROR(linear(f + ".gate.weight", E, D, false, &L->gate, false, /*fp32_output=*/true));
    if (L->hash_moe) {
      HART_ASSIGN_OR_RETURN(L->tid2eid, r.ints(f + ".gate.tid2eid", {cfg.vocab_size, cfg.n_activated_experts}));
      for (int32_t e : L->tid2eid) {
        if (e < 0 || e >= E) return invalid_argument("%s.gate.tid2eid holds expert id %d, not in [0, %lld)", f.c_str(), e, (long long)E);
      }
    } else if (r.find(f + ".gate.bias")) {
      HART_RETURN_IF_ERROR(vec(f + ".gate.bias", E, &L->gate_bias));
    }
    HART_RETURN_IF_ERROR(experts(f, L));
    if (cfg.n_shared_experts > 0) {
      const int64_t Is = I * cfg.n_shared_experts;
      HART_RETURN_IF_ERROR(linear(f + ".shared_experts.w1.weight", Is, D, true, &L->shared.w1));
      HART_RETURN_IF_ERROR(linear(f + ".shared_experts.w3.weight", Is, D, true, &L->shared.w3));
      HART_RETURN_IF_ERROR(linear(f + ".shared_experts.w2.weight", D, Is, true, &L->shared.w2));
    }
    return {};
  }
};

}  // namespace

std::vector<float> rope_inv_freq(const rope_config& r, int64_t head_dim) {
  const int64_t dim = static_cast<int64_t>(double(head_dim) * r.partial_rotary_factor);
  const int64_t half = dim / 2;
  std::vector<float> inv(half);
  // fp32 arithmetic, as the reference builds the table with float32 tensors.
  for (int64_t i = 0; i < half; ++i) {
    const float pos_freq = std::pow(float(r.theta), float(2 * i) / float(dim));
    inv[i] = 1.0f / pos_freq;
    if (r.yarn) {
      const float interp = 1.0f / (float(r.factor) * pos_freq);
      auto correction_dim = [&](double n_rot) {
        return (double(dim) * std::log(double(r.original_max_position) / (n_rot * 2.0 * M_PI))) /
               (2.0 * std::log(r.theta));
      };
      double low = std::max(std::floor(correction_dim(r.beta_fast)), 0.0);
      double high = std::min(std::ceil(correction_dim(r.beta_slow)), double(dim - 1));
      if (low == high) high += 0.001;
      const float ramp = std::clamp((float(i) - float(low)) / (float(high) - float(low)), 0.0f, 1.0f);
      const float extrap = 1.0f - ramp;
      inv[i] = interp * (1.0f - extrap) + inv[i] * extrap;
    }
  }
  return inv;
}

status_or<model_weights> model_weights_load(const std::string& dir, const model_config& cfg,
                                            precision prec, void (*on_progress)(const load_progress&),
                                            bool row_invariant, bool bf16_activations) {
  HART_ASSIGN_OR_RETURN(std::unique_ptr<tensor_source> src, checkpoint_source_open(dir));
  return model_weights_load(*src, cfg, prec, on_progress, row_invariant, bf16_activations);
}

status_or<model_weights> model_weights_load(const tensor_source& src, const model_config& cfg,
                                            precision prec, void (*on_progress)(const load_progress&),
                                            bool row_invariant, bool bf16_activations) {
  HART_RETURN_IF_ERROR(cfg.validate());
  HART_ASSIGN_OR_RETURN(tensor_reader reader, tensor_reader::open(src));
  loader ld{reader, cfg, prec, bf16_activations};
  model_weights w;
  const int64_t D = cfg.hidden_size, V = cfg.vocab_size, n = cfg.hc_mult;
  HART_RETURN_IF_ERROR(ld.linear("embed.weight", V, D, false, &w.embed));
  if (reader.find("head.weight")) {
    HART_RETURN_IF_ERROR(ld.linear("head.weight", V, D, false, &w.head, false, /*fp32_output=*/true));
  } else if (cfg.tie_word_embeddings) {
    w.head = w.embed;
    w.head.bf16_output = false;
  } else {
    return not_found("%s lacks tensor 'head.weight' (lm_head) and embeddings are not tied", src.describe().c_str());
  }
  HART_RETURN_IF_ERROR(ld.vec("norm.weight", D, &w.norm));
  HART_RETURN_IF_ERROR(ld.mat("hc_head_fn", n, n * D, &w.hc_head_fn));
  HART_RETURN_IF_ERROR(ld.vec("hc_head_base", n, &w.hc_head_base));
  HART_RETURN_IF_ERROR(ld.vec("hc_head_scale", 1, &w.hc_head_scale));
  w.layers.resize(cfg.n_layers);
  load_progress prog{0, cfg.n_layers};
  for (int64_t il = 0; il < cfg.n_layers; ++il) {
    status s = ld.layer(il, &w.layers[il]);
    if (!s.ok()) return status(s.code(), src.describe() + ": layer " + std::to_string(il) + ": " + s.message());
    prog.layers_done = il + 1;
    if (on_progress) on_progress(prog);
  }
  w.inv_freq_main = rope_inv_freq(cfg.rope_main, cfg.head_dim);
  w.inv_freq_compress = rope_inv_freq(cfg.rope_compress, cfg.head_dim);
  if ((int64_t)w.inv_freq_main.size() * 2 != cfg.rope_dim || (int64_t)w.inv_freq_compress.size() * 2 != cfg.rope_dim) {
    return invalid_argument("config: partial_rotary_factor gives %zu rope dims, qk_rope_head_dim is %lld",
                            w.inv_freq_main.size() * 2, (long long)cfg.rope_dim);
  }
  w.n_params = ld.n_params;
  if (row_invariant) {
    auto mark = [](linear_weight& l) { l.row_invariant = true; };
    mark(w.head);
    for (layer_weights& L : w.layers) {
      for (linear_weight* l : {&L.wq_a, &L.wq_b, &L.wkv, &L.wo_a, &L.wo_b, &L.compressor.wkv, &L.compressor.wgate,
                               &L.indexer.wq_b, &L.indexer.weights_proj, &L.indexer.compressor.wkv,
                               &L.indexer.compressor.wgate, &L.gate, &L.shared.w1, &L.shared.w2, &L.shared.w3}) {
        mark(*l);
      }
      for (expert_weights& e : L.experts) {
        mark(e.w1);
        mark(e.w2);
        mark(e.w3);
      }
    }
  }
  return w;
}

}  // namespace hart
