// File: runtime/cache/shadow_radix_impl.h
// Internal to runtime/cache: the state behind shadow_radix, shared by the
// request lifecycle (shadow_radix.cpp) and the checker (cache_check.cpp).
#pragma once

#include "runtime/cache/page_allocator.h"
#include "runtime/cache/radix_tree.h"
#include "runtime/cache/shadow_radix.h"

#include <map>

namespace hart::cache {

struct request_state {
  request_pages pages;
  std::vector<int32_t> tokens;  // the sequence as known (prompt, then what advance() saw)
  /// End of the request's chain in the tree: it path-locks root -> chain_end
  /// and window-locks the live nodes past lock_swa_start. The root when the
  /// request has nothing in the tree.
  radix_node* chain_end = nullptr;
  int64_t n_tree = 0;  // tokens on the chain (== chain_end's end)
  int64_t lock_swa_start = 0;
};

/// Everything behind shadow_radix (its private impl derives from it, so the
/// checker's free functions can read it).
struct cache_state {
  explicit cache_state(const cache_config& c);

  /// Index of the request's first page whose SWA it must still hold at
  /// n_computed: pages entirely older than n_computed - window - P go.
  int64_t first_swa_page(int64_t n_computed) const;
  void release(request_state& r);
  request_state* find(request_id r);
  const request_state* find(request_id r) const;

  cache_config cfg;
  page_allocator full;
  page_allocator swa;
  radix_tree tree;
  std::map<request_id, request_state> requests;  // ordered: deterministic checks
  request_id next_id = 1;

  int64_t n_requests = 0;
  int64_t n_prompt_tokens = 0;
  int64_t n_cached_tokens = 0;
  int64_t n_window_freed_swa = 0;  // request SWA pages released for leaving the window
};

struct shadow_radix::impl : cache_state {
  using cache_state::cache_state;
};

}  // namespace hart::cache
