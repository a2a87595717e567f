// File: runtime/worker/step_routing.h
// The routing half of executing a step_plan, shared by every engine's worker:
// when an item asks for its routing (step_item::capture_routing) the forward
// runs with a trace, and each such item gets its tokens' rows of it.
//
//   forward_trace trace;
//   HART_RETURN_IF_ERROR(eng.forward(batch, &logits, plan_captures_routing(plan) ? &trace : nullptr));
//   collect_step_routing(plan, trace, &res);
#pragma once

#include "runtime/model/engine.h"
#include "runtime/sched/step.h"

namespace hart::worker {

bool plan_captures_routing(const sched::step_plan& plan);

/// Appends to res->routing one entry per capturing item, in item order; the
/// trace's token rows are the plan's items' tokens in item order.
void collect_step_routing(const sched::step_plan& plan, const forward_trace& trace, sched::step_result* res);

}  // namespace hart::worker
