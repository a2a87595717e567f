// File: runtime/sample/spec_accept.h
// Acceptance of a speculative step for drafts that are one token each
// (deterministic drafters: n-gram lookup, the MTP block's argmax;
// docs/spec-decode.md §3). The verify pass gives k+1 rows of target logits for
// one sequence: row j is the target's distribution of the token after draft j
// (row 0: after the last accepted token). Row j draws with a sampler seeded
// `row_seeds[j]`, the seed non-speculative decoding gives that position
// (sched::step_seed), and a draft is kept while it equals the draw; the first
// draw that differs (or the draw at row k, after every draft matched) is
// emitted too. For a one-hot draft this is rejection sampling (accept d with
// probability p(d); on rejection, p restricted to other tokens), so the
// tokens follow the target distribution; and since each position makes the
// non-speculative draw with the same seed, they are the tokens
// non-speculative decoding emits for the same request seed (given the same
// logits). Greedy (temperature 0) is the same rule with argmax.
//
//   spec_outcome o = spec_accept(params, {s0, s1, s2, s3}, rows, vocab, {d1, d2, d3});  // rows: [4][vocab]
//   // emit o.tokens (o.tokens.size() - 1 drafts kept); roll the pass back to n + o.tokens.size()
#pragma once

#include "runtime/sample/sampler.h"

#include <cstdint>
#include <random>
#include <vector>

namespace hart {

struct spec_outcome {
  std::vector<int32_t> tokens;  // the kept drafts, then one token drawn from the target
  std::vector<float> logprobs;  // each under the distribution it was drawn from (sampler::sample's)
  int64_t accepted() const { return int64_t(tokens.size()) - 1; }  // drafts kept
};

/// `rows` is [drafts.size() + 1][vocab] row-major (the verify pass's logits of
/// one sequence, in position order), `row_seeds` one seed per row. Draws one
/// row at a time and stops at the first draw that differs from its draft.
spec_outcome spec_accept(const sampling_params& params, const std::vector<uint64_t>& row_seeds,
                         const float* rows, int64_t vocab, const std::vector<int32_t>& drafts);

/// Drafts sampled from the drafter's distributions `q` (one per draft, over
/// its ids; a block drafter's): Leviathan/Chen rejection sampling. Row j keeps
/// d_j with probability min(1, p_j(d_j) / q_j(d_j)), p_j the target's
/// distribution under `params` (sampling_distribution_of; one-hot at the
/// argmax when greedy); a rejection emits a draw from max(0, p_j - q_j)
/// renormalised (from p_j when d_j lies outside q_j); after every draft the
/// bonus token is drawn from p_k. The tokens follow the target distribution;
/// the uniforms come from `rng`, so they are not non-speculative decoding's
/// draws (spec_accept's exactness needs one-token drafts). Log-probs are each
/// token's under p_j (0 when greedy), as non-speculative sampling reports.
spec_outcome spec_accept_sampled(std::mt19937_64& rng, const sampling_params& params, const float* rows,
                                 int64_t vocab, const std::vector<int32_t>& drafts,
                                 const std::vector<sampling_distribution>& q);

}  // namespace hart
