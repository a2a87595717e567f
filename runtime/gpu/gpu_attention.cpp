// The attention layer on the device (runtime/model/attention.cpp and
// compressor.cpp are the reference): projections, window KV into SWA pages,
// compressor rings and emitted entries into the pool, indexer scores + top-k,
// gathered sparse attention (fp32 rows, or A1 over FP8 entries: kv_entries),
// inverse RoPE and the grouped output projection.
// Offsets and index lists are built per layer on the host (one copy, meta_batch)
// or, for a decode pass, on the device (decode_meta.h).
#include "kernels/flash_compressor/flash_compressor.h"
#include "kernels/indexer/indexer.h"
#include "kernels/lightning_topk/lightning_topk.h"
#include "kernels/quant/quant.h"
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/rope/rope.h"
#include "kernels/sparse_attention/sparse_attention.h"
#include "kernels/sparse_decode_attention/sparse_decode_attention.h"
#include "runtime/gpu/decode_meta.h"
#include "runtime/gpu/engine_kernels.h"
#include "runtime/gpu/gpu_engine_impl.h"

#include <algorithm>
#include <cmath>

namespace hart::gpu {
namespace {

constexpr int64_t k_kv_qdq_block = 64;  // the reference's block on window / compressed KV

// An RMS norm whose output rows then take RoPE at pos[row / rows_per_pos] (one launch).
rms_norm_params norm_rope(rms_norm_params p, const int64_t* pos, const float* inv_freq, int64_t rope_dim,
                          int64_t rows_per_pos) {
  p.rope_pos = pos;
  p.rope_inv_freq = inv_freq;
  p.rope_dim = rope_dim;
  p.rope_rows_per_pos = rows_per_pos;
  return p;
}

// bf16: the official inference rounds the transform's output to bf16 before the QDQ.
status hadamard_fp4(float* x, int64_t n_rows, int64_t dim, bool bf16, cudaStream_t st) {
  HART_RETURN_IF_ERROR(hadamard_transform_cuda(x, n_rows, dim, 1.0f / std::sqrt(float(dim)), st));
  if (bf16) HART_RETURN_IF_ERROR(round_bf16_rows_cuda(x, n_rows, dim, dim, st));
  return fp4_act_qdq_cuda(x, n_rows * dim, std::min<int64_t>(32, dim), st);
}

// The pass's spans as the flash compressor reads them (flash_compressor_params).
struct compressor_spans {
  const int64_t* start = nullptr;                             // [n_seq] first position
  const int32_t* cu_tokens = nullptr;                         // [n_seq + 1]; null: one token per sequence
  const int32_t *full_pages = nullptr, *swa_pages = nullptr;  // [stride, n_seq]
  int64_t n_seq = 0, stride = 0;
};

// One compressor as the flash compressor sees it: its projections in the arena,
// its rings and entries (or indexer keys) in the pool's sections of layer il.
flash_compressor_desc compressor_desc(const engine_state& s, int64_t il, const device_compressor& c,
                                      bool indexer, const float* kv, const float* gate,
                                      const float* inv_freq) {
  const kv_pool& pool = s.pool;
  const bool fp8 = s.params.base.prec == precision::fp8;
  float* const base = pool.base();
  flash_compressor_desc d;
  d.kv = kv;
  d.gate = gate;
  d.ape = c.ape;
  d.norm = c.norm;
  d.inv_freq = inv_freq;
  d.rate = c.rate;
  d.dim = c.dim;
  d.rope_dim = s.cfg.rope_dim;
  d.overlap = c.overlap;
  d.eps = float(s.cfg.norm_eps);
  d.bf16 = s.bf16;
  const int64_t ring0 = indexer ? pool.index_ring(il, 0, 0) : pool.ring(il, 0, 0);
  const int64_t ring1 = indexer ? pool.index_ring(il, 1, 0) : pool.ring(il, 1, 0);
  const int64_t ent0 = indexer ? pool.index_key(il, 0, 0) : pool.entry(il, 0, 0);
  const int64_t ent1 = indexer ? pool.index_key(il, 1, 0) : pool.entry(il, 1, 0);
  d.ring = base + ring0;
  d.ring_page_stride = ring1 - ring0;
  d.entries = base + ent0;
  d.entry_page_stride_bytes = (ent1 - ent0) * int64_t(sizeof(float));
  if (indexer) {
    d.quant = fp8 ? flash_entry_quant::hadamard_fp4 : flash_entry_quant::none;
  } else if (s.kv_entries) {
    d.quant = flash_entry_quant::fp8_nope;
    d.format = flash_entry_format::kv_entry;  // packed 584 bytes apart, as the pool lays them out
  } else {
    d.quant = fp8 ? flash_entry_quant::fp8_nope : flash_entry_quant::none;
  }
  return d;
}

// Layer il's compressors (a CSA layer's main and indexer ones) over n_tokens
// tokens in the spans `sp`.
flash_compressor_params compressor_params(const engine_state& s, int64_t il, const compressor_spans& sp,
                                          int64_t n_tokens) {
  const device_layer& w = s.w.layers[il];
  const arena_buffers& A = s.a;
  const float* inv_freq = s.w.inv_freq_compress;
  flash_compressor_params fp;
  fp.comp[0] = compressor_desc(s, il, w.compressor, false, A.comp_a, A.comp_z, inv_freq);
  if (w.kind == attention_kind::csa) {
    fp.comp[1] = compressor_desc(s, il, w.index_compressor, true, A.index_a, A.index_z, inv_freq);
    fp.n_comp = 2;
  }
  fp.n_seq = sp.n_seq;
  fp.n_tokens = n_tokens;
  fp.start = sp.start;
  fp.cu_tokens = sp.cu_tokens;
  fp.full_pages = sp.full_pages;
  fp.swa_pages = sp.swa_pages;
  fp.pages_stride = sp.stride;
  fp.page_size = s.pool.page_size();
  return fp;
}

// The layer's compressors over the pass (flash_compressor.h): ring rows,
// every entry (and indexer key) whose block closes in the pass, in one launch
// for a decode pass, two for any other.
status compress(engine_state& s, const pass& p, int64_t il, const compressor_spans& sp) {
  const flash_compressor_params fp = compressor_params(s, il, sp, p.n_tokens());
  return sp.cu_tokens ? flash_compressor_prefill_cuda(fp, s.stream)
                      : flash_compressor_decode_cuda(fp, s.stream);
}

// Every CSA token's visible indexer keys: (t + 1) / m, and the longest.
std::vector<int32_t> indexer_lengths(const pass& p, int64_t m, int64_t* max_keys) {
  std::vector<int32_t> lengths(p.n_tokens(), 0);
  *max_keys = 0;
  for (const pass::span& sp : p.spans) {
    for (int64_t j = 0; j < sp.n; ++j) lengths[sp.row0 + j] = int32_t((sp.p0 + j + 1) / m);
    *max_keys = std::max(*max_keys, (sp.p0 + sp.n) / m);
  }
  return lengths;
}

// A layer's metadata at its device addresses, from either builder below.
struct layer_meta {
  const int64_t *win_dst = nullptr, *win_src = nullptr;                           // window KV rows
  int32_t* idx = nullptr;                                                         // [n_idx, T] attention rows
  const int32_t *page_base = nullptr, *full_pages = nullptr, *lengths = nullptr;  // CSA indexer
  int64_t n_idx = 0, max_keys = 0;
  std::vector<int32_t> host_lengths;  // host builder only (reference-tie re-picks)
  compressor_spans spans;             // compressed layers
};

// Built on the host from positions and page tables only, then one copy (any pass).
status host_layer_meta(engine_state& s, const pass& p, int64_t il, layer_meta* lm) {
  const model_config& c = s.cfg;
  const device_layer& w = s.w.layers[il];
  const kv_layer_addr& addr = s.pool.layer(il);
  const int64_t T = p.n_tokens(), hd = c.head_dim, W = c.window, P = s.pool.page_size();
  const bool csa = w.kind == attention_kind::csa, compressed = w.kind != attention_kind::sliding;
  // This pass's window KV into its SWA pages: every position has its own row.
  std::vector<int64_t> win_dst(T), win_src(T);
  for (const pass::span& sp : p.spans) {
    for (int64_t j = 0; j < sp.n; ++j) {
      const int64_t q = sp.p0 + j;
      win_dst[sp.row0 + j] = s.pool.window(il, sp.seq->pages->swa[q / P], q % P);
      win_src[sp.row0 + j] = (sp.row0 + j) * hd;
    }
  }
  // Index lists: window rows (oldest first), then CSA picks or every visible HCA entry.
  const int64_t m = compressed ? c.compress_rate(w.kind) : 0;
  int64_t n_extra = 0;
  if (csa) n_extra = c.index_topk;
  if (w.kind == attention_kind::hca) {
    for (const pass::span& sp : p.spans) n_extra = std::max(n_extra, (sp.p0 + sp.n) / m);
  }
  const int64_t n_idx = W + n_extra;
  std::vector<int32_t> idx(T * n_idx, -1), page_base(csa ? T : 0), full_pages;
  for (const pass::span& sp : p.spans) {
    const page_table& pt = *sp.seq->pages;
    const int32_t fbase = int32_t(full_pages.size());
    // Only the pages up to the span's end: a cache may have reserved more (the arena holds max_context's).
    const int64_t n_pg = (sp.p0 + sp.n + P - 1) / P;
    if (csa) full_pages.insert(full_pages.end(), pt.full.begin(), pt.full.begin() + n_pg);
    for (int64_t j = 0; j < sp.n; ++j) {
      const int64_t r = sp.row0 + j, t = sp.p0 + j;
      int32_t* row = idx.data() + r * n_idx;
      // Oldest first from column 0, as decode_meta lays them out (the official slot layout).
      const int64_t first = std::max<int64_t>(0, t - W + 1);
      for (int64_t q = first; q <= t; ++q) row[q - first] = addr.window_index(pt.swa[q / P], q % P);
      if (w.kind == attention_kind::hca) {
        for (int64_t i = 0; i < (t + 1) / m; ++i)
          row[W + i] = addr.entry_index(pt.full[i * m / P], i * m % P);
      }
      if (csa) page_base[r] = fbase;
    }
  }
  if (csa) lm->host_lengths = indexer_lengths(p, c.csa_rate, &lm->max_keys);
  // The compressors' spans: one per sequence, its page tables up to its end.
  std::vector<int64_t> start;
  std::vector<int32_t> cu, span_full, span_swa;
  int64_t stride = 1;
  if (compressed) {
    for (const pass::span& sp : p.spans) stride = std::max(stride, (sp.p0 + sp.n + P - 1) / P);
    cu.push_back(0);
    for (const pass::span& sp : p.spans) {
      const page_table& pt = *sp.seq->pages;
      // The flash compressor reads span s's rows at [cu[s], cu[s + 1]).
      if (sp.row0 != cu.back()) return internal_error("gpu engine: a pass's spans are not consecutive rows");
      start.push_back(sp.p0);
      cu.push_back(int32_t(sp.row0 + sp.n));
      for (int64_t i = 0; i < stride; ++i) {
        const bool in = i < (sp.p0 + sp.n + P - 1) / P;
        span_full.push_back(in ? pt.full[i] : -1);
        span_swa.push_back(in ? pt.swa[i] : -1);
      }
    }
  }
  meta_batch mb(s);
  lm->win_dst = mb.add(win_dst);
  lm->win_src = mb.add(win_src);
  lm->idx = mb.add(idx);
  lm->page_base = mb.add(page_base);  // the indexer reads its keys through the page lists too
  lm->full_pages = mb.add(full_pages);
  lm->lengths = mb.add(lm->host_lengths);
  lm->n_idx = n_idx;
  if (compressed) {
    lm->spans.start = mb.add(start);
    lm->spans.cu_tokens = mb.add(cu);
    lm->spans.full_pages = mb.add(span_full);
    lm->spans.swa_pages = mb.add(span_swa);
    lm->spans.n_seq = int64_t(start.size());
    lm->spans.stride = stride;
  }
  return mb.flush();
}

// Built on the device (decode_meta.h) from the positions and page tables
// run_pass uploaded: a decode pass, capturable as a graph. Every token is its
// own sequence to the compressors.
status device_layer_meta(engine_state& s, const pass& p, int64_t il, layer_meta* lm) {
  const model_config& c = s.cfg;
  const device_layer& w = s.w.layers[il];
  const int64_t T = p.n_tokens();
  const bool csa = w.kind == attention_kind::csa, hca = w.kind == attention_kind::hca;
  const int64_t len = std::min(p.len_bucket, s.params.max_context);
  lm->n_idx = c.window + (csa ? c.index_topk : hca ? len / c.hca_rate : 0);
  lm->max_keys = csa ? len / c.csa_rate : 0;
  meta_batch mb(s);
  decode_meta_params dp;
  dp.layer = s.pool.layer(il);
  dp.pos = s.a.pos;
  dp.swa_pages = s.a.dec_swa;
  dp.full_pages = s.a.dec_full;
  dp.stride = p.page_stride;
  dp.n_tokens = T;
  dp.window = c.window;
  dp.n_idx = lm->n_idx;
  dp.hca = hca;
  dp.win_dst = mb.reserve<int64_t>(T);
  dp.win_src = mb.reserve<int64_t>(T);
  dp.idx = mb.reserve<int32_t>(T * lm->n_idx);
  if (csa) {
    dp.page_base = mb.reserve<int32_t>(T);
    dp.lengths = mb.reserve<int32_t>(T);
  }
  HART_RETURN_IF_ERROR(mb.flush());  // reservation errors
  lm->win_dst = dp.win_dst;
  lm->win_src = dp.win_src;
  lm->idx = dp.idx;
  lm->page_base = dp.page_base;
  lm->full_pages = s.a.dec_full;
  lm->lengths = dp.lengths;
  lm->spans = {s.a.pos, nullptr, s.a.dec_full, s.a.dec_swa, T, p.page_stride};
  return decode_meta_cuda(dp, s.stream);
}

// Indexer picks [k_top, T] for the pass: every token's visible keys scored in
// one launch straight from the pool's pages (through the page lists), then the
// top-k (lowest-index ties on the device; sequences in reference-tie mode
// re-pick on the host like the CPU engine).
status index_topk(engine_state& s, const pass& p, int64_t il, const layer_meta& lm) {
  arena_buffers& A = s.a;
  const model_config& c = s.cfg;
  const int64_t m = c.csa_rate, nI = c.index_n_heads, dI = c.index_head_dim, K = c.index_topk;
  const int64_t T = p.n_tokens(), S = s.max_entries;
  indexer_score_paged_params ip;
  ip.q = A.index_q;
  ip.w = A.index_w;
  ip.keys = s.pool.base();
  ip.lengths = lm.lengths;
  ip.page_base = lm.page_base;
  ip.pages = lm.full_pages;
  ip.score = A.scores;
  ip.n_tokens = T;
  ip.n_heads = nI;
  ip.head_dim = dI;
  ip.max_keys = lm.max_keys;
  ip.score_stride = S;
  ip.rate = m;
  ip.page_size = s.pool.page_size();
  ip.key_off = s.pool.index_key(il, 0, 0);
  ip.page_floats = s.pool.index_key(il, 1, 0) - ip.key_off;
  ip.softmax_scale = s.bf16 ? 1.0f : 1.0f / std::sqrt(float(dI));  // bf16: folded into the head weights
  ip.bf16 = s.bf16;
  HART_RETURN_IF_ERROR(indexer_score_paged_cuda(ip, s.stream));
  HART_RETURN_IF_ERROR(lightning_topk_cuda({A.scores, lm.lengths, nullptr, A.picks, T, S, K}, s.stream));
  for (const pass::span& sp : p.spans) {
    const int64_t ref_len = sp.seq->tie_reference_length;
    if (ref_len <= 0) continue;
    // Reference tie mode (attention.cpp): rows as long as the reference's call, future entries at −inf.
    std::vector<float> sc;
    HART_RETURN_IF_ERROR(s.download(&sc, A.scores + sp.row0 * S, sp.n * S));
    std::vector<int32_t> picks(sp.n * K, -1);
    for (int64_t j = 0; j < sp.n; ++j) {
      const int64_t n_vis = lm.host_lengths[sp.row0 + j];
      if (n_vis == 0) continue;
      const int64_t n_row = std::max(n_vis, ref_len / m);
      std::vector<float> row(n_row, -INFINITY);
      std::copy_n(sc.data() + j * S, n_vis, row.data());
      int32_t* pk = picks.data() + j * K;
      HART_RETURN_IF_ERROR(topk_cpu({row.data(), pk, n_row, std::min(K, n_row), true}));
      for (int64_t i = 0; i < K; ++i) {
        if (pk[i] >= n_vis) pk[i] = -1;
      }
    }
    HART_RETURN_IF_ERROR(s.upload(A.picks + sp.row0 * K, picks));
  }
  return {};
}

// Attention of the pass's queries over their index lists (window, then picks
// or HCA entries): A1 over FP8 entries (the window's slots in one pool, the
// layer's entries in another, both lists in one array), k_entry_attention_queries
// at a time; or the fp32 gathered kernel over pool rows.
status attend(engine_state& s, int64_t il, const layer_meta& lm, const float* sink, int64_t T) {
  arena_buffers& A = s.a;
  const int64_t H = s.cfg.n_heads, hd = s.cfg.head_dim, W = s.cfg.window;
  const float scale = 1.0f / std::sqrt(float(hd));
  if (s.kv_entries) {
    sparse_decode_attention_params ap;
    ap.pool0 = s.pool.window_pool(il);
    ap.n_idx0 = W;
    ap.n_idx1 = lm.n_idx - W;
    if (ap.n_idx1 > 0) ap.pool1 = s.pool.entry_pool(il);
    ap.idx_stride = lm.n_idx;
    ap.sink = sink;
    ap.n_heads = H;
    ap.scale = scale;
    ap.bf16 = s.bf16;
    ap.workspace = A.entry_workspace;
    ap.workspace_bytes = A.entry_workspace_bytes;
    for (int64_t t0 = 0; t0 < T; t0 += k_entry_attention_queries) {
      ap.n_queries = std::min(k_entry_attention_queries, T - t0);
      ap.q_f32 = A.q + t0 * H * hd;
      ap.out_f32 = A.o + t0 * H * hd;
      ap.idx0 = lm.idx + t0 * lm.n_idx;
      if (ap.n_idx1 > 0) ap.idx1 = ap.idx0 + W;
      HART_RETURN_IF_ERROR(sparse_decode_attention_cuda(ap, s.stream));
    }
    return {};
  }
  sparse_attention_gather_params ap{A.q, s.pool.base(), lm.idx,          sink, A.o,  T, H,
                                    hd,  lm.n_idx,      s.pool.n_rows(), hd,   scale};
  ap.bf16 = s.bf16;
  // Sliced index lists (few tokens) make a token's output depend on the batch: not under --deterministic.
  if (!s.params.base.deterministic) {
    ap.workspace = A.attn_workspace;
    ap.workspace_bytes = sparse_attention_cuda_workspace_bytes(H, hd);
  }
  return sparse_attention_cuda(ap, s.stream);
}

}  // namespace

status compressors_supported(const engine_state& s) {
  for (int64_t il = 0; il < s.cfg.n_layers; ++il) {
    if (s.w.layers[il].kind == attention_kind::sliding) continue;
    const status st = flash_compressor_cuda_supports(compressor_params(s, il, compressor_spans{}, 0));
    if (!st.ok())
      return status(st.code(), "gpu engine: layer " + std::to_string(il) + "'s compressors: " + st.message());
  }
  return {};
}

status attention_run(engine_state& s, const pass& p, int64_t il, const float* x, float* y,
                     std::vector<int32_t>* topk) {
  arena_buffers& A = s.a;
  const model_config& c = s.cfg;
  const device_layer& w = s.w.layers[il];
  const int64_t T = p.n_tokens(), H = c.n_heads, hd = c.head_dim, rd = c.rope_dim, W = c.window;
  const int64_t P = s.pool.page_size();
  const bool csa = w.kind == attention_kind::csa, compressed = w.kind != attention_kind::sliding;
  const bool fp8 = s.params.base.prec == precision::fp8;
  const float eps = float(c.norm_eps);
  const float* inv_freq = w.kind == attention_kind::sliding ? s.w.inv_freq_main : s.w.inv_freq_compress;
  cudaStream_t st = s.stream;

  // Projections (attention.cpp project()): the KV's, the compressors' and the
  // indexer's key side on the side stream (small passes), the query's here.
  HART_RETURN_IF_ERROR(branch_run(s, T, [&]() -> status {
    HART_RETURN_IF_ERROR(linear_run_activation(s, w.wkv, x, T, A.kv));
    HART_RETURN_IF_ERROR(rms_norm_cuda(
        official_norm(s, norm_rope({A.kv, w.kv_norm, A.kv, T, hd, 0, 0, eps}, A.pos, inv_freq, rd, 1)),
        s.stream));
    // (FP8 entries quantize as they are written.)
    if (fp8 && !s.kv_entries)
      HART_RETURN_IF_ERROR(rows_fp8_qdq_cuda(A.kv, T, hd - rd, k_kv_qdq_block, hd, s.stream));
    if (compressed) {
      HART_RETURN_IF_ERROR(linear_run(s, w.compressor.wkv, x, T, A.comp_a));
      HART_RETURN_IF_ERROR(linear_run(s, w.compressor.wgate, x, T, A.comp_z));
    }
    if (csa) {
      const int64_t nI = c.index_n_heads, dI = c.index_head_dim;
      HART_RETURN_IF_ERROR(linear_run(s, w.index_compressor.wkv, x, T, A.index_a));
      HART_RETURN_IF_ERROR(linear_run(s, w.index_compressor.wgate, x, T, A.index_z));
      HART_RETURN_IF_ERROR(linear_run_activation(s, w.index_weights_proj, x, T, A.index_w));
      // bf16: the official inference folds the score scale dI^-0.5 in here, one rounded product.
      const float wscale = s.bf16 ? float(std::pow(double(dI), -0.5) * std::pow(double(nI), -0.5))
                                  : 1.0f / std::sqrt(float(nI));
      HART_RETURN_IF_ERROR(scale_cuda(A.index_w, T * nI, wscale, s.bf16, s.stream));
    }
    return {};
  }));
  HART_RETURN_IF_ERROR(linear_run_activation(s, w.wq_a, x, T, A.qr));
  HART_RETURN_IF_ERROR(
      rms_norm_cuda(official_norm(s, {A.qr, w.q_norm, A.qr, T, c.q_lora_rank, 0, 0, eps}), st));
  HART_RETURN_IF_ERROR(linear_run_activation(s, w.wq_b, A.qr, T, A.q));
  // The per-head q RMS (no weight; bf16: computed on bf16 tensors as the official inference does).
  rms_norm_params q_rms = norm_rope({A.q, nullptr, A.q, T * H, hd, 0, 0, eps}, A.pos, inv_freq, rd, H);
  q_rms.bf16 = s.bf16;
  HART_RETURN_IF_ERROR(rms_norm_cuda(q_rms, st));
  if (csa) {
    const int64_t nI = c.index_n_heads, dI = c.index_head_dim;
    HART_RETURN_IF_ERROR(linear_run_activation(s, w.index_wq_b, A.qr, T, A.index_q));
    rope_params qr{A.index_q, A.pos, inv_freq, T, nI, dI, rd};
    qr.bf16 = s.bf16;
    HART_RETURN_IF_ERROR(rope_cuda(qr, st));
    if (fp8) HART_RETURN_IF_ERROR(hadamard_fp4(A.index_q, T * nI, dI, s.bf16, st));
  }
  // The layer's metadata (built while the device runs the projections), then its KV writes.
  layer_meta lm;
  HART_RETURN_IF_ERROR(p.device_meta ? device_layer_meta(s, p, il, &lm) : host_layer_meta(s, p, il, &lm));
  const int64_t n_idx = lm.n_idx, m = compressed ? c.compress_rate(w.kind) : 0;
  HART_RETURN_IF_ERROR(branch_join(s));

  if (s.kv_entries) {
    HART_RETURN_IF_ERROR(kv_entry_encode_rows_cuda({A.kv, lm.win_src, s.pool.base(), lm.win_dst, T}, st));
  } else {
    HART_RETURN_IF_ERROR(copy_rows_cuda(s.pool.base(), lm.win_dst, A.kv, lm.win_src, hd, T, false, st));
  }
  // Compressors next: an entry whose block closes at token t is visible to t.
  if (compressed) HART_RETURN_IF_ERROR(compress(s, p, il, lm.spans));
  if (csa) {
    HART_RETURN_IF_ERROR(index_topk(s, p, il, lm));
    picks_to_rows_params tr;
    tr.picks = A.picks;
    tr.page_base = lm.page_base;
    tr.full_pages = lm.full_pages;
    tr.idx = lm.idx;
    tr.n_tokens = T;
    tr.k = c.index_topk;
    tr.n_idx = n_idx;
    tr.col0 = W;
    tr.rate = m;
    tr.page_size = P;
    // Picks become pool rows, or with FP8 entries slots of the layer's entry pool (P / m per page).
    tr.full_page_rows = s.kv_entries ? P / m : s.pool.full_page_rows();
    tr.entry_row0 = s.kv_entries ? 0 : s.pool.entry_row0(il);
    HART_RETURN_IF_ERROR(picks_to_rows_cuda(tr, st));
    if (topk) HART_RETURN_IF_ERROR(s.download(topk, A.picks, T * c.index_topk));
  }
  HART_RETURN_IF_ERROR(attend(s, il, lm, w.attn_sink, T));

  // Undo the values' rotation at the query position, then the grouped output projection.
  rope_params inverse{A.o, A.pos, inv_freq, T, H, hd, rd, 0, 1.0f, true};
  inverse.bf16 = s.bf16;
  HART_RETURN_IF_ERROR(rope_cuda(inverse, st));
  HART_RETURN_IF_ERROR(linear_run_groups(s, w.wo_a, c.o_groups, A.o, T, H * hd, A.u));
  if (s.bf16) HART_RETURN_IF_ERROR(round_bf16_rows_cuda(A.u, T, w.wo_a.out, w.wo_a.out, st));
  return linear_run_activation(s, w.wo_b, A.u, T, y);
}

}  // namespace hart::gpu
