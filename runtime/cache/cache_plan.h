// File: runtime/cache/cache_plan.h
// Capacity planning for ShadowRadix: bytes per token per pool for a V4 layer
// layout and precision, and how many tokens and sequences fit in a budget.
// The pools follow docs/shadowradix.md: full pages carry C4 KV, C128 KV and
// indexer keys (arithmetic shadows of the slot space); SWA pages carry the
// window KV of every layer plus the compressor-state rings nested in them.
//
//   cache_plan_params p = cache_plan_params::v4_flash();
//   p.memory_bytes = 80ll << 30;  p.context_len = 1 << 20;
//   status_or<cache_plan> plan = cache_plan_make(p);
//   // plan->max_seqs, plan->n_full_pages, plan->n_swa_pages -> cache_config
#pragma once

#include "runtime/core/status.h"

#include <cstdint>

namespace hart::cache {

/// KV entry precision. fp32: head_dim fp32 values. fp8: FlashMLA's 584-B
/// token (448 e4m3 NoPE + 64 bf16 RoPE + 8 scale bytes); indexer keys 128
/// e4m3 + one fp32 scale. Compressor states are fp32 in both.
enum class kv_precision { fp32, fp8 };

struct cache_plan_params {
  int64_t n_swa_layers = 0;  // SWA-only layers (compress ratio 0)
  int64_t n_csa_layers = 0;  // C4 layers (with indexer)
  int64_t n_hca_layers = 0;  // C128 layers
  int64_t n_mtp_layers = 0;  // MTP heads: SWA-only, no compressor
  int64_t head_dim = 512;    // latent K=V width
  int64_t rope_dim = 64;     // of head_dim, stored bf16 in fp8 mode
  int64_t index_head_dim = 128;
  int64_t csa_rate = 4;
  int64_t hca_rate = 128;
  int64_t window = 128;     // tokens
  int64_t page_size = 256;  // tokens
  int64_t csa_ring = 8;     // compressor-state rows per SWA page (CSA main and indexer)
  int64_t hca_ring = 128;   // rows per SWA page (HCA)
  kv_precision precision = kv_precision::fp8;
  int64_t memory_bytes = 0;  // budget for the KV pools
  int64_t context_len = 0;   // tokens per sequence

  /// V4-Flash: 2 SWA + 21 CSA + 20 HCA layers + 1 MTP, fp8.
  static cache_plan_params v4_flash();
  status validate() const;
};

struct cache_plan {
  // Bytes per raw token, all layers of the kind together.
  int64_t swa_kv_bytes_per_token = 0;  // every layer (+ MTP) keeps window KV
  double c4_kv_bytes_per_token = 0;    // n_csa * entry / csa_rate
  double c128_kv_bytes_per_token = 0;  // n_hca * entry / hca_rate
  double indexer_bytes_per_token = 0;  // n_csa * index entry / csa_rate
  double full_bytes_per_token = 0;     // the three shadows together
  // Compressor-state rings nested in one SWA page.
  int64_t csa_state_bytes_per_swa_page = 0;  // main + indexer, all CSA layers
  int64_t hca_state_bytes_per_swa_page = 0;
  int64_t full_page_bytes = 0;
  int64_t swa_page_bytes = 0;  // window KV + state rings
  // Per sequence of context_len tokens.
  int64_t full_pages_per_seq = 0;
  int64_t swa_pages_per_seq = 0;  // ceil(window / P) + 2: window, margin page, page being written
  int64_t bytes_per_seq = 0;
  // What fits in memory_bytes.
  int64_t max_seqs = 0;            // sequences of context_len
  int64_t max_tokens_one_seq = 0;  // one sequence's KV (page-aligned) beside its SWA pages
  int64_t n_full_pages = 0;        // a cache_config for max_seqs: leftover memory goes to full pages
  int64_t n_swa_pages = 0;
};

status_or<cache_plan> cache_plan_make(const cache_plan_params& p);

}  // namespace hart::cache
