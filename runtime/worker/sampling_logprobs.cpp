#include "runtime/worker/sampling_logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace hart::sched {

void sampling_logprobs(const float* logits, int64_t vocab, const sampling_params& p, int32_t token,
                       int32_t top_k, float* logprob_out, std::vector<token_logprob>* top) {
  std::vector<int32_t> ids(size_t(vocab), 0);
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  const double temp = p.temperature == 0.0f ? 1.0 : double(p.temperature);
  int64_t n = vocab;
  if (p.temperature != 0.0f && p.top_k > 0) n = std::min(n, p.top_k);
  // Same expressions as sampler::sample (float / float promoted the same way).
  std::vector<double> prob(size_t(n), 0.0);
  double sum = 0;
  if (p.temperature != 0.0f) {
    const double mx = logits[ids[0]] / p.temperature;
    for (int64_t i = 0; i < n; ++i) sum += (prob[i] = std::exp(logits[ids[i]] / p.temperature - mx));
  } else {
    const double mx = logits[ids[0]] / temp;
    for (int64_t i = 0; i < n; ++i) sum += (prob[i] = std::exp(logits[ids[i]] / temp - mx));
  }
  for (double& v : prob) v /= sum;
  if (p.temperature != 0.0f) {
    if (p.top_p < 1.0f) {
      double cum = 0;
      int64_t keep = 0;
      while (keep < n && (keep == 0 || cum < p.top_p)) cum += prob[keep++];
      n = keep;
    }
    if (p.min_p > 0.0f) {
      int64_t keep = 1;
      while (keep < n && prob[keep] >= p.min_p * prob[0]) ++keep;
      n = keep;
    }
  }
  double kept = 0;
  for (int64_t i = 0; i < n; ++i) kept += prob[i];
  auto lp = [&](int64_t i) { return float(std::log(prob[i] / kept)); };
  if (logprob_out) {
    *logprob_out = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < n; ++i) {
      if (ids[i] == token) {
        *logprob_out = lp(i);
        break;
      }
    }
  }
  if (top) {
    top->clear();
    for (int64_t i = 0; i < std::min<int64_t>(n, top_k); ++i) top->push_back({ids[i], lp(i)});
  }
}

}  // namespace hart::sched
