// The attention layer on the device (runtime/model/attention.cpp and
// compressor.cpp are the reference): projections, window KV into SWA pages,
// compressor rings and emitted entries into the pool, indexer scores + top-k,
// gathered sparse attention (fp32 rows, or A1 over FP8 entries: kv_entries),
// inverse RoPE and the grouped output projection.
// Offsets and index lists are built per layer on the host (one copy, meta_batch)
// or, for a decode pass, on the device (decode_meta.h).
#include <algorithm>
#include <cmath>

#include "kernels/compress_pool/compress_pool.h"
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

namespace hart::gpu {
namespace {

constexpr int64_t k_kv_qdq_block = 64;  // the reference's block on window / compressed KV

// fp8_entry: the fp8_nope values stored as 584-byte FP8 entries (kv_entries).
enum class entry_quant { none, fp8_nope, fp8_entry, hadamard_fp4 };

// An RMS norm whose output rows then take RoPE at pos[row / rows_per_pos] (one launch).
rms_norm_params norm_rope(rms_norm_params p, const int64_t* pos, const float* inv_freq, int64_t rope_dim,
                          int64_t rows_per_pos) {
  p.rope_pos = pos;
  p.rope_inv_freq = inv_freq;
  p.rope_dim = rope_dim;
  p.rope_rows_per_pos = rows_per_pos;
  return p;
}

status hadamard_fp4(float* x, int64_t n_rows, int64_t dim, cudaStream_t st) {
  HART_RETURN_IF_ERROR(hadamard_transform_cuda(x, n_rows, dim, 1.0f / std::sqrt(float(dim)), st));
  return fp4_act_qdq_cuda(x, n_rows * dim, std::min<int64_t>(32, dim), st);
}

// Where a compressor's pass writes (compressor_push for every token): ring rows
// of the chunk, entries of every block that closes in it (candidates from the
// chunk's rows or, before the chunk, from the pool's rings), then the rings the
// next pass reads. Host-built (only addresses), then packed with the layer's metadata.
struct compress_plan {
  std::vector<const float*> kvp, gp;  // each emission owns n_cand_max consecutive pointer slots
  std::vector<int64_t> n_cand, ent_pos, ent_dst, ent_src, ring_dst, ring_src;
};

// The plan's arrays at their device addresses, and how many entries and ring rows it writes.
struct compress_meta : compress_plan_arrays {
  int64_t n_emit = 0, ring_rows = 0;
};

compress_plan plan_compress(const engine_state& s, const pass& p, int64_t il, const device_compressor& c,
                            bool indexer) {
  const kv_pool& pool = s.pool;
  const int64_t m = c.rate, dim = c.dim, width = c.overlap ? 2 * dim : dim, rw = 2 * width, P = pool.page_size();
  float* const base = pool.base();
  compress_plan cp;
  for (const pass::span& sp : p.spans) {
    const page_table& pt = *sp.seq->pages;
    auto row = [&](int64_t q) -> const float* {
      if (q >= sp.p0) return s.a.ring_stage + (sp.row0 + q - sp.p0) * rw;
      const int32_t page = pt.swa[q / P];
      return base + (indexer ? pool.index_ring(il, page, q) : pool.ring(il, page, q));
    };
    for (int64_t j = 0; j < sp.n; ++j) {
      const int64_t q = sp.p0 + j;
      if ((q + 1) % m == 0) {
        const int64_t blk = q / m, first = blk * m;
        int64_t nc = 0;
        auto add = [&](const float* r, int64_t half) {
          cp.kvp.push_back(r + half);
          cp.gp.push_back(r + width + half);
          ++nc;
        };
        if (c.overlap && blk > 0) {
          for (int64_t jj = 0; jj < m; ++jj) add(row(first - m + jj), 0);
        }
        for (int64_t jj = 0; jj < m; ++jj) add(row(first + jj), c.overlap ? dim : 0);
        cp.kvp.resize(size_t(cp.ent_pos.size() + 1) * s.n_cand_max, nullptr);
        cp.gp.resize(cp.kvp.size(), nullptr);
        cp.n_cand.push_back(nc);
        cp.ent_pos.push_back(first);
        const int32_t fp = pt.full[first / P];
        cp.ent_dst.push_back(indexer ? pool.index_key(il, fp, first % P) : pool.entry(il, fp, first % P));
        cp.ent_src.push_back(int64_t(cp.ent_src.size()) * dim);
      }
      // The ring keeps the last `ring` positions the chunk wrote into each page.
      const int64_t ring = indexer ? 2 * s.cfg.csa_rate : (c.overlap ? 2 * m : m);
      const int64_t last = std::min(sp.p0 + sp.n, (q / P + 1) * P) - 1;
      if (q > last - ring) {
        const int32_t page = pt.swa[q / P];
        cp.ring_dst.push_back(indexer ? pool.index_ring(il, page, q) : pool.ring(il, page, q));
        cp.ring_src.push_back((sp.row0 + j) * rw);
      }
    }
  }
  return cp;
}

compress_meta add_compress_plan(meta_batch& mb, const compress_plan& cp) {
  compress_meta cm;
  cm.kvp = mb.add(cp.kvp);
  cm.gp = mb.add(cp.gp);
  cm.n_cand = mb.add(cp.n_cand);
  cm.ent_pos = mb.add(cp.ent_pos);
  cm.ent_dst = mb.add(cp.ent_dst);
  cm.ent_src = mb.add(cp.ent_src);
  cm.ring_dst = mb.add(cp.ring_dst);
  cm.ring_src = mb.add(cp.ring_src);
  cm.n_emit = int64_t(cp.ent_pos.size());
  cm.ring_rows = int64_t(cp.ring_dst.size());
  return cm;
}

// The compressor's kernels over the pass, on its planned metadata.
status compress(engine_state& s, const pass& p, const device_compressor& c, const compress_meta& cm, const float* a,
                const float* z, entry_quant quant, const float* inv_freq) {
  arena_buffers& A = s.a;
  const int64_t m = c.rate, dim = c.dim, width = c.overlap ? 2 * dim : dim, rw = 2 * width;
  const int64_t T = p.n_tokens();
  float* const base = s.pool.base();
  HART_RETURN_IF_ERROR(ring_rows_cuda(a, z, c.ape, A.pos, m, width, A.ring_stage, T, s.stream));
  if (cm.n_emit > 0) {
    // Every entry the pass completes, in one launch.
    HART_RETURN_IF_ERROR(compress_pool_batch_cuda(
        {cm.kvp, cm.gp, cm.n_cand, A.ent_stage, cm.n_emit, s.n_cand_max, dim}, s.stream));
    const float eps = float(s.cfg.norm_eps);
    HART_RETURN_IF_ERROR(rms_norm_cuda(norm_rope({A.ent_stage, c.norm, A.ent_stage, cm.n_emit, dim, 0, 0, eps},
                                                 cm.ent_pos, inv_freq, s.cfg.rope_dim, 1), s.stream));
    if (quant == entry_quant::fp8_nope) {
      HART_RETURN_IF_ERROR(rows_fp8_qdq_cuda(A.ent_stage, cm.n_emit, dim - s.cfg.rope_dim, k_kv_qdq_block, dim, s.stream));
    } else if (quant == entry_quant::hadamard_fp4) {
      HART_RETURN_IF_ERROR(hadamard_fp4(A.ent_stage, cm.n_emit, dim, s.stream));
    }
    if (quant == entry_quant::fp8_entry) {
      HART_RETURN_IF_ERROR(kv_entry_encode_rows_cuda({A.ent_stage, cm.ent_src, base, cm.ent_dst, cm.n_emit}, s.stream));
    } else {
      HART_RETURN_IF_ERROR(copy_rows_cuda(base, cm.ent_dst, A.ent_stage, cm.ent_src, dim, cm.n_emit, false, s.stream));
    }
  }
  return copy_rows_cuda(base, cm.ring_dst, A.ring_stage, cm.ring_src, rw, cm.ring_rows, false, s.stream);
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
  const int64_t *win_dst = nullptr, *win_src = nullptr;  // window KV rows
  int32_t* idx = nullptr;                                // [n_idx, T] attention rows
  const int32_t *page_base = nullptr, *full_pages = nullptr, *lengths = nullptr;  // CSA indexer
  int64_t n_idx = 0, max_keys = 0;
  std::vector<int32_t> host_lengths;                     // host builder only (reference-tie re-picks)
  compress_meta main, index;
};

// Built on the host from positions and page tables only, then one copy (any pass).
status host_layer_meta(engine_state& s, const pass& p, int64_t il, layer_meta* lm) {
  const model_config& c = s.cfg;
  const device_layer& w = s.w.layers[il];
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
      for (int64_t q = std::max<int64_t>(0, t - W + 1); q <= t; ++q) {
        row[q - (t - W + 1)] = int32_t(s.pool.window(il, pt.swa[q / P], q % P) / hd);
      }
      if (w.kind == attention_kind::hca) {
        for (int64_t i = 0; i < (t + 1) / m; ++i) row[W + i] = int32_t(s.pool.entry(il, pt.full[i * m / P], i * m % P) / hd);
      }
      if (csa) page_base[r] = fbase;
    }
  }
  if (csa) lm->host_lengths = indexer_lengths(p, c.csa_rate, &lm->max_keys);
  meta_batch mb(s);
  lm->win_dst = mb.add(win_dst);
  lm->win_src = mb.add(win_src);
  lm->idx = mb.add(idx);
  lm->page_base = mb.add(page_base);  // the indexer reads its keys through the page lists too
  lm->full_pages = mb.add(full_pages);
  lm->lengths = mb.add(lm->host_lengths);
  lm->n_idx = n_idx;
  if (compressed) lm->main = add_compress_plan(mb, plan_compress(s, p, il, w.compressor, false));
  if (csa) lm->index = add_compress_plan(mb, plan_compress(s, p, il, w.index_compressor, true));
  return mb.flush();
}

// Built on the device (decode_meta.h) from the positions and page tables
// run_pass uploaded: a decode pass, capturable as a graph. Every token owns
// one entry slot per compressor (no entry this step: skipped by its copy).
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
  dp.pool = s.pool.base();
  dp.ring_stage = s.a.ring_stage;
  dp.pos = s.a.pos;
  dp.swa_pages = s.a.dec_swa;
  dp.full_pages = s.a.dec_full;
  dp.stride = p.page_stride;
  dp.n_tokens = T;
  dp.window = c.window;
  dp.n_idx = lm->n_idx;
  dp.hca = hca;
  dp.n_cand_max = s.n_cand_max;
  dp.win_dst = mb.reserve<int64_t>(T);
  dp.win_src = mb.reserve<int64_t>(T);
  dp.idx = mb.reserve<int32_t>(T * lm->n_idx);
  if (csa) {
    dp.page_base = mb.reserve<int32_t>(T);
    dp.lengths = mb.reserve<int32_t>(T);
  }
  auto plan = [&](const device_compressor& dc, bool indexer, decode_compressor_plan* cp, compress_meta* cm) {
    cp->kvp = mb.reserve<const float*>(T * s.n_cand_max);
    cp->gp = mb.reserve<const float*>(T * s.n_cand_max);
    cp->n_cand = mb.reserve<int64_t>(T);
    cp->ent_pos = mb.reserve<int64_t>(T);
    cp->ent_dst = mb.reserve<int64_t>(T);
    cp->ent_src = mb.reserve<int64_t>(T);
    cp->ring_dst = mb.reserve<int64_t>(T);
    cp->ring_src = mb.reserve<int64_t>(T);
    cp->rate = dc.rate;
    cp->dim = dc.dim;
    cp->overlap = dc.overlap;
    cp->indexer = indexer;
    static_cast<compress_plan_arrays&>(*cm) = *cp;
    cm->n_emit = T;
    cm->ring_rows = T;
  };
  if (w.kind != attention_kind::sliding) plan(w.compressor, false, &dp.comp, &lm->main);
  if (csa) plan(w.index_compressor, true, &dp.index_comp, &lm->index);
  HART_RETURN_IF_ERROR(mb.flush());  // reservation errors
  lm->win_dst = dp.win_dst;
  lm->win_src = dp.win_src;
  lm->idx = dp.idx;
  lm->page_base = dp.page_base;
  lm->full_pages = s.a.dec_full;
  lm->lengths = dp.lengths;
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
  ip.softmax_scale = 1.0f / std::sqrt(float(dI));
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

// Attention of the pass's queries over their index lists (window rows, then
// picks or HCA entries): A1 over FP8 entries (every pool row is one 584-byte
// entry at its start, so a slot is a row), k_entry_attention_queries at a
// time; or the fp32 gathered kernel.
status attend(engine_state& s, const layer_meta& lm, const float* sink, int64_t T) {
  arena_buffers& A = s.a;
  const int64_t H = s.cfg.n_heads, hd = s.cfg.head_dim;
  const float scale = 1.0f / std::sqrt(float(hd));
  if (s.kv_entries) {
    sparse_decode_attention_params ap;
    ap.pool0 = {reinterpret_cast<const uint8_t*>(s.pool.base()), 1, hd * int64_t(sizeof(float))};
    ap.n_idx0 = lm.n_idx;
    ap.sink = sink;
    ap.n_heads = H;
    ap.scale = scale;
    ap.workspace = A.entry_workspace;
    ap.workspace_bytes = A.entry_workspace_bytes;
    for (int64_t t0 = 0; t0 < T; t0 += k_entry_attention_queries) {
      ap.n_queries = std::min(k_entry_attention_queries, T - t0);
      ap.q_f32 = A.q + t0 * H * hd;
      ap.out_f32 = A.o + t0 * H * hd;
      ap.idx0 = lm.idx + t0 * lm.n_idx;
      HART_RETURN_IF_ERROR(sparse_decode_attention_cuda(ap, s.stream));
    }
    return {};
  }
  sparse_attention_gather_params ap{A.q, s.pool.base(), lm.idx, sink, A.o, T, H, hd, lm.n_idx,
                                    s.pool.n_rows(), hd, scale};
  // Sliced index lists (few tokens) make a token's output depend on the batch: not under --deterministic.
  if (!s.params.base.deterministic) {
    ap.workspace = A.attn_workspace;
    ap.workspace_bytes = sparse_attention_cuda_workspace_bytes(H, hd);
  }
  return sparse_attention_cuda(ap, s.stream);
}

}  // namespace

status attention_run(engine_state& s, const pass& p, int64_t il, const float* x, float* y, std::vector<int32_t>* topk) {
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
    HART_RETURN_IF_ERROR(linear_run(s, w.wkv, x, T, A.kv));
    HART_RETURN_IF_ERROR(rms_norm_cuda(norm_rope({A.kv, w.kv_norm, A.kv, T, hd, 0, 0, eps}, A.pos, inv_freq, rd, 1), s.stream));
    // (FP8 entries quantize as they are written.)
    if (fp8 && !s.kv_entries) HART_RETURN_IF_ERROR(rows_fp8_qdq_cuda(A.kv, T, hd - rd, k_kv_qdq_block, hd, s.stream));
    if (compressed) {
      HART_RETURN_IF_ERROR(linear_run(s, w.compressor.wkv, x, T, A.comp_a));
      HART_RETURN_IF_ERROR(linear_run(s, w.compressor.wgate, x, T, A.comp_z));
    }
    if (csa) {
      const int64_t nI = c.index_n_heads;
      HART_RETURN_IF_ERROR(linear_run(s, w.index_compressor.wkv, x, T, A.index_a));
      HART_RETURN_IF_ERROR(linear_run(s, w.index_compressor.wgate, x, T, A.index_z));
      HART_RETURN_IF_ERROR(linear_run(s, w.index_weights_proj, x, T, A.index_w));
      HART_RETURN_IF_ERROR(scale_cuda(A.index_w, T * nI, 1.0f / std::sqrt(float(nI)), s.stream));
    }
    return {};
  }));
  HART_RETURN_IF_ERROR(linear_run(s, w.wq_a, x, T, A.qr));
  HART_RETURN_IF_ERROR(rms_norm_cuda({A.qr, w.q_norm, A.qr, T, c.q_lora_rank, 0, 0, eps}, st));
  HART_RETURN_IF_ERROR(linear_run(s, w.wq_b, A.qr, T, A.q));
  HART_RETURN_IF_ERROR(rms_norm_cuda(norm_rope({A.q, nullptr, A.q, T * H, hd, 0, 0, eps}, A.pos, inv_freq, rd, H), st));
  if (csa) {
    const int64_t nI = c.index_n_heads, dI = c.index_head_dim;
    HART_RETURN_IF_ERROR(linear_run(s, w.index_wq_b, A.qr, T, A.index_q));
    HART_RETURN_IF_ERROR(rope_cuda({A.index_q, A.pos, inv_freq, T, nI, dI, rd}, st));
    if (fp8) HART_RETURN_IF_ERROR(hadamard_fp4(A.index_q, T * nI, dI, st));
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
  if (compressed) {
    const entry_quant q = s.kv_entries ? entry_quant::fp8_entry : fp8 ? entry_quant::fp8_nope : entry_quant::none;
    HART_RETURN_IF_ERROR(compress(s, p, w.compressor, lm.main, A.comp_a, A.comp_z, q, inv_freq));
  }
  if (csa) {
    HART_RETURN_IF_ERROR(compress(s, p, w.index_compressor, lm.index, A.index_a, A.index_z,
                                  fp8 ? entry_quant::hadamard_fp4 : entry_quant::none, inv_freq));
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
    tr.full_page_rows = s.pool.full_page_rows();
    tr.entry_row0 = s.pool.entry_row0(il);
    HART_RETURN_IF_ERROR(picks_to_rows_cuda(tr, st));
    if (topk) HART_RETURN_IF_ERROR(s.download(topk, A.picks, T * c.index_topk));
  }
  HART_RETURN_IF_ERROR(attend(s, lm, w.attn_sink, T));

  // Undo the values' rotation at the query position, then the grouped output projection.
  HART_RETURN_IF_ERROR(rope_cuda({A.o, A.pos, inv_freq, T, H, hd, rd, 0, 1.0f, true}, st));
  HART_RETURN_IF_ERROR(linear_run_groups(s, w.wo_a, c.o_groups, A.o, T, H * hd, A.u));
  return linear_run(s, w.wo_b, A.u, T, y);
}

}  // namespace hart::gpu
