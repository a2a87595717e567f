#include "runtime/worker/sampling_logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace hart::worker {

void sampling_logprobs(const float* logits, int64_t vocab, const sampling_params& p, int32_t token,
                       int32_t top_k, float* logprob_out, std::vector<sched::token_logprob>* top) {
  const sampling_distribution d = sampling_distribution_of(logits, vocab, p);
  auto lp = [&](size_t i) { return float(std::log(d.probs[i])); };
  if (logprob_out) {
    *logprob_out = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < d.ids.size(); ++i) {
      if (d.ids[i] == token) {
        *logprob_out = lp(i);
        break;
      }
    }
  }
  if (top) {
    top->clear();
    for (size_t i = 0; i < std::min(d.ids.size(), size_t(std::max(top_k, 0))); ++i)
      top->push_back({d.ids[i], lp(i)});
  }
}

}  // namespace hart::worker
