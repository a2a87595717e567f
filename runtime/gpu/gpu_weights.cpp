#include "runtime/gpu/gpu_weights.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "kernels/quant/quant.h"

namespace hart::gpu {
namespace {

constexpr int64_t k_fp8_block = 128;

class uploader {
 public:
  explicit uploader(device_weights* d) : d_(d) {}

  template <class T>
  status_or<const T*> put(const std::vector<T>& v) {
    if (v.empty()) return static_cast<const T*>(nullptr);
    HART_ASSIGN_OR_RETURN(device_buffer b, device_buffer::create(v.size() * sizeof(T)));
    HART_RETURN_IF_ERROR(cuda_status(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice),
                                     "gpu engine: weight upload"));
    const T* p = static_cast<const T*>(b.get());
    d_->bytes += b.bytes();
    d_->buffers.push_back(std::move(b));
    return p;
  }

  status linear(const linear_weight& w, precision prec, device_linear* out) {
    out->in = w.in;
    out->out = w.out;
    d_->max_linear_in = std::max(d_->max_linear_in, w.in);
    if (prec == precision::fp8 && w.fp8_input) {
      // The host values are FP8 tiles unless they came from MXFP4: re-encode and keep codes only if exact.
      std::vector<uint8_t> q(w.w.size()), s(((w.out + 127) / 128) * ((w.in + 127) / 128));
      HART_RETURN_IF_ERROR(fp8_block_quantize(w.w.data(), w.out, w.in, k_fp8_block, q.data(), s.data()));
      std::vector<float> back(w.w.size());
      HART_RETURN_IF_ERROR(fp8_block_dequantize(q.data(), s.data(), w.out, w.in, k_fp8_block, back.data()));
      if (std::memcmp(back.data(), w.w.data(), back.size() * sizeof(float)) == 0) {
        HART_ASSIGN_OR_RETURN(out->codes, put(q));
        HART_ASSIGN_OR_RETURN(out->scales, put(s));
        return {};
      }
      out->qdq_input = true;
    }
    HART_ASSIGN_OR_RETURN(out->f32, put(w.w));
    return {};
  }

  status compressor(const compressor_weights& c, precision prec, device_compressor* out) {
    HART_RETURN_IF_ERROR(linear(c.wkv, prec, &out->wkv));
    HART_RETURN_IF_ERROR(linear(c.wgate, prec, &out->wgate));
    HART_ASSIGN_OR_RETURN(out->ape, put(c.ape));
    HART_ASSIGN_OR_RETURN(out->norm, put(c.norm));
    out->rate = c.rate;
    out->dim = c.dim;
    out->overlap = c.overlap;
    return {};
  }

  status expert(const expert_weights& e, precision prec, device_expert* out) {
    HART_RETURN_IF_ERROR(linear(e.w1, prec, &out->w1));
    HART_RETURN_IF_ERROR(linear(e.w3, prec, &out->w3));
    return linear(e.w2, prec, &out->w2);
  }

 private:
  device_weights* d_;
};

}  // namespace

status_or<device_weights> device_weights_upload(const model_weights& w, const model_config& cfg, precision prec) {
  device_weights d;
  uploader up(&d);
  HART_ASSIGN_OR_RETURN(d.embed, up.put(w.embed.w));
  HART_RETURN_IF_ERROR(up.linear(w.head, prec, &d.head));
  HART_ASSIGN_OR_RETURN(d.norm, up.put(w.norm));
  HART_ASSIGN_OR_RETURN(d.hc_head_fn, up.put(w.hc_head_fn));
  HART_ASSIGN_OR_RETURN(d.hc_head_base, up.put(w.hc_head_base));
  HART_ASSIGN_OR_RETURN(d.hc_head_scale, up.put(w.hc_head_scale));
  HART_ASSIGN_OR_RETURN(d.inv_freq_main, up.put(w.inv_freq_main));
  HART_ASSIGN_OR_RETURN(d.inv_freq_compress, up.put(w.inv_freq_compress));
  d.layers.resize(w.layers.size());
  for (size_t il = 0; il < w.layers.size(); ++il) {
    const layer_weights& L = w.layers[il];
    device_layer& o = d.layers[il];
    o.kind = L.kind;
    o.hash_moe = L.hash_moe;
    HART_ASSIGN_OR_RETURN(o.hc_attn_fn, up.put(L.hc_attn_fn));
    HART_ASSIGN_OR_RETURN(o.hc_attn_base, up.put(L.hc_attn_base));
    HART_ASSIGN_OR_RETURN(o.hc_attn_scale, up.put(L.hc_attn_scale));
    HART_ASSIGN_OR_RETURN(o.hc_ffn_fn, up.put(L.hc_ffn_fn));
    HART_ASSIGN_OR_RETURN(o.hc_ffn_base, up.put(L.hc_ffn_base));
    HART_ASSIGN_OR_RETURN(o.hc_ffn_scale, up.put(L.hc_ffn_scale));
    HART_ASSIGN_OR_RETURN(o.attn_norm, up.put(L.attn_norm));
    HART_ASSIGN_OR_RETURN(o.ffn_norm, up.put(L.ffn_norm));
    HART_RETURN_IF_ERROR(up.linear(L.wq_a, prec, &o.wq_a));
    HART_RETURN_IF_ERROR(up.linear(L.wq_b, prec, &o.wq_b));
    HART_RETURN_IF_ERROR(up.linear(L.wkv, prec, &o.wkv));
    HART_RETURN_IF_ERROR(up.linear(L.wo_b, prec, &o.wo_b));
    HART_ASSIGN_OR_RETURN(o.wo_a, up.put(L.wo_a.w));
    HART_ASSIGN_OR_RETURN(o.q_norm, up.put(L.q_norm));
    HART_ASSIGN_OR_RETURN(o.kv_norm, up.put(L.kv_norm));
    HART_ASSIGN_OR_RETURN(o.attn_sink, up.put(L.attn_sink));
    if (L.kind != attention_kind::sliding) HART_RETURN_IF_ERROR(up.compressor(L.compressor, prec, &o.compressor));
    if (L.kind == attention_kind::csa) {
      HART_RETURN_IF_ERROR(up.compressor(L.indexer.compressor, prec, &o.index_compressor));
      HART_RETURN_IF_ERROR(up.linear(L.indexer.wq_b, prec, &o.index_wq_b));
      HART_RETURN_IF_ERROR(up.linear(L.indexer.weights_proj, prec, &o.index_weights_proj));
    }
    HART_RETURN_IF_ERROR(up.linear(L.gate, prec, &o.gate));
    HART_ASSIGN_OR_RETURN(o.gate_bias, up.put(L.gate_bias));
    o.tid2eid = L.tid2eid;
    o.experts.resize(L.experts.size());
    for (size_t e = 0; e < L.experts.size(); ++e) HART_RETURN_IF_ERROR(up.expert(L.experts[e], prec, &o.experts[e]));
    if (cfg.n_shared_experts > 0) HART_RETURN_IF_ERROR(up.expert(L.shared, prec, &o.shared));
  }
  return d;
}

}  // namespace hart::gpu
