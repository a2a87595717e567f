// File: runtime/cache/shadow_radix.h
// ShadowRadix: the one cache index for V4's three attention types (metadata
// only; the KV bytes live in the engine's pools, addressed by the slots this
// class hands out). See docs/shadowradix.md for the slot model, locks,
// invariants and a worked example.
//
// Slot model. One virtual token-slot space in pages of `page_size` tokens:
// position p of a request lives in full slot full[p / P] * P + p % P. Every
// compressed pool is an arithmetic shadow of it (CSA entry = slot / 4, HCA
// entry = slot / 128, indexer key = CSA entry), so full pages carry the
// compressed KV. The sliding-window KV and the compressor-state rings live in
// a second pool of SWA pages with its own allocator; swa[p / P] maps a
// request's page to its SWA page, or no_page once that page has left every
// live window (a tombstone).
//
//   shadow_radix c({.page_size = 256, .n_full_pages = 64, .n_swa_pages = 16, .window = 128});
//   auto r = c.admit(prompt);          // matches a cached prefix, locks it
//   c.reserve(*r, prompt.size());       // pages for the positions to compute
//   ... engine computes positions [c.pages(*r).n_computed, prompt.size()) ...
//   c.advance(*r, prompt);              // inserts full pages, frees out-of-window SWA
//   c.finish(*r, all_tokens);           // caches the request, releases its locks
#pragma once

#include "runtime/core/status.h"

#include <cstdint>
#include <vector>

namespace hart::cache {

using page_id = int32_t;
constexpr page_id no_page = -1;
using request_id = int64_t;

struct cache_config {
  int64_t page_size = 256;   // tokens per page; a multiple of 128 (every compress rate divides it)
  int64_t n_full_pages = 0;  // virtual slot space (carries CSA/HCA/indexer shadows)
  int64_t n_swa_pages = 0;   // sliding-window KV + compressor-state rings
  int64_t window = 128;      // sliding window, tokens including self
  bool enable_prefix_cache = true;

  status validate() const;
  /// SWA pages one sequence holds at most while decoding: its window, one
  /// page of margin and the page being written (ceil(window / P) + 2).
  int64_t min_swa_pages() const;
  /// First page of a request's table whose SWA it still holds once
  /// `n_computed` positions are computed: pages entirely older than
  /// n_computed - window - page_size were released by advance() (no_page).
  int64_t first_live_swa_page(int64_t n_computed) const;
};

/// A request's pages. Positions [0, n_computed) hold valid KV; the first
/// n_cached of them came from the tree (shared, read-only for this request).
struct request_pages {
  std::vector<page_id> full;  // one per page of reserved positions
  std::vector<page_id> swa;   // same length; no_page where tombstoned
  int64_t n_cached = 0;       // page-aligned
  int64_t n_computed = 0;
  int64_t n_reserved = 0;  // positions with pages: full.size() * page_size
};

struct cache_metrics {
  int64_t requests = 0;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens served from the tree
  int64_t evicted_full_pages = 0;
  int64_t tombstoned_swa_pages = 0;
  int64_t full_pages_used = 0, full_pages_total = 0;
  int64_t swa_pages_used = 0, swa_pages_total = 0;
  int64_t tree_full_tokens = 0;  // tokens the tree holds
  int64_t tree_swa_tokens = 0;   // of those, with live SWA
  double hit_rate() const { return prompt_tokens ? double(cached_tokens) / double(prompt_tokens) : 0.0; }
};

class shadow_radix {
 public:
  explicit shadow_radix(const cache_config& cfg);
  ~shadow_radix();
  shadow_radix(const shadow_radix&) = delete;
  shadow_radix& operator=(const shadow_radix&) = delete;

  const cache_config& config() const;

  /// Starts a request for `prompt` (non-empty): finds the longest cached
  /// prefix that is page-aligned, shorter than the prompt (at least one
  /// position is always computed, so the last logits exist) and preceded by
  /// >= window live SWA tokens; locks it (path lock on full pages, window
  /// lock on the SWA pages of its last window). No pages are allocated yet.
  /// match_prefix false: no prefix is looked up (the request computes from
  /// position 0, as with the prefix cache off); its pages still join the tree
  /// when it finishes, like those of a request that raced another one.
  status_or<request_id> admit(const std::vector<int32_t>& prompt, bool match_prefix = true);

  /// Ensures pages for positions [0, n_tokens). Evicts unlocked tree pages
  /// (LRU) when a pool runs dry; resource_exhausted ("out of KV memory")
  /// if it still cannot, leaving the request as it was.
  status reserve(request_id r, int64_t n_tokens);

  /// Positions up to tokens.size() are now computed (tokens = the request's
  /// whole sequence so far). Inserts its newly completed full pages into the
  /// tree (chunked prefill inserts as it goes), moves the locks, and frees the
  /// request's SWA pages that left the window, keeping one page of margin.
  status advance(request_id r, const std::vector<int32_t>& tokens);
  /// advance() for a caller that does not keep the sequence (the cache shard
  /// actor): `appended` extends the tokens the request knows (its prompt and
  /// what it was told since), and positions [0, n_computed) of them are now
  /// computed.
  status advance_to(request_id r, const std::vector<int32_t>& appended, int64_t n_computed);

  /// Ends the request: inserts what it computed (full pages only; a partial
  /// last page is freed) and releases all its locks. `tokens` as in advance().
  status finish(request_id r, const std::vector<int32_t>& tokens);
  /// finish() with the tokens the request knows, computed up to n_computed.
  status finish_at(request_id r, int64_t n_computed);
  /// Ends the request without caching anything new; releases everything it holds.
  status abort(request_id r);

  const request_pages& pages(request_id r) const;
  /// The sequence the request knows: its prompt, extended by advance().
  const std::vector<int32_t>& tokens(request_id r) const;

  /// Frees up to n unlocked full pages from the tree (LRU leaves first;
  /// SWA of internal nodes is tombstoned, leaves deleted). Returns how many.
  int64_t evict_full(int64_t n);
  int64_t evict_swa(int64_t n);
  /// Drops every unlocked cached page.
  void flush();

  /// Full consistency check: reference counts, no page owned twice,
  /// used + free = capacity per pool, shadows consistent, locks balanced.
  status check() const;
  cache_metrics metrics() const;

 private:
  struct impl;
  impl* impl_;
};

}  // namespace hart::cache
