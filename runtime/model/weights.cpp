#include "runtime/model/weights.h"

#include "kernels/quant/quant.h"
#include "runtime/core/codecs.h"
#include "runtime/core/log.h"
#include "runtime/model/safetensors.h"
#include "runtime/model/tensor_source.h"
#include "runtime/model/weight_names.h"

#include <climits>

#include <cmath>
#include <cstring>
#include <map>

namespace hart {

const char* precision_name(precision p) {
  return p == precision::exact ? "exact" : "fp8";
}

bool precision_parse(const std::string& s, precision* out) {
  if (s == "exact" || s == "fp32")
    *out = precision::exact;
  else if (s == "fp8")
    *out = precision::fp8;
  else
    return false;
  return true;
}

namespace {

constexpr int64_t k_fp8_block = 128;  // weight tile and activation block of the FP8 linears

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

bool packed_fp4(dtype t) {
  return t == dtype::i8 || t == dtype::u8 || t == dtype::e2m1x2;
}
bool dense(dtype t) {
  return t == dtype::f32 || t == dtype::f64 || t == dtype::bf16 || t == dtype::f16;
}

// `n` elements of a dense tensor from element `first`, as fp32.
void decode_dense(const tensor_entry& e, int64_t first, int64_t n, float* out) {
  const uint8_t* p = e.data + first * int64_t(dtype_size(e.type));
  switch (e.type) {
    case dtype::f32:
      std::memcpy(out, p, n * sizeof(float));
      break;
    case dtype::f64:
      for (int64_t i = 0; i < n; ++i) {
        double v;
        std::memcpy(&v, p + i * 8, 8);
        out[i] = float(v);
      }
      break;
    case dtype::bf16:
      bf16_to_f32(reinterpret_cast<const uint16_t*>(p), out, n);
      break;
    case dtype::f16:
      f16_to_f32(reinterpret_cast<const uint16_t*>(p), out, n);
      break;
    default:
      break;  // callers check dense() first
  }
}

// Finds tensors by canonical name and checks them against the shapes the config gives.
class tensor_reader {
 public:
  static status_or<tensor_reader> open(const tensor_source& src) {
    tensor_reader r;
    r.what_ = src.describe();
    for (const tensor_entry* e : src.tensors()) {
      const std::string& name = e->name;
      std::string canon = canonical_weight_name(name);
      if (mtp_copy_of_shared(canon)) continue;
      auto [it, inserted] = r.by_canonical_.emplace(canon, e);
      if (!inserted) {
        return invalid_argument("%s has two spellings of tensor '%s': '%s' and '%s'", src.describe().c_str(),
                                canon.c_str(), it->second->name.c_str(), name.c_str());
      }
    }
    return r;
  }

  // An MTP block's copy of the embedding or the head: the model's own are used
  // (the official convert.py skips them too).
  static bool mtp_copy_of_shared(const std::string& canon) {
    if (canon.rfind("mtp.", 0) != 0) return false;
    const bool head = canon.size() >= 11 && canon.compare(canon.size() - 11, 11, "head.weight") == 0;
    return head || canon.find("emb") != std::string::npos;
  }

  const tensor_entry* find(const std::string& canon) const {
    auto it = by_canonical_.find(canon);
    return it == by_canonical_.end() ? nullptr : it->second;
  }

  const std::map<std::string, const tensor_entry*>& all() const { return by_canonical_; }

  // Where the [rows, cols] matrix `canon` is (packed FP4 counts logical columns), checked.
  status_or<stored_linear> matrix(const std::string& canon, int64_t rows, int64_t cols) const {
    const tensor_entry* e = find(canon);
    if (!e) return not_found("%s lacks tensor '%s'", what_.c_str(), canon.c_str());
    std::vector<int64_t> stored = {rows, packed_fp4(e->type) ? cols / 2 : cols};
    if (e->shape != stored) {
      return invalid_argument("tensor '%s' (%s) has shape %s %s, expected %s", canon.c_str(), e->name.c_str(),
                              e->shape_string().c_str(), std::string(dtype_name(e->type)).c_str(),
                              shape_str(stored).c_str());
    }
    stored_linear s{e};
    if (e->type == dtype::e4m3) {
      HART_ASSIGN_OR_RETURN(s.scales, scale_of(canon, {(rows + 127) / 128, (cols + 127) / 128}));
      if (s.scales->type != dtype::e8m0 && !dense(s.scales->type)) {
        return invalid_argument("FP8 tensor '%s' needs an F8_E8M0 or float scale, got %s", canon.c_str(),
                                std::string(dtype_name(s.scales->type)).c_str());
      }
    } else if (packed_fp4(e->type)) {
      if (cols % 32) return invalid_argument("FP4 tensor '%s' must be 2-D with K %% 32 == 0", canon.c_str());
      HART_ASSIGN_OR_RETURN(s.scales, scale_of(canon, {rows, cols / 32}));
      if (s.scales->type != dtype::e8m0 && s.scales->type != dtype::u8) {
        return invalid_argument("FP4 tensor '%s' needs an F8_E8M0 scale, got %s", canon.c_str(),
                                std::string(dtype_name(s.scales->type)).c_str());
      }
    } else if (!dense(e->type)) {
      return invalid_argument("tensor '%s' has unsupported dtype %s", canon.c_str(),
                              std::string(dtype_name(e->type)).c_str());
    }
    return s;
  }

  // Floats of the dense or quantized tensor `canon` with logical shape `shape` (1-D or 2-D).
  status_or<std::vector<float>> floats(const std::string& canon, std::vector<int64_t> shape) const {
    const int64_t rows = shape.size() == 2 ? shape[0] : 1, cols = shape.empty() ? 1 : shape.back();
    if (shape.size() == 2) {
      HART_ASSIGN_OR_RETURN(stored_linear s, matrix(canon, rows, cols));
      std::vector<float> out(rows * cols);
      HART_RETURN_IF_ERROR(read_rows(s, rows, cols, 0, rows, out.data()));
      return out;
    }
    const tensor_entry* e = find(canon);
    if (!e) return not_found("%s lacks tensor '%s'", what_.c_str(), canon.c_str());
    if (e->shape != shape) {
      return invalid_argument("tensor '%s' (%s) has shape %s, expected %s", canon.c_str(), e->name.c_str(),
                              e->shape_string().c_str(), shape_str(shape).c_str());
    }
    if (!dense(e->type)) {
      return invalid_argument("tensor '%s' has unsupported dtype %s", canon.c_str(),
                              std::string(dtype_name(e->type)).c_str());
    }
    std::vector<float> out(rows * cols);
    decode_dense(*e, 0, rows * cols, out.data());
    return out;
  }

  // Rows [row0, row0 + n) of the [rows, cols] matrix at `s` as fp32; row0 % 128 == 0.
  static status read_rows(const stored_linear& s, int64_t rows, int64_t cols, int64_t row0, int64_t n,
                          float* out) {
    if (row0 < 0 || n < 0 || row0 + n > rows || row0 % k_fp8_block) {
      return invalid_argument(
          "read_rows: rows [%lld, %lld) of a [%lld, %lld] linear (row0 a multiple of 128)", (long long)row0,
          (long long)(row0 + n), (long long)rows, (long long)cols);
    }
    const tensor_entry& e = *s.values;
    if (dense(e.type)) {
      decode_dense(e, (s.row0 + row0) * cols, n * cols, out);
    } else if (e.type == dtype::e4m3) {
      const int64_t tiles = (cols + 127) / 128, first = row0 / 128 * tiles, count = (n + 127) / 128 * tiles;
      const uint8_t* q = e.data + row0 * cols;
      if (s.scales->type == dtype::e8m0) {
        HART_RETURN_IF_ERROR(fp8_block_dequantize(q, s.scales->data + first, n, cols, k_fp8_block, out));
      } else {
        std::vector<float> sf(count);
        decode_dense(*s.scales, first, count, sf.data());
        HART_RETURN_IF_ERROR(fp8_block_dequantize(q, sf.data(), n, cols, k_fp8_block, out));
      }
    } else {
      HART_RETURN_IF_ERROR(
          mxfp4_dequantize(e.data + row0 * cols / 2, s.scales->data + row0 * cols / 32, n, cols, out));
    }
    if (s.qdq == weight_qdq::fp8) {
      // Round-trip through the checkpoint's FP8 format so fp32 weights carry FP8 values (tiles of 128 rows).
      std::vector<uint8_t> q(n * cols), sc(((n + 127) / 128) * ((cols + 127) / 128));
      HART_RETURN_IF_ERROR(fp8_block_quantize(out, n, cols, k_fp8_block, q.data(), sc.data()));
      HART_RETURN_IF_ERROR(fp8_block_dequantize(q.data(), sc.data(), n, cols, k_fp8_block, out));
    } else if (s.qdq == weight_qdq::mxfp4) {
      std::vector<uint8_t> q(n * cols / 2), sc(n * cols / 32);
      HART_RETURN_IF_ERROR(mxfp4_quantize(out, n, cols, q.data(), sc.data()));
      HART_RETURN_IF_ERROR(mxfp4_dequantize(q.data(), sc.data(), n, cols, out));
    }
    return {};
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

  std::string what_;                                         // the source, for error messages
  std::map<std::string, const tensor_entry*> by_canonical_;  // entries owned by the tensor_source
};

// The loader's state: reader, config, precision and a parameter count.
struct loader {
  const tensor_reader& r;
  const model_config& cfg;
  precision prec;
  model_weights_reader::options opts;
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

  // Values of `w` (stored set) unless lazy.
  status finish_linear(linear_weight* w) {
    n_params += w->out * w->in;
    if (opts.lazy) return {};
    w->w.resize(w->out * w->in);
    HART_RETURN_IF_ERROR(tensor_reader::read_rows(w->stored, w->out, w->in, 0, w->out, w->w.data()));
    w->stored = {};  // the source may go before the weights
    return {};
  }

  // `fp8`: the reference runs this linear in FP8 (weights e4m3, inputs quantized per 128).
  // `fp8_weight_only`: weights are FP8 values but inputs stay unquantized (wo_a).
  // `fp32_output`: the reference keeps this linear's output in fp32 (fp32 weights there).
  // MXFP4 values (routed experts) keep their values and sum per 32.
  status linear(const std::string& name, int64_t out, int64_t in, bool fp8, linear_weight* w,
                bool fp8_weight_only = false, bool fp32_output = false) {
    HART_RETURN_IF_ERROR(describe_linear(name, out, in, fp8, w, fp8_weight_only, fp32_output));
    return finish_linear(w);
  }

  // linear()'s form of `w` without reading its values.
  status describe_linear(const std::string& name, int64_t out, int64_t in, bool fp8, linear_weight* w,
                         bool fp8_weight_only = false, bool fp32_output = false) {
    w->out = out;
    w->in = in;
    w->bf16_output = opts.bf16_activations && !fp32_output;
    w->row_invariant = opts.row_invariant;
    HART_ASSIGN_OR_RETURN(w->stored, r.matrix(name, out, in));
    const bool quantize = prec == precision::fp8 && (fp8 || fp8_weight_only);
    const bool fp4 = packed_fp4(w->stored.values->type);
    if (quantize) {
      w->stored.qdq = w->stored.values->type != dtype::e4m3 && !fp4 ? weight_qdq::fp8 : weight_qdq::none;
      w->fp8_input = fp8;
    }
    // bf16 activations: the official kernels' sums (fp8_gemm per 128, fp4_gemm per 32); its fp32
    // GEMMs (fp32 weights: compressors, router, head) in K order as cuBLAS's SGEMM adds (blocks
    // of 1: measured to keep the CSA layer's picks where one exact dot flips one); its bf16 GEMMs
    // (and widths its kernels cannot take) as one exactly rounded dot.
    if (opts.bf16_activations) {
      const int64_t block = quantize && fp8 ? (fp4 ? 32 : 128) : fp32_output ? 1 : in;
      w->k_block = in % block == 0 ? block : in;
    }
    return {};
  }

  // A routed expert's linear; `*mxfp4` stays true while it holds MXFP4 values. With
  // opts.mxfp4_experts (fp8 precision) values not stored MXFP4 are QDQ'd to MXFP4 and
  // summed per 32, as stored MXFP4 ones are.
  status expert_linear(const std::string& name, int64_t out, int64_t in, linear_weight* w, bool* mxfp4) {
    HART_RETURN_IF_ERROR(describe_linear(name, out, in, true, w));
    to_mxfp4_if_served(w);
    *mxfp4 = *mxfp4 && (w->stored.mxfp4() || w->stored.qdq == weight_qdq::mxfp4);
    return finish_linear(w);
  }

  void to_mxfp4_if_served(linear_weight* w) const {
    if (!opts.mxfp4_experts || prec != precision::fp8 || w->in % 32 || w->stored.mxfp4()) return;
    w->stored.qdq = weight_qdq::mxfp4;
    if (opts.bf16_activations) w->k_block = 32;
  }

  status compressor(const std::string& p, int64_t rate, int64_t dim, bool overlap, compressor_weights* c) {
    const int64_t D = cfg.hidden_size, width = (overlap ? 2 : 1) * dim;
    c->rate = rate;
    c->dim = dim;
    c->overlap = overlap;
    HART_RETURN_IF_ERROR(linear(p + ".wkv.weight", width, D, false, &c->wkv, false, /*fp32_output=*/true));
    HART_RETURN_IF_ERROR(
        linear(p + ".wgate.weight", width, D, false, &c->wgate, false, /*fp32_output=*/true));
    HART_RETURN_IF_ERROR(mat(p + ".ape", rate, width, &c->ape));
    return vec(p + ".norm.weight", dim, &c->norm);
  }

  // HF stacked layout: gate_up_proj [E, 2I, D] (gate rows first), down_proj [E, D, I], dense dtypes.
  status stacked_experts(const std::string& p, layer_weights* L) {
    const int64_t D = cfg.hidden_size, I = cfg.moe_inter_dim, E = cfg.n_routed_experts;
    const tensor_entry* gu = r.find(p + ".experts.gate_up_proj");
    const tensor_entry* dn = r.find(p + ".experts.down_proj");
    if (!dn)
      return not_found("%s has gate_up_proj but lacks tensor '%s.experts.down_proj'", p.c_str(), p.c_str());
    auto check = [&](const tensor_entry* e, std::vector<int64_t> shape) -> status {
      if (e->shape == shape && dense(e->type)) return {};
      return invalid_argument("tensor '%s' has shape %s %s, expected %s of BF16, F16 or F32", e->name.c_str(),
                              e->shape_string().c_str(), std::string(dtype_name(e->type)).c_str(),
                              shape_str(shape).c_str());
    };
    HART_RETURN_IF_ERROR(check(gu, {E, 2 * I, D}));
    HART_RETURN_IF_ERROR(check(dn, {E, D, I}));
    bool mxfp4 = E > 0;
    for (int64_t e = 0; e < E; ++e) {
      expert_weights& x = L->experts[e];
      const std::pair<linear_weight*, stored_linear> parts[3] = {{&x.w1, {gu, nullptr, e * 2 * I}},
                                                                 {&x.w3, {gu, nullptr, e * 2 * I + I}},
                                                                 {&x.w2, {dn, nullptr, e * D}}};
      for (auto [w, at] : parts) {
        w->out = w == &x.w2 ? D : I;
        w->in = w == &x.w2 ? I : D;
        w->stored = at;
        w->bf16_output = opts.bf16_activations;
        w->row_invariant = opts.row_invariant;
        if (prec == precision::fp8) {
          w->stored.qdq = weight_qdq::fp8;
          w->fp8_input = true;
          if (opts.bf16_activations) w->k_block = 128;
          to_mxfp4_if_served(w);
        }
        mxfp4 = mxfp4 && w->stored.qdq == weight_qdq::mxfp4;
        HART_RETURN_IF_ERROR(finish_linear(w));
      }
    }
    L->mxfp4_experts = mxfp4;
    return {};
  }

  status experts(const std::string& p, layer_weights* L) {
    const int64_t D = cfg.hidden_size, I = cfg.moe_inter_dim, E = cfg.n_routed_experts;
    L->experts.resize(E);
    if (!r.find(p + ".experts.0.w1.weight") && r.find(p + ".experts.gate_up_proj"))
      return stacked_experts(p, L);
    bool mxfp4 = E > 0;
    for (int64_t e = 0; e < E; ++e) {
      const std::string q = p + ".experts." + std::to_string(e);
      HART_RETURN_IF_ERROR(expert_linear(q + ".w1.weight", I, D, &L->experts[e].w1, &mxfp4));
      HART_RETURN_IF_ERROR(expert_linear(q + ".w3.weight", I, D, &L->experts[e].w3, &mxfp4));
      HART_RETURN_IF_ERROR(expert_linear(q + ".w2.weight", D, I, &L->experts[e].w2, &mxfp4));
    }
    L->mxfp4_experts = mxfp4;
    return {};
  }

  status layer(int64_t il, layer_weights* L) {
    return block("layers." + std::to_string(il), cfg.layer_kinds[il], cfg.layer_hash_moe[il], L);
  }

  // MTP block `i`: a score-routed sliding-window block plus its input and head parts.
  status mtp(int64_t i, mtp_weights* M) {
    const std::string p = "mtp." + std::to_string(i);
    const int64_t D = cfg.hidden_size, n = cfg.hc_mult;
    HART_RETURN_IF_ERROR(block(p, attention_kind::sliding, false, &M->block));
    HART_RETURN_IF_ERROR(linear(p + ".e_proj.weight", D, D, true, &M->e_proj));
    HART_RETURN_IF_ERROR(linear(p + ".h_proj.weight", D, D, true, &M->h_proj));
    HART_RETURN_IF_ERROR(vec(p + ".enorm.weight", D, &M->enorm));
    HART_RETURN_IF_ERROR(vec(p + ".hnorm.weight", D, &M->hnorm));
    HART_RETURN_IF_ERROR(vec(p + ".norm.weight", D, &M->norm));
    HART_RETURN_IF_ERROR(mat(p + ".hc_head_fn", n, n * D, &M->hc_head_fn));
    HART_RETURN_IF_ERROR(vec(p + ".hc_head_base", n, &M->hc_head_base));
    return vec(p + ".hc_head_scale", 1, &M->hc_head_scale);
  }

  // One block under `p` ("layers.3", "mtp.0").
  status block(const std::string& p, attention_kind kind, bool hash_moe, layer_weights* L) {
    const int64_t D = cfg.hidden_size, n = cfg.hc_mult, H = cfg.n_heads, hd = cfg.head_dim;
    const int64_t n_mix = (2 + n) * n;
    L->kind = kind;
    L->hash_moe = hash_moe;
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
      HART_RETURN_IF_ERROR(
          compressor(a + ".compressor", cfg.compress_rate(L->kind), hd, csa, &L->compressor));
      if (csa) {
        const std::string x = a + ".indexer";
        HART_RETURN_IF_ERROR(linear(x + ".wq_b.weight", cfg.index_n_heads * cfg.index_head_dim,
                                    cfg.q_lora_rank, true, &L->indexer.wq_b));
        HART_RETURN_IF_ERROR(
            linear(x + ".weights_proj.weight", cfg.index_n_heads, D, false, &L->indexer.weights_proj));
        HART_RETURN_IF_ERROR(
            compressor(x + ".compressor", cfg.csa_rate, cfg.index_head_dim, true, &L->indexer.compressor));
      }
    }

    const std::string f = p + ".ffn";
    const int64_t E = cfg.n_routed_experts, I = cfg.moe_inter_dim;
    HART_RETURN_IF_ERROR(linear(f + ".gate.weight", E, D, false, &L->gate, false, /*fp32_output=*/true));
    if (L->hash_moe) {
      HART_ASSIGN_OR_RETURN(L->tid2eid,
                            r.ints(f + ".gate.tid2eid", {cfg.vocab_size, cfg.n_activated_experts}));
      for (int32_t e : L->tid2eid) {
        if (e < 0 || e >= E)
          return invalid_argument("%s.gate.tid2eid holds expert id %d, not in [0, %lld)", f.c_str(), e,
                                  (long long)E);
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

bool stored_linear::fp8_e8m0() const {
  return values && values->type == dtype::e4m3 && scales->type == dtype::e8m0 && qdq == weight_qdq::none &&
         row0 == 0;
}
bool stored_linear::mxfp4() const {
  return values && packed_fp4(values->type) && qdq == weight_qdq::none && row0 == 0;
}
bool stored_linear::bf16() const {
  return values && values->type == dtype::bf16 && qdq == weight_qdq::none;
}

struct model_weights_reader::impl {
  impl(const tensor_source& s, const model_config& c, tensor_reader r, precision prec, options opts)
      : src(s), cfg(c), reader(std::move(r)), ld{reader, cfg, prec, opts} {}
  const tensor_source& src;
  const model_config cfg;
  const tensor_reader reader;
  loader ld;  // reads `reader`
};

model_weights_reader::model_weights_reader(std::unique_ptr<impl> p) : p_(std::move(p)) {}
model_weights_reader::~model_weights_reader() = default;

status_or<std::unique_ptr<model_weights_reader>> model_weights_reader::open(const tensor_source& src,
                                                                            const model_config& cfg,
                                                                            precision prec, options opts) {
  HART_RETURN_IF_ERROR(cfg.validate());
  HART_ASSIGN_OR_RETURN(tensor_reader reader, tensor_reader::open(src));
  auto p = std::make_unique<impl>(src, cfg, std::move(reader), prec, opts);
  return std::unique_ptr<model_weights_reader>(new model_weights_reader(std::move(p)));
}

status_or<model_weights> model_weights_reader::globals() {
  loader& ld = p_->ld;
  const model_config& cfg = p_->cfg;
  model_weights w;
  const int64_t D = cfg.hidden_size, V = cfg.vocab_size, n = cfg.hc_mult;
  HART_RETURN_IF_ERROR(ld.linear("embed.weight", V, D, false, &w.embed));
  w.embed.row_invariant = false;  // rows gathered, never multiplied
  if (p_->reader.find("head.weight")) {
    HART_RETURN_IF_ERROR(ld.linear("head.weight", V, D, false, &w.head, false, /*fp32_output=*/true));
  } else if (cfg.tie_word_embeddings) {
    w.head = w.embed;
    w.head.bf16_output = false;
    w.head.row_invariant = ld.opts.row_invariant;
  } else {
    return not_found("%s lacks tensor 'head.weight' (lm_head) and embeddings are not tied",
                     p_->src.describe().c_str());
  }
  HART_RETURN_IF_ERROR(ld.vec("norm.weight", D, &w.norm));
  HART_RETURN_IF_ERROR(ld.mat("hc_head_fn", n, n * D, &w.hc_head_fn));
  HART_RETURN_IF_ERROR(ld.vec("hc_head_base", n, &w.hc_head_base));
  HART_RETURN_IF_ERROR(ld.vec("hc_head_scale", 1, &w.hc_head_scale));
  w.inv_freq_main = rope_inv_freq(cfg.rope_main, cfg.head_dim);
  w.inv_freq_compress = rope_inv_freq(cfg.rope_compress, cfg.head_dim);
  if ((int64_t)w.inv_freq_main.size() * 2 != cfg.rope_dim ||
      (int64_t)w.inv_freq_compress.size() * 2 != cfg.rope_dim) {
    return invalid_argument("config: partial_rotary_factor gives %zu rope dims, qk_rope_head_dim is %lld",
                            w.inv_freq_main.size() * 2, (long long)cfg.rope_dim);
  }
  return w;
}

status_or<layer_weights> model_weights_reader::layer(int64_t il) {
  if (il < 0 || il >= p_->cfg.n_layers) {
    return invalid_argument("model_weights_reader: layer %lld of %lld", (long long)il,
                            (long long)p_->cfg.n_layers);
  }
  layer_weights L;
  status s = p_->ld.layer(il, &L);
  if (!s.ok())
    return status(s.code(), p_->src.describe() + ": layer " + std::to_string(il) + ": " + s.message());
  return L;
}

bool model_weights_reader::has_mtp(int64_t i) const {
  const std::string prefix = "mtp." + std::to_string(i) + ".";
  auto it = p_->reader.all().lower_bound(prefix);
  return it != p_->reader.all().end() && it->first.rfind(prefix, 0) == 0;
}

status_or<mtp_weights> model_weights_reader::mtp(int64_t i) {
  if (i < 0 || i >= p_->cfg.n_mtp_layers) {
    return invalid_argument("model_weights_reader: MTP block %lld of %lld", (long long)i,
                            (long long)p_->cfg.n_mtp_layers);
  }
  mtp_weights M;
  status s = p_->ld.mtp(i, &M);
  if (!s.ok())
    return status(s.code(), p_->src.describe() + ": MTP block " + std::to_string(i) + ": " + s.message());
  return M;
}

status model_weights_reader::read_rows(const linear_weight& w, int64_t row0, int64_t rows, float* out) const {
  if (!w.stored.values)
    return invalid_argument("read_rows: the linear has no stored values (not read lazily)");
  return tensor_reader::read_rows(w.stored, w.out, w.in, row0, rows, out);
}

status model_weights_reader::read(linear_weight* w) const {
  w->w.resize(w->out * w->in);
  return read_rows(*w, 0, w->out, w->w.data());
}

int64_t model_weights_reader::n_params() const {
  return p_->ld.n_params;
}

int64_t model_weights_reader::layer_bytes(int64_t il) const {
  const std::string prefix = "layers." + std::to_string(il) + ".";
  int64_t bytes = 0;
  for (auto it = p_->reader.all().lower_bound(prefix);
       it != p_->reader.all().end() && it->first.rfind(prefix, 0) == 0; ++it) {
    bytes += int64_t(it->second->n_bytes);
  }
  return bytes;
}

int64_t model_weights_reader::total_bytes() const {
  int64_t bytes = 0;
  for (const auto& [name, e] : p_->reader.all()) bytes += int64_t(e->n_bytes);
  return bytes;
}

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

status_or<model_weights> model_weights_load(const std::string& dir, const model_config& cfg, precision prec,
                                            void (*on_progress)(const load_progress&),
                                            model_weights_reader::options opts) {
  HART_ASSIGN_OR_RETURN(std::unique_ptr<tensor_source> src, checkpoint_source_open(dir));
  return model_weights_load(*src, cfg, prec, on_progress, opts);
}

status_or<model_weights> model_weights_load(const tensor_source& src, const model_config& cfg, precision prec,
                                            void (*on_progress)(const load_progress&),
                                            model_weights_reader::options opts) {
  opts.lazy = false;
  HART_ASSIGN_OR_RETURN(std::unique_ptr<model_weights_reader> reader,
                        model_weights_reader::open(src, cfg, prec, opts));
  HART_ASSIGN_OR_RETURN(model_weights w, reader->globals());
  w.layers.reserve(cfg.n_layers);
  load_progress prog{0, cfg.n_layers};
  for (int64_t il = 0; il < cfg.n_layers; ++il) {
    HART_ASSIGN_OR_RETURN(layer_weights L, reader->layer(il));
    w.layers.push_back(std::move(L));
    prog.layers_done = il + 1;
    if (on_progress) on_progress(prog);
  }
  for (int64_t i = 0; i < cfg.n_mtp_layers && reader->has_mtp(0); ++i) {
    HART_ASSIGN_OR_RETURN(mtp_weights M, reader->mtp(i));
    w.mtp.push_back(std::move(M));
  }
  w.n_params = reader->n_params();
  return w;
}

}  // namespace hart
