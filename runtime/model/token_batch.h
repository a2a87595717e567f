// File: runtime/model/token_batch.h
// The tokens of one forward call, flattened across sequences (style R24:
// per-step state passed explicitly). Rows [row0, row0 + n) belong to `seq`
// and sit at consecutive positions from pos[row0]: seq->n_tokens + 0..n-1 in
// the model's pass, the positions the MTP block is run at in its own.
#pragma once

#include "runtime/model/sequence_state.h"

#include <cstdint>
#include <vector>

namespace hart {

struct token_batch {
  struct span {
    sequence_state* seq = nullptr;
    int64_t row0 = 0;
    int64_t n = 0;
  };
  std::vector<int32_t> ids;  // [n_tokens]
  std::vector<int64_t> pos;  // [n_tokens] absolute positions
  std::vector<span> spans;   // one per sequence, rows in order

  int64_t n_tokens() const { return static_cast<int64_t>(ids.size()); }
};

}  // namespace hart
