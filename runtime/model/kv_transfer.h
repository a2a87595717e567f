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
// A long sequence moves in chunks of whole pages (a frame holds at most
// 64 MiB, a Cap'n Proto Data blob 2^29 bytes; docs/pd.md): kv_pages_plan cuts
// the transfer into page ranges under a byte limit, kv_pages_export copies one
// range out, and kv_pages_import writes one range in, each validated on its
// own. The whole sequence is the one-range case.
//
//   HART_ASSIGN_OR_RETURN(auto ranges, kv_pages_plan(src_store, cfg, seq.n_tokens, 0, limit_bytes));
//   for (kv_page_range r : ranges) {
//     HART_ASSIGN_OR_RETURN(kv_pages kv, kv_pages_export(src_store, cfg, *seq.pages, seq.n_tokens, 0, r));
//     HART_RETURN_IF_ERROR(kv_pages_import(kv, dst_store, full, swa));   // the decode side's pages
//   }
//   engine::bind_pages(dst_seq, &dst_store, full, swa, seq.n_tokens);
#pragma once

#include "runtime/core/status.h"
#include "runtime/model/config.h"
#include "runtime/model/kv_store.h"
#include "runtime/model/sequence_state.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace hart {

/// Pages [first_page, end_page) of a sequence, the unit of a chunked transfer.
struct kv_page_range {
  int64_t first_page = 0;
  int64_t end_page = 0;  // exclusive
};

/// The KV of one page range of a transfer (all of it when the range is every
/// page of the sequence).
struct kv_pages {
  int64_t n_tokens = 0;  // positions [0, n_tokens) hold valid KV
  uint64_t layout = 0;   // kv_store::layout_id of the store they came from
  int64_t page_size = 0;
  int64_t first_full = 0;  // the transfer carries full pages [first_full, n_pages)
  int64_t first_swa = 0;   // and SWA pages [first_swa, n_pages)
  int64_t first_page = 0;  // this part carries those of pages [first_page, end_page)
  int64_t end_page = 0;
  std::vector<float> full;  // n_full_carried() × full_page_floats, page by page
  std::vector<float> swa;   // n_swa_carried() × swa_page_floats

  /// The sequence's pages (not this part's).
  int64_t n_pages() const { return page_size > 0 ? (n_tokens + page_size - 1) / page_size : 0; }
  /// The first page whose full (SWA) entries this part carries, and how many it carries.
  int64_t full_begin() const { return first_page > first_full ? first_page : first_full; }
  int64_t swa_begin() const { return first_page > first_swa ? first_page : first_swa; }
  int64_t n_full_carried() const { return end_page > full_begin() ? end_page - full_begin() : 0; }
  int64_t n_swa_carried() const { return end_page > swa_begin() ? end_page - swa_begin() : 0; }
};

/// The page ranges a transfer of positions [0, n_tokens) without its first
/// `skip_full` full pages moves in, in order: from the first page that carries
/// anything to the last, each of whole pages holding at most
/// `max_chunk_bytes` of KV (full and SWA floats together), as many pages as
/// fit. invalid_argument: n_tokens <= 0, skip_full outside [0, pages of
/// n_tokens), or a single page over the limit.
///
/// `first_swa` >= 0: SWA pages from that page on instead of from
/// swa_live_tokens back (it may only be earlier): the pages a receiver's
/// prefix cache keeps (cache::cache_config::first_live_swa_page), so that
/// every SWA page it will hold and share is written (docs/pd.md).
status_or<std::vector<kv_page_range>> kv_pages_plan(const kv_store& store, const model_config& cfg,
                                                    int64_t n_tokens, int64_t skip_full,
                                                    size_t max_chunk_bytes, int64_t first_swa = -1);

/// The KV of positions [0, n_tokens) of the sequence on `pages` in `store`,
/// without its first `skip_full` full pages (the receiver holds them), in page
/// range `range` (default: every page). invalid_argument: n_tokens <= 0,
/// skip_full outside [0, pages of n_tokens), a range empty or past the last
/// page, or the table lacks a page the range needs (a full page, or a live SWA
/// page from swa_live_tokens back).
status_or<kv_pages> kv_pages_export(const kv_store& store, const model_config& cfg, const page_table& pages,
                                    int64_t n_tokens, int64_t skip_full = 0);
status_or<kv_pages> kv_pages_export(const kv_store& store, const model_config& cfg, const page_table& pages,
                                    int64_t n_tokens, int64_t skip_full, kv_page_range range,
                                    int64_t first_swa = -1);  // as kv_pages_plan's

/// Writes `kv` (the whole transfer, or one range of it) into `store`'s pages
/// `full` and `swa`: the receiving side's page ids for every position p of the
/// sequence, full[p / P] and swa[p / P]; only the entries of the pages `kv`
/// carries are read (others may be -1). invalid_argument, with nothing
/// written: another page layout (another model or page size), header fields
/// out of range or sizes that do not match the layout (a truncated or corrupt
/// chunk), a page id missing or outside the store.
status kv_pages_import(const kv_pages& kv, kv_store& store, const std::vector<int32_t>& full,
                       const std::vector<int32_t>& swa);

/// Leaves the SWA pages below `page` out of `kv` (one range or the whole
/// transfer): a receiver whose prefix hit holds pages [0, page) keeps its own
/// window over them, as a colocated prefill on top of that hit reads it, and
/// never writes into those shared pages. invalid_argument when kv's SWA floats
/// are not whole pages.
status kv_pages_drop_swa_below(kv_pages& kv, int64_t page);

}  // namespace hart
