// File: runtime/sample/sampler.h
// Next-token choice from one row of logits: greedy (temperature 0) or sampled
// with temperature, top-k, top-p and min-p filtering, from a per-sequence seed.
// Reports the log-probability of the chosen token under the distribution that
// was actually sampled (after temperature and filtering), as RL users expect.
#pragma once

#include "runtime/core/status.h"

#include <cstdint>
#include <random>
#include <vector>

namespace hart {

struct sampling_params {
  float temperature = 0.0f;  // 0 = greedy
  int64_t top_k = 0;         // 0 = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off; keeps tokens with p >= min_p * p_max
  uint64_t seed = 0;

  status validate() const;
};

/// The distribution a token is drawn from. Temperature > 0: candidates best
/// first (ties: lower id), softmax(logits / T) over those top-k, top-p and
/// min-p keep, renormalised. Temperature 0 (greedy): the model's own
/// softmax(logits) over every token, which is what greedy log-probs report.
struct sampling_distribution {
  std::vector<int32_t> ids;   // kept tokens, best first
  std::vector<double> probs;  // their probabilities, summing to 1
};
sampling_distribution sampling_distribution_of(const float* logits, int64_t vocab, const sampling_params& p);

/// log softmax(logits)[token], summed in double: the model's own log-probability of `token`
/// (temperature 1, no filters), as scoring reports it (hart score, prompt log-probs).
float model_logprob(const float* logits, int64_t vocab, int32_t token);

class sampler {
 public:
  explicit sampler(const sampling_params& p) : p_(p), rng_(p.seed) {}

  /// Picks a token from logits [vocab]; `logprob` (optional) receives its
  /// log-probability under the sampled distribution (0 for greedy).
  int32_t sample(const float* logits, int64_t vocab, float* logprob = nullptr);

 private:
  sampling_params p_;
  std::mt19937_64 rng_;
};

}  // namespace hart
