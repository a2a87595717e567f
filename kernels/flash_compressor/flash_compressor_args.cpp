// Argument checks of the flash compressor entry points (CPU and CUDA).
#include "kernels/flash_compressor/flash_compressor.h"
#include "kernels/flash_compressor/flash_compressor_plan.h"
#include "kernels/sparse_decode_attention/kv_entry.h"

namespace hart {
namespace {

using ll = long long;

status validate_desc(const flash_compressor_desc& d, int64_t ic, int64_t page_size, int64_t n_tokens,
                     const char* op) {
  // A call with no tokens (every span empty) reads no projections.
  if ((n_tokens > 0 && (!d.kv || !d.gate)) || !d.ape || !d.norm || !d.inv_freq || !d.ring || !d.entries) {
    return invalid_argument("%s: comp[%lld]: kv, gate, ape, norm, inv_freq, ring and entries must be set", op,
                            ll(ic));
  }
  if (d.rate <= 0 || d.dim <= 0) {
    return invalid_argument("%s: comp[%lld]: rate=%lld dim=%lld must be > 0", op, ll(ic), ll(d.rate),
                            ll(d.dim));
  }
  if (d.rope_dim <= 0 || d.rope_dim % 2 || d.rope_dim > d.dim) {
    return invalid_argument("%s: comp[%lld]: rope_dim=%lld must be even, > 0 and <= dim=%lld", op, ll(ic),
                            ll(d.rope_dim), ll(d.dim));
  }
  if (page_size % d.rate) {
    return invalid_argument("%s: comp[%lld]: page_size=%lld is not a multiple of rate=%lld", op, ll(ic),
                            ll(page_size), ll(d.rate));
  }
  const int64_t width = fc_width(d);
  if ((d.kv_stride && d.kv_stride < width) || (d.gate_stride && d.gate_stride < width)) {
    return invalid_argument("%s: comp[%lld]: kv_stride=%lld / gate_stride=%lld below coff*dim=%lld", op,
                            ll(ic), ll(d.kv_stride), ll(d.gate_stride), ll(width));
  }
  if (d.ring_page_stride < fc_ring_rows(d) * 2 * width) {
    return invalid_argument("%s: comp[%lld]: ring_page_stride=%lld < ring rows %lld x %lld floats", op,
                            ll(ic), ll(d.ring_page_stride), ll(fc_ring_rows(d)), ll(2 * width));
  }
  const int64_t row_bytes = flash_compressor_entry_bytes(d);
  if (d.entry_page_stride_bytes < page_size / d.rate * row_bytes) {
    return invalid_argument("%s: comp[%lld]: entry_page_stride_bytes=%lld < %lld entries x %lld bytes", op,
                            ll(ic), ll(d.entry_page_stride_bytes), ll(page_size / d.rate), ll(row_bytes));
  }
  if (!(d.eps > 0.0f)) return invalid_argument("%s: comp[%lld]: eps must be > 0", op, ll(ic));
  if (d.format == flash_entry_format::kv_entry &&
      (d.dim != kv_entry_dim || d.rope_dim != kv_entry_rope || d.quant != flash_entry_quant::fp8_nope)) {
    return invalid_argument(
        "%s: comp[%lld]: kv_entry format needs dim=512, rope_dim=64, quant fp8_nope (got %lld, %lld)", op,
        ll(ic), ll(d.dim), ll(d.rope_dim));
  }
  if (d.quant == flash_entry_quant::hadamard_fp4 && (d.dim & (d.dim - 1))) {
    return invalid_argument("%s: comp[%lld]: Hadamard needs a power-of-two dim, got %lld", op, ll(ic),
                            ll(d.dim));
  }
  return {};
}

}  // namespace

int64_t flash_compressor_entry_bytes(const flash_compressor_desc& d) {
  return fc_entry_bytes(d);
}

status fc_validate(const flash_compressor_params& p, const char* op) {
  if (p.n_comp < 1 || p.n_comp > 2)
    return invalid_argument("%s: n_comp=%lld must be 1 or 2", op, ll(p.n_comp));
  if (p.n_seq < 0 || p.n_tokens < 0) {
    return invalid_argument("%s: n_seq=%lld n_tokens=%lld must be >= 0", op, ll(p.n_seq), ll(p.n_tokens));
  }
  if (!p.cu_tokens && p.n_tokens != p.n_seq) {
    return invalid_argument("%s: without cu_tokens every sequence has one token: n_tokens=%lld != n_seq=%lld",
                            op, ll(p.n_tokens), ll(p.n_seq));
  }
  if (p.page_size <= 0) return invalid_argument("%s: page_size=%lld must be > 0", op, ll(p.page_size));
  if (p.n_seq > 0 && (!p.start || !p.full_pages || !p.swa_pages || p.pages_stride <= 0)) {
    return invalid_argument("%s: start, full_pages, swa_pages and pages_stride > 0 are required", op);
  }
  for (int64_t ic = 0; ic < p.n_comp; ++ic)
    HART_RETURN_IF_ERROR(validate_desc(p.comp[ic], ic, p.page_size, p.n_tokens, op));
  return {};
}

}  // namespace hart
