#include "runtime/gpu/gpu_engine.h"

#include "kernels/mhc/mhc.h"
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/sparse_attention/sparse_attention.h"
#include "kernels/sparse_decode_attention/sparse_decode_attention.h"
#include "runtime/cache/memory_plan.h"
#include "runtime/core/log.h"
#include "runtime/gpu/engine_kernels.h"
#include "runtime/gpu/gpu_engine_impl.h"
#include "runtime/gpu/moe_dispatch.h"
#include "runtime/model/kv_page_layout.h"
#include "runtime/model/kv_store.h"
#include "runtime/model/tensor_source.h"

#include <algorithm>
#include <atomic>
#include <set>

namespace hart {

using gpu::arena_buffers;
using gpu::device_arena;
using gpu::engine_state;
using gpu::pass;

status gpu_engine_params::validate() const {
  if (base.model_dir.empty()) return invalid_argument("gpu engine: model_dir is empty");
  if (max_batch_tokens <= 0 || max_batch_tokens > 65535 || max_context <= 0) {
    // Per-token kernels put tokens on the grid's y axis (at most 65535).
    return invalid_argument(
        "gpu engine: max_batch_tokens %lld must be in [1, 65535] and max_context %lld > 0",
        (long long)max_batch_tokens, (long long)max_context);
  }
  if (full_pages < 0 || swa_pages < 0) return invalid_argument("gpu engine: page counts must be >= 0");
  if (!(memory_fraction >= 0 && memory_fraction <= 1) || max_running < 1) {
    return invalid_argument("gpu engine: memory_fraction %g must be in [0, 1] and max_running %lld >= 1",
                            memory_fraction, (long long)max_running);
  }
  if (fp8_cublaslt_rows < 0)
    return invalid_argument("gpu engine: fp8_cublaslt_rows %lld must be >= 0", (long long)fp8_cublaslt_rows);
  return {};
}

bool gpu_kv_entries(const gpu_engine_params& p, const model_config& cfg) {
  return p.fp8_kv_entries && p.base.prec == precision::fp8 && !p.base.deterministic &&
         cfg.head_dim == kv_entry_dim && cfg.rope_dim == kv_entry_rope && cfg.n_heads % 16 == 0;
}

bool gpu_device_available() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    return false;
  }
  return true;
}

namespace gpu {

// Rows from which gpu_engine_params::fp8_tensor_cores moves an FP8 linear to
// tensor cores (linear_bench, G1 v3: at 1 row the CUDA-core dot is faster on the small shapes).
constexpr int64_t k_tensor_core_rows = 2;

namespace {

// Deterministic: the CUDA-core dot at every row count (the tensor-core paths start
// at k_tensor_core_rows, and linear_fp8_tc splits K by row count).
bool fp8_on_tensor_cores(const engine_state& s, int64_t n) {
  return s.params.fp8_tensor_cores && !s.params.base.deterministic && n >= k_tensor_core_rows;
}

}  // namespace

status linear_run(engine_state& s, const device_linear& w, const float* x, int64_t n, float* y,
                  int64_t x_stride, int64_t y_stride) {
  return linear_run_rows(s, w, 0, w.out, x, n, y, x_stride, y_stride);
}

status linear_run_rows(engine_state& s, const device_linear& w, int64_t row0, int64_t rows, const float* x,
                       int64_t n, float* y, int64_t x_stride, int64_t y_stride) {
  if (n == 0) return {};
  if (row0 < 0 || rows < 0 || row0 + rows > w.out) {
    return invalid_argument("linear_run_rows: rows [%lld, %lld) outside the weight's %lld", (long long)row0,
                            (long long)(row0 + rows), (long long)w.out);
  }
  if (w.fp4) return unimplemented("linear_run_rows: MXFP4 weights run only in the MoE's grouped linears");
  const int64_t in = w.in;
  if (w.codes) {
    linear_fp8_params p{
        x,       w.codes + row0 * in, w.scales + (row0 / 128) * ((in + 127) / 128), y, n, in, rows, x_stride,
        y_stride};
    p.quantize_input = !w.raw_input;
    p.w_scale_row_offset = row0 % 128;
    if (fp8_on_tensor_cores(s, n)) {
      if (s.params.fp8_cublaslt_rows > 0 && n >= s.params.fp8_cublaslt_rows && linear_fp8_lt_supported(p)) {
        return linear_fp8_lt_cuda(p, *s.lin, s.stream);
      }
      if (linear_fp8_tc_supported(p)) return linear_fp8_tc_cuda(p, *s.lin, s.stream);
      if (linear_fp8_raw_tc_supported(p)) return linear_fp8_raw_tc_cuda(p, *s.lin, s.stream);
    }
    return linear_fp8_cuda(p, *s.lin, s.stream);
  }
  if (w.bf16) {
    linear_bf16w_params p{x, w.bf16 + row0 * in, y, n, in, rows, x_stride, y_stride};
    p.row_invariant = s.params.base.deterministic;
    return linear_bf16w_cuda(p, *s.lin, s.stream);
  }
  if (w.qdq_input) {
    const int64_t xs = x_stride ? x_stride : in;
    HART_RETURN_IF_ERROR(
        cuda_status(cudaMemcpy2DAsync(s.a.qdq, in * sizeof(float), x, xs * sizeof(float), in * sizeof(float),
                                      n, cudaMemcpyDeviceToDevice, s.stream),
                    "gpu engine: linear input"));
    HART_RETURN_IF_ERROR(rows_fp8_qdq_cuda(s.a.qdq, n, in, 128, in, s.stream));
    x = s.a.qdq;
    x_stride = 0;
  }
  return linear_cuda(
      {x, w.f32 + row0 * in, y, n, in, rows, x_stride, y_stride, false, s.params.base.deterministic}, *s.lin,
      s.stream);
}

status linear_run_activation(engine_state& s, const device_linear& w, const float* x, int64_t n, float* y) {
  HART_RETURN_IF_ERROR(linear_run(s, w, x, n, y));
  return s.bf16 ? round_bf16_rows_cuda(y, n, w.out, w.out, s.stream) : status{};
}

status linear_run_groups(engine_state& s, const device_linear& w, int64_t groups, const float* x, int64_t n,
                         int64_t x_stride, float* y) {
  const int64_t rows = w.out / groups, gin = w.in;
  if (w.codes && w.raw_input) {  // one launch for every group
    linear_fp8_params p{x, w.codes, w.scales, y, n, gin, w.out, x_stride, w.out};
    p.quantize_input = false;
    p.x_group_rows = rows;
    p.x_group_stride = gin;
    if (fp8_on_tensor_cores(s, n) && linear_fp8_raw_tc_supported(p))
      return linear_fp8_raw_tc_cuda(p, *s.lin, s.stream);
    return linear_fp8_cuda(p, *s.lin, s.stream);
  }
  for (int64_t g = 0; g < groups; ++g) {
    HART_RETURN_IF_ERROR(
        linear_run_rows(s, w, g * rows, rows, x + g * gin, n, y + g * rows, x_stride, w.out));
  }
  return {};
}

void trace_reset(forward_trace* t) {
  t->hidden.clear();
  t->final_hidden.clear();
  t->topk.clear();
  t->experts.clear();
}

void trace_append(forward_trace* t, forward_trace&& part) {
  // Every captured tensor has the token as its outermost dimension ([.., T]), so passes concatenate.
  auto cat = [](auto& dst, auto& src) {
    if (dst.empty()) {
      dst = std::move(src);
    } else {
      dst.insert(dst.end(), src.begin(), src.end());
    }
  };
  if (t->hidden.size() < part.hidden.size()) t->hidden.resize(part.hidden.size());
  for (size_t l = 0; l < part.hidden.size(); ++l) cat(t->hidden[l], part.hidden[l]);
  cat(t->final_hidden, part.final_hidden);
  for (auto& [il, v] : part.topk) cat(t->topk[il], v);
  for (auto& [il, v] : part.experts) cat(t->experts[il], v);
}

void* meta_batch::add_bytes(const void* src, size_t n) {
  const size_t padded = (n + 15) / 16 * 16;
  if (dev_used_ + padded > s_.a.meta_bytes) {
    st_ = internal_error("gpu engine: a layer's metadata (%zu bytes) is over the arena's %zu",
                         dev_used_ + padded, s_.a.meta_bytes);
    return nullptr;
  }
  char* dev = s_.a.meta + dev_used_;
  void* h = s_.staging.take(padded);
  if (h && host_ && static_cast<char*>(h) != host_ + host_used_) {  // not contiguous: a new segment
    st_ = flush();
  }
  if (!h && padded <= s_.staging.capacity()) {  // the staging is full: copy, wait, start over
    st_ = flush();
    if (st_.ok()) st_ = cuda_status(cudaStreamSynchronize(s_.stream), "gpu engine: metadata");
    s_.staging.reset();
    h = s_.staging.take(padded);
  }
  if (!st_.ok()) return nullptr;
  if (!h) {  // larger than the staging: its own copy from pageable memory
    st_ = flush();
    if (st_.ok())
      st_ = cuda_status(cudaMemcpyAsync(dev, src, n, cudaMemcpyHostToDevice, s_.stream),
                        "gpu engine: metadata");
    dev_used_ += padded;
    return st_.ok() ? dev : nullptr;
  }
  if (!host_) {
    host_ = static_cast<char*>(h);
    host_used_ = 0;
    dev_start_ = dev_used_;
  }
  std::memcpy(h, src, n);
  host_used_ += padded;
  dev_used_ += padded;
  return dev;
}

void* meta_batch::reserve_bytes(size_t n) {
  const size_t padded = (n + 15) / 16 * 16;
  st_ = flush();  // a pending segment's device range must stay contiguous
  if (st_.ok() && dev_used_ + padded > s_.a.meta_bytes) {
    st_ = internal_error("gpu engine: a layer's metadata (%zu bytes) is over the arena's %zu",
                         dev_used_ + padded, s_.a.meta_bytes);
  }
  if (!st_.ok()) return nullptr;
  char* dev = s_.a.meta + dev_used_;
  dev_used_ += padded;
  return dev;
}

status meta_batch::flush() {
  if (!st_.ok()) return st_;
  if (host_used_ > 0) {
    st_ = cuda_status(
        cudaMemcpyAsync(s_.a.meta + dev_start_, host_, host_used_, cudaMemcpyHostToDevice, s_.stream),
        "gpu engine: metadata");
  }
  host_ = nullptr;
  host_used_ = 0;
  return st_;
}

size_t meta_layout_bytes(const engine_state& s, int64_t T) {
  auto padded = [](int64_t n, size_t elem) {
    return (size_t(std::max<int64_t>(n, 0)) * elem + 15) / 16 * 16;
  };
  return 2 * padded(T, 8)                                                        // window writes
         + padded(T * s.n_idx_max, 4)                                            // index lists
         + padded(T, 4) + padded(T * s.pages_per_seq, 4)                         // page lists
         + padded(T, 8) + padded(T + 1, 4) + 2 * padded(T * s.pages_per_seq, 4)  // the compressors' spans
         + padded(T, 4)                                                          // indexer lengths
         + padded(T, 8);                                                         // logits rows (the head)
}

namespace {

// The arena's buffers for T tokens per pass; `a` with a null base only counts bytes.
size_t arena_layout(const engine_state& s, device_arena& ar, arena_buffers* b) {
  const model_config& c = s.cfg;
  const int64_t T = s.params.max_batch_tokens, D = c.hidden_size, n = c.hc_mult, H = c.n_heads,
                hd = c.head_dim;
  const int64_t dI = c.index_head_dim, nI = c.index_n_heads, K = c.n_activated_experts,
                E = c.n_routed_experts;
  const int64_t I = c.moe_inter_dim;
  size_t bytes = 0;
  auto f = [&](float** p, int64_t cnt) {
    bytes += device_arena::bytes_for<float>(cnt);
    *p = ar.take<float>(cnt);
  };
  auto i32 = [&](int32_t** p, int64_t cnt) {
    bytes += device_arena::bytes_for<int32_t>(cnt);
    *p = ar.take<int32_t>(cnt);
  };
  auto i64 = [&](int64_t** p, int64_t cnt) {
    bytes += device_arena::bytes_for<int64_t>(cnt);
    *p = ar.take<int64_t>(cnt);
  };
  i32(&b->ids, T);
  i64(&b->pos, T);
  f(&b->x, T * n * D);
  f(&b->xn, T * n * D);
  f(&b->collapsed, T * D);
  f(&b->normed, T * D);
  f(&b->out, T * D);
  f(&b->post, T * n);
  f(&b->comb, T * n * n);
  // hc_pre's split mix for up to 8 tokens (hc_pre_workspace_bytes is 0 above that).
  const int64_t hc_doubles =
      std::max<int64_t>(1, int64_t(hc_pre_workspace_bytes(std::min<int64_t>(T, 8), n, D) / sizeof(double)));
  bytes += device_arena::bytes_for<double>(hc_doubles);
  b->hc_workspace = ar.take<double>(hc_doubles);
  bytes += device_arena::bytes_for<char>(int64_t(sparse_attention_cuda_workspace_bytes(H, hd)));
  b->attn_workspace = ar.take<char>(int64_t(sparse_attention_cuda_workspace_bytes(H, hd)));
  if (s.kv_entries) {
    b->entry_workspace_bytes = sparse_decode_attention_cuda_workspace_bytes(
        std::min(T, k_entry_attention_queries), H, s.n_idx_max, 0);
    bytes += device_arena::bytes_for<char>(int64_t(b->entry_workspace_bytes));
    b->entry_workspace = ar.take<char>(int64_t(b->entry_workspace_bytes));
  }
  f(&b->qr, T * c.q_lora_rank);
  f(&b->q, T * H * hd);
  f(&b->kv, T * hd);
  f(&b->o, T * H * hd);
  f(&b->u, T * c.o_groups * c.o_lora_rank);
  f(&b->comp_a, T * 2 * hd);
  f(&b->comp_z, T * 2 * hd);
  f(&b->index_a, T * 2 * dI);
  f(&b->index_z, T * 2 * dI);
  f(&b->index_q, T * nI * dI);
  f(&b->index_w, T * nI);
  b->meta_bytes = meta_layout_bytes(s, T);
  bytes += device_arena::bytes_for<char>(int64_t(b->meta_bytes));
  b->meta = ar.take<char>(int64_t(b->meta_bytes));
  i32(&b->dec_swa, T * s.pages_per_seq);
  i32(&b->dec_full, T * s.pages_per_seq);
  f(&b->scores, T * s.max_entries);
  i32(&b->picks, T * std::max<int64_t>(c.index_topk, 1));
  f(&b->route_logits, T * E);
  f(&b->route_w, T * K);
  i32(&b->experts, T * K);
  i32(&b->hash, T * K);
  const int64_t R = moe_rows(s);  // routed rows per MoE chunk (gpu_moe.cpp)
  f(&b->xe, R * D);
  const int64_t hidden_rows =
      std::max(R * I, T * I * std::max<int64_t>(c.n_shared_experts, 1));  // + the shared expert
  f(&b->g, hidden_rows);
  f(&b->up, hidden_rows);
  f(&b->h, hidden_rows);
  f(&b->ye, R * D);
  bytes += device_arena::bytes_for<uint8_t>(R * std::max(D, I));
  b->moe_codes = ar.take<uint8_t>(R * std::max(D, I));
  f(&b->moe_scales, R * ((std::max(D, I) + 127) / 128));
  i64(&b->moe_src, R);
  i64(&b->iota_d, R);
  f(&b->moe_w, R);
  i32(&b->moe_slot, R);
  const int64_t n_tiles = moe_plan_max_tiles(R, E);
  i32(&b->tile_group, n_tiles);
  i32(&b->tile_row0, n_tiles);
  i32(&b->tile_rows, n_tiles);
  i32(&b->n_tiles, 1);
  f(&b->rows, T * D);
  f(&b->logits, T * c.vocab_size);
  f(&b->qdq, T * s.w.max_linear_in);
  const int64_t TB = std::min(T, k_branch_tokens);
  f(&b->side_qdq, TB * s.w.max_linear_in);
  f(&b->shared_g, TB * I * std::max<int64_t>(c.n_shared_experts, 1));
  f(&b->shared_up, TB * I * std::max<int64_t>(c.n_shared_experts, 1));
  f(&b->shared_h, TB * I * std::max<int64_t>(c.n_shared_experts, 1));
  return bytes;
}

// One mHC site around a sublayer: X ← hc_post(sublayer(norm(hc_pre(X))), X).
template <class Sublayer>
status run_site(engine_state& s, int64_t T, const float* fn, const float* base, const float* scale,
                const float* norm, Sublayer&& sublayer) {
  arena_buffers& A = s.a;
  const model_config& c = s.cfg;
  const int64_t n = c.hc_mult, D = c.hidden_size;
  const float eps = float(c.norm_eps), hc_eps = float(c.hc_eps);
  hc_pre_params pre{A.x, fn,    base, scale, A.collapsed, A.post, A.comb, T, n, D, c.hc_sinkhorn_iters,
                    eps, hc_eps};
  pre.bf16 = s.bf16;
  // The split mix serves passes of <= 8 tokens: its fp64 order differs from the cluster's,
  // so --deterministic (logits independent of the batch) keeps every pass on the cluster path.
  pre.workspace = s.params.base.deterministic ? nullptr : A.hc_workspace;
  HART_RETURN_IF_ERROR(hc_pre_cuda(pre, s.stream));
  HART_RETURN_IF_ERROR(
      rms_norm_cuda(official_norm(s, {A.collapsed, norm, A.normed, T, D, 0, 0, eps}), s.stream));
  HART_RETURN_IF_ERROR(sublayer(A.normed, A.out));
  hc_post_params post{A.x, A.out, A.post, A.comb, A.xn, T, n, D};
  post.bf16 = s.bf16;
  HART_RETURN_IF_ERROR(hc_post_cuda(post, s.stream));
  std::swap(A.x, A.xn);
  return {};
}

// The pass's kernels from the embedding to the head: logits of `logit_rows`
// (R rows) in A.logits. Stream work only unless a trace downloads.
status enqueue_pass(engine_state& s, const pass& p, const std::vector<int64_t>& logit_rows,
                    forward_trace* trace) {
  arena_buffers& A = s.a;
  const model_config& c = s.cfg;
  const int64_t T = p.n_tokens(), D = c.hidden_size, n = c.hc_mult;
  HART_RETURN_IF_ERROR(gpu::embed_rows_cuda(s.w.embed, A.ids, T, n, D, s.bf16, A.x, s.stream));
  const bool hidden = trace && trace->capture_hidden;
  if (hidden) {
    trace->hidden.assign(1, {});
    HART_RETURN_IF_ERROR(s.download(&trace->hidden[0], A.x, T * n * D));
  }
  for (int64_t il = 0; il < c.n_layers; ++il) {
    const gpu::device_layer& L = s.w.layers[il];
    std::vector<int32_t>* topk = trace && L.kind == attention_kind::csa ? &trace->topk[il] : nullptr;
    HART_RETURN_IF_ERROR(
        run_site(s, T, L.hc_attn_fn, L.hc_attn_base, L.hc_attn_scale, L.attn_norm,
                 [&](const float* x, float* y) { return gpu::attention_run(s, p, il, x, y, topk); }));
    std::vector<int32_t>* experts = trace ? &trace->experts[il] : nullptr;
    HART_RETURN_IF_ERROR(
        run_site(s, T, L.hc_ffn_fn, L.hc_ffn_base, L.hc_ffn_scale, L.ffn_norm,
                 [&](const float* x, float* y) { return gpu::moe_run(s, p, il, x, y, experts); }));
    if (hidden) {
      trace->hidden.emplace_back();
      HART_RETURN_IF_ERROR(s.download(&trace->hidden.back(), A.x, T * n * D));
    }
  }
  HART_RETURN_IF_ERROR(gpu::branch_join(s));  // every branch joined (a capture must end so)
  const float eps = float(c.norm_eps), hc_eps = float(c.hc_eps);
  hc_head_params head{A.x, s.w.hc_head_fn, s.w.hc_head_base, s.w.hc_head_scale, A.collapsed, T, n, D,
                      eps, hc_eps};
  head.bf16 = s.bf16;
  HART_RETURN_IF_ERROR(hc_head_cuda(head, s.stream));
  HART_RETURN_IF_ERROR(
      rms_norm_cuda(gpu::official_norm(s, {A.collapsed, s.w.norm, A.normed, T, D, 0, 0, eps}), s.stream));
  if (hidden) HART_RETURN_IF_ERROR(s.download(&trace->final_hidden, A.normed, T * D));
  const int64_t R = int64_t(logit_rows.size());
  if (R == 0) return {};
  bool every_row = R == T;
  for (int64_t i = 0; every_row && i < R; ++i) every_row = logit_rows[i] == i;
  const float* rows = A.normed;
  if (!every_row) {  // gather the rows that want logits
    std::vector<int64_t> src(R);
    for (int64_t i = 0; i < R; ++i) src[i] = logit_rows[i] * D;
    gpu::meta_batch mb(s);
    const int64_t* d_src = mb.add(src);
    HART_RETURN_IF_ERROR(mb.flush());
    HART_RETURN_IF_ERROR(gpu::copy_rows_cuda(A.rows, A.iota_d, A.normed, d_src, D, R, false, s.stream));
    rows = A.rows;
  }
  return gpu::linear_run(s, s.w.head, rows, R, A.logits);
}

// A decode pass's page tables into the arena, [T, page_stride], −1 past a sequence's pages.
status upload_page_tables(engine_state& s, const pass& p) {
  const int64_t T = p.n_tokens(), stride = p.page_stride;
  std::vector<int32_t> swa(size_t(T * stride), -1), full(size_t(T * stride), -1);
  for (const pass::span& sp : p.spans) {
    const page_table& pt = *sp.seq->pages;
    const int64_t n = std::min<int64_t>({stride, int64_t(pt.full.size()), int64_t(pt.swa.size())});
    std::copy_n(pt.swa.begin(), n, swa.begin() + sp.row0 * stride);
    std::copy_n(pt.full.begin(), n, full.begin() + sp.row0 * stride);
  }
  HART_RETURN_IF_ERROR(s.upload(s.a.dec_swa, swa));
  return s.upload(s.a.dec_full, full);
}

// One device pass over `p`; logits rows [V, |logit_rows|] written to `logits`.
status run_pass(engine_state& s, const pass& p, const std::vector<int64_t>& logit_rows, float* logits,
                forward_trace* trace) {
  arena_buffers& A = s.a;
  s.staging.reset();  // the last pass ended with a stream sync: its copies are done
  HART_RETURN_IF_ERROR(s.upload(A.ids, p.ids));
  HART_RETURN_IF_ERROR(s.upload(A.pos, p.pos));
  if (p.device_meta) HART_RETURN_IF_ERROR(upload_page_tables(s, p));
  static const std::vector<int64_t> no_rows;
  const std::vector<int64_t>& rows = logits ? logit_rows : no_rows;
  if (p.device_meta && s.params.decode == gpu_engine_params::decode_launch::graphs) {
    const uint64_t key = uint64_t(p.n_tokens()) << 40 | uint64_t(p.len_bucket);
    HART_RETURN_IF_ERROR(s.graphs.run(s.stream, key, [&] { return enqueue_pass(s, p, rows, nullptr); }));
  } else {
    HART_RETURN_IF_ERROR(enqueue_pass(s, p, rows, trace));
  }
  if (!rows.empty()) {
    const size_t bytes = rows.size() * size_t(s.cfg.vocab_size) * sizeof(float);
    return s.readback.copy(logits, A.logits, bytes, s.stream);  // waits for the stream
  }
  return cuda_status(cudaStreamSynchronize(s.stream), "gpu engine: forward");
}

// Positions a decode pass's kernels are sized for: its longest sequence rounded
// up to a quarter of its power of two (at least a page, at most max_context),
// so graphs are few and their index lists at most 25% longer than needed.
int64_t decode_len_bucket(int64_t longest, int64_t page_size, int64_t max_context) {
  const int64_t x = std::max(longest, page_size);
  int64_t pow2 = 1;
  while (pow2 * 2 <= x) pow2 *= 2;
  const int64_t step = std::max<int64_t>(pow2 / 4, 1);
  return std::min((x + step - 1) / step * step, max_context);
}

// Whether `p` runs on device-built metadata (gpu_engine_params::decode_launch).
void mark_decode_pass(const engine_state& s, pass* p, size_t n_logit_rows, bool traced) {
  p->device_meta = false;
  if (s.params.decode == gpu_engine_params::decode_launch::host_metadata || traced ||
      n_logit_rows != size_t(p->n_tokens())) {
    return;
  }
  int64_t longest = 0;
  for (const pass::span& sp : p->spans) {
    // Reference-tie sequences re-pick their top-k on the host (index_topk).
    if (sp.n != 1 || sp.seq->tie_reference_length > 0) return;
    longest = std::max(longest, sp.p0 + 1);
  }
  const int64_t P = s.pool.page_size();
  p->device_meta = true;
  p->len_bucket = decode_len_bucket(longest, P, s.params.max_context);
  p->page_stride = (p->len_bucket + P - 1) / P;
}

}  // namespace
}  // namespace gpu

gpu_engine::gpu_engine(std::unique_ptr<state> s) : s_(std::move(s)) {}

gpu_engine::~gpu_engine() = default;

gpu::engine_state::~engine_state() {
  for (cudaStream_t st : {stream, side}) {
    if (!st) continue;
    cudaStreamSynchronize(st);
    cudaStreamDestroy(st);
  }
  for (cudaEvent_t ev : {fork_event, join_event}) {
    if (ev) cudaEventDestroy(ev);
  }
}

const model_config& gpu_engine::config() const {
  return s_->cfg;
}
const gpu_engine_params& gpu_engine::params() const {
  return s_->params;
}
size_t gpu_engine::device_bytes() const {
  return s_->w.bytes + s_->pool.bytes() + s_->arena_mem.bytes();
}
const cache::memory_plan* gpu_engine::memory_plan() const {
  return s_->plan.get();
}
int64_t gpu_engine::full_pages() const {
  return s_->pool.n_full();
}
int64_t gpu_engine::swa_pages() const {
  return s_->pool.n_swa();
}
size_t gpu_engine::decode_graphs() const {
  return s_->graphs.size();
}
uint64_t gpu_engine::decode_graph_replays() const {
  return s_->graphs.replays();
}

namespace {

// Pinned staging of step metadata: a decode step's fits many times over; a
// long prefill's that does not waits for the stream once per overflow.
constexpr size_t k_staging_bytes = size_t(16) << 20;
// Logits come back in chunks of this (two pinned): 8 rows of a 129K vocabulary.
constexpr size_t k_readback_chunk_bytes = size_t(4) << 20;

struct device_free_bytes {
  size_t free = 0, total = 0;
};

// The current device's free and total memory (the context exists: cudaSetDevice ran).
status_or<device_free_bytes> device_free_now() {
  device_free_bytes m;
  HART_RETURN_IF_ERROR(gpu::cuda_status(cudaFree(nullptr), "gpu engine: device context"));
  HART_RETURN_IF_ERROR(gpu::cuda_status(cudaMemGetInfo(&m.free, &m.total), "gpu engine: cudaMemGetInfo"));
  return m;
}

// Before a long load: the device keeps every tensor in at least its stored
// size (FP8, MXFP4 and BF16 as stored, the rest wider), so a checkpoint larger
// than what the fraction leaves cannot fit.
status checkpoint_fits(const tensor_source& src, double fraction, const device_free_bytes& now) {
  int64_t bytes = 0;
  for (const tensor_entry* t : src.tensors()) bytes += int64_t(t->n_bytes);
  const int64_t budget = int64_t(fraction * double(now.total));
  const int64_t in_use = int64_t(now.total) - int64_t(now.free);
  if (bytes <= budget - in_use) return {};
  const double gib = double(int64_t(1) << 30);
  return resource_exhausted(
      "gpu engine: %s holds %.2f GiB of weights; --gpu-memory-fraction %.4g of the device's "
      "%.2f GiB is %.2f GiB, of which %.2f GiB are already in use (CUDA context, other processes)",
      src.describe().c_str(), bytes / gib, fraction, now.total / gib, budget / gib, in_use / gib);
}

// load's body: the config and weights come from params.base.model_dir unless given.
status_or<std::unique_ptr<gpu_engine::state>> state_load(const gpu_engine_params& params,
                                                         const model_config* cfg,
                                                         gpu::device_weights* weights) {
  HART_RETURN_IF_ERROR(params.validate());
  HART_RETURN_IF_ERROR(params.base.validate());
  if (!gpu_device_available()) {
    return failed_precondition(
        "gpu engine: no CUDA device is visible (use --device cpu, or run on the GPU machine)");
  }
  auto s = std::make_unique<gpu_engine::state>();
  s->params = params;
  static std::atomic<uint64_t> next_id{uint64_t(1) << 62};  // apart from the CPU engines' ids
  s->id = next_id++;
  HART_RETURN_IF_ERROR(gpu::cuda_status(cudaSetDevice(params.device), "gpu engine: cudaSetDevice"));
  if (cfg) {
    HART_RETURN_IF_ERROR(cfg->validate());
    s->cfg = *cfg;
  } else {
    HART_ASSIGN_OR_RETURN(s->cfg, model_config_load(params.base.model_dir));
  }
  const model_config& c = s->cfg;
  const int64_t P = params.base.page_size;
  if (P % c.csa_rate || P % c.hca_rate || P < c.window) {
    return invalid_argument(
        "gpu engine: page_size %lld must be a multiple of the compress rates (%lld, %lld) and >= the window "
        "%lld",
        (long long)P, (long long)c.csa_rate, (long long)c.hca_rate, (long long)c.window);
  }
  HART_ASSIGN_OR_RETURN(const device_free_bytes before_weights, device_free_now());
  if (weights) {
    s->w = std::move(*weights);
  } else {
    HART_ASSIGN_OR_RETURN(std::unique_ptr<tensor_source> src, checkpoint_source_open(params.base.model_dir));
    if (params.memory_fraction > 0)
      HART_RETURN_IF_ERROR(checkpoint_fits(*src, params.memory_fraction, before_weights));
    HART_ASSIGN_OR_RETURN(s->w, gpu::device_weights_load(*src, c, params.base.prec, params.fp8_tensor_cores,
                                                         gpu::weights_load_reporter()));
  }
  HART_ASSIGN_OR_RETURN(const device_free_bytes after_weights, device_free_now());
  s->swa_keep = swa_live_tokens(c);  // the CPU engine's bound, so both free the same SWA pages
  s->pages_per_seq = (params.max_context + P - 1) / P;
  s->max_entries = std::max<int64_t>(params.max_context / c.csa_rate, 1);
  bool any_hca = false;
  for (attention_kind k : c.layer_kinds) any_hca |= k == attention_kind::hca;
  s->n_idx_max = c.window + std::max<int64_t>(c.index_topk, any_hca ? params.max_context / c.hca_rate : 0);
  if (c.head_dim > sparse_attention_cuda_max_head_dim) {
    return invalid_argument("gpu engine: head_dim %lld is over the %lld the device attention holds",
                            (long long)c.head_dim, (long long)sparse_attention_cuda_max_head_dim);
  }
  s->kv_entries = gpu_kv_entries(params, c);
  s->bf16 = params.base.bf16_activations();
  HART_ASSIGN_OR_RETURN(
      s->lin, linear_cuda_context::create(params.max_batch_tokens, std::max<int64_t>(s->w.max_linear_in, 1)));
  {
    device_arena counter;
    arena_buffers unused;
    const size_t bytes = gpu::arena_layout(*s, counter, &unused);
    HART_ASSIGN_OR_RETURN(s->arena_mem, gpu::device_buffer::create(bytes));
    device_arena ar(s->arena_mem.get(), s->arena_mem.bytes());
    gpu::arena_layout(*s, ar, &s->a);
  }
  HART_RETURN_IF_ERROR(
      gpu::cuda_status(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking), "gpu engine: stream"));
  HART_RETURN_IF_ERROR(
      gpu::cuda_status(cudaStreamCreateWithFlags(&s->side, cudaStreamNonBlocking), "gpu engine: stream"));
  HART_RETURN_IF_ERROR(gpu::cuda_status(cudaEventCreateWithFlags(&s->fork_event, cudaEventDisableTiming),
                                        "gpu engine: event"));
  HART_RETURN_IF_ERROR(gpu::cuda_status(cudaEventCreateWithFlags(&s->join_event, cudaEventDisableTiming),
                                        "gpu engine: event"));
  HART_ASSIGN_OR_RETURN(s->side_lin,
                        linear_cuda_context::create(std::min(params.max_batch_tokens, gpu::k_branch_tokens),
                                                    std::max<int64_t>(s->w.max_linear_in, 1)));
  HART_ASSIGN_OR_RETURN(s->staging, gpu::pinned_staging::create(k_staging_bytes));
  HART_ASSIGN_OR_RETURN(s->readback,
                        gpu::pinned_readback::create(k_readback_chunk_bytes, piece_pool_default_threads()));
  // The KV pool last: the memory plan sizes it from what everything above left.
  int64_t n_full = params.full_pages ? params.full_pages : 8 * s->pages_per_seq;
  int64_t n_swa = params.swa_pages ? params.swa_pages : 8 * s->pages_per_seq;
  if (params.memory_fraction > 0) {
    HART_ASSIGN_OR_RETURN(const device_free_bytes after_workspaces, device_free_now());
    HART_ASSIGN_OR_RETURN(const kv_page_layout page, kv_page_layout_make(c, P, s->kv_entries));
    cache::memory_plan_params mp;
    mp.device_total = int64_t(after_workspaces.total);
    mp.device_free = int64_t(after_workspaces.free);
    mp.fraction = params.memory_fraction;
    // Weights made before load (dummy, bench) were already in use at before_weights.
    mp.weights = weights ? int64_t(s->w.bytes) : int64_t(before_weights.free) - int64_t(after_weights.free);
    mp.workspaces = int64_t(after_weights.free) - int64_t(after_workspaces.free);
    mp.full_page_bytes = page.full_page_bytes();
    mp.swa_page_bytes = page.swa_page_bytes();
    mp.page_size = P;
    mp.window = c.window;
    mp.max_context = params.max_context;
    mp.max_running = params.max_running;
    mp.max_batch_tokens = params.max_batch_tokens;
    mp.n_full_pages = params.full_pages;
    mp.n_swa_pages = params.swa_pages;
    HART_ASSIGN_OR_RETURN(cache::memory_plan plan, cache::memory_plan_make(mp));
    n_full = plan.n_full_pages;
    n_swa = plan.n_swa_pages;
    HART_LOG_INFO("gpu engine: memory plan\n%s", plan.describe().c_str());
    s->plan = std::make_unique<cache::memory_plan>(std::move(plan));
  }
  HART_ASSIGN_OR_RETURN(s->pool, gpu::kv_pool::create(c, P, n_full, n_swa, s->kv_entries));
  HART_RETURN_IF_ERROR(gpu::compressors_supported(*s));  // reads the pool's layer addresses
  {
    const int64_t n_rows = gpu::moe_rows(*s);
    std::vector<int64_t> iota(n_rows);
    for (int64_t i = 0; i < n_rows; ++i) iota[i] = i * c.hidden_size;
    HART_RETURN_IF_ERROR(s->upload(s->a.iota_d, iota));
    HART_RETURN_IF_ERROR(gpu::cuda_status(cudaStreamSynchronize(s->stream), "gpu engine: load"));
  }
  // NOTE(gpu): page ids come from a kv_store over a layer-less copy of the
  // config: the same allocator and page_table ownership as the CPU engine,
  // with no host KV behind the ids (one float per page).
  model_config ids_cfg = c;
  ids_cfg.n_layers = 0;
  ids_cfg.layer_kinds.clear();
  s->page_ids = std::make_unique<kv_store>(ids_cfg, P);
  HART_LOG_INFO(
      "gpu engine: %s on device %d, %.1f MiB weights, %.1f MiB KV (%lld full + %lld swa pages; %s), %.1f MiB "
      "arena",
      c.summary().c_str(), params.device, s->w.bytes / 1048576.0, s->pool.bytes() / 1048576.0,
      (long long)n_full, (long long)n_swa,
      s->kv_entries ? "window and compressed KV as 584-B FP8 entries" : "fp32 rows",
      s->arena_mem.bytes() / 1048576.0);
  return s;
}

}  // namespace

status_or<std::unique_ptr<gpu_engine>> gpu_engine::load(const gpu_engine_params& params) {
  HART_ASSIGN_OR_RETURN(std::unique_ptr<state> s, state_load(params, nullptr, nullptr));
  return std::unique_ptr<gpu_engine>(new gpu_engine(std::move(s)));
}

status_or<std::unique_ptr<gpu_engine>> gpu_engine::load(const gpu_engine_params& params,
                                                        const model_config& cfg,
                                                        gpu::device_weights weights) {
  HART_ASSIGN_OR_RETURN(std::unique_ptr<state> s, state_load(params, &cfg, &weights));
  return std::unique_ptr<gpu_engine>(new gpu_engine(std::move(s)));
}

sequence_state gpu_engine::new_sequence() const {
  sequence_state seq;
  seq.engine_id = s_->id;
  seq.pages->store = s_->page_ids.get();
  seq.pages->owned = true;
  return seq;
}

sequence_state gpu_engine::bind_pages(const std::vector<int32_t>& full, const std::vector<int32_t>& swa,
                                      int64_t n_computed) const {
  sequence_state seq;
  seq.engine_id = s_->id;
  seq.pages->store = s_->page_ids.get();  // marks the engine; the ids are the cache's, never allocated here
  seq.pages->owned = false;
  seq.pages->full = full;
  seq.pages->swa = swa;
  seq.n_tokens = n_computed;
  return seq;
}

namespace {

// A cache-bound sequence must have pages reserved up to `end`, live where a
// window or ring still reads (as engine::prepare_pages checks), inside the pool.
status check_bound_pages(const engine_state& s, size_t i, const sequence_state& seq, int64_t end) {
  const page_table& pt = *seq.pages;
  const int64_t P = s.pool.page_size(), n_pages = (end + P - 1) / P;
  if (int64_t(pt.full.size()) < n_pages || int64_t(pt.swa.size()) < n_pages) {
    return failed_precondition(
        "forward: item %zu: positions up to %lld need %lld pages but the cache reserved %zu", i,
        (long long)end, (long long)n_pages, std::min(pt.full.size(), pt.swa.size()));
  }
  const int64_t first_live = std::max<int64_t>(0, seq.n_tokens - s.swa_keep) / P;
  for (int64_t pg = 0; pg < n_pages; ++pg) {
    const int32_t f = pt.full[pg], w = pt.swa[pg];
    if (f < 0 || (pg >= first_live && w < 0)) {
      return failed_precondition("forward: item %zu: page %lld (positions from %lld) is not live", i,
                                 (long long)pg, (long long)(pg * P));
    }
    if (f >= s.pool.n_full() || w >= s.pool.n_swa()) {
      return invalid_argument(
          "forward: item %zu: page %lld has ids (full %d, swa %d) outside the GPU KV pool "
          "(%lld full, %lld swa pages)",
          i, (long long)pg, f, w, (long long)s.pool.n_full(), (long long)s.pool.n_swa());
    }
  }
  return {};
}

engine_state::page_owner page_owner_of(const sequence_state& seq) {
  return seq.pages->owned ? engine_state::page_owner::engine : engine_state::page_owner::cache;
}

status validate_batch(const engine_state& s, const std::vector<batch_item>& batch) {
  if (batch.empty()) return invalid_argument("forward: empty batch");
  // The pool's owner so far, else the first item's: every item must agree.
  engine_state::page_owner pool_owner = s.pages_from;
  if (pool_owner == engine_state::page_owner::none && batch[0].seq && batch[0].seq->pages) {
    pool_owner = page_owner_of(*batch[0].seq);
  }
  const model_config& c = s.cfg;
  std::set<const sequence_state*> seen;
  for (size_t i = 0; i < batch.size(); ++i) {
    const batch_item& it = batch[i];
    if (!it.seq) return invalid_argument("forward: item %zu has no sequence", i);
    if (!seen.insert(it.seq).second) return invalid_argument("forward: item %zu repeats a sequence", i);
    if (it.seq->engine_id != s.id || !it.seq->pages || it.seq->pages->store != s.page_ids.get()) {
      return invalid_argument("forward: item %zu's sequence was not made by this GPU engine", i);
    }
    if (page_owner_of(*it.seq) != pool_owner) {
      return failed_precondition(
          "forward: item %zu's sequence is %s, but this GPU engine's pool serves %s "
          "(their page ids would collide; use one or the other per engine)",
          i, it.seq->pages->owned ? "the engine's own" : "cache-bound",
          it.seq->pages->owned ? "cache-bound pages" : "its own sequences");
    }
    if (it.tokens.empty()) return invalid_argument("forward: item %zu has no tokens (empty prompt)", i);
    for (size_t j = 0; j < it.tokens.size(); ++j) {
      if (it.tokens[j] < 0 || it.tokens[j] >= c.vocab_size) {
        return out_of_range("forward: item %zu token %zu has id %d, outside the vocabulary [0, %lld)", i, j,
                            it.tokens[j], (long long)c.vocab_size);
      }
    }
    const int64_t end = it.seq->n_tokens + int64_t(it.tokens.size());
    if (c.max_position > 0 && end > c.max_position) {
      return out_of_range("forward: item %zu would reach %lld tokens, past max_position_embeddings %lld", i,
                          (long long)end, (long long)c.max_position);
    }
    if (end > s.params.max_context) {
      return out_of_range("forward: item %zu would reach %lld tokens, past the GPU engine's max_context %lld",
                          i, (long long)end, (long long)s.params.max_context);
    }
    if (!it.seq->pages->owned) HART_RETURN_IF_ERROR(check_bound_pages(s, i, *it.seq, end));
  }
  return {};
}

// Pages for every item's new positions; on exhaustion the pages taken here go back.
status prepare_pages(engine_state& s, const std::vector<batch_item>& batch) {
  const int64_t P = s.pool.page_size();
  std::vector<std::pair<page_table*, size_t>> before;
  status st;
  for (const batch_item& it : batch) {
    page_table& pt = *it.seq->pages;
    if (!pt.owned) continue;  // the cache reserved them (check_bound_pages)
    before.emplace_back(&pt, pt.full.size());
    const int64_t n_pages = (it.seq->n_tokens + int64_t(it.tokens.size()) + P - 1) / P;
    while (st.ok() && int64_t(pt.full.size()) < n_pages) {
      pt.full.push_back(pt.store->alloc_full());
      pt.swa.push_back(pt.store->alloc_swa());
      if (pt.full.back() >= s.pool.n_full() || pt.swa.back() >= s.pool.n_swa()) {
        st = resource_exhausted("forward: the GPU KV pool is full (%lld full, %lld swa pages)",
                                (long long)s.pool.n_full(), (long long)s.pool.n_swa());
      }
    }
    if (!st.ok()) break;
  }
  if (st.ok()) return st;
  for (auto& [pt, n] : before) {
    while (pt->full.size() > n) {
      pt->store->free_full(pt->full.back());
      pt->store->free_swa(pt->swa.back());
      pt->full.pop_back();
      pt->swa.pop_back();
    }
  }
  return st;
}

void release_old_pages(const engine_state& s, sequence_state& seq) {
  page_table& pt = *seq.pages;
  if (!pt.owned) return;  // the cache decides for its pages
  const int64_t P = s.pool.page_size();
  const int64_t n_dead = std::max<int64_t>(0, seq.n_tokens - s.swa_keep) / P;  // wholly behind every window
  for (int64_t pg = 0; pg < n_dead && pg < int64_t(pt.swa.size()); ++pg) {
    if (pt.swa[pg] >= 0) {
      pt.store->free_swa(pt.swa[pg]);
      pt.swa[pg] = -1;
    }
  }
}

}  // namespace

status gpu_engine::forward(const std::vector<batch_item>& batch, std::vector<float>* logits,
                           forward_trace* trace) const {
  engine_state& s = *s_;
  HART_RETURN_IF_ERROR(validate_batch(s, batch));
  const int64_t cap = s.params.max_batch_tokens;
  HART_RETURN_IF_ERROR(prepare_pages(s, batch));
  s.pages_from = page_owner_of(*batch[0].seq);
  if (logits) {
    // Sized once (a caller reusing its vector across steps keeps its pages: no
    // fill, no page faults), then every pass writes its rows in place.
    int64_t n_rows = 0;
    for (const batch_item& it : batch) {
      n_rows +=
          it.logits == logits_request::all ? int64_t(it.tokens.size()) : it.logits == logits_request::last;
    }
    logits->resize(size_t(n_rows * s.cfg.vocab_size));
  }
  if (trace) gpu::trace_reset(trace);

  // Passes of at most `cap` tokens, items cut in position order; a trace is
  // captured per pass and appended (token rows in call order, as one pass).
  pass p;
  std::vector<int64_t> rows;
  size_t logits_at = 0;
  auto flush = [&]() -> status {
    if (p.ids.empty()) return {};
    forward_trace part;
    if (trace) part.capture_hidden = trace->capture_hidden;
    float* out = logits ? logits->data() + logits_at : nullptr;
    gpu::mark_decode_pass(s, &p, logits ? rows.size() : 0, trace != nullptr);
    HART_RETURN_IF_ERROR(gpu::run_pass(s, p, rows, out, trace ? &part : nullptr));
    if (trace) gpu::trace_append(trace, std::move(part));
    logits_at += rows.size() * size_t(s.cfg.vocab_size);
    p = pass();
    rows.clear();
    return {};
  };
  for (const batch_item& it : batch) {
    const int64_t n = int64_t(it.tokens.size());
    for (int64_t off = 0; off < n;) {
      const int64_t take = std::min(n - off, cap - p.n_tokens());
      pass::span sp{it.seq, p.n_tokens(), take, it.seq->n_tokens + off};
      for (int64_t j = 0; j < take; ++j) {
        p.ids.push_back(it.tokens[off + j]);
        p.pos.push_back(sp.p0 + j);
        const bool last = off + j == n - 1;
        if (it.logits == logits_request::all || (it.logits == logits_request::last && last))
          rows.push_back(sp.row0 + j);
      }
      p.spans.push_back(sp);
      off += take;
      if (p.n_tokens() == cap) HART_RETURN_IF_ERROR(flush());
    }
  }
  HART_RETURN_IF_ERROR(flush());
  for (const batch_item& it : batch) {
    it.seq->n_tokens += int64_t(it.tokens.size());
    release_old_pages(s, *it.seq);
  }
  return {};
}

}  // namespace hart
