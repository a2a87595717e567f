// CPU reference of the flash compressor: compressor.cpp's steps, op by op.
#include "kernels/compress_pool/compress_pool.h"
#include "kernels/flash_compressor/flash_compressor.h"
#include "kernels/flash_compressor/flash_compressor_plan.h"
#include "kernels/quant/quant.h"
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/rope/rope.h"
#include "kernels/sparse_decode_attention/kv_entry.h"
#include "runtime/core/check.h"
#include "runtime/core/codecs.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace hart {
namespace {

constexpr int64_t k_fp8_block = 64;  // the reference's act_quant block on compressed KV

// Span s as (first position, first projection row, length).
struct span {
  int64_t p0, r0, n;
};

span span_of(const flash_compressor_params& p, int64_t s) {
  if (!p.cu_tokens) return {p.start[s], s, 1};
  return {p.start[s], p.cu_tokens[s], int64_t(p.cu_tokens[s + 1]) - p.cu_tokens[s]};
}

float* ring_row(const flash_compressor_desc& d, const flash_compressor_params& p, int64_t s, int64_t q) {
  const int32_t page = p.swa_pages[s * p.pages_stride + q / p.page_size];
  const int64_t width = fc_width(d);
  return d.ring + page * d.ring_page_stride + (q % fc_ring_rows(d)) * 2 * width;
}

// One block's entry: the steps of compressor.cpp's emit_entry on candidates
// taken from the span's projections (bias added here) or, before the span,
// from the ring.
void emit_entry(const flash_compressor_desc& d, const flash_compressor_params& p, int64_t s, const span& sp,
                int64_t blk) {
  const int64_t m = d.rate, c = d.dim, width = fc_width(d);
  const int64_t kv_stride = d.kv_stride ? d.kv_stride : width;
  const int64_t gate_stride = d.gate_stride ? d.gate_stride : width;
  std::vector<const float*> kv_rows, gate_rows;
  std::vector<float> gate_buf(size_t(2 * m * c));  // biased gates of span candidates
  auto add = [&](int64_t q, int64_t half) {
    if (q < sp.p0) {
      const float* row = ring_row(d, p, s, q);
      kv_rows.push_back(row + half);
      gate_rows.push_back(row + width + half);
      return;
    }
    const int64_t r = sp.r0 + (q - sp.p0);
    float* g = gate_buf.data() + kv_rows.size() * c;
    const float* ape = d.ape + (q % m) * width + half;
    for (int64_t i = 0; i < c; ++i) g[i] = d.gate[r * gate_stride + half + i] + ape[i];
    kv_rows.push_back(d.kv + r * kv_stride + half);
    gate_rows.push_back(g);
  };
  if (d.overlap && blk > 0) {
    for (int64_t j = 0; j < m; ++j) add((blk - 1) * m + j, 0);
  }
  for (int64_t j = 0; j < m; ++j) add(blk * m + j, d.overlap ? c : 0);

  const int64_t first = blk * m;
  std::vector<float> e(static_cast<size_t>(c));
  // bf16: compressor.cpp's roundings, after each of the three steps.
  auto round_if_bf16 = [&] {
    if (d.bf16) {
      for (float& v : e) v = round_to_bf16(v);
    }
  };
  HART_CHECK(
      compress_pool_cpu({kv_rows.data(), gate_rows.data(), e.data(), int64_t(kv_rows.size()), c}).ok());
  round_if_bf16();
  HART_CHECK(rms_norm_cpu({e.data(), d.norm, e.data(), 1, c, 0, 0, d.eps, d.bf16}).ok());
  round_if_bf16();
  HART_CHECK(rope_cpu({e.data(), &first, d.inv_freq, 1, 1, c, d.rope_dim}).ok());
  round_if_bf16();

  const int32_t page = p.full_pages[s * p.pages_stride + first / p.page_size];
  uint8_t* dst = static_cast<uint8_t*>(d.entries) + page * d.entry_page_stride_bytes +
                 (first % p.page_size) / m * flash_compressor_entry_bytes(d);
  if (d.format == flash_entry_format::kv_entry) {
    HART_CHECK(kv_entry_encode(e.data(), dst).ok());
    return;
  }
  if (d.quant == flash_entry_quant::fp8_nope) {
    const int64_t nope = c - d.rope_dim;
    for (int64_t b = 0; b < nope; b += k_fp8_block) {
      const int64_t len = std::min(k_fp8_block, nope - b);
      HART_CHECK(act_quant_fp8_qdq(e.data() + b, len, len).ok());
    }
  } else if (d.quant == flash_entry_quant::hadamard_fp4) {
    HART_CHECK(hadamard_transform(e.data(), c, 1.0f / std::sqrt(float(c))).ok());
    round_if_bf16();  // as hadamard_fp4_qdq_rows(.., bf16)
    HART_CHECK(fp4_act_qdq(e.data(), c, std::min<int64_t>(32, c)).ok());
  }
  std::memcpy(dst, e.data(), size_t(c) * sizeof(float));
}

}  // namespace

status flash_compressor_cpu(const flash_compressor_params& p) {
  HART_RETURN_IF_ERROR(fc_validate(p, "flash_compressor_cpu"));
  for (int64_t ic = 0; ic < p.n_comp; ++ic) {
    const flash_compressor_desc& d = p.comp[ic];
    const int64_t m = d.rate, width = fc_width(d);
    const int64_t kv_stride = d.kv_stride ? d.kv_stride : width;
    const int64_t gate_stride = d.gate_stride ? d.gate_stride : width;
    for (int64_t s = 0; s < p.n_seq; ++s) {
      const span sp = span_of(p, s);
      // Entries first: every candidate before the span is still in the ring.
      for (int64_t q = sp.p0; q < sp.p0 + sp.n; ++q) {
        if ((q + 1) % m == 0) emit_entry(d, p, s, sp, q / m);
      }
      for (int64_t q = sp.p0; q < sp.p0 + sp.n; ++q) {
        if (!fc_ring_keeps(d, p.page_size, q, sp.p0 + sp.n)) continue;
        float* row = ring_row(d, p, s, q);
        const int64_t r = sp.r0 + (q - sp.p0);
        const float* ape = d.ape + (q % m) * width;
        for (int64_t i = 0; i < width; ++i) {
          row[i] = d.kv[r * kv_stride + i];
          row[width + i] = d.gate[r * gate_stride + i] + ape[i];
        }
      }
    }
  }
  return {};
}

}  // namespace hart
