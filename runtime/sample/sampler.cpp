#include "runtime/sample/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace hart {

status sampling_params::validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) return invalid_argument("sampling: temperature %g must be >= 0", temperature);
  if (top_k < 0) return invalid_argument("sampling: top_k %lld must be >= 0", (long long)top_k);
  if (!(top_p > 0.0f && top_p <= 1.0f)) return invalid_argument("sampling: top_p %g must be in (0, 1]", top_p);
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return invalid_argument("sampling: min_p %g must be in [0, 1]", min_p);
  return {};
}

int32_t sampler::sample(const float* logits, int64_t vocab, float* logprob) {
  if (p_.temperature == 0.0f) {
    const int32_t best = int32_t(std::max_element(logits, logits + vocab) - logits);
    if (logprob) *logprob = 0.0f;
    return best;
  }
  // Candidates sorted by logit (ties: lower id first), then filtered.
  std::vector<int32_t> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  int64_t n = vocab;
  if (p_.top_k > 0) n = std::min(n, p_.top_k);
  std::vector<double> prob(n);
  const double mx = logits[ids[0]] / p_.temperature;
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += (prob[i] = std::exp(logits[ids[i]] / p_.temperature - mx));
  for (double& v : prob) v /= sum;
  if (p_.top_p < 1.0f) {
    double cum = 0;
    int64_t keep = 0;
    while (keep < n && (keep == 0 || cum < p_.top_p)) cum += prob[keep++];
    n = keep;
  }
  if (p_.min_p > 0.0f) {
    int64_t keep = 1;
    while (keep < n && prob[keep] >= p_.min_p * prob[0]) ++keep;
    n = keep;
  }
  double kept = 0;
  for (int64_t i = 0; i < n; ++i) kept += prob[i];
  std::uniform_real_distribution<double> u(0.0, kept);
  const double r = u(rng_);
  double cum = 0;
  int64_t pick = n - 1;
  for (int64_t i = 0; i < n; ++i) {
    cum += prob[i];
    if (r < cum) {
      pick = i;
      break;
    }
  }
  if (logprob) *logprob = float(std::log(prob[pick] / kept));
  return ids[pick];
}

}  // namespace hart
