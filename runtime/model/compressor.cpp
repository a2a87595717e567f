#include "runtime/model/compressor.h"

#include "kernels/compress_pool/compress_pool.h"
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/rope/rope.h"
#include "runtime/core/check.h"
#include "runtime/model/linear_ops.h"

#include <cmath>
#include <vector>

namespace hart {
namespace {

constexpr int64_t k_kv_qdq_block = 64;  // the reference's act_quant block on window/compressed KV

float* ring(const compressor_params& p, const kv_store& store, const page_table& pt, int64_t pos) {
  const int32_t page = pt.swa[pos / store.page_size()];
  HART_CHECK(page >= 0) << "compressor needs position " << pos << " but its SWA page was freed";
  return p.indexer ? store.index_ring_row(p.il, page, pos) : store.ring_row(p.il, page, pos);
}

// Emits the entry of block `blk` from the ring rows of its positions.
void emit_entry(const compressor_params& p, const kv_store& store, const page_table& pt, int64_t blk) {
  const compressor_weights& w = *p.w;
  const int64_t m = w.rate, c = w.dim, width = w.overlap ? 2 * c : c;
  // Candidates per channel: CSA = previous block's A half (if any) + this block's B half;
  // HCA = the whole block. A ring row is [kv (width) | gate (width)].
  std::vector<const float*> kv_rows, gate_rows;
  if (w.overlap && blk > 0) {
    for (int64_t j = 0; j < m; ++j) {
      const float* row = ring(p, store, pt, (blk - 1) * m + j);
      kv_rows.push_back(row);
      gate_rows.push_back(row + width);
    }
  }
  const int64_t half = w.overlap ? c : 0;
  for (int64_t j = 0; j < m; ++j) {
    const float* row = ring(p, store, pt, blk * m + j);
    kv_rows.push_back(row + half);
    gate_rows.push_back(row + width + half);
  }
  const int64_t first = blk * m, P = store.page_size();
  const int32_t full_page = pt.full[first / P];
  float* entry = p.indexer ? store.index_key_row(p.il, full_page, first % P)
                           : store.entry_row(p.il, full_page, first % P);
  HART_CHECK(compress_pool_cpu({kv_rows.data(), gate_rows.data(), entry, int64_t(kv_rows.size()), c}).ok());
  if (p.bf16) round_to_bf16(entry, c);
  HART_CHECK(rms_norm_cpu({entry, w.norm.data(), entry, 1, c, 0, 0, p.norm_eps, p.bf16}).ok());
  if (p.bf16) round_to_bf16(entry, c);
  HART_CHECK(rope_cpu({entry, &first, p.inv_freq, 1, 1, c, p.rope_dim}).ok());
  if (p.bf16) round_to_bf16(entry, c);
  if (p.quant == entry_quant::fp8_nope) fp8_qdq_rows(entry, 1, c - p.rope_dim, k_kv_qdq_block);
  if (p.quant == entry_quant::hadamard_fp4) hadamard_fp4_qdq_rows(entry, 1, c, p.bf16);
}

}  // namespace

void compressor_push(const compressor_params& p, const kv_store& store, const page_table& pt, int64_t pos,
                     const float* a, const float* z) {
  const compressor_weights& w = *p.w;
  const int64_t m = w.rate, width = w.overlap ? 2 * w.dim : w.dim;
  float* row = ring(p, store, pt, pos);
  const float* ape = w.ape.data() + (pos % m) * width;
  for (int64_t i = 0; i < width; ++i) {
    row[i] = a[i];
    row[width + i] = z[i] + ape[i];
  }
  if ((pos + 1) % m == 0) emit_entry(p, store, pt, pos / m);
}

}  // namespace hart
