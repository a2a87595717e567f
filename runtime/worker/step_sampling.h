// File: runtime/worker/step_sampling.h
// The sampling half of executing a step_plan, shared by every engine's
// worker: each item that asks for a token is sampled from its logits row
// (sampler seeded by the item's sampling params), with the log-probabilities
// of that distribution when asked.
//
//   HART_RETURN_IF_ERROR(eng.forward(batch, &logits));
//   sample_step_items(plan, logits.data(), vocab, &res);
#pragma once

#include <cstdint>

#include "runtime/sched/step.h"

namespace hart::sched {

/// `logits` [vocab, rows] holds one row per item with sample_last, in item
/// order (forward's logits_request::last rows); appends to res->sampled.
void sample_step_items(const step_plan& plan, const float* logits, int64_t vocab, step_result* res);

}  // namespace hart::sched
