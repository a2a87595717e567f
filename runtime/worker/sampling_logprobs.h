// File: runtime/worker/sampling_logprobs.h
// Log-probabilities of the distribution a token is drawn from, as
// runtime/sample/sampler.cpp builds it: softmax(logits / T) over the tokens
// top-k, top-p and min-p keep, renormalised (tokens outside: −inf). For
// greedy (T = 0) the distribution reported is the model's, softmax(logits).
// Same arithmetic as the sampler (double, same order), so the sampled token's
// value equals the sampler's.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/sample/sampler.h"
#include "runtime/sched/request.h"

namespace hart::sched {

/// logprob of `token` and the `top_k` most likely tokens (best first; ties:
/// lower id first) under the sampling distribution of `p` for logits [vocab].
void sampling_logprobs(const float* logits, int64_t vocab, const sampling_params& p, int32_t token,
                       int32_t top_k, float* logprob_out, std::vector<token_logprob>* top);

}  // namespace hart::sched
