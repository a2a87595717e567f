#include "runtime/model/attention.h"

#include "kernels/indexer/indexer.h"
#include "kernels/linear/linear.h"
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/rope/rope.h"
#include "kernels/sparse_attention/sparse_attention.h"
#include "runtime/core/check.h"
#include "runtime/core/codecs.h"
#include "runtime/model/compressor.h"
#include "runtime/model/linear_ops.h"

#include <algorithm>
#include <cmath>

namespace hart {
namespace {

constexpr int64_t k_kv_qdq_block = 64;

// bf16: the official inference rounds each step's output to bf16 (the linears round their own).
void to_bf16(bool on, std::vector<float>& v) {
  if (on) round_to_bf16(v.data(), int64_t(v.size()));
}

// Projections of every token of the batch, computed once per layer.
struct projections {
  std::vector<float> q;                 // [H*hd, T] normed, rotated (q path)
  std::vector<float> qr;                // [q_lora, T] the q latent (also feeds the indexer)
  std::vector<float> kv;                // [hd, T] normed, rotated, QDQ'd in fp8
  std::vector<float> comp_a, comp_z;    // [coff*c, T] main compressor inputs
  std::vector<float> index_a, index_z;  // [2*c_I, T] indexer compressor inputs
  std::vector<float> index_q;           // [n_I*hd_I, T]
  std::vector<float> index_w;           // [n_I, T] head weights · n_I^-0.5
};

projections project(const attention_params& p, const token_batch& b, const float* x) {
  const model_config& c = *p.cfg;
  const layer_weights& w = *p.w;
  const int64_t T = b.n_tokens(), H = c.n_heads, hd = c.head_dim, rd = c.rope_dim;
  const float eps = float(c.norm_eps);
  projections pr;
  pr.qr = linear_apply(w.wq_a, x, T);
  // bf16: the norms and rotations round their outputs as the official inference does
  // (the unweighted per-head q RMS computed on bf16 tensors), the linears their own.
  HART_CHECK(
      rms_norm_cpu({pr.qr.data(), w.q_norm.data(), pr.qr.data(), T, c.q_lora_rank, 0, 0, eps, p.bf16, p.bf16})
          .ok());
  pr.q = linear_apply(w.wq_b, pr.qr.data(), T);
  HART_CHECK(rms_norm_cpu({pr.q.data(), nullptr, pr.q.data(), T * H, hd, 0, 0, eps, false, p.bf16}).ok());
  rope_params q_rope{pr.q.data(), b.pos.data(), p.inv_freq, T, H, hd, rd};
  q_rope.bf16 = p.bf16;
  HART_CHECK(rope_cpu(q_rope).ok());

  pr.kv = linear_apply(w.wkv, x, T);
  HART_CHECK(
      rms_norm_cpu({pr.kv.data(), w.kv_norm.data(), pr.kv.data(), T, hd, 0, 0, eps, p.bf16, p.bf16}).ok());
  rope_params kv_rope{pr.kv.data(), b.pos.data(), p.inv_freq, T, 1, hd, rd};
  kv_rope.bf16 = p.bf16;
  HART_CHECK(rope_cpu(kv_rope).ok());
  if (p.prec == precision::fp8) fp8_qdq_rows(pr.kv.data(), T, hd - rd, k_kv_qdq_block, hd);

  if (w.kind != attention_kind::sliding) {
    pr.comp_a = linear_apply(w.compressor.wkv, x, T);
    pr.comp_z = linear_apply(w.compressor.wgate, x, T);
  }
  if (w.kind == attention_kind::csa) {
    const int64_t nI = c.index_n_heads, hI = c.index_head_dim;
    pr.index_a = linear_apply(w.indexer.compressor.wkv, x, T);
    pr.index_z = linear_apply(w.indexer.compressor.wgate, x, T);
    pr.index_q = linear_apply(w.indexer.wq_b, pr.qr.data(), T);
    rope_params index_rope{pr.index_q.data(), b.pos.data(), p.inv_freq, T, nI, hI, rd};
    index_rope.bf16 = p.bf16;  // (its linear's output is already bf16)
    HART_CHECK(rope_cpu(index_rope).ok());
    if (p.prec == precision::fp8) hadamard_fp4_qdq_rows(pr.index_q.data(), T * nI, hI, p.bf16);
    pr.index_w = linear_apply(w.indexer.weights_proj, x, T);
    // bf16: the reference folds the score scale hI^-0.5 into the weights, one rounded product.
    const float wscale =
        p.bf16 ? float(std::pow(double(hI), -0.5) * std::pow(double(nI), -0.5)) : 1.0f / std::sqrt(float(nI));
    for (float& v : pr.index_w) v *= wscale;
    to_bf16(p.bf16, pr.index_w);
  }
  return pr;
}

}  // namespace

status attention_forward(const attention_params& p, const token_batch& b, const float* x, float* y,
                         std::vector<int32_t>* topk) {
  const model_config& c = *p.cfg;
  const layer_weights& w = *p.w;
  const int64_t T = b.n_tokens(), H = c.n_heads, hd = c.head_dim, rd = c.rope_dim, W = c.window;
  const bool csa = w.kind == attention_kind::csa, compressed = w.kind != attention_kind::sliding;
  const int64_t m = c.compress_rate(w.kind), k_top = c.index_topk;
  projections pr = project(p, b, x);

  compressor_params main_cp{&w.compressor,
                            p.inv_freq,
                            rd,
                            float(c.norm_eps),
                            p.prec == precision::fp8 ? entry_quant::fp8_nope : entry_quant::none,
                            false,
                            p.il,
                            p.bf16};
  compressor_params index_cp{&w.indexer.compressor,
                             p.inv_freq,
                             rd,
                             float(c.norm_eps),
                             p.prec == precision::fp8 ? entry_quant::hadamard_fp4 : entry_quant::none,
                             true,
                             p.il,
                             p.bf16};
  if (topk && csa) topk->assign(T * k_top, -1);
  std::vector<float> o(T * H * hd);

  for (const token_batch::span& sp : b.spans) {
    const page_table& pt = *sp.seq->pages;
    const kv_store& store = *pt.store;
    const int64_t p0 = b.pos[sp.row0], P = store.page_size();
    auto window_row = [&](int64_t pos) {
      const int32_t page = pt.swa[pos / P];
      HART_CHECK(page >= 0) << "window position " << pos << " has no SWA page";
      return store.window_row(p.il, page, pos % P);
    };
    auto entry_row = [&](int64_t i) { return store.entry_row(p.il, pt.full[i * m / P], i * m % P); };
    // This chunk's window KV goes to its pages first: every position has its own slot.
    for (int64_t j = 0; j < sp.n; ++j) std::copy_n(pr.kv.data() + (sp.row0 + j) * hd, hd, window_row(p0 + j));
    // Compressors next: an entry whose block closes at token t is visible to t.
    if (compressed) {
      const int64_t wm = w.compressor.overlap ? 2 * hd : hd;
      for (int64_t j = 0; j < sp.n; ++j) {
        const int64_t r = sp.row0 + j;
        compressor_push(main_cp, store, pt, p0 + j, pr.comp_a.data() + r * wm, pr.comp_z.data() + r * wm);
        if (csa) {
          const int64_t wi = 2 * c.index_head_dim;
          compressor_push(index_cp, store, pt, p0 + j, pr.index_a.data() + r * wi,
                          pr.index_z.data() + r * wi);
        }
      }
    }
    // The indexer scores contiguous keys: gather this sequence's once per layer.
    std::vector<float> index_keys;
    if (csa) {
      const int64_t n_entries = (p0 + sp.n) / m, dI = c.index_head_dim;
      index_keys.resize(n_entries * dI);
      for (int64_t i = 0; i < n_entries; ++i) {
        std::copy_n(store.index_key_row(p.il, pt.full[i * m / P], i * m % P), dI, index_keys.data() + i * dI);
      }
    }

#pragma omp parallel for schedule(dynamic, 4)
    for (int64_t j = 0; j < sp.n; ++j) {
      const int64_t r = sp.row0 + j, t = p0 + j;
      std::vector<const float*> keys;
      for (int64_t pos = std::max<int64_t>(0, t - W + 1); pos <= t; ++pos) keys.push_back(window_row(pos));
      // bf16: the reference's slot layout, which sets its softmax blocks: the window takes W
      // slots, masked past the position. (Its first call on a prompt shorter than W gives the
      // window only that many; hart keeps W so that chunking cannot change a result.)
      if (p.bf16) keys.resize(size_t(W), nullptr);
      if (compressed) {
        const int64_t n_vis = (t + 1) / m;
        if (csa && n_vis > 0) {
          // Reference tie mode scores a row as long as the reference's call had
          // entries, future ones at −inf; picks past the visible ones are dropped.
          const int64_t ref_len = sp.seq->tie_reference_length;
          const int64_t n_row = ref_len > 0 ? std::max(n_vis, ref_len / m) : n_vis;
          std::vector<float> score(n_row, -INFINITY);
          HART_CHECK(indexer_score_cpu({pr.index_q.data() + r * c.index_n_heads * c.index_head_dim,
                                        pr.index_w.data() + r * c.index_n_heads, index_keys.data(),
                                        score.data(), c.index_n_heads, c.index_head_dim, n_vis,
                                        p.bf16 ? 1.0f : 1.0f / std::sqrt(float(c.index_head_dim)), p.bf16})
                         .ok());
          std::vector<int32_t> pick(k_top, -1);
          HART_CHECK(topk_cpu({score.data(), pick.data(), n_row, std::min(k_top, n_row), ref_len > 0}).ok());
          for (int64_t i = 0; i < k_top; ++i) {
            if (pick[i] >= n_vis) pick[i] = -1;
            if (pick[i] >= 0) keys.push_back(entry_row(pick[i]));
          }
          if (topk) std::copy(pick.begin(), pick.end(), topk->begin() + r * k_top);
        } else if (!csa) {
          for (int64_t i = 0; i < n_vis; ++i) keys.push_back(entry_row(i));
        }
      }
      HART_CHECK(sparse_attention_cpu({pr.q.data() + r * H * hd, keys.data(), w.attn_sink.data(),
                                       o.data() + r * H * hd, H, hd, int64_t(keys.size()),
                                       1.0f / std::sqrt(float(hd)), p.bf16})
                     .ok());
    }
  }

  // Undo the values' rotation at the query position, then the grouped output projection.
  rope_params inverse{o.data(), b.pos.data(), p.inv_freq, T, H, hd, rd, 0, 1.0f, true};
  inverse.bf16 = p.bf16;  // (the attention output is already bf16)
  HART_RETURN_IF_ERROR(rope_cpu(inverse));
  const int64_t G = c.o_groups, ol = c.o_lora_rank, gin = H / G * hd;
  std::vector<float> u(T * G * ol);
  for (int64_t g = 0; g < G; ++g) {
    if (w.wo_a.k_block > 0) {
      linear_blocked(o.data() + g * gin, H * hd, w.wo_a.w.data() + g * ol * gin, gin, ol, T, gin,
                     u.data() + g * ol, G * ol);
      continue;
    }
    HART_RETURN_IF_ERROR(linear_cpu({o.data() + g * gin, w.wo_a.w.data() + g * ol * gin, u.data() + g * ol, T,
                                     gin, ol, H * hd, G * ol, false, w.wo_a.row_invariant}));
  }
  to_bf16(p.bf16, u);
  return linear_apply(w.wo_b, u.data(), T, y);
}

}  // namespace hart
