// File: runtime/worker/sampling_logprobs.h
// Log-probabilities under the distribution a token is drawn from
// (sampling_distribution_of in runtime/sample: the sampler's own), tokens the
// filters drop at −inf; for greedy the model's softmax(logits).
#pragma once

#include "runtime/sample/sampler.h"
#include "runtime/sched/request.h"

#include <cstdint>
#include <vector>

namespace hart::worker {

/// logprob of `token` and the `top_k` most likely tokens (best first; ties:
/// lower id first) under the sampling distribution of `p` for logits [vocab].
void sampling_logprobs(const float* logits, int64_t vocab, const sampling_params& p, int32_t token,
                       int32_t top_k, float* logprob_out, std::vector<sched::token_logprob>* top);

}  // namespace hart::worker
