#include "runtime/sample/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace hart {

status sampling_params::validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature))
    return invalid_argument("sampling: temperature %g must be >= 0", temperature);
  if (top_k < 0) return invalid_argument("sampling: top_k %lld must be >= 0", (long long)top_k);
  if (!(top_p > 0.0f && top_p <= 1.0f))
    return invalid_argument("sampling: top_p %g must be in (0, 1]", top_p);
  if (!(min_p >= 0.0f && min_p <= 1.0f))
    return invalid_argument("sampling: min_p %g must be in [0, 1]", min_p);
  return {};
}

float model_logprob(const float* logits, int64_t vocab, int32_t token) {
  double mx = logits[0], z = 0;
  for (int64_t v = 1; v < vocab; ++v) mx = std::max<double>(mx, logits[v]);
  for (int64_t v = 0; v < vocab; ++v) z += std::exp(double(logits[v]) - mx);
  return float(double(logits[token]) - mx - std::log(z));
}

sampling_distribution sampling_distribution_of(const float* logits, int64_t vocab, const sampling_params& p) {
  sampling_distribution d;
  d.ids.resize(size_t(vocab));
  std::iota(d.ids.begin(), d.ids.end(), 0);
  const bool greedy = p.temperature == 0.0f;
  int64_t n = vocab;
  if (!greedy && p.top_k > 0) n = std::min(n, p.top_k);
  // Best first, ties by lower id; only the n kept need ordering (top-k: a
  // partial sort, not the whole vocabulary per sampled token).
  auto better = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::partial_sort(d.ids.begin(), d.ids.begin() + n, d.ids.end(), better);
  std::vector<double>& prob = d.probs;
  prob.resize(size_t(n));
  double sum = 0;
  if (greedy) {
    const double mx = logits[d.ids[0]];
    for (int64_t i = 0; i < n; ++i) sum += (prob[i] = std::exp(double(logits[d.ids[i]]) - mx));
  } else {
    const double mx = logits[d.ids[0]] / p.temperature;
    for (int64_t i = 0; i < n; ++i) sum += (prob[i] = std::exp(logits[d.ids[i]] / p.temperature - mx));
  }
  for (double& v : prob) v /= sum;
  if (!greedy && p.top_p < 1.0f) {
    double cum = 0;
    int64_t keep = 0;
    while (keep < n && (keep == 0 || cum < p.top_p)) cum += prob[keep++];
    n = keep;
  }
  if (!greedy && p.min_p > 0.0f) {
    int64_t keep = 1;
    while (keep < n && prob[keep] >= p.min_p * prob[0]) ++keep;
    n = keep;
  }
  double kept = 0;
  for (int64_t i = 0; i < n; ++i) kept += prob[i];
  d.ids.resize(size_t(n));
  prob.resize(size_t(n));
  for (double& v : prob) v /= kept;
  return d;
}

int32_t sampler::sample(const float* logits, int64_t vocab, float* logprob) {
  if (p_.temperature == 0.0f) {
    const int32_t best = int32_t(std::max_element(logits, logits + vocab) - logits);
    if (logprob) *logprob = 0.0f;
    return best;
  }
  const sampling_distribution d = sampling_distribution_of(logits, vocab, p_);
  const double r = std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
  double cum = 0;
  size_t pick = d.ids.size() - 1;
  for (size_t i = 0; i < d.ids.size(); ++i) {
    cum += d.probs[i];
    if (r < cum) {
      pick = i;
      break;
    }
  }
  if (logprob) *logprob = float(std::log(d.probs[pick]));
  return d.ids[pick];
}

}  // namespace hart
