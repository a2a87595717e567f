// File: runtime/model/sequence_state.h
// One sequence as the engine sees it: how many positions it has consumed and
// the page tables that place those positions in a kv_store (full pages carry
// the compressed shadows, SWA pages the window KV and compressor rings; see
// kv_store.h and docs/shadowradix.md). State starts clean per sequence (no
// compressor state leaks across requests, unlike the reference, §10.4).
//
// Two owners of pages: sequences from engine::new_sequence() allocate pages
// from the engine's own store as they grow and return them when destroyed;
// sequences bound to ShadowRadix (engine::bind_pages) only view pages the
// cache owns. A sequence must not outlive the engine or store it uses.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace hart {

class kv_store;

struct page_table {
  kv_store* store = nullptr;
  bool owned = false;         // pages go back to `store` when the table dies
  std::vector<int32_t> full;  // full[p / P] for reserved positions p
  std::vector<int32_t> swa;   // swa[p / P], -1 once freed (out of every window)

  page_table() = default;
  page_table(const page_table&) = delete;
  page_table& operator=(const page_table&) = delete;
  ~page_table();
};

struct sequence_state {
  uint64_t engine_id = 0;  // the engine that made it; 0 = none
  int64_t n_tokens = 0;    // positions consumed so far; the next token gets position n_tokens
  /// Indexer top-k ties (ReLU scores are often exactly 0): 0 picks the lowest
  /// entry index, which depends only on the visible entries, so any chunking
  /// gives the same result. L > 0 picks what torch.topk picks in the reference's
  /// single forward over L tokens (rows padded with −inf to L/m entries), so
  /// teacher-forced scoring of a known L-token sequence reproduces the
  /// reference in every feeding mode.
  int64_t tie_reference_length = 0;
  std::unique_ptr<page_table> pages = std::make_unique<page_table>();
};

}  // namespace hart
