// File: runtime/sample/ngram_draft.h
// Prompt-lookup drafting (vLLM's "ngram" speculative method, SGLang's NGRAM):
// no weights, no model. The sequence's last n tokens (n from max_n down to
// min_n) are looked for earlier in it, the most recent match first, and the
// tokens that followed that match are the drafts; a draft past the end of the
// sequence continues from the drafts already made, so a repeating span is
// drafted for as long as it repeats. Accepted when text repeats itself: code
// edits, answers that quote the prompt, loops. The verify pass decides what
// is kept (spec_accept), so a bad draft costs a wasted position, never a
// wrong token.
//
//   std::vector<int32_t> d = ngram_draft(seq_tokens, /*k=*/4, {});
#pragma once

#include "runtime/core/status.h"

#include <cstdint>
#include <vector>

namespace hart {

struct ngram_draft_params {
  int64_t min_n = 1;  // shortest suffix matched
  int64_t max_n = 4;  // longest suffix matched (tried first)
  /// Tokens searched back from the end for a match: bounds the scheduler's
  /// work per step on long contexts.
  int64_t lookback = 8192;

  status validate() const;
};

/// Up to k drafts after `tokens` (none when no suffix of min_n..max_n tokens
/// occurs earlier within the lookback).
std::vector<int32_t> ngram_draft(const std::vector<int32_t>& tokens, int64_t k, const ngram_draft_params& p);

}  // namespace hart
