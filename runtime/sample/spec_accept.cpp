#include "runtime/sample/spec_accept.h"

namespace hart {

spec_outcome spec_accept(sampler& s, const float* rows, int64_t vocab, const std::vector<int32_t>& drafts) {
  spec_outcome o;
  for (size_t j = 0; j <= drafts.size(); ++j) {
    float logprob = 0.0f;
    const int32_t drawn = s.sample(rows + int64_t(j) * vocab, vocab, &logprob);
    o.tokens.push_back(drawn);
    o.logprobs.push_back(logprob);
    if (j == drafts.size() || drawn != drafts[j]) break;  // a rejection, or the bonus token after all k
  }
  return o;
}

}  // namespace hart
