#include "runtime/sample/ngram_draft.h"

#include <algorithm>

namespace hart {

status ngram_draft_params::validate() const {
  if (min_n < 1 || max_n < min_n)
    return invalid_argument("ngram drafting: need 1 <= min_n <= max_n, got %lld..%lld", (long long)min_n,
                            (long long)max_n);
  if (lookback <= max_n)
    return invalid_argument("ngram drafting: lookback %lld must exceed max_n %lld", (long long)lookback,
                            (long long)max_n);
  return {};
}

std::vector<int32_t> ngram_draft(const std::vector<int32_t>& tokens, int64_t k, const ngram_draft_params& p) {
  const int64_t L = int64_t(tokens.size());
  const int64_t from = std::max<int64_t>(0, L - p.lookback);
  for (int64_t n = std::min(p.max_n, L - 1); n >= p.min_n; --n) {
    const int32_t* suffix = tokens.data() + L - n;
    // The most recent earlier occurrence: a start j < L - n.
    for (int64_t j = L - n - 1; j >= from; --j) {
      if (!std::equal(suffix, suffix + n, tokens.data() + j)) continue;
      std::vector<int32_t> drafts;
      for (int64_t i = 0; i < k; ++i) {
        const int64_t src = j + n + i;  // < L + i: a token of the sequence or a draft already made
        drafts.push_back(src < L ? tokens[size_t(src)] : drafts[size_t(src - L)]);
      }
      return drafts;
    }
  }
  return {};
}

}  // namespace hart
