#include "runtime/cache/cache_plan.h"

namespace hart::cache {

cache_plan_params cache_plan_params::v4_flash() {
  cache_plan_params p;
  p.n_swa_layers = 2;
  p.n_csa_layers = 21;
  p.n_hca_layers = 20;
  p.n_mtp_layers = 1;
  return p;
}

status cache_plan_params::validate() const {
  if (n_swa_layers < 0 || n_csa_layers < 0 || n_hca_layers < 0 || n_mtp_layers < 0 ||
      n_swa_layers + n_csa_layers + n_hca_layers + n_mtp_layers == 0) {
    return invalid_argument("cache_plan: layer counts must be >= 0 and not all 0");
  }
  if (head_dim <= 0 || rope_dim < 0 || rope_dim > head_dim || index_head_dim <= 0) {
    return invalid_argument("cache_plan: head_dim=%lld rope_dim=%lld index_head_dim=%lld",
                            static_cast<long long>(head_dim), static_cast<long long>(rope_dim),
                            static_cast<long long>(index_head_dim));
  }
  if (page_size <= 0 || csa_rate <= 0 || hca_rate <= 0 || page_size % csa_rate != 0 ||
      page_size % hca_rate != 0) {
    return invalid_argument("cache_plan: page_size=%lld must be a multiple of the rates %lld, %lld",
                            static_cast<long long>(page_size), static_cast<long long>(csa_rate),
                            static_cast<long long>(hca_rate));
  }
  if (window <= 0 || csa_ring <= 0 || hca_ring <= 0) {
    return invalid_argument("cache_plan: window and rings must be positive");
  }
  if (memory_bytes <= 0 || context_len <= 0) {
    return invalid_argument("cache_plan: memory_bytes=%lld and context_len=%lld must be positive",
                            static_cast<long long>(memory_bytes), static_cast<long long>(context_len));
  }
  return status::ok_status();
}

status_or<cache_plan> cache_plan_make(const cache_plan_params& p) {
  HART_RETURN_IF_ERROR(p.validate());
  const bool fp8 = p.precision == kv_precision::fp8;
  // NOTE(hart): 8 scale bytes = 7 UE8M0 scales (one per 64 NoPE) + 1 pad.
  const int64_t entry = fp8 ? (p.head_dim - p.rope_dim) + 2 * p.rope_dim + 8 : 4 * p.head_dim;
  const int64_t index_entry = fp8 ? p.index_head_dim + 4 : 4 * p.index_head_dim;
  const int64_t n_layers = p.n_swa_layers + p.n_csa_layers + p.n_hca_layers + p.n_mtp_layers;

  cache_plan c;
  c.swa_kv_bytes_per_token = n_layers * entry;
  c.c4_kv_bytes_per_token = double(p.n_csa_layers * entry) / double(p.csa_rate);
  c.c128_kv_bytes_per_token = double(p.n_hca_layers * entry) / double(p.hca_rate);
  c.indexer_bytes_per_token = double(p.n_csa_layers * index_entry) / double(p.csa_rate);
  c.full_bytes_per_token = c.c4_kv_bytes_per_token + c.c128_kv_bytes_per_token + c.indexer_bytes_per_token;

  // fp32 rows: CSA [kv_overlap, kv, score_overlap, score] x head_dim (main)
  // and x index_head_dim (indexer); HCA [kv, score] x head_dim.
  const int64_t csa_row = 4 * 4 * (p.head_dim + p.index_head_dim);
  const int64_t hca_row = 4 * 2 * p.head_dim;
  c.csa_state_bytes_per_swa_page = p.n_csa_layers * p.csa_ring * csa_row;
  c.hca_state_bytes_per_swa_page = p.n_hca_layers * p.hca_ring * hca_row;

  // Full page: the shadows of P slots (P / rate entries per compressed layer).
  c.full_page_bytes = p.n_csa_layers * (p.page_size / p.csa_rate) * (entry + index_entry) +
                      p.n_hca_layers * (p.page_size / p.hca_rate) * entry;
  c.swa_page_bytes = p.page_size * c.swa_kv_bytes_per_token + c.csa_state_bytes_per_swa_page +
                     c.hca_state_bytes_per_swa_page;

  c.full_pages_per_seq = (p.context_len + p.page_size - 1) / p.page_size;
  c.swa_pages_per_seq = (p.window + p.page_size - 1) / p.page_size + 2;
  c.bytes_per_seq = c.full_pages_per_seq * c.full_page_bytes + c.swa_pages_per_seq * c.swa_page_bytes;
  c.max_seqs = p.memory_bytes / c.bytes_per_seq;
  const int64_t one_seq_swa = c.swa_pages_per_seq * c.swa_page_bytes;
  c.max_tokens_one_seq =
      p.memory_bytes > one_seq_swa ? (p.memory_bytes - one_seq_swa) / c.full_page_bytes * p.page_size : 0;
  c.n_swa_pages = c.max_seqs * c.swa_pages_per_seq;
  c.n_full_pages =
      c.max_seqs > 0 ? (p.memory_bytes - c.n_swa_pages * c.swa_page_bytes) / c.full_page_bytes : 0;
  if (c.max_seqs == 0) {
    return resource_exhausted(
        "out of KV memory: one sequence of %lld tokens needs %lld bytes, budget is %lld",
        static_cast<long long>(p.context_len), static_cast<long long>(c.bytes_per_seq),
        static_cast<long long>(p.memory_bytes));
  }
  return c;
}

}  // namespace hart::cache
