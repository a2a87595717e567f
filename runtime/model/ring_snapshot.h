// File: runtime/model/ring_snapshot.h
// What a speculative verify pass must be able to take back. A pass feeds
// k+1 tokens at positions n..n+k; each writes its row in every compressor
// and indexer ring (row pos % ring of its SWA page, kv_store.h). When the
// pass crosses a block boundary, those rows held positions before n that the
// re-opened block still needs (HCA: n+j >= 128(b+1) overwrites position
// n+j-128 of block b; CSA: the previous block's overlap half). Everything
// else a rejected position wrote is position-addressed (window KV, compressed
// entries, indexer keys): invisible once n_tokens goes back, rewritten when
// the position is fed again. So the snapshot is the pass's ring rows as they
// were before it: k+1 rows per ring, restored for the rejected positions.
// A pass is at most kv_store::min_ring_rows() tokens (8 for V4: 1 + 7
// drafts), so no two of its positions share a row (docs/spec-decode.md §4).
//
//   ring_snapshot snap;
//   HART_RETURN_IF_ERROR(eng.verify({{&seq, {t, d1, d2, d3}, logits_request::all}}, {&snap}, &logits));
//   HART_RETURN_IF_ERROR(eng.rollback(seq, n + accepted, snap));
#pragma once

#include "runtime/model/sequence_state.h"

#include <cstdint>
#include <vector>

namespace hart {

struct ring_snapshot {
  const page_table* pages = nullptr;  // the sequence the pass ran on
  int64_t first = 0;                  // its first position (n_tokens before the pass)
  int64_t n = 0;                      // positions in the pass
  std::vector<float> rows;            // [position_ring_floats, n]: rows of first + j before the pass
};

/// Saves the ring rows of positions [first, first + n) of `pages` (their SWA
/// pages must exist) into `snap`.
void ring_snapshot_take(const page_table& pages, int64_t first, int64_t n, ring_snapshot* snap);

/// Puts back the rows of positions [from, snap.first + snap.n).
void ring_snapshot_restore(const ring_snapshot& snap, const page_table& pages, int64_t from);

}  // namespace hart
