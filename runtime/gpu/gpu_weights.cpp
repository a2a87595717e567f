#include "runtime/gpu/gpu_weights.h"

#include "kernels/linear/linear.h"
#include "kernels/quant/quant.h"
#include "runtime/core/codecs.h"
#include "runtime/core/log.h"
#include "runtime/gpu/weight_requant.h"
#include "runtime/model/safetensors.h"
#include "runtime/model/tensor_source.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstring>

namespace hart::gpu {
namespace {

constexpr int64_t k_fp8_block = 128;

// A linear's values as MXFP4 (the grouped linear's layout: pairs in mxfp4_mma_order), when they are exactly
// that.
struct mxfp4_codes {
  std::vector<uint8_t> packed, scales;

  bool encode_exact(const linear_weight& w) {
    packed.resize(w.w.size() / 2);
    scales.resize(w.w.size() / 32);
    if (!mxfp4_quantize(w.w.data(), w.out, w.in, packed.data(), scales.data()).ok()) return false;
    if (*std::min_element(scales.begin(), scales.end()) == 0)
      return false;  // linear_grouped_tc_cuda reads 2^-127 as 0
    std::vector<float> back(w.w.size());
    if (!mxfp4_dequantize(packed.data(), scales.data(), w.out, w.in, back.data()).ok()) return false;
    if (std::memcmp(back.data(), w.w.data(), back.size() * sizeof(float)) != 0) return false;
    return mxfp4_mma_order(packed.data(), w.out, w.in, packed.data()).ok();
  }
};

// Uploads host weights. Load (`like_` null): fp8 linears arrive QDQ'd from the
// host loader and are encoded on the host. A streamed load (`src_` set) gets
// lazy linears: what the device keeps in the checkpoint's own format (FP8
// codes with e8m0 scales, MXFP4 experts, bf16) goes up as stored, the rest is
// read one linear at a time and dropped after its upload. Update (`like_`
// set, streamed too): raw values read one linear at a time, fp8 linears chosen
// by the serving set and re-quantized on the device.
class uploader {
 public:
  uploader(device_weights* d, const device_weights* like, cudaStream_t stream,
           const model_weights_reader* src = nullptr)
      : d_(d), like_(like), stream_(stream), src_(src) {}

  bool updating() const { return like_ != nullptr; }

  template <class T>
  status_or<const T*> put(const std::vector<T>& v) {
    HART_ASSIGN_OR_RETURN(T * p, put_mutable(v));
    return static_cast<const T*>(p);
  }

  /// `narrow`: fp32 values that are all bf16 values are kept as bf16 (not for
  /// experts: the grouped MoE linears take codes or fp32).
  status linear(const linear_weight& w, precision prec, device_linear* out, const device_linear* like,
                bool narrow = true) {
    out->in = w.in;
    out->out = w.out;
    d_->max_linear_in = std::max(d_->max_linear_in, w.in);
    if (updating()) {
      // Experts the serving set keeps MXFP4 stay MXFP4, as the CPU engine's update quantizes them.
      if (prec == precision::fp8 && like->fp4) return requant(w, out, k_as_mxfp4);
      if (prec == precision::fp8 && (like->codes || like->qdq_input)) return requant(w, out, k_as_fp8);
      return dense_or_stored(w, out, narrow);
    }
    if (prec == precision::fp8 && w.fp8_input) {
      if (lazy(w) && w.stored.fp8_e8m0()) return put_stored_fp8(w, out);
      linear_weight read;
      HART_ASSIGN_OR_RETURN(const linear_weight* v, values(w, &read));
      // The host values are FP8 tiles unless they came from MXFP4: codes only if exact.
      HART_RETURN_IF_ERROR(encode_if_exact(*v, out));
      if (out->codes) return {};
      out->qdq_input = true;
      HART_ASSIGN_OR_RETURN(out->f32, put(v->w));
      return {};
    }
    return dense_or_stored(w, out, narrow);
  }

  /// A matrix the device keeps in fp32 (the embedding): a lazy one read in row
  /// blocks of at most k_chunk_bytes, so no copy of it is ever whole on the host.
  status_or<const float*> put_rows(const linear_weight& w) {
    if (!lazy(w)) return put(w.w);
    HART_ASSIGN_OR_RETURN(device_buffer b, device_buffer::create(size_t(w.out * w.in) * sizeof(float)));
    const int64_t rows = std::max<int64_t>(128, k_chunk_bytes / int64_t(sizeof(float) * w.in) / 128 * 128);
    std::vector<float> chunk(size_t(std::min(rows, w.out) * w.in));
    auto* dst = static_cast<float*>(b.get());
    for (int64_t r = 0; r < w.out; r += rows) {
      const int64_t n = std::min(rows, w.out - r);
      HART_RETURN_IF_ERROR(src_->read_rows(w, r, n, chunk.data()));
      HART_RETURN_IF_ERROR(cuda_status(
          cudaMemcpy(dst + r * w.in, chunk.data(), size_t(n * w.in) * sizeof(float), cudaMemcpyHostToDevice),
          "gpu engine: weight upload"));
    }
    return static_cast<const float*>(track(std::move(b)));
  }

  /// wo_a: in fp8 precision its values are FP8 (QDQ'd), its inputs not: codes
  /// applied to the raw inputs when the values are exactly FP8 tiles (always,
  /// for a load or an update), else the fp32 values; in exact precision a
  /// dense linear.
  status fp8_values(const linear_weight& w, precision prec, device_linear* out) {
    out->in = w.in;
    out->out = w.out;
    if (prec != precision::fp8 || (w.w.empty() && !lazy(w))) return dense_or_stored(w, out, true);
    if (updating()) {
      out->raw_input = true;
      return requant(w, out, k_as_fp8);  // codes of QDQ(raw), always (finish() refuses the update otherwise)
    }
    if (lazy(w) && w.stored.fp8_e8m0()) {
      out->raw_input = true;
      return put_stored_fp8(w, out);
    }
    linear_weight read;
    HART_ASSIGN_OR_RETURN(const linear_weight* v, values(w, &read));
    HART_RETURN_IF_ERROR(encode_if_exact(*v, out));
    if (out->codes) {
      out->raw_input = true;
      return {};
    }
    HART_ASSIGN_OR_RETURN(out->f32, put(v->w));
    return {};
  }

  status compressor(const compressor_weights& c, precision prec, device_compressor* out,
                    const device_compressor* like) {
    HART_RETURN_IF_ERROR(linear(c.wkv, prec, &out->wkv, like ? &like->wkv : nullptr));
    HART_RETURN_IF_ERROR(linear(c.wgate, prec, &out->wgate, like ? &like->wgate : nullptr));
    HART_ASSIGN_OR_RETURN(out->ape, put(c.ape));
    HART_ASSIGN_OR_RETURN(out->norm, put(c.norm));
    out->rate = c.rate;
    out->dim = c.dim;
    out->overlap = c.overlap;
    return {};
  }

  /// A layer's routed experts: MXFP4 (`mxfp4`, a load in fp8 precision) when
  /// every w1/w3/w2 is an FP8-input linear of whole 128-blocks whose values
  /// re-encode to MXFP4 exactly with scale codes the kernel takes (>= 1);
  /// else each as expert() keeps it. A streamed load keeps them MXFP4 when
  /// the checkpoint stores them so (stored_mxfp4_experts), as stored.
  status routed_experts(const std::vector<expert_weights>& ex, precision prec, bool mxfp4,
                        std::vector<device_expert>* out, const device_layer* like) {
    out->resize(ex.size());
    if (mxfp4 && !updating() && prec == precision::fp8 && !ex.empty() && lazy(ex[0].w1)) {
      HART_ASSIGN_OR_RETURN(bool as_stored, stored_mxfp4_experts(ex));
      if (as_stored) return put_stored_mxfp4(ex, out);
    } else if (mxfp4 && !updating() && prec == precision::fp8) {
      std::vector<mxfp4_codes> enc;
      enc.reserve(ex.size() * 3);
      auto encode_all = [&] {
        for (const expert_weights& e : ex) {
          for (const linear_weight* l : {&e.w1, &e.w3, &e.w2}) {
            enc.emplace_back();
            if (!l->fp8_input || l->in % 128 || l->out % 128 || !enc.back().encode_exact(*l)) return false;
          }
        }
        return !ex.empty();
      };
      if (encode_all()) {
        for (size_t e = 0; e < ex.size(); ++e) {
          device_linear* dl[3] = {&(*out)[e].w1, &(*out)[e].w3, &(*out)[e].w2};
          const linear_weight* hl[3] = {&ex[e].w1, &ex[e].w3, &ex[e].w2};
          for (int i = 0; i < 3; ++i) {
            dl[i]->in = hl[i]->in;
            dl[i]->out = hl[i]->out;
            d_->max_linear_in = std::max(d_->max_linear_in, hl[i]->in);
            HART_ASSIGN_OR_RETURN(dl[i]->fp4, put(enc[e * 3 + i].packed));
            HART_ASSIGN_OR_RETURN(dl[i]->fp4_scales, put(enc[e * 3 + i].scales));
          }
        }
        return {};
      }
    }
    for (size_t e = 0; e < ex.size(); ++e) {
      HART_RETURN_IF_ERROR(expert(ex[e], prec, &(*out)[e], like ? &like->experts[e] : nullptr));
    }
    return {};
  }

  status expert(const expert_weights& e, precision prec, device_expert* out, const device_expert* like) {
    HART_RETURN_IF_ERROR(linear(e.w1, prec, &out->w1, like ? &like->w1 : nullptr, false));
    HART_RETURN_IF_ERROR(linear(e.w3, prec, &out->w3, like ? &like->w3 : nullptr, false));
    return linear(e.w2, prec, &out->w2, like ? &like->w2 : nullptr, false);
  }

  /// Waits for the update's copies and kernels (load copies are synchronous),
  /// once; a weight the re-quantization found non-finite fails the update, as
  /// the host load would, and so do codes that do not reproduce their values.
  status finish() {
    if (!updating()) return {};
    HART_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream_), "gpu weight update"));
    return scratch_.check(stream_);
  }

 private:
  static constexpr int64_t k_chunk_bytes = int64_t(64) << 20;  // host rows read at once for put_rows

  bool lazy(const linear_weight& w) const { return w.w.empty() && w.stored.values; }

  // `w` with its values: itself, or (lazy) read whole from the source into `read`.
  status_or<const linear_weight*> values(const linear_weight& w, linear_weight* read) const {
    if (!lazy(w)) return &w;
    if (!src_) return internal_error("gpu weights: a lazy linear without its source");
    *read = w;
    HART_RETURN_IF_ERROR(src_->read(read));
    return static_cast<const linear_weight*>(read);
  }

  const void* track(device_buffer b) {
    const void* p = b.get();
    d_->bytes += b.bytes();
    d_->buffers.push_back(std::move(b));
    return p;
  }

  // `n` elements of type T of a stored tensor from element `first`, straight from the source.
  template <class T>
  status_or<const T*> put_stored(const tensor_entry& e, int64_t first, int64_t n) {
    HART_ASSIGN_OR_RETURN(device_buffer b, device_buffer::create(size_t(n) * sizeof(T)));
    HART_RETURN_IF_ERROR(cuda_status(cudaMemcpy(b.get(), e.data + first * int64_t(sizeof(T)),
                                                size_t(n) * sizeof(T), cudaMemcpyHostToDevice),
                                     "gpu engine: weight upload"));
    return static_cast<const T*>(track(std::move(b)));
  }

  // Scale codes that are NaN (0xff) fail the load, as reading the values would.
  static status check_scales(const tensor_entry& s, uint8_t lowest) {
    const auto [lo, hi] = std::minmax_element(s.data, s.data + s.n_bytes);
    if (s.n_bytes && *hi == 0xff)
      return data_loss("tensor '%s' holds a NaN scale code (0xff)", s.name.c_str());
    if (s.n_bytes && *lo < lowest)
      return failed_precondition("tensor '%s' holds scale code %d", s.name.c_str(), int(*lo));
    return {};
  }

  // FP8 codes and e8m0 scales as the checkpoint stores them: the values the host
  // path would re-encode (every stored tile re-encodes exactly; power-of-two
  // scales make the GEMM's sums the same).
  status put_stored_fp8(const linear_weight& w, device_linear* out) {
    HART_RETURN_IF_ERROR(check_scales(*w.stored.scales, 0));
    HART_ASSIGN_OR_RETURN(out->codes, put_stored<uint8_t>(*w.stored.values, 0, w.out * w.in));
    HART_ASSIGN_OR_RETURN(out->scales, put_stored<uint8_t>(*w.stored.scales, 0, n_scales(w.out, w.in)));
    return {};
  }

  // Whether every routed expert's w1/w3/w2 is stored MXFP4 the tensor-core
  // kernels take as it is: FP8-input linears of whole 128-blocks, scale codes
  // >= 1 (the kernel reads code 0 as 0). NaN codes fail the load.
  status_or<bool> stored_mxfp4_experts(const std::vector<expert_weights>& ex) const {
    for (const expert_weights& e : ex) {
      for (const linear_weight* l : {&e.w1, &e.w3, &e.w2}) {
        if (!lazy(*l) || !l->fp8_input || !l->stored.mxfp4() || l->in % 128 || l->out % 128) return false;
        status s = check_scales(*l->stored.scales, 1);
        if (s.code() == status_code::failed_precondition) return false;
        HART_RETURN_IF_ERROR(s);
      }
    }
    return true;
  }

  // The pairs reordered for the kernel (mxfp4_mma_order), the scales as stored.
  status put_stored_mxfp4(const std::vector<expert_weights>& ex, std::vector<device_expert>* out) {
    std::vector<uint8_t> packed;
    for (size_t e = 0; e < ex.size(); ++e) {
      device_linear* dl[3] = {&(*out)[e].w1, &(*out)[e].w3, &(*out)[e].w2};
      const linear_weight* hl[3] = {&ex[e].w1, &ex[e].w3, &ex[e].w2};
      for (int i = 0; i < 3; ++i) {
        const linear_weight& w = *hl[i];
        dl[i]->in = w.in;
        dl[i]->out = w.out;
        d_->max_linear_in = std::max(d_->max_linear_in, w.in);
        packed.assign(w.stored.values->data, w.stored.values->data + w.out * w.in / 2);
        HART_RETURN_IF_ERROR(mxfp4_mma_order(packed.data(), w.out, w.in, packed.data()));
        HART_ASSIGN_OR_RETURN(dl[i]->fp4, put(packed));
        HART_ASSIGN_OR_RETURN(dl[i]->fp4_scales, put_stored<uint8_t>(*w.stored.scales, 0, w.out * w.in / 32));
      }
    }
    return {};
  }

  template <class T>
  status_or<T*> put_mutable(const std::vector<T>& v) {
    if (v.empty()) return static_cast<T*>(nullptr);
    HART_ASSIGN_OR_RETURN(device_buffer b, device_buffer::create(v.size() * sizeof(T)));
    // An update runs beside forward passes: its copies go on its own stream. Pageable host
    // memory: cudaMemcpyAsync returns once the bytes are staged, so `v` may go afterwards.
    const cudaError_t e =
        updating() ? cudaMemcpyAsync(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, stream_)
                   : cudaMemcpy(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
    HART_RETURN_IF_ERROR(cuda_status(e, "gpu engine: weight upload"));
    T* p = static_cast<T*>(b.get());
    d_->bytes += b.bytes();
    d_->buffers.push_back(std::move(b));
    return p;
  }

  // Sets codes and scales when re-encoding the host values reproduces them bitwise.
  status encode_if_exact(const linear_weight& w, device_linear* out) {
    std::vector<uint8_t> q(w.w.size()), s(size_t(n_scales(w.out, w.in)));
    HART_RETURN_IF_ERROR(fp8_block_quantize(w.w.data(), w.out, w.in, k_fp8_block, q.data(), s.data()));
    std::vector<float> back(w.w.size());
    HART_RETURN_IF_ERROR(fp8_block_dequantize(q.data(), s.data(), w.out, w.in, k_fp8_block, back.data()));
    if (std::memcmp(back.data(), w.w.data(), back.size() * sizeof(float)) != 0) return {};
    HART_ASSIGN_OR_RETURN(out->codes, put(q));
    HART_ASSIGN_OR_RETURN(out->scales, put(s));
    return {};
  }

  // dense() of a lazy linear too: a bf16 one goes up as stored when `narrow`, others are read first.
  status dense_or_stored(const linear_weight& w, device_linear* out, bool narrow) {
    if (lazy(w) && narrow && w.stored.bf16()) {
      HART_ASSIGN_OR_RETURN(out->bf16,
                            put_stored<uint16_t>(*w.stored.values, w.stored.row0 * w.in, w.out * w.in));
      return {};
    }
    linear_weight read;
    HART_ASSIGN_OR_RETURN(const linear_weight* v, values(w, &read));
    return dense(*v, out, narrow);
  }

  // A linear kept unquantized: bf16 when `narrow` and every value is one (the
  // checkpoint's bf16 tensors: half the bytes for every decode step to read).
  status dense(const linear_weight& w, device_linear* out, bool narrow) {
    if (narrow && !w.w.empty() && bf16_exact(w.w)) {
      std::vector<uint16_t> b(w.w.size());
      f32_to_bf16(w.w.data(), b.data(), int64_t(b.size()));
      HART_ASSIGN_OR_RETURN(out->bf16, put(b));
      return {};
    }
    HART_ASSIGN_OR_RETURN(out->f32, put(w.w));
    return {};
  }

  static bool bf16_exact(const std::vector<float>& v) {
    uint32_t low = 0;
    for (float f : v) {
      uint32_t u;
      std::memcpy(&u, &f, sizeof u);
      low |= u & 0xffffu;
    }
    return low == 0;
  }

  static int64_t n_scales(int64_t out, int64_t in) {
    return ((out + k_fp8_block - 1) / k_fp8_block) * ((in + k_fp8_block - 1) / k_fp8_block);
  }

  // An fp8 linear of an update: raw values up into one of two staging buffers, QDQ
  // and encode on the device, no wait: the buffer is reused two linears later,
  // after its event. The load keeps fp32 when re-encoding does not reproduce
  // the QDQ'd values (MXFP4); for QDQ'd values it always does (a tile's amax
  // re-quantizes to the same or half the scale, and every code doubles
  // exactly), so an update counts such values and finish() refuses the update
  // if any appear, rather than carrying a path no input reaches. `mxfp4`: e2m1
  // pairs and per-32 scales of the raw values instead, as a release checkpoint
  // of them stores (an expert the serving set keeps MXFP4).
  static constexpr bool k_as_fp8 = false, k_as_mxfp4 = true;
  status requant(const linear_weight& lw, device_linear* out, bool mxfp4) {
    linear_weight read;  // a streamed update's values, read for this linear alone
    HART_ASSIGN_OR_RETURN(const linear_weight* vw, values(lw, &read));
    const linear_weight& w = *vw;
    const int64_t n = w.out * w.in;
    HART_RETURN_IF_ERROR(scratch_.reserve());
    staging& st = staging_[n_requant_++ % 2];
    if (st.pending) {
      HART_RETURN_IF_ERROR(cuda_status(cudaEventSynchronize(st.done), "gpu weight update"));
      st.pending = false;
    }
    if (st.raw.bytes() < size_t(n) * sizeof(float)) {
      st.raw = device_buffer{};  // freed before the larger one is taken
      HART_ASSIGN_OR_RETURN(st.raw, device_buffer::create(size_t(n) * sizeof(float)));
    }
    if (!st.done)
      HART_RETURN_IF_ERROR(cuda_status(cudaEventCreateWithFlags(&st.done, cudaEventDisableTiming),
                                       "gpu weight update: event"));
    auto* v = static_cast<float*>(st.raw.get());
    HART_RETURN_IF_ERROR(cuda_status(
        cudaMemcpyAsync(v, w.w.data(), size_t(n) * sizeof(float), cudaMemcpyHostToDevice, stream_),
        "gpu engine: weight upload"));
    HART_ASSIGN_OR_RETURN(device_buffer q, device_buffer::create(size_t(mxfp4 ? n / 2 : n)));
    HART_ASSIGN_OR_RETURN(device_buffer s,
                          device_buffer::create(size_t(mxfp4 ? n / 32 : n_scales(w.out, w.in))));
    auto* qp = static_cast<uint8_t*>(q.get());
    auto* sp = static_cast<uint8_t*>(s.get());
    if (mxfp4) {
      out->fp4 = qp;
      out->fp4_scales = sp;
      HART_RETURN_IF_ERROR(weight_requant_mxfp4_async(v, w.out, w.in, qp, sp, scratch_.count(), stream_));
    } else {
      out->codes = qp;
      out->scales = sp;
      HART_RETURN_IF_ERROR(weight_requant_fp8_async(v, w.out, w.in, qp, sp, scratch_.count(), stream_));
    }
    HART_RETURN_IF_ERROR(cuda_status(cudaEventRecord(st.done, stream_), "gpu weight update: event"));
    st.pending = true;
    d_->bytes += q.bytes() + s.bytes();
    d_->buffers.push_back(std::move(q));
    d_->buffers.push_back(std::move(s));
    return {};
  }

  // A staging buffer of raw values and the event after the kernel that read them.
  struct staging {
    device_buffer raw;
    cudaEvent_t done = nullptr;
    bool pending = false;
    ~staging() {
      if (done) cudaEventDestroy(done);
    }
  };

  device_weights* d_;
  const device_weights* like_;
  cudaStream_t stream_;
  const model_weights_reader* src_;  // a streamed load's source
  weight_requant_scratch scratch_;
  staging staging_[2];
  int64_t n_requant_ = 0;
};

// The walk shared by load, streamed load and update; `like` (update) is the serving set, same layout.
status upload_globals(uploader& up, const model_weights& w, precision prec, const device_weights* like,
                      device_weights* d) {
  HART_ASSIGN_OR_RETURN(d->embed, up.put_rows(w.embed));
  HART_RETURN_IF_ERROR(up.linear(w.head, prec, &d->head, like ? &like->head : nullptr));
  HART_ASSIGN_OR_RETURN(d->norm, up.put(w.norm));
  HART_ASSIGN_OR_RETURN(d->hc_head_fn, up.put(w.hc_head_fn));
  HART_ASSIGN_OR_RETURN(d->hc_head_base, up.put(w.hc_head_base));
  HART_ASSIGN_OR_RETURN(d->hc_head_scale, up.put(w.hc_head_scale));
  HART_ASSIGN_OR_RETURN(d->inv_freq_main, up.put(w.inv_freq_main));
  HART_ASSIGN_OR_RETURN(d->inv_freq_compress, up.put(w.inv_freq_compress));
  return {};
}

status upload_layer(uploader& up, const layer_weights& L, size_t il, const model_config& cfg, precision prec,
                    const device_layer* lk, bool mxfp4_experts, device_weights* d) {
  device_layer& o = d->layers[il];
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
  HART_RETURN_IF_ERROR(up.linear(L.wq_a, prec, &o.wq_a, lk ? &lk->wq_a : nullptr));
  HART_RETURN_IF_ERROR(up.linear(L.wq_b, prec, &o.wq_b, lk ? &lk->wq_b : nullptr));
  HART_RETURN_IF_ERROR(up.linear(L.wkv, prec, &o.wkv, lk ? &lk->wkv : nullptr));
  HART_RETURN_IF_ERROR(up.linear(L.wo_b, prec, &o.wo_b, lk ? &lk->wo_b : nullptr));
  HART_RETURN_IF_ERROR(up.fp8_values(L.wo_a, prec, &o.wo_a));
  HART_ASSIGN_OR_RETURN(o.q_norm, up.put(L.q_norm));
  HART_ASSIGN_OR_RETURN(o.kv_norm, up.put(L.kv_norm));
  HART_ASSIGN_OR_RETURN(o.attn_sink, up.put(L.attn_sink));
  if (L.kind != attention_kind::sliding) {
    HART_RETURN_IF_ERROR(up.compressor(L.compressor, prec, &o.compressor, lk ? &lk->compressor : nullptr));
  }
  if (L.kind == attention_kind::csa) {
    HART_RETURN_IF_ERROR(
        up.compressor(L.indexer.compressor, prec, &o.index_compressor, lk ? &lk->index_compressor : nullptr));
    HART_RETURN_IF_ERROR(up.linear(L.indexer.wq_b, prec, &o.index_wq_b, lk ? &lk->index_wq_b : nullptr));
    HART_RETURN_IF_ERROR(up.linear(L.indexer.weights_proj, prec, &o.index_weights_proj,
                                   lk ? &lk->index_weights_proj : nullptr));
  }
  HART_RETURN_IF_ERROR(up.linear(L.gate, prec, &o.gate, lk ? &lk->gate : nullptr));
  HART_ASSIGN_OR_RETURN(o.gate_bias, up.put(L.gate_bias));
  if (lk && lk->experts.size() != L.experts.size()) {
    return invalid_argument("gpu weight update: layer %zu has %zu experts, the serving weights %zu", il,
                            L.experts.size(), lk->experts.size());
  }
  HART_RETURN_IF_ERROR(up.routed_experts(L.experts, prec, mxfp4_experts, &o.experts, lk));
  if (cfg.n_shared_experts > 0)
    HART_RETURN_IF_ERROR(up.expert(L.shared, prec, &o.shared, lk ? &lk->shared : nullptr));
  return device_layer_finish(&o, L.tid2eid, d);
}

status_or<device_weights> upload_all(const model_weights& w, const model_config& cfg, precision prec,
                                     bool mxfp4_experts) {
  device_weights d;
  uploader up(&d, nullptr, nullptr);
  HART_RETURN_IF_ERROR(upload_globals(up, w, prec, nullptr, &d));
  d.layers.resize(w.layers.size());
  for (size_t il = 0; il < w.layers.size(); ++il) {
    HART_RETURN_IF_ERROR(upload_layer(up, w.layers[il], il, cfg, prec, nullptr, mxfp4_experts, &d));
  }
  return d;
}

}  // namespace

status device_layer_finish(device_layer* layer, const std::vector<int32_t>& tid2eid, device_weights* d) {
  const size_t E = layer->experts.size();
  std::vector<linear_group_weight> table(3 * E);
  layer->experts_fp8 = layer->experts_fp4 = E > 0;
  for (size_t e = 0; e < E; ++e) {
    const device_expert& x = layer->experts[e];
    size_t i = 0;
    for (const device_linear* l : {&x.w1, &x.w3, &x.w2}) {
      table[i++ * E + e] = l->fp4     ? linear_group_weight{l->fp4, l->fp4_scales}
                           : l->codes ? linear_group_weight{l->codes, l->scales}
                                      : linear_group_weight{l->f32, nullptr};
      layer->experts_fp8 = layer->experts_fp8 && l->codes;
      layer->experts_fp4 = layer->experts_fp4 && l->fp4;
    }
  }
  const size_t table_bytes = table.size() * sizeof(linear_group_weight),
               map_bytes = tid2eid.size() * sizeof(int32_t);
  if (table_bytes + map_bytes == 0) return {};
  HART_ASSIGN_OR_RETURN(device_buffer b, device_buffer::create(table_bytes + map_bytes));
  auto* base = static_cast<char*>(b.get());
  HART_RETURN_IF_ERROR(cuda_status(cudaMemcpy(base, table.data(), table_bytes, cudaMemcpyHostToDevice),
                                   "gpu engine: expert table"));
  if (map_bytes) {
    HART_RETURN_IF_ERROR(
        cuda_status(cudaMemcpy(base + table_bytes, tid2eid.data(), map_bytes, cudaMemcpyHostToDevice),
                    "gpu engine: hash routing table"));
    layer->tid2eid = reinterpret_cast<const int32_t*>(base + table_bytes);
  }
  const auto* t = reinterpret_cast<const linear_group_weight*>(base);
  layer->expert_w1 = t;
  layer->expert_w2 = t + 2 * E;
  layer->expert_w3 = t + E;
  d->bytes += b.bytes();
  d->buffers.push_back(std::move(b));
  return {};
}

status_or<device_weights> device_weights_upload(const model_weights& w, const model_config& cfg,
                                                precision prec, bool mxfp4_experts) {
  return upload_all(w, cfg, prec, mxfp4_experts);
}

status_or<device_weights> device_weights_load(
    const tensor_source& src, const model_config& cfg, precision prec, bool mxfp4_experts,
    const std::function<void(const weights_load_progress&)>& on_progress) {
  HART_ASSIGN_OR_RETURN(std::unique_ptr<model_weights_reader> reader,
                        model_weights_reader::open(src, cfg, prec, {false, false, /*lazy=*/true}));
  const auto start = std::chrono::steady_clock::now();
  weights_load_progress prog{0, cfg.n_layers, 0, reader->total_bytes(), 0};
  int64_t layer_bytes = 0;
  for (int64_t il = 0; il < cfg.n_layers; ++il) layer_bytes += reader->layer_bytes(il);
  auto report = [&](int64_t done_bytes) {
    prog.bytes_done = done_bytes;
    prog.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (on_progress) on_progress(prog);
  };
  device_weights d;
  uploader up(&d, nullptr, nullptr, reader.get());
  {
    HART_ASSIGN_OR_RETURN(model_weights g, reader->globals());
    HART_RETURN_IF_ERROR(upload_globals(up, g, prec, nullptr, &d));
  }
  int64_t done = prog.bytes_total - layer_bytes;  // the tensors outside the layers
  report(done);
  d.layers.resize(cfg.n_layers);
  for (int64_t il = 0; il < cfg.n_layers; ++il) {
    HART_ASSIGN_OR_RETURN(layer_weights L, reader->layer(il));
    status s = upload_layer(up, L, size_t(il), cfg, prec, nullptr, mxfp4_experts, &d);
    if (!s.ok())
      return status(s.code(), src.describe() + ": layer " + std::to_string(il) + ": " + s.message());
    done += reader->layer_bytes(il);
    prog.layers_done = il + 1;
    report(done);
  }
  HART_RETURN_IF_ERROR(up.finish());
  return d;
}

std::function<void(const weights_load_progress&)> weights_load_reporter() {
  return [last = -1.0](const weights_load_progress& p) mutable {
    const bool done = p.layers_done == p.layers_total;
    if (!done && last >= 0 && p.seconds - last < 2.0) return;
    last = p.seconds;
    const double gb = 1e-9, rate = p.seconds > 0 ? double(p.bytes_done) / p.seconds : 0;
    if (done) {
      HART_LOG_INFO("loaded weights: %lld layers, %.1f GB in %.1f s (%.2f GB/s)", (long long)p.layers_total,
                    double(p.bytes_done) * gb, p.seconds, rate * gb);
      return;
    }
    const double eta = rate > 0 ? double(p.bytes_total - p.bytes_done) / rate : 0;
    HART_LOG_INFO("loading weights: layer %lld/%lld, %.1f/%.1f GB, %.2f GB/s, ETA %.0f s",
                  (long long)p.layers_done, (long long)p.layers_total, double(p.bytes_done) * gb,
                  double(p.bytes_total) * gb, rate * gb, eta);
  };
}

status_or<device_weights> device_weights_build(const tensor_source& src, const device_weights& like,
                                               const model_config& cfg, precision prec, cudaStream_t stream) {
  if (int64_t(like.layers.size()) != cfg.n_layers) {
    return invalid_argument("gpu weight update: %lld layers, the serving weights have %zu",
                            (long long)cfg.n_layers, like.layers.size());
  }
  // Exact precision: the raw values, rounded once, on the device.
  HART_ASSIGN_OR_RETURN(
      std::unique_ptr<model_weights_reader> reader,
      model_weights_reader::open(src, cfg, precision::exact, {false, false, /*lazy=*/true}));
  device_weights d;
  uploader up(&d, &like, stream, reader.get());
  {
    HART_ASSIGN_OR_RETURN(model_weights g, reader->globals());
    HART_RETURN_IF_ERROR(upload_globals(up, g, prec, &like, &d));
  }
  d.layers.resize(like.layers.size());
  for (int64_t il = 0; il < cfg.n_layers; ++il) {
    HART_ASSIGN_OR_RETURN(layer_weights L, reader->layer(il));
    status s = upload_layer(up, L, size_t(il), cfg, prec, &like.layers[size_t(il)], false, &d);
    if (!s.ok())
      return status(s.code(), src.describe() + ": layer " + std::to_string(il) + ": " + s.message());
  }
  HART_RETURN_IF_ERROR(up.finish());
  return d;
}

}  // namespace hart::gpu
