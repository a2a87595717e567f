// File: runtime/model/sequence_state.h
// Everything the CPU engine remembers about one sequence between calls
// (v4-model.md §10): per layer, the sliding-window ring of KV vectors, and for
// CSA/HCA layers the compressor's open block, the previous block's overlap
// ("A") half and the emitted compressed entries (plus the indexer's own
// compressor on CSA layers). State starts clean per sequence (kv 0, gate −inf),
// unlike the reference, whose compressor state leaks across requests (§10.4).
#pragma once

#include <cstdint>
#include <vector>

namespace hart {

struct compressor_state {
  std::vector<float> open_kv;    // [width, n_open] tokens of the open block; width = coff·c
  std::vector<float> open_gate;  // [width, n_open] gate logits + position bias
  int64_t n_open = 0;
  std::vector<float> prev_kv;    // [c, m] previous closed block's A half (CSA only)
  std::vector<float> prev_gate;  // [c, m]
  bool has_prev = false;
  std::vector<float> entries;    // [c, n_entries] emitted entries: normed, rotated (and QDQ'd in fp8)
  int64_t n_entries = 0;
};

struct layer_state {
  std::vector<float> window;  // [head_dim, window] ring: position p lives in slot p % window
  compressor_state main;      // CSA / HCA
  compressor_state index;     // CSA: the indexer's compressor (keys)
};

struct sequence_state {
  uint64_t engine_id = 0;  // the engine that made it (engine::new_sequence); 0 = none
  int64_t n_tokens = 0;    // positions consumed so far; the next token gets position n_tokens
  /// Indexer top-k ties (ReLU scores are often exactly 0): 0 picks the lowest
  /// entry index, which depends only on the visible entries, so any chunking
  /// gives the same result. L > 0 picks what torch.topk picks in the reference's
  /// single forward over L tokens (rows padded with −inf to L/m entries), so
  /// teacher-forced scoring of a known L-token sequence reproduces the
  /// reference in every feeding mode.
  int64_t tie_reference_length = 0;
  std::vector<layer_state> layers;
};

}  // namespace hart
