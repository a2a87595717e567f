// File: runtime/model/kv_transfer.h
// A sequence's KV moved from one page store to another by virtual slot
// (position order), as prefill/decode disaggregation hands a prefilled
// sequence from the prefill server's pages to the decode server's (issue 25):
// every full page of its first n positions (compressed entries, indexer keys)
// and the SWA pages a decode step still reads (the window and the compressor
// rings, swa_live_tokens). Page ids differ on the two sides; positions, and
// the page layout, do not. The decode side binds the imported pages
// (engine::bind_pages) and goes on as if it had prefilled them. A receiver
// that already holds the first full pages (a prefix-cache hit) asks for the
// rest only (`skip_full`).
//
//   HART_ASSIGN_OR_RETURN(kv_pages kv, kv_pages_export(src_store, cfg, *seq.pages, seq.n_tokens));
//   HART_RETURN_IF_ERROR(kv_pages_import(kv, dst_store, full, swa));   // the decode side's pages
//   engine::bind_pages(dst_seq, &dst_store, full, swa, kv.n_tokens);
#pragma once

#include "runtime/core/status.h"
#include "runtime/model/config.h"
#include "runtime/model/kv_store.h"
#include "runtime/model/sequence_state.h"

#include <cstdint>
#include <vector>

namespace hart {

struct kv_pages {
  int64_t n_tokens = 0;  // positions [0, n_tokens) hold valid KV
  uint64_t layout = 0;   // kv_store::layout_id of the store they came from
  int64_t page_size = 0;
  int64_t first_full = 0;   // full pages [first_full, n_pages) are carried
  int64_t first_swa = 0;    // SWA pages [first_swa, n_pages) are carried
  std::vector<float> full;  // (n_pages − first_full) × full_page_floats, page by page
  std::vector<float> swa;   // (n_pages − first_swa) × swa_page_floats

  int64_t n_pages() const { return page_size > 0 ? (n_tokens + page_size - 1) / page_size : 0; }
};

/// The KV of positions [0, n_tokens) of the sequence on `pages` in `store`,
/// without its first `skip_full` full pages (the receiver holds them).
/// invalid_argument: n_tokens <= 0, skip_full outside [0, pages of n_tokens),
/// or the table lacks a page those positions or a decode step after them need
/// (a full page, or a live SWA page from swa_live_tokens back).
status_or<kv_pages> kv_pages_export(const kv_store& store, const model_config& cfg, const page_table& pages,
                                    int64_t n_tokens, int64_t skip_full = 0);

/// Writes `kv` into `store`'s pages `full` and `swa` (the receiving side's
/// page ids for positions p: full[p / P], swa[p / P]; full entries before
/// kv.first_full are not written, SWA entries before kv.first_swa may be -1). invalid_argument, with nothing
/// written: another page layout (another model or page size), sizes that do not match the layout (a truncated
/// transfer), a page id missing or outside the store.
status kv_pages_import(const kv_pages& kv, kv_store& store, const std::vector<int32_t>& full,
                       const std::vector<int32_t>& swa);

}  // namespace hart
