// File: runtime/worker/step_sampling.h
// The sampling half of executing a step_plan, shared by every engine's
// worker: which logits each item needs from the forward pass, then each item
// that asks for a token is sampled from its last row (sampler seeded by the
// item's sampling params), with the log-probabilities of that distribution
// when asked, and an item that asks for prompt log-probs gets the model's
// log-prob of the token after each of its positions. A verify item (drafts)
// is accepted row by row (spec_accept): its kept drafts, then one draw.
//
//   for (...) batch[i].logits = step_item_logits(plan.items[i]);
//   HART_RETURN_IF_ERROR(eng.forward(batch, &logits));
//   sample_step_items(plan, logits.data(), vocab, &res);
#pragma once

#include "runtime/model/engine.h"
#include "runtime/sched/step.h"

#include <cstdint>
#include <vector>

namespace hart::worker {

/// Every row for prompt log-probs or a verify pass, else the last when the item samples, else none.
logits_request step_item_logits(const sched::step_item& item);

/// `logits` [vocab, rows] holds the rows step_item_logits asked for, in item
/// order (forward's layout); appends to res->sampled and res->prompt_logprobs.
/// Returns the tokens emitted per item (0, 1, or a verify item's kept drafts + 1).
std::vector<int64_t> sample_step_items(const sched::step_plan& plan, const float* logits, int64_t vocab,
                                       sched::step_result* res);

}  // namespace hart::worker
